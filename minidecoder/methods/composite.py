"""One method built from two: CP with TP's copies in the same forwards (`cp+tp`, also `cp tp=true`; a
minidecoder extension, in no paper). `Steps` chains steps in one forward, each part keeping its own
meaning; `CPWithTP` is CP whose prompts are encoded as TP encodes them (a <PST> before the quote, TP's
copies as the step) and whose steering runs after those copies."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from minidecoder.errors import InputError
from minidecoder.methods.audit import PartsAudited
from minidecoder.methods.base import check_bool, check_int, check_seed, option, register
from minidecoder.methods.cp import CP, SteerLastToken
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.loop import Step
from minidecoder.methods.placeholders import check_placeholder_init, placeholder_row
from minidecoder.methods.tp import PST, TPStep, encode_tp, with_placeholders


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


@register
@dataclass
class CPWithTP(CP):
    """CP (methods.cp) whose forwards also take TP's copies (methods.tp): each normal prompt, and with
    `tp_aux` the auxiliary one, holds a <PST> before its quote that takes the last token's row before
    blocks [start, end); CP's edit at block `steer_layer` runs after them (`Steps`)."""

    name = "cp+tp"
    summary = ("CP with Token Prepending in the same forwards (a minidecoder extension, in no paper): TP's <PST> "
               "copies before blocks [start, end), CP's steering at block steer_layer")
    extensions: ClassVar[dict[str, str]] = {}
    baseline_prompts: ClassVar[str] = "the same prompt(s) with TP's copies"

    start: int = option(1, "first 0-based block before which <PST> takes the last token's row (TP's start)")
    end: int = option(7, "copies before blocks start..end-1 (half-open; TP's end, reference 7 on Llama-2)")
    pst_init: str = option("gaussian", "<PST> input row (TP's pst_init: zeros, ones, uniform, gaussian, mean, "
                           "token:<text>)")
    seed: int = option(0, "seed of the <PST> row for gaussian/uniform (TP's seed)")
    tp_aux: bool = option(True, "the auxiliary prompt gets the same <PST> and copies (a and b come from matched "
                          "forwards); false runs it plain, as CP does")

    def encode(self, model, template: str, sentences: list[str], contexts: list[str] | None = None,
               auxiliary: bool = False) -> tuple[PromptBatch, Step, dict]:
        """TP's <PST> before the quote (unless the template places it), TP's copies before blocks [start, end)
        as the step, and the <PST> input row; the auxiliary prompt plain where `tp_aux` is false."""
        if auxiliary and not self.tp_aux:
            return super().encode(model, template, sentences, contexts)
        template = template if PST in template else with_placeholders(template, 1)
        batch, pst_id, pst = encode_tp(model.tokenizer, template, sentences, contexts)
        step = TPStep.of(batch, pst, set(range(self.start, self.end)), hide_pst_in_block_0=False)
        return batch, step, {pst_id: placeholder_row(model, self.pst_init, self.seed)}

    def with_steering(self, step: Step, steering: SteerLastToken) -> Step:
        return Steps(parts=(step, steering))  # TP's copies, then CP's edit

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("start", "end"):
            check_int(getattr(self, name), name)
        check_seed(self.seed)
        check_bool(self.tp_aux, "CP tp_aux")
        check_placeholder_init(self.pst_init, self.seed)

    def check(self, model) -> None:
        super().check(model)
        index = resolve_output_layer(self.output_layer(model), model.num_layers)
        check_block_range(self.start, self.end, model.num_layers, "CP + TP")
        if self.end > index:
            raise InputError(f"CP + TP range [{self.start}, {self.end}) reaches past the output layer "
                             f"{self.output_layer(model)} (blocks 0..{index - 1} run)", "lower `end` or raise `layer`")
