"""Placeholder tokens and the row copies into them: the pieces TP, HTP and CP's TP extension share.

A placeholder (`<PST>`, `<B-PST>`) is an added token whose input-embedding row the method chooses
(`placeholder_row`). Between blocks, the residual-stream row at a placeholder is overwritten by the
row of another position of the same sequence (`CopyPlan`), before given blocks (`CopyStep`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.loop import NOWHERE, Step

PLACEHOLDER_INITS = ("zeros", "ones", "uniform", "gaussian", "mean", "token:<text>")


@dataclass
class CopyPlan:
    """Row copies inside the residual stream: h[batch[k], target[k]] <- h[batch[k], source[k]] for
    every k, all sources read before any target is written. Index tensors are (K,) long."""

    batch: torch.Tensor
    target: torch.Tensor
    source: torch.Tensor

    @classmethod
    def from_pairs(cls, pairs: list[tuple[int, int, int]]) -> "CopyPlan":
        """pairs: (row, target position, source position) triples."""
        index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 3)  # (K, 3)
        return cls(index[:, 0], index[:, 1], index[:, 2])

    def apply(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, E) -> a new (B, T, E) with the rows copied; `h` itself is left untouched, so hidden
        states handed out earlier keep their values (the references wrote in place)."""
        out = h.clone()
        out[self.batch, self.target] = h[self.batch, self.source]  # the whole vector is replaced
        return out

    def to(self, device: torch.device) -> "CopyPlan":
        return CopyPlan(self.batch.to(device), self.target.to(device), self.source.to(device))

    def shifted(self, columns: int) -> "CopyPlan":
        return CopyPlan(self.batch, self.target - columns, self.source - columns)

    def first_touched(self, batch_size: int) -> torch.Tensor:
        """(B,) each row's first column read or written (NOWHERE for a row without copies)."""
        first = torch.full((batch_size,), NOWHERE, dtype=torch.long)
        touched = torch.minimum(self.target, self.source).cpu()
        return first.scatter_reduce(0, self.batch.cpu(), touched, reduce="amin")


class CopyStep(Step):
    """Before every block in `blocks`, apply `plan` to the residual stream (TP's and HTP's step)."""

    def __init__(self, plan: CopyPlan, blocks: set[int]) -> None:
        self.plan, self.blocks = plan, set(blocks)
        self._on: dict[torch.device, CopyPlan] = {}

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        if i not in self.blocks:
            return h
        plan = self._on.setdefault(h.device, self.plan.to(h.device))
        return plan.apply(h)  # h[b, target] <- h[b, source], on the block's input (before its norm)

    def first_touched(self, batch_size: int) -> torch.Tensor:
        return self.plan.first_touched(batch_size)

    def shifted(self, columns: int) -> "CopyStep":
        return CopyStep(self.plan.shifted(columns), self.blocks)


def placeholder_row(model, init: str, seed: int = 0, index: int = 0) -> torch.Tensor:
    """(E,) float32 input-embedding row for a placeholder, *before* Gemma's sqrt(hidden) scaling
    (`Decoder.embed` scales it like every row, as transformers scales the resized table's row).

    zeros / ones; uniform: U[0, 1); gaussian: N(0, I) (the TP reference's `torch.randn`); both drawn
    from `torch.Generator('cpu').manual_seed(seed)`, skipping `index` earlier draws (HTP's second
    placeholder uses index 1); mean: the mean row of the embedding table (what transformers'
    `resize_token_embeddings` gives a new row, up to its 1e-9-covariance noise; HTP's reference
    default); token:<text>: a copy of that token's row (the TP paper's Table 4 uses a space).
    """
    weight = model.model.embed_tokens.weight
    E = weight.shape[1]
    check_placeholder_init(init)
    if init == "zeros":
        return torch.zeros(E)
    if init == "ones":
        return torch.ones(E)
    if init in ("uniform", "gaussian"):
        generator = torch.Generator().manual_seed(seed)
        draw = torch.rand if init == "uniform" else torch.randn
        for _ in range(index):
            draw(E, generator=generator)
        return draw(E, generator=generator)
    if init == "mean":
        return weight.detach().float().mean(dim=0).cpu()
    text = init[len("token:"):]
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise InputError(f"pst_init {init!r}: {text!r} is {len(ids)} tokens ({ids}), not one",
                         "name a text that is a single token, e.g. 'token: ' (a space, the paper's choice)")
    return weight[ids[0]].detach().float().cpu()


def check_placeholder_init(init: object) -> str:
    if not isinstance(init, str) or not (init in PLACEHOLDER_INITS[:-1] or init.startswith("token:")):
        raise InputError(f"unknown pst_init {init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")
    return init
