"""PromptEOL, Pretended CoT, Knowledge and any template: the last token of a prompt at one layer.

The prompts and their provenance are in `minidecoder.methods.prompts`; the loop is the plain one
(`minidecoder.methods.reading`): fill the template, run to `layer` (early exit), read the last real
token, the references' `hidden_states[layer][:, -1, :]` under left padding.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.methods.base import option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.loop import last_token
from minidecoder.methods.prompts import _SENTEVAL_HELP, REFERENCE_LAYERS, TEMPLATES, check_bool, check_template
from minidecoder.methods.reading import ReadsOneLayer


@dataclasses.dataclass
class LastTokenPrompt(ReadsOneLayer):
    """One template, last token at `layer`. Subclasses fix the template (or make it an option)."""

    layer: int = option(-1, "output layer (hidden_states index: -1 = final normed output, -2 = raw output "
                            "of the second-to-last block)")
    senteval_text: bool = option(True, _SENTEVAL_HELP)

    def prompt_template(self) -> str:
        raise NotImplementedError

    def templates(self) -> list[str]:
        return [self.prompt_template()]

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        return last_token(h, batch)  # the references' hidden_states[layer][:, -1, :] under left padding

    def __post_init__(self) -> None:
        check_template(self.prompt_template())
        check_bool(self.senteval_text, "senteval_text")


@register
@dataclasses.dataclass
class PromptEOL(LastTokenPrompt):
    name = "prompteol"
    summary = ('PromptEOL (Jiang et al. 2023): last token of \'This sentence : "{text}" means in one word:"\' '
               "at the final normed layer")
    layer: int = option(REFERENCE_LAYERS["prompteol"], "output layer (hidden_states index); the reference reads -1, "
                                                       "the final normed output")

    def prompt_template(self) -> str:
        return TEMPLATES["prompteol"]


@register
@dataclasses.dataclass
class PretendedCoT(LastTokenPrompt):
    name = "pretended_cot"
    summary = ("Pretended CoT (Zhang et al. 2024): PromptEOL prefixed with 'After thinking step by step ,', "
               "last token at layer -2")
    layer: int = option(REFERENCE_LAYERS["pretended_cot"], "output layer (hidden_states index); the reference reads -2, "
                                                           "the raw output of the second-to-last block")

    def prompt_template(self) -> str:
        return TEMPLATES["pretended_cot"]


@register
@dataclasses.dataclass
class Knowledge(LastTokenPrompt):
    name = "knowledge"
    summary = ("Knowledge Enhancement (Zhang et al. 2024): PromptEOL after a sentence on what carries meaning, "
               "last token at layer -2")
    layer: int = option(REFERENCE_LAYERS["knowledge"], "output layer (hidden_states index); the reference reads -2, "
                                                       "the raw output of the second-to-last block")

    def prompt_template(self) -> str:
        return TEMPLATES["knowledge"]


@register
@dataclasses.dataclass
class Prompt(LastTokenPrompt):
    name = "prompt"
    summary = "any template: last token of the filled template at an output layer (PromptEOL's recipe, your words)"
    template: str = option(TEMPLATES["prompteol"], "the prompt, with {text} where the sentence goes (tokenized as "
                                                   "one string)")

    def prompt_template(self) -> str:
        return self.template
