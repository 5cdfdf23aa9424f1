"""Text handling shared by the STS harness and the methods: the SentEval preparation of a sentence,
templates with `{text}`, the checks every text must pass, and HTP's sentence splitting.

SentEval preparation (docs/spec.md section 2).

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
minidecoder writes `{text}` (docs/spec.md section 3) and `fill_template` substitutes it the same way.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from minidecoder.errors import InputError

# The help of every method's `senteval_text` option (the prompt methods default to True, the bare-text
# baselines and Echo to False).
SENTEVAL_HELP = ("prepare each text as the SentEval batchers of the references did (append '.', '\"' -> \"'\", "
                 "final '?' -> '.') before filling the template; false embeds the text verbatim")

# The help of the `pieces` option of every method that fills a template of its own (inputs.encode_pieces).
PIECES_HELP = ("tokenize the template's text around each {text}, and the text, on their own and join the ids, as "
               "HTP's code does (parser.py _tokenize_from_pieces); false: the filled template as one string")

# A format field is `{` + anything without braces or whitespace + `}`; `{text}` is the text's place,
# `{eos}`, at the very end only, the tokenizer's EOS token appended as one id (HTP's code's `{</s>}`, the
# token its last-token rows read), and `{bos}`, at the very start only, the tokenizer's BOS token put first
# whatever its policy (HTP's code's literal `<s>`, written into templates it tokenizes with add_bos_token=False;
# once, where the policy adds one too). Lone braces and tokens such as `<PST>` are literal text.
_FIELD = re.compile(r"\{([^{}\s]*)\}")
EOS_FIELD = "{eos}"
BOS_FIELD = "{bos}"
PIECE_FIELD = "{|}"  # with pieces=true, a cut between two pieces (HTP's code's `{"}`: a quote tokenized on its own)
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


def without_eos(template: str) -> tuple[str, bool]:
    """(the template without a final `{eos}`, whether it had one). `{eos}` anywhere but at the end is an
    error: an id appended after the text is all it can mean."""
    head = template.rstrip()
    ends = head.endswith(EOS_FIELD)
    head = head[:-len(EOS_FIELD)] if ends else template
    if EOS_FIELD in head:
        raise InputError(f"template {template!r} has {EOS_FIELD} before its end",
                         f"write {EOS_FIELD} last: it appends the tokenizer's EOS token after the filled template")
    return head, ends


def without_bos(template: str) -> tuple[str, bool]:
    """(the template without a leading `{bos}`, whether it had one). `{bos}` anywhere but at the start is an
    error: the BOS token put first is all it can mean."""
    tail = template.lstrip()
    starts = tail.startswith(BOS_FIELD)
    tail = tail[len(BOS_FIELD):] if starts else template
    if BOS_FIELD in tail:
        raise InputError(f"template {template!r} has {BOS_FIELD} after its start",
                         f"write {BOS_FIELD} first: it puts the tokenizer's BOS token before the filled template")
    return tail, starts


def fill_template(template: str, text: str) -> str:
    """Substitute `text` for every `{text}` in `template`, then strip the result (a leading `{bos}` and a final
    `{eos}` are dropped here: `inputs.encode_one` adds their ids; so is `{|}`, which only cuts pieces).

    Templates contain literal `"` and may contain placeholder tokens such as `<PST>`; neither is
    touched. Any other `{name}` is an error, because it almost always is a typo of `{text}`
    (a silently unfilled field would change every embedding).

    >>> fill_template('This sentence : "{text}" means in one word:"', "a cat.")
    'This sentence : "a cat." means in one word:"'
    """
    template, _ = without_eos(without_bos(template)[0])
    fields = template_fields(template)
    unknown = sorted({name for name in fields if name not in ("text", PIECE_FIELD[1:-1])})
    if unknown:
        raise InputError(
            f"template {template!r} has unknown placeholder(s) "
            + ", ".join("{" + name + "}" for name in unknown),
            "write the sentence's place as {text} ({bos}, first, for the BOS token; {eos}, last, for the EOS token; "
            "{|} between two pieces with pieces=true); no other placeholder exists",
        )
    if "text" not in fields:
        raise InputError(
            f"template {template!r} has no {{text}} placeholder",
            'put {text} where the sentence goes, e.g. \'This sentence : "{text}" means in one word:"\'',
        )
    # str.replace is one pass over the template, so braces inside `text` are never re-read.
    return template.replace(PIECE_FIELD, "").replace("{text}", text).strip()


def check_template(template: str, min_occurrences: int = 1) -> str:
    """A template must be a string with `{text}` (at least `min_occurrences` times) and no other field."""
    if not isinstance(template, str):
        raise InputError(f"template {template!r} is not a string", 'pass e.g. \'This sentence : "{text}" means in one word:"\'')
    fill_template(template, "x")  # raises for a missing {text} or an unknown {field}
    count = template_fields(template).count("text")
    if count < min_occurrences:
        raise InputError(f"template {template!r} has {count} {{text}} placeholder(s); this method needs {min_occurrences}",
                         "write {text} where each copy of the sentence goes")
    return template


def require_text(texts: Sequence[str], empty_allowed: bool = False) -> None:
    """Every text must be a string with some non-whitespace character: an embedding of nothing is undefined.
    `empty_allowed` (a method that `reads_empty_text`) lets the empty string "" through, as SentEval's
    batchers do with a blank line; whitespace-only text stays an error."""
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {row} is a {type(text).__name__}, not a string", "pass a list of strings")
        if not text.strip() and not (empty_allowed and text == ""):
            raise InputError(f"text {row} is empty or whitespace-only ({text!r})",
                             "remove that row or give it some text; an embedding of nothing is undefined"
                             + ("" if empty_allowed else " for a method that pools over the text (a prompt read at "
                                "its last token, e.g. prompteol, embeds \"\" as its prompt around nothing)"))


def prepare_texts(texts: Sequence[str], senteval_text: bool, empty_allowed: bool = False) -> list[str]:
    """Validate, then apply the SentEval batcher steps (docs/spec.md section 2) when `senteval_text`."""
    require_text(texts, empty_allowed)
    return [senteval_sentence(text) if senteval_text else text for text in texts]


# ---- sentence splitting (HTP) ----------------------------------------------------------------------
# Offline sentence splitting for HTP (docs/spec.md section 5.1).
#
# The HTP reference (snap-research/HTP, `parser/parser.py`, `add_pst_to_sentences`) splits with spaCy's
# `en_core_web_sm` (a dependency parse). minidecoder uses **pysbd** instead: rule-based, pure Python,
# deterministic, no model download, and it handles abbreviations, decimals, quotes and ellipses. Boundaries
# may differ from spaCy's on unusual text; the HTP method reports the splitter it used.
#
# After splitting, each sentence is processed as the reference does: strip, and append "." unless it
# already ends with one of `. ! ? "`. Text without a boundary is one sentence; text that is empty after
# stripping gives no sentence (the caller decides; HTP follows the reference's `"<PST> ."`).
SPLITTER = "pysbd 'en' (clean=False)"
_SENTENCE_ENDINGS = (".", "!", "?", '"')  # parser.py: `if not s.endswith(('.', '!', '?', "\""))`


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
        if not s.endswith(_SENTENCE_ENDINGS):
            s += "."
        sentences.append(s)
    return sentences
