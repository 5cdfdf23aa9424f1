"""What the entry points for texts check beyond `errors.check_text` (a text must be Unicode a tokenizer can
take; the tokenizer runs it on every text, and `minidecoder.embed`, `explain` and the job runner's reader
run it first to name the row): a command-line argument's undecodable byte, and the unpooled context.
"""
from __future__ import annotations

from minidecoder.errors import InputError, check_text, lone_surrogate


def check_argument(text: str, where: str) -> None:
    """`check_text` for a command-line argument. Python decodes argv with surrogateescape, so a byte that is not
    UTF-8 arrives as a lone surrogate U+DC80-U+DCFF: it is named as the byte the user typed."""
    at = lone_surrogate(text)
    if at is not None and 0xDC80 <= ord(text[at]) <= 0xDCFF:
        raise InputError(f"{where} holds the byte 0x{ord(text[at]) - 0xDC00:02x} at character {at}, which is not "
                         "UTF-8", "give the text in UTF-8 (a UTF-8 locale, or convert it with iconv)")
    check_text(text, where)


# ---- unpooled context ----------------------------------------------------------------------------------
CONTEXT_FIX = ("give each text as a string, or as a (context, text) pair whose context the model reads and no "
               "pooling touches; or pass context= (one string for every text, or a list with one per text)")


def split_contexts(items: list, context: str | list | None = None) -> tuple[list, list[str] | None]:
    """(texts, contexts) of `embed`'s input: each item a text or a (context, text) pair, and `context` one
    string for every text or a list with one per text. contexts is None when no row has one (the plain
    path, untouched); a row without one gets "". Texts are returned as given, for the caller's checks."""
    pairs = [row for row, item in enumerate(items) if isinstance(item, tuple)]
    if context is None and not pairs:
        return items, None
    if context is not None and pairs:
        raise InputError(f"text {pairs[0]} is a (context, text) pair and context= was given too", CONTEXT_FIX)
    if isinstance(context, str):
        context = [context] * len(items)
    elif context is not None:
        if isinstance(context, (bytes, dict)) or not hasattr(context, "__iter__"):
            raise InputError(f"context={context!r:.60} is neither a string nor a list of strings", CONTEXT_FIX)
        context = list(context)
        if len(context) != len(items):
            raise InputError(f"context= holds {len(context)} strings for {len(items)} texts", CONTEXT_FIX)
    texts, contexts = [], []
    for row, item in enumerate(items):
        if isinstance(item, tuple):
            if len(item) != 2:
                raise InputError(f"text {row} is a tuple of {len(item)} items, not a (context, text) pair", CONTEXT_FIX)
            given, item = item
        else:
            given = context[row] if context is not None else ""
        texts.append(item)
        contexts.append(check_context(given, f"text {row}"))
    return texts, contexts if any(contexts) else None


def check_context(context: object, where: str) -> str:
    """A row's context: a string with some text, or "" / None for none (returned as "")."""
    if context is None or context == "":
        return ""
    if not isinstance(context, str):
        raise InputError(f"the context of {where} is a {type(context).__name__}, not a string", CONTEXT_FIX)
    if not context.strip():
        raise InputError(f"the context of {where} is whitespace-only ({context!r})",
                         "give it some text, or '' (or None) for no context")
    check_text(context, f"the context of {where}")
    return context


PLACEMENTS = ("context", "pooled")  # where an instruction goes: unpooled context, or joined to the text


def refuse_placement_without_instruction(call: str, instruction: str | None, placement: str) -> None:
    """placement="pooled" says where an instruction goes: given with none, it would change nothing (the CLI
    refuses `--instruction-placement pooled` without one alike)."""
    if placement == "pooled" and not instruction:
        raise InputError(f"{call}(placement='pooled') places the instruction, and instruction={instruction!r} "
                         "gives none: the placement would change nothing",
                         f"leave placement out, or give the instruction: {call}(..., instruction='...', "
                         "placement='pooled')")


def with_instruction(texts: list[str], instruction: str | None, placement: str = "context") -> list:
    """The texts as embedded under an instruction: (instruction, text) pairs, the instruction read as unpooled
    context (HTP's code, `embed_mask = 0`), or with placement "pooled" the joined string "{instruct} {text}"
    (pooled with the text: the ablation); the texts unchanged without an instruction."""
    if placement not in PLACEMENTS:
        raise InputError(f"instruction placement {placement!r} is unknown",
                         "use 'context' (read, never pooled: the default) or 'pooled' (joined to the text)")
    if not instruction:
        return list(texts)
    if placement == "pooled":
        return [f"{instruction} {text}" for text in texts]
    return [(instruction, text) for text in texts]
