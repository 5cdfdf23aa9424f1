"""Methods that only read: the plain block loop, one output layer, a pooling. PromptEOL, Pretended CoT,
Knowledge, any template (this file), mean and last pooling (pooling.py), MetaEOL (metaeol.py) and Echo
(echo.py) are this loop with their own templates and pooling:

    for each template t:  e_t = pool(hidden_states[layer] of the filled template t)
    e = mean over templates of e_t            (MetaEOL: e = (1/8) sum_k h_last(prompt_k(text)))

A prompt asks the model to compress the sentence into "one word"; its embedding is the hidden state
of the prompt's last token (the position that would predict that word) at an output layer, the
references' `hidden_states[layer][:, -1, :]` under left padding. The prompts and their provenance
are in `minidecoder.methods.prompts`.

Text handling (docs/spec.md section 2): every reference batcher prepares the sentence with the
SentEval steps of `minidecoder.methods.text.senteval_sentence` (append `.`, `"` -> `'`, final `?` -> `.`)
before filling the template; `senteval_text=True` (the default) does the same, `False` embeds the
text verbatim. Padding is on the left, as in the references; positions are derived from the mask
(`Decoder.context`), which gives a padded row exactly its unpadded positions (the references fed
0..T-1 over the padded row; with RoPE the shift cancels, see tests/methods/test_methods_invariants.py).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from minidecoder.methods.base import Method, check_bool, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import Pass, last_token
from minidecoder.methods.prompts import REFERENCE_LAYERS, TEMPLATES
from minidecoder.methods.text import PIECES_HELP, SENTEVAL_HELP, check_template, fill_template, prepare_texts


@dataclasses.dataclass
class ReadsOneLayer(Method):
    """A method whose embedding is a pooling of one output layer of the plain loop. A text's context goes
    before the template (`inputs.encode_prompts`): a prompt read at its last token simply reads it there."""

    takes_context = True

    def templates(self) -> list[str]:
        raise NotImplementedError

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        """(B, T, E) hidden states of one filled template -> (B, E)."""
        raise NotImplementedError

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """One plain forward per template, read at `layer` and pooled by `pool`."""
        texts = prepare_texts(texts, self.senteval_text, self.reads_empty_text())  # the text only, not a context
        index = resolve_output_layer(self.layer, model.num_layers)
        passes = []
        for template in self.templates():
            batch = encode_prompts(model.tokenizer, template, texts, padding_side="left", contexts=contexts,
                                   pieces=self.pieces)
            passes.append(Pass(batch, layer=index, reads=f"{type(self).__name__}.pool",
                               pool=lambda run, batch=batch: self.pool(run.hidden(index), batch)))  # (B, E)
        return passes

    def check(self, model) -> None:
        resolve_output_layer(self.layer, model.num_layers)


@dataclasses.dataclass
class OwnTemplate(ReadsOneLayer):
    """A method with a `template` option of its own holding {text} (mean, last, Echo), and `senteval_text`."""

    min_occurrences: ClassVar[int] = 1  # of {text} in the template

    def templates(self) -> list[str]:
        return [self.template]

    def __post_init__(self) -> None:
        check_template(self.template, min_occurrences=self.min_occurrences)
        check_bool(self.senteval_text, "senteval_text")
        check_bool(self.pieces, "pieces")


@dataclasses.dataclass
class LastTokenPrompt(ReadsOneLayer):
    """One template, last token at `layer`. Subclasses fix the template (or make it an option)."""

    layer: int = option(-1, "output layer (hidden_states index: -1 = final normed output, -2 = raw output "
                            "of the second-to-last block)")
    senteval_text: bool = option(True, SENTEVAL_HELP)
    pieces: bool = option(False, PIECES_HELP)

    def prompt_template(self) -> str:
        return TEMPLATES[self.name]  # PromptEOL, Pretended CoT, Knowledge: the paper's own prompt

    def templates(self) -> list[str]:
        return [self.prompt_template()]

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        return last_token(h, batch)  # the references' hidden_states[layer][:, -1, :] under left padding

    def reads_empty_text(self) -> bool:
        return bool(fill_template(self.prompt_template(), ""))  # a prompt around the text: its last token is there

    def __post_init__(self) -> None:
        check_template(self.prompt_template())
        check_bool(self.senteval_text, "senteval_text")
        check_bool(self.pieces, "pieces")


# The papers' prompts: each is LastTokenPrompt with its paper's template (prompts.TEMPLATES) read at its
# reference's layer (prompts.REFERENCE_LAYERS); nothing else differs, so a table says it once.
PAPER_PROMPTS = [  # (class name, method name, summary)
    ("PromptEOL", "prompteol", 'PromptEOL (Jiang et al. 2023): last token of \'This sentence : "{text}" means in '
                               'one word:"\' at the final normed layer'),
    ("PretendedCoT", "pretended_cot", "Pretended CoT (Zhang et al. 2024): PromptEOL prefixed with 'After thinking "
                                      "step by step ,', last token at layer -2"),
    ("Knowledge", "knowledge", "Knowledge Enhancement (Zhang et al. 2024): PromptEOL after a sentence on what "
                               "carries meaning, last token at layer -2"),
]
LAYER_WORDS = {-1: "the final normed output", -2: "the raw output of the second-to-last block"}


def paper_prompt(class_name: str, name: str, summary: str) -> type[LastTokenPrompt]:
    """The registered method `name`: LastTokenPrompt whose `layer` defaults to the reference's."""
    layer = REFERENCE_LAYERS[name]
    help_text = f"output layer (hidden_states index); the reference reads {layer}, {LAYER_WORDS[layer]}"
    return register(dataclasses.make_dataclass(
        class_name, [("layer", int, option(layer, help_text))], bases=(LastTokenPrompt,),
        namespace={"name": name, "summary": summary, "__module__": __name__}))


PromptEOL, PretendedCoT, Knowledge = (paper_prompt(*row) for row in PAPER_PROMPTS)


@register
@dataclasses.dataclass
class Prompt(LastTokenPrompt):
    name = "prompt"
    summary = "any template: last token of the filled template at an output layer (PromptEOL's recipe, your words)"
    template: str = option(TEMPLATES["prompteol"], "the prompt, with {text} where the sentence goes (tokenized as "
                                                   "one string)")

    def prompt_template(self) -> str:
        return self.template
