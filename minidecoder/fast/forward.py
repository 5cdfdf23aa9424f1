"""The executor: the plain loop (`minidecoder.methods.loop.Forward`) run with the fast paths its `Plan`
chooses. It overrides the constructor (plan, shared prefix, bucket padding, context), `block` (how a block
is called) and `hidden` / `recorded` (states put back in the batch's layout); the order of a block's work,
`run_to`, is the plain loop's own, so it is written once.

    shared prefix   the prefix runs once in a batch-1 `FastForward` filling a KV cache; this forward runs
                    the rest of every row against its broadcast keys, with the step's column fields
                    shifted (fast.prefix_cache.shifted); states are assembled back (prefix_cache.assemble)
    buckets         rows and leading columns of padding added (fast.graphs.bucket); the step acts on the
                    batch's rows only (`OnRows`); states are read without the padding
    block calls     site-free ones fused (fast.fused, the GPU default), compiled (fast.compiled) or replayed
                    from a captured graph (fast.graphs)
    blocked fusion  a folding block records q and k; its patterns are recomputed a few heads at a time

Tested equal to the plain `Forward` for every method with each plan field forced on alone
(tests/fast/test_executor_oracle.py).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from minidecoder.core.model import KVCache, Sites
from minidecoder.fast import prefix_cache
from minidecoder.fast.blocked_fusion import head_group_patterns
from minidecoder.fast.compiled import compiled_block_forward
from minidecoder.fast.fused import fused_block_forward
from minidecoder.fast.device import pinned, to_device
from minidecoder.fast.graphs import graph_bank
from minidecoder.fast.options import FastPaths, fast_paths_of
from minidecoder.fast.plan import Plan, plan
from minidecoder.methods.loop import Forward, Step


class FastForward(Forward):
    """A `Forward` whose batch runs as its plan says (see the module docstring). touched_by: steps that a
    sweep will later fork to (the shared prefix stays clear of them); cache: a KV cache to fill (the
    shared prefix's own pass); paths: settings instead of the model's `fast_paths`."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 step: Step | None = None, keep: Iterable[int] = (), extra_rows: Mapping | None = None,
                 record: Mapping[int, Iterable[str]] | None = None, touched_by: Iterable[Step] = (),
                 cache: KVCache | None = None, paths: FastPaths | None = None) -> None:
        step, keep = step if step is not None else Step(), frozenset(keep)
        record = {i: frozenset(names) for i, names in (record or {}).items()}
        paths = paths or fast_paths_of(model)
        ids = input_ids.cpu()  # decisions are made on the host's copy: no device value is read back
        mask = None if attention_mask is None else attention_mask.cpu().bool()
        self.model, device = model, model.device
        self.plan: Plan = plan(model.config, device, model.dtype, paths, ids, mask, (step, *touched_by), record,
                               cached=cache is not None)
        self.rows, self.first = ids.shape[0], None if mask is None else prefix_cache.first_real_positions(mask)
        self.batch_mask = to_device(mask, device) if self.plan.prefix else None  # (B, T): where states assemble
        self.prefix: FastForward | None = None
        self.offset = 0  # stream column j is batch column j + offset
        stream_ids, stream_mask = ids, mask
        if self.plan.prefix:  # the shared prefix, once (batch 1), through every block this forward may run
            prefix_ids, stream_ids, stream_mask = prefix_cache.split(ids, mask, self.plan.prefix)
            self.prefix = FastForward(model, prefix_ids, None, keep=keep, record=record,
                                      cache=KVCache.empty(model.num_layers), paths=paths)
            self.prefix.run_to(self.prefix.deepest)
            self.offset = self.plan.prefix
        elif self.plan.bucket:
            stream_ids, stream_mask, self.offset = padded_to_bucket(ids, mask, self.plan.bucket)
        self.stream_shape, self.stream_mask = stream_ids.shape, to_device(stream_mask, device)
        self.cache = cache
        super().__init__(model, pinned(stream_ids, device), pinned(stream_mask, device), self.stream_step(step), keep,
                         {k: to_device(row, device) for k, row in (extra_rows or {}).items()}, record,
                         context=self.stream_context())

    @property
    def prefix_length(self) -> int:
        """Tokens every row shares that ran once (0: none)."""
        return self.plan.prefix

    def stream_step(self, step: Step) -> Step:
        """`step` (in batch columns) as it acts on this stream: its column fields shifted past the prefix or
        the padding, on the batch's rows only, on the device."""
        if self.plan.prefix:
            touched = prefix_cache.first_touched(step, self.rows)
            if step.folds or step.hidden_keys is not None or int((touched - self.first).min()) < self.plan.prefix:
                raise ValueError("the step touches the shared prefix; build the forward with it in touched_by")
        if self.offset:
            step = prefix_cache.shifted(step, self.offset)
        if self.plan.bucket:
            step = OnRows(inner=step, rows=self.rows)
        return step

    def stream_context(self):
        """Masks and RoPE tables of this stream; with a shared prefix, a fresh broadcast of its cache (each
        branch of a sweep appends its own keys)."""
        B, T = self.stream_shape
        cache = self.prefix.ctx.cache.expand(B) if self.prefix is not None else self.cache
        return self.model.context(self.stream_mask, T, B, cache, explicit_attention=self.plan.explicit,
                                  longest=self.plan.longest)

    def block(self, i: int, h: torch.Tensor) -> tuple[torch.Tensor, Iterable[torch.Tensor]]:
        """Block i as the plan says: a site-free call compiled, replayed from a graph or fused, a folding
        block's patterns a few heads at a time, any other call the plain loop's own."""
        folding = self.step.folds and i in self.step.blocks
        layer, ctx = self.model.layers[i], self.first_ctx if i == 0 else self.ctx
        # a call through a KV cache is never compiled or captured; the fused call is eager, so it takes one too
        fast_call = (self.plan.block_call != "plain" and ctx.cache is None) or self.plan.fused
        if fast_call and not folding and not self.record.get(i) and not self.step.edits(i):  # site-free
            if self.plan.block_call == "graph" and ctx.cache is None:  # a bounded set of shapes and captures
                return graph_bank(self.model).forward(layer, h, ctx), []
            if self.plan.block_call == "compiled" and ctx.cache is None:
                return compiled_block_forward(layer, h, ctx), []
            return fused_block_forward(layer, h, ctx), []
        if not (folding and self.plan.heads_per_fold):
            return super().block(i, h)
        # blocked fusion: the block records q and k; its patterns are recomputed a few heads at a time
        sites = Sites(record=self.record.get(i, frozenset()) | {"q", "k"}, edit=self.step.edits(i))
        h = layer(h, ctx, sites)
        for name in self.record.get(i, ()):
            self.records[(i, name)] = sites.store[name]
        attn = layer.self_attn
        return h, head_group_patterns(attn, sites.store["q"], sites.store["k"], ctx.masks[attn.layer_type],
                                      self.plan.heads_per_fold)

    def hidden(self, index: int) -> torch.Tensor:
        """hidden_states[index] (B, T, E) in the batch's layout (where the prefix ran once, padded positions
        hold zeros); index L is after the final norm."""
        self.run_to(index)
        state = self._in_batch_layout(self.states[index], lambda: self.prefix.states[index])
        return self.model.norm(state) if index == self.model.num_layers else state

    def recorded(self, block: int, site: str) -> torch.Tensor:
        self.run_to(block + 1)
        return self._in_batch_layout(self.records[(block, site)], lambda: self.prefix.records[(block, site)])

    def _in_batch_layout(self, value: torch.Tensor, prefix_value: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A token-major (B', T', ...) value of the stream in the batch's layout (B, T, ...)."""
        if self.prefix is not None:
            return prefix_cache.assemble(prefix_value(), value, self.batch_mask)
        if self.plan.bucket:  # drop the padding rows and leading columns
            return value[:self.rows, -self.offset:]
        return value


@dataclass(frozen=True, eq=False, kw_only=True)
class OnRows(Step):
    """`inner` acting on the first `rows` rows of a bucket-padded stream only (the rest is padding, none
    of its business). Never folds or hides keys: a plan pads no batch whose step does."""

    inner: Step
    rows: int

    @property
    def blocks(self) -> frozenset[int]:
        return self.inner.blocks

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        real = h[:self.rows]
        out = self.inner.before(i, real)
        return h if out is real else torch.cat([out, h[self.rows:]])

    def edits(self, i: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        return {name: _on_rows(edit, self.rows) for name, edit in self.inner.edits(i).items()}

    def to(self, device: torch.device) -> "OnRows":
        inner = self.inner.to(device)
        return self if inner is self.inner else OnRows(inner=inner, rows=self.rows)

    def acts_on(self, row: int) -> list[dict]:
        return self.inner.acts_on(row)

    def report(self, i: int, where: str, old: Any, new: Any, shift: int) -> list[dict]:
        return self.inner.report(i, where, old, new, shift)


def _on_rows(edit: Callable, rows: int) -> Callable:
    return lambda value: torch.cat([edit(value[:rows]), value[rows:]])


def padded_to_bucket(ids: torch.Tensor, mask: torch.Tensor | None,
                     shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(ids, mask) padded to `shape`: padding rows after the batch's, padding columns before its first
    (masked, pad id 0); and the column offset, minus the columns added."""
    B, T = ids.shape
    rows, columns = shape
    padded_ids = torch.zeros(rows, columns, dtype=ids.dtype)
    padded_mask = torch.zeros(rows, columns, dtype=torch.bool)
    padded_ids[:B, columns - T:] = ids
    padded_mask[:B, columns - T:] = True if mask is None else mask
    return padded_ids, padded_mask, -(columns - T)


def executor(paths: FastPaths | None) -> type[Forward]:
    """The forward a model's settings ask for: the plain loop when every fast path is off (then nothing of
    this folder runs), else this executor."""
    if paths is not None and paths.prefix_cache is False and not paths.explicit_attention and not paths.compiled and paths.buckets is not True \
            and paths.graphs is not True and paths.blocked_fusion_from is None and paths.fused is not True:
        return Forward
    return FastForward
