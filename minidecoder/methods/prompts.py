"""Prompt-based last-token embeddings: PromptEOL, Pretended CoT, Knowledge, and any template.

A prompt asks the model to compress the sentence into "one word"; the embedding is the hidden state
of the prompt's last token (the position that would predict that word) at an output layer.

    PromptEOL      Jiang et al., "Scaling Sentence Embeddings with Large Language Models" (arXiv
                   2307.16645), the explicit one-word limitation prompt; code kongds/scaling_sentemb,
                   `evaluation.py` (`batcher`: `hidden_states[-1][:, -1, :]`).
    Pretended CoT  Zhang et al., "Simple Techniques for Enhancing Sentence Embeddings in Generative
    Knowledge      Language Models" (arXiv 2404.03921); code ZBWpro/PretCoTandKE, `settings.py` (the
                   strings `Pretended_CoT`, `Knowledge_Enhancement`) and `evaluation.py` (`batcher`:
                   `hidden_states[-2][:, -1, :]` for these two prompts, `hidden_states[-1]` for PromptEOL).

Text handling (spec `methods.md` section 2): every reference batcher prepares the sentence with the
SentEval steps of `minidecoder.methods.text.senteval_sentence` (append `.`, `"` -> `'`, final `?` -> `.`)
before filling the template; `senteval_text=True` (the default) does the same, `False` embeds the
text verbatim. Padding is on the left, as in the references; positions are derived from the mask
(`Decoder.context`), which gives a padded row exactly its unpadded positions (the references fed
0..T-1 over the padded row; with RoPE the shift cancels, see tests/methods/test_methods_invariants.py).

Shared pieces for the other prompt methods (TP and CP wrap these prompts): `TEMPLATES`,
`prepare_texts`, `check_template`. The methods themselves are in `minidecoder.methods.prompt_methods`.
"""
from __future__ import annotations

from collections.abc import Sequence

from minidecoder.errors import InputError
from minidecoder.methods.text import fill_template, senteval_sentence, template_fields

# The exact strings of spec section 3 (= the references' strings with `*sent 0*` written `{text}`).
TEMPLATES: dict[str, str] = {
    # kongds/scaling_sentemb, evaluation.py; ZBWpro/PretCoTandKE, settings.py `PromptEOL`
    "prompteol": 'This sentence : "{text}" means in one word:"',
    # ZBWpro/PretCoTandKE, settings.py `Pretended_CoT`
    "pretended_cot": 'After thinking step by step , this sentence : "{text}" means in one word:"',
    # ZBWpro/PretCoTandKE, settings.py `Knowledge_Enhancement`
    "knowledge": ('The essence of a sentence is often captured by its main subjects and actions, while descriptive '
                  'terms provide additional but less central details. With this in mind , this sentence : '
                  '"{text}" means in one word:"'),
}

# The output layer each reference reads (hidden_states index; see minidecoder.methods.layers).
REFERENCE_LAYERS: dict[str, int] = {"prompteol": -1, "pretended_cot": -2, "knowledge": -2}

_SENTEVAL_HELP = ("prepare each text as the SentEval batchers of the references did (append '.', '\"' -> \"'\", "
                  "final '?' -> '.') before filling the template; false embeds the text verbatim")


# ---- shared pieces ---------------------------------------------------------------------------------
def require_text(texts: Sequence[str]) -> None:
    """Every text must be a non-empty, non-whitespace string: an embedding of nothing is undefined."""
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {row} is a {type(text).__name__}, not a string", "pass a list of strings")
        if not text.strip():
            raise InputError(f"text {row} is empty or whitespace-only ({text!r})",
                             "remove that row or give it some text; an embedding of nothing is undefined")


def prepare_texts(texts: Sequence[str], senteval_text: bool) -> list[str]:
    """Validate, then apply the SentEval batcher steps (spec section 2) when `senteval_text`."""
    require_text(texts)
    return [senteval_sentence(text) if senteval_text else text for text in texts]


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


def check_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} {value!r} is not true or false", f"pass {what}=true or {what}=false")
    return value
