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
0..T-1 over the padded row; with RoPE the shift cancels, see tests/test_methods_invariants.py).

Shared pieces for the other prompt methods (TP and CP wrap these prompts, MetaEOL and CP's CK
average several of them): `TEMPLATES`, `prepare_texts`, `last_token_embedding`,
`average_over_templates`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.runner import hidden_at, last_token
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


def last_token_embedding(model, template: str, texts: list[str], layer: int) -> torch.Tensor:
    """(B, E): fill `template` with each (already prepared) text, left-pad, run up to `layer` (early
    exit), read the last real token: `hidden_states[layer][:, -1, :]` in the references."""
    batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
    return last_token(hidden_at(model, batch, layer), batch)  # (B, E)


def average_over_templates(embed_one: Callable[[str], torch.Tensor], templates: Sequence[str]) -> torch.Tensor:
    """The mean over templates of `embed_one(template)` (each (B, E)): MetaEOL's average of its eight
    prompts, CP's CK (Knowledge + Pretended CoT). Each template is its own forward pass; the MetaEOL
    reference stacked all prompts of a batch into one padded forward, which padding does not change
    beyond float tolerance."""
    if not templates:
        raise InputError("no templates to average", "give at least one template")
    return torch.stack([embed_one(template) for template in templates]).mean(dim=0)  # (B, E)


# ---- methods ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class _LastTokenPrompt(Method):
    """One template, last token at `layer`. Subclasses fix the template (or make it an option)."""

    layer: int = option(-1, "output layer (hidden_states index: -1 = final normed output, -2 = raw output "
                            "of the second-to-last block)")
    senteval_text: bool = option(True, _SENTEVAL_HELP)

    def prompt_template(self) -> str:
        raise NotImplementedError

    def __post_init__(self) -> None:
        check_template(self.prompt_template())
        check_bool(self.senteval_text, "senteval_text")

    def check(self, model) -> None:
        resolve_output_layer(self.layer, model.num_layers)

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        texts = prepare_texts(texts, self.senteval_text)
        return last_token_embedding(model, self.prompt_template(), texts, self.layer).float()


@register
@dataclasses.dataclass
class PromptEOL(_LastTokenPrompt):
    name = "prompteol"
    summary = ('PromptEOL (Jiang et al. 2023): last token of \'This sentence : "{text}" means in one word:"\' '
               "at the final normed layer")
    layer: int = option(REFERENCE_LAYERS["prompteol"], "output layer (hidden_states index); the reference reads -1, "
                                                       "the final normed output")

    def prompt_template(self) -> str:
        return TEMPLATES["prompteol"]


@register
@dataclasses.dataclass
class PretendedCoT(_LastTokenPrompt):
    name = "pretended_cot"
    summary = ("Pretended CoT (Zhang et al. 2024): PromptEOL prefixed with 'After thinking step by step ,', "
               "last token at layer -2")
    layer: int = option(REFERENCE_LAYERS["pretended_cot"], "output layer (hidden_states index); the reference reads -2, "
                                                           "the raw output of the second-to-last block")

    def prompt_template(self) -> str:
        return TEMPLATES["pretended_cot"]


@register
@dataclasses.dataclass
class Knowledge(_LastTokenPrompt):
    name = "knowledge"
    summary = ("Knowledge Enhancement (Zhang et al. 2024): PromptEOL after a sentence on what carries meaning, "
               "last token at layer -2")
    layer: int = option(REFERENCE_LAYERS["knowledge"], "output layer (hidden_states index); the reference reads -2, "
                                                       "the raw output of the second-to-last block")

    def prompt_template(self) -> str:
        return TEMPLATES["knowledge"]


@register
@dataclasses.dataclass
class Prompt(_LastTokenPrompt):
    name = "prompt"
    summary = "any template: last token of the filled template at an output layer (PromptEOL's recipe, your words)"
    template: str = option(TEMPLATES["prompteol"], "the prompt, with {text} where the sentence goes (tokenized as "
                                                   "one string)")

    def prompt_template(self) -> str:
        return self.template
