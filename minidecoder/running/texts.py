"""The check every entry point for texts shares (`minidecoder.embed`, so `SentenceEncoder.encode` and
`explain`'s CLI too, and the job runner's reader): a text must be Unicode a tokenizer can take.

A Python str can hold a lone surrogate (`"\\ud800"`, e.g. from `json.loads` or a file decoded with
`errors="surrogateescape"`); it cannot be written as UTF-8, and the tokenizers library refuses it with a
bare `TypeError` that names no row. Here it is named, before any work.
"""
from __future__ import annotations

from minidecoder.errors import InputError

SURROGATE_FIX = ("decode the source with errors='replace' (or fix its bytes), or remove the character; "
                 "a lone surrogate is half of a UTF-16 pair, not a character")


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, or None when `text` is valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def check_text(text: str, where: str) -> None:
    """Raise InputError naming `where` (e.g. "text 3") if `text` holds a lone surrogate."""
    at = lone_surrogate(text)
    if at is not None:
        raise InputError(f"{where} holds a lone surrogate {text[at]!r} at character {at}, which is not Unicode "
                         "text (no tokenizer takes it)", SURROGATE_FIX)
