"""Several steps in one forward, applied in order: CP's steering on top of TP's copies (`cp` with `tp=true`,
a minidecoder extension in no paper). Each part keeps its own meaning; this only chains them."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minidecoder.methods.audit import PartsAudited
from minidecoder.methods.loop import Step


@dataclass(frozen=True, eq=False, kw_only=True)
class Steps(PartsAudited, Step):
    """The parts' `before` in order, their `edits` merged (two parts editing one site is an error), their
    folds in order."""

    parts: tuple[Step, ...]

    @property
    def blocks(self) -> frozenset[int]:
        return frozenset().union(*(part.blocks for part in self.parts))

    @property
    def hidden_keys(self) -> torch.Tensor | None:
        hidden = [part.hidden_keys for part in self.parts if part.hidden_keys is not None]
        return torch.stack(hidden).any(dim=0) if hidden else None

    @property
    def folds(self) -> bool:
        return any(part.folds for part in self.parts)

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            h = part.before(i, h)
        return h

    def edits(self, i: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        merged: dict[str, Callable] = {}
        for part in self.parts:
            found = part.edits(i)
            if set(found) & set(merged):
                raise ValueError(f"two steps edit the same site(s) {sorted(set(found) & set(merged))} of block {i}")
            merged.update(found)
        return merged

    def fold(self, A: torch.Tensor | None, pattern: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            if part.folds:
                A = part.fold(A, pattern)
        return A

    def to(self, device: torch.device) -> "Steps":
        return dataclasses.replace(self, parts=tuple(part.to(device) for part in self.parts))
