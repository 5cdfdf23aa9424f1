"""Echo embeddings: show the sentence twice and pool the second copy.

Springer et al., "Repetition Improves Language Model Embeddings" (arXiv 2402.15449). A causal model's
token states cannot see later tokens; in the second copy of a repeated text every token has already
seen the whole sentence once, so pooling only that copy gives states that "know" the full text.
Zero-shot template (docs/spec.md section 3, confirmed by the paper's author):

    Rewrite the following paragraph: {text}. The rewritten paragraph: {text}

Reference code: jakespringer/echo-embeddings, `echo_embeddings.py` (commit e7d39333):
- `EchoEmbeddingsMistral.forward` reads `AutoModel(...).last_hidden_state`, the base model's output
  after the final norm = hidden_states[-1] -> default `layer=-1`;
- `EchoPooling(strategy='mean')` averages the token states where `embed_mask` is 1, i.e. the tokens
  of the braced second `{%%text%%}` piece only -> `pooling=mean` over the last `{text}` occurrence;
  `strategy='last'` takes the last of those tokens -> `pooling=last`.

Paper vs code, and what minidecoder does:
- `EchoParser` tokenizes every template piece on its own and concatenates the ids (with
  `add_bos_token=False` and `<s>` written into its trained-model templates). minidecoder tokenizes the
  filled template as one string (as every other method here does) and adds BOS by the tokenizer's
  policy; a SentencePiece tokenizer can split the boundary between template and text differently
  from the piecewise reference (e.g. a "\u2581"-prefixed first text token). The tokens counted as the text are
  those overlapping its characters.
- The released checkpoints' templates (`<s>Instruct:...Query again:{%%text%%}{</s>}`) pool `</s>` too;
  those are fine-tuned models. This module is the zero-shot method; pass `template=` for others.
- The text is not touched (`senteval_text=False`): the Echo code does no SentEval preparation, and
  the template already puts a `.` after the first copy.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.loop import mean_over_spans
from minidecoder.methods.reading import OwnTemplate
from minidecoder.methods.text import PIECES_HELP, SENTEVAL_HELP

ECHO_TEMPLATE = "Rewrite the following paragraph: {text}. The rewritten paragraph: {text}"


@register
@dataclasses.dataclass
class Echo(OwnTemplate):
    name = "echo"
    summary = ("Echo embeddings (Springer et al. 2024): the text twice in a rewrite prompt, mean over the "
               "second copy's tokens at the final layer")
    layer: int = option(-1, "output layer (hidden_states index); the reference reads last_hidden_state, i.e. -1")
    template: str = option(ECHO_TEMPLATE, "prompt with {text} at least twice; the last copy is pooled")
    pooling: str = option("mean", "'mean' over the last copy's tokens (EchoPooling 'mean'), or 'last': its last "
                                  "token (EchoPooling 'last')")
    senteval_text: bool = option(False, SENTEVAL_HELP)  # off: the Echo reference prepares nothing
    pieces: bool = option(False, PIECES_HELP)

    min_occurrences = 2  # the text twice

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pooling not in ("mean", "last"):
            raise InputError(f"pooling={self.pooling!r} is not 'mean' or 'last'", "pass pooling=mean or pooling=last")

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        if self.pooling == "mean":
            # EchoPooling 'mean': sum(h * embed_mask) / sum(embed_mask), embed_mask = the second copy
            return mean_over_spans(h, batch.text_spans, occurrence=-1)
        ends = torch.tensor([spans[-1][1] - 1 for spans in batch.text_spans]).to(h.device, non_blocking=True)  # last of copy 2
        return h[torch.arange(h.shape[0], device=h.device), ends]  # (B, E)
