"""Offline sentence splitting for HTP (spec `methods.md` section 5.1).

The HTP reference (snap-research/HTP, `parser/parser.py`, `add_pst_to_sentences`) splits with spaCy's
`en_core_web_sm` (a dependency parse). minidecoder uses **pysbd** instead: a rule-based port of the
"Golden Rules" sentence-boundary suite, pure Python, deterministic, no model download, and it handles
the cases that matter for STS/retrieval text (abbreviations such as "Mr." / "e.g." / "p.m.",
decimals, quotes, ellipses). blingfire is faster but is a compiled finite-state model whose rules
cannot be read; spaCy needs a 12 MB model and a parser. Boundaries may differ from spaCy's on
unusual text; the HTP method reports the splitter it used.

After splitting, each sentence is processed as the reference does: strip, and append "." unless it
already ends with one of `. ! ? "`. Text without a boundary is one sentence; text that is empty after
stripping gives no sentence (the caller decides; HTP follows the reference's `"<PST> ."`).
"""
from __future__ import annotations

import functools

SPLITTER = "pysbd 'en' (clean=False)"
_ENDINGS = (".", "!", "?", '"')  # parser.py: `if not s.endswith(('.', '!', '?', "\""))`


@functools.lru_cache(maxsize=1)
def _segmenter():
    import pysbd
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The stripped, non-empty sentences of `text`, each ending in `. ! ?` or `"` (a `.` is appended
    otherwise, as the reference does). Never raises on text without boundaries: that is one sentence.

    >>> split_sentences("Mr. Smith arrived at 5 p.m. on Monday. He left")
    ['Mr. Smith arrived at 5 p.m. on Monday.', 'He left.']
    """
    sentences = []
    for piece in _segmenter().segment(text.strip()) if text.strip() else []:
        s = piece.strip()
        if not s:
            continue
        if not s.endswith(_ENDINGS):
            s += "."
        sentences.append(s)
    return sentences
