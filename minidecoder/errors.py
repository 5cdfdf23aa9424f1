"""One error type for everything a user can get wrong.

Every message names the offending value and the way out; the CLI prints it without a traceback
and exits with status 2. Internal bugs stay ordinary exceptions so they keep their traceback.
"""
from __future__ import annotations

import numbers


class MinidecoderError(Exception):
    """A problem with the user's input, files or options, with a hint on how to fix it."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")


class ConfigError(MinidecoderError):
    """config.json is missing, malformed, or uses a key/value this code does not understand."""


class CheckpointError(MinidecoderError):
    """Weights are missing, truncated, mis-shaped, or do not match the config."""


class TokenizerError(MinidecoderError):
    """The tokenizer files are missing or disagree with the model."""


class InputError(MinidecoderError):
    """Text, templates, layers or options passed to a method are invalid."""


class NumericsError(MinidecoderError):
    """NaN or inf appeared in activations."""


class ArgumentTypeError(InputError, TypeError):
    """A Python argument of the wrong type (e.g. `embed(model, None)`); also a TypeError for callers that
    catch that."""


class ContextLengthError(InputError):
    """A sequence longer than the model's context; `length` and `limit` are token counts."""

    def __init__(self, problem: str, fix: str | None = None, length: int = 0, limit: int = 0) -> None:
        super().__init__(problem, fix)
        self.length = length
        self.limit = limit


class OutputError(MinidecoderError):
    """An output location that cannot be written, is taken, or failed while being written."""


class TruncationWarning(UserWarning):
    """`truncate=N` cut some texts to their first N tokens: said once per call, naming the rows it cut."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying one line that says what was kept and how to resume (the CLI prints it once).

    A KeyboardInterrupt, so that code that stops on Ctrl-C still stops."""


def is_whole_number(value, minimum: int | None = None) -> bool:
    """Whether a count or limit a user gave is a whole number (a Python or NumPy integer, never a bool, which is
    an int to Python), and at least `minimum` where one is given. Each caller keeps its own message and turns
    the NumPy integer into a Python one, which JSON records and slices take."""
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and (minimum is None or value >= minimum))


def describe_unusable_file(path, what: str = "file") -> str:
    """Why `path` cannot be read as a file, in words: a directory, a symlink loop, a dangling link, missing.

    For messages: `raise InputError(f"{what} {path} {describe_unusable_file(path)}", ...)`.
    """
    import errno
    import os

    try:
        info = os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if os.path.islink(path):
            return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
        if error.errno == errno.EACCES:
            return "cannot be reached (permission denied on a folder above it)"
        if error.errno == errno.ENOTDIR:
            return "does not exist (a part of its path is a file, not a folder)"
        return "does not exist"
    import stat
    if stat.S_ISDIR(info.st_mode):
        return f"is a directory, not a {what}"
    if not stat.S_ISREG(info.st_mode):
        return f"is not a regular {what}"
    if not os.access(path, os.R_OK):
        return "is not readable (permission denied)"
    return "is unusable"


def file_is_there(path, error: type[MinidecoderError] = MinidecoderError) -> bool:
    """True when `path` is a regular file, False when nothing at all is there; anything else at `path` (a
    dangling link, a link loop, a folder) raises `error` saying what it is: "missing" would send the user
    looking for a file that is there, or re-downloading what only needs its link restored."""
    import os

    if os.path.isfile(path):
        return True
    if not os.path.lexists(path):
        return False
    if os.path.islink(path):
        fix = ("restore what the link points to, or replace the link with the file itself (a Hugging Face cache "
               "whose blobs were cleaned leaves such links: download the model again)")
    else:
        fix = "put the file itself at that path"
    raise error(f"{path} {describe_unusable_file(path)}", fix)


# ---- texts ---------------------------------------------------------------------------------------------
# A Python str can hold a lone surrogate ("\ud800", half a UTF-16 pair: from `json.loads`, or an argv or file
# decoded with surrogateescape) that UTF-8 cannot: the tokenizers library refuses it with a bare TypeError naming
# nothing, sentencepiece with a UnicodeEncodeError. `check_text` names it and where it sits.
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
