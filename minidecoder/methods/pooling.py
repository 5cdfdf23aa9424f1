"""The two plain baselines (docs/spec.md section 8): mean pooling and last-token pooling of any
output layer, on the bare text or inside a template.

    mean   average of the hidden states at `layer` over the `{text}` tokens (default), over every
           real token of the row (`over=all`: template and BOS included, padding never), or, with a
           template that repeats `{text}`, over every copy after the first (`over=after-first`: Echo-k's
           mean over positions n..kn, ReBA Table 2's mean-pooled repetition).
    last   hidden state of the last real token at `layer` (with `template="{text}"`, the sentence's
           own last token; with a prompt, what `prompt` computes).

References: the mean-pooling baseline the TP paper reports (arXiv 2412.11556; 47.06 STS Avg. on
Llama-2-7B, docs/spec.md section 10) and ZBWpro/PretCoTandKE `evaluation.py` (`--avg`: `(hidden_states[-1] * mask).mean(1)`).
That reference line divides the masked sum by the padded width T rather than by the number of real
tokens, so its vectors shrink with a batch's padding; minidecoder divides by the real count (a
per-row constant factor in the reference, which cosine similarity ignores, but a batch-dependent one).

Tokens of `{text}` are located by the tokenizer's character offsets (`inputs.encode_prompts`): a
token overlapping the sentence counts as the sentence's, the BOS never does.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.loop import last_token, masked_mean, mean_over_spans
from minidecoder.methods.reading import OwnTemplate
from minidecoder.methods.text import PIECES_HELP, SENTEVAL_HELP, template_fields

_LAYER_HELP = "output layer (hidden_states index: -1 = final normed output, 0 = embeddings, k = raw output of block k)"
_TEMPLATE_HELP = "text around the sentence, with {text} where it goes; '{text}' embeds the bare text"


def mean_over_mask(h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean over each row's real tokens (padding and a context excluded, BOS included)."""
    real = batch.attention_mask if batch.context_spans is None else batch.attention_mask & ~batch.context_mask()
    return masked_mean(h, real)


def mean_after_first_copy(h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean over the tokens of every {text} copy but the first (a token shared by two
    copies counted once): Echo-k's mean over positions n..kn."""
    later = torch.zeros(batch.attention_mask.shape, dtype=torch.bool)
    for row, spans in enumerate(batch.text_spans):
        for start, end in spans[1:]:
            later[row, start:end] = True
    return masked_mean(h, later)


def check_occurrence(template: str, occurrence: int) -> int:
    count = template_fields(template).count("text")
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or not -count <= occurrence < count:
        raise InputError(f"occurrence {occurrence!r} is not one of the template's {count} {{text}} placeholder(s)",
                         f"pick 0..{count - 1} (or -1 for the last)")
    return occurrence


@dataclasses.dataclass
class PlainBaseline(OwnTemplate):
    """mean and last: one output layer, the bare text or any template, the text taken verbatim by default."""

    layer: int = option(-1, _LAYER_HELP)
    template: str = option("{text}", _TEMPLATE_HELP)
    senteval_text: bool = option(False, SENTEVAL_HELP)
    pieces: bool = option(False, PIECES_HELP)


@register
@dataclasses.dataclass
class MeanPooling(PlainBaseline):
    name = "mean"
    summary = "mean pooling: average hidden state over the text tokens (or all tokens) at any layer, optional template"
    over: str = option("text", "which tokens to average: 'text' (the {text} tokens only), 'all' (every real "
                               "token: template and BOS included) or 'after-first' (every {text} copy after the "
                               "first: Echo-k's positions n..kn)")
    occurrence: int = option(-1, "with over=text and a template that repeats {text}: which copy to average "
                                 "(0 = first, -1 = last)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_occurrence(self.template, self.occurrence)
        if self.over not in ("text", "all", "after-first"):
            raise InputError(f"over={self.over!r} is not 'text', 'all' or 'after-first'",
                             "pass over=text, over=all or over=after-first")
        if self.over == "after-first" and template_fields(self.template).count("text") < 2:
            raise InputError(f"over=after-first needs {{text}} at least twice in the template, not {self.template!r}",
                             "pass a repeating template, e.g. template={text}{text}")

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        if self.over == "all":
            return mean_over_mask(h, batch)
        if self.over == "after-first":
            return mean_after_first_copy(h, batch)
        return mean_over_spans(h, batch.text_spans, self.occurrence)


@register
@dataclasses.dataclass
class LastTokenPooling(PlainBaseline):
    name = "last"
    summary = "last-token pooling: hidden state of the last real token at any layer, optional template"

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        return last_token(h, batch)
