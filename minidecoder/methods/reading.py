"""Methods that only read: the plain block loop, one output layer, a pooling. PromptEOL, Pretended CoT,
Knowledge, any template, mean and last pooling, MetaEOL (8 templates averaged) and Echo are this loop
with their own templates and pooling:

    for each template t:  e_t = pool(hidden_states[layer] of the filled template t)
    e = mean over templates of e_t            (MetaEOL: e = (1/8) sum_k h_last(prompt_k(text)))

Each declares `templates()` and `pool()`; the sweep reads every output layer of one forward through
the same two hooks (minidecoder.evaluation.sweep), so what it scores is what `embed_batch` computes.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.methods.base import Method
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import hidden_at
from minidecoder.methods.prompts import prepare_texts


@dataclasses.dataclass
class ReadsOneLayer(Method):
    """A method whose embedding is a pooling of one output layer of the plain loop."""

    def templates(self) -> list[str]:
        raise NotImplementedError

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        """(B, T, E) hidden states of one filled template -> (B, E)."""
        raise NotImplementedError

    def prepare(self, texts: list[str]) -> list[str]:
        return prepare_texts(texts, self.senteval_text)

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        texts = self.prepare(texts)
        vectors = []
        for template in self.templates():
            batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
            vectors.append(self.pool(hidden_at(model, batch, self.layer), batch))  # (B, E)
        return torch.stack(vectors).mean(dim=0).float()  # one template: the vector itself

    def check(self, model) -> None:
        resolve_output_layer(self.layer, model.num_layers)
