"""Text handling shared by the STS harness and the prompt methods (spec `methods.md` section 2).

Every prompt-based reference (PromptEOL, Pretended CoT / Knowledge, MetaEOL, TP, CP) receives a
sentence from SentEval as a list of words and prepares it in its `batcher` in this exact order:

    s = ' '.join(words)
    if len(s) > 0 and s[-1] not in '.?"\\'': s += '.'
    s = s.replace('"', '\\'')
    if len(s) > 0 and '?' == s[-1]: s = s[:-1] + '.'
    prompt = template.replace('*sent 0*', s).strip()

References (read for this module):
- kongds/scaling_sentemb, `evaluation.py`, `batcher` (PromptEOL), commit 656ddec6.
- fuyuchenIfyw/token_prepending, `evaluate.py`, `batcher` (TP), commit ab3081d6 — identical steps.

The order matters at the edges: a sentence ending in `"` gets no `.` (the check runs before the
quote is replaced), so it ends in `'`; a sentence ending in `?` keeps its `?` through the first
step and only then turns into `.`. The references write the template with a `*sent 0*` marker;
minidecoder writes `{text}` (spec section 3) and `fill_template` substitutes it the same way.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from minidecoder.errors import InputError

# A format field is `{` + anything without braces or whitespace + `}`; `{text}` is the only one
# known. Lone braces and tokens such as `<PST>` are literal text.
_FIELD = re.compile(r"\{([^{}\s]*)\}")
_ENDINGS = ".?\"'"  # a sentence ending in one of these gets no extra "."


def senteval_sentence(text_or_words: str | Sequence[str]) -> str:
    """Prepare one sentence exactly as the SentEval batchers of PromptEOL and TP do.

    A list of words is joined with single spaces (SentEval hands the batcher `line.split()`); a
    string is taken as already joined and used verbatim. Then: append `.` unless the last
    character is one of `. ? " '`; replace every `"` with `'`; turn a final `?` into `.`.
    The empty string stays empty.

    >>> senteval_sentence(["a", "man", "is", "playing", "a", "flute"])
    'a man is playing a flute.'
    >>> senteval_sentence('he said "yes"')
    "he said 'yes'"
    >>> senteval_sentence("is it raining ?")
    'is it raining .'
    """
    s = text_or_words if isinstance(text_or_words, str) else " ".join(text_or_words)
    if len(s) > 0 and s[-1] not in _ENDINGS:
        s += "."
    s = s.replace('"', "'")
    if len(s) > 0 and s[-1] == "?":
        s = s[:-1] + "."
    return s


def template_fields(template: str) -> list[str]:
    """The `{name}` fields of a template, in order of appearance (with repeats)."""
    return _FIELD.findall(template)


def fill_template(template: str, text: str) -> str:
    """Substitute `text` for every `{text}` in `template`, then strip the result.

    Templates contain literal `"` and may contain placeholder tokens such as `<PST>`; neither is
    touched. Any other `{name}` is an error, because it almost always is a typo of `{text}`
    (a silently unfilled field would change every embedding).

    >>> fill_template('This sentence : "{text}" means in one word:"', "a cat.")
    'This sentence : "a cat." means in one word:"'
    """
    fields = template_fields(template)
    unknown = sorted({name for name in fields if name != "text"})
    if unknown:
        raise InputError(
            f"template {template!r} has unknown placeholder(s) "
            + ", ".join("{" + name + "}" for name in unknown),
            "write the sentence's place as {text}; that is the only placeholder a template may use",
        )
    if "text" not in fields:
        raise InputError(
            f"template {template!r} has no {{text}} placeholder",
            'put {text} where the sentence goes, e.g. \'This sentence : "{text}" means in one word:"\'',
        )
    # str.replace is one pass over the template, so braces inside `text` are never re-read.
    return template.replace("{text}", text).strip()
