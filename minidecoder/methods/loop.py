"""The one block loop every method runs: embed, blocks with the method's step, final norm, early exit.

    h = embed(ids)                                   hidden_states[0]
    for i in 0 .. deepest-1:                         (blocks after the deepest output never run)
        h = step.before(i, h)                        TP / HTP: copy rows into the placeholders
        h = block_i(h, ctx, step.sites(i))           CP: edit a site; CP's auxiliary pass: record one
        step.fold_pattern(i, P_i)                    ReBA: fold the block's attention patterns
        keep h if i + 1 is an output asked for       hidden_states[i + 1]
    hidden_states[L] = norm(h)                       only the last entry is normed (transformers)

A method says what it does here with a `Step` and reads `Forward.hidden(index)`; this module alone
decides, from the model's `FastPaths` and what the step declares (`first_touched`), which fast path
applies, and a method never branches on one:

    shared prompt prefix   the leading tokens every row shares run once (batch 1) and are reused through
                           the KV cache; the step sees only the rest of each row (`Step.shifted`)
    explicit attention     short inputs on a CPU take the explicit kernel (fast.attention)
    compiled blocks        site-free block calls go through torch.compile (fast.compiled)
    blocked fusion         a step that folds patterns gets a few heads at a time (fast.blocked_fusion)

Sweeps fork a forward at a block (`Forward.fork`): the branch continues from the trunk's state with
another step, which is how they share work without restating any method's step.

Layer numbers follow `minidecoder.methods.layers`: an output index k is hidden_states[k].
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable

import torch

from minidecoder.core.model import KVCache, Sites
from minidecoder.fast import prefix_cache
from minidecoder.fast.attention import explicit_is_faster
from minidecoder.fast.blocked_fusion import head_group_patterns
from minidecoder.fast.compiled import compiled_block_forward
from minidecoder.fast.options import FastPaths, fast_paths_of
from minidecoder.methods.layers import resolve_output_layer

NOWHERE = 1 << 30  # `first_touched` of a row the step never reads or writes


class Step:
    """What a method does inside the loop. This base step does nothing (PromptEOL, pooling, Echo).

    Positions a step holds are columns of the stream it is handed: the padded batch's columns, or,
    when the loop runs a shared prefix once, the rest's (`shifted`)."""

    folds_patterns = False  # True: the loop calls `fold_pattern` with every block's attention patterns

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """The residual stream (B, T, E) entering block i, rewired."""
        return h

    def sites(self, i: int) -> Sites | None:
        """What block i should record or edit (minidecoder.core.model.Sites), or None."""
        return None

    def fold_pattern(self, i: int, pattern: torch.Tensor) -> None:
        """Post-softmax attention of some of block i's heads, (B, heads, T, S); every head comes once,
        in groups the loop chooses, so the fold must not depend on the grouping."""

    def hides_first_block_keys(self) -> torch.Tensor | None:
        """(B, T) bool: keys block 0 must not attend to (TP's mask_pst_first_layer), or None."""
        return None

    def first_touched(self, batch_size: int) -> torch.Tensor | None:
        """(B,) the first batch column of each row this step reads or writes (NOWHERE if none);
        None: it reads every column. The shared prefix is cut before these columns."""
        return torch.full((batch_size,), NOWHERE, dtype=torch.long)

    def shifted(self, columns: int) -> "Step":
        """This step on a stream whose column j is batch column j + `columns`."""
        return self


class Forward:
    """One forward pass of a batch, advanced block by block (`run_to`), read at the hidden-state indices
    in `keep` (`hidden`), and forked into a branch that continues with another step (`fork`)."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 step: Step | None = None, keep: Iterable[int] = (), extra_rows: dict | None = None,
                 fast: FastPaths | None = None, cache: KVCache | None = None) -> None:
        """keep: hidden_states indices to keep (0..L); the forward can run no deeper than max(keep).
        extra_rows: input-embedding rows of placeholder ids (`Decoder.embed`).
        cache: a KV cache to fill (the shared-prefix pass); then no other fast path is considered."""
        self.model, self.keep = model, set(keep)
        self.deepest = max(self.keep, default=0)
        self.fast = fast if fast is not None else fast_paths_of(model)
        step = step if step is not None else Step()
        if cache is None:  # the audit view (running.explain) may watch this forward's step
            step = watched(model, self, step, input_ids, attention_mask)
        device = model.device
        ids = input_ids.to(device)
        mask = None if attention_mask is None else attention_mask.to(device=device, dtype=torch.bool)
        self.mask = mask
        self.prefix: Forward | None = None
        hidden = step.hides_first_block_keys()  # (B, T) keys block 0 must not see, or None
        p = self._prefix_length(ids, mask, step) if cache is None and hidden is None else 0
        if p:
            # The shared prefix, once (batch 1), through every block this forward may run; its keys and
            # values are then broadcast to the batch, and the rest of every row runs against them.
            prefix_ids, ids, mask = prefix_cache.split(ids, mask, p)
            self.prefix = Forward(model, prefix_ids, None, keep=self.keep | {self.deepest}, fast=self.fast,
                                  cache=KVCache.empty(model.num_layers))
            self.prefix.run_to(self.deepest)
            step = step.shifted(p)
        self.ids, self.stream_mask, self.extra_rows, self.step = ids, mask, extra_rows, step
        B, T = ids.shape
        S = T + (p if p else cache.length if cache is not None else 0)
        self.explicit = self.fast.explicit_attention and explicit_is_faster(device, model.dtype, S)
        self.ctx = self._context(cache)
        self.first_ctx = self.ctx
        if hidden is not None:  # a key column zeroed in the mask is hidden from every query of block 0;
            # positions are passed explicitly, or mask-derived positions would skip the hidden token
            visible = mask & ~hidden.to(device)
            self.first_ctx = model.context(visible, T, B, position_ids=self.ctx.positions,
                                           explicit_attention=self.explicit)
        self.h = model.embed(ids, extra_rows)  # (B, T, E): hidden_states[0]
        self.next_block = 0
        self.states = {0: self.h} if 0 in self.keep else {}

    def _prefix_length(self, ids: torch.Tensor, mask: torch.Tensor | None, step: Step) -> int:
        if not self.fast.prefix_cache or mask is None:
            return 0
        p = prefix_cache.cacheable_prefix(self.model.config, ids, mask)
        touched = step.first_touched(ids.shape[0])
        if not p or touched is None:
            return 0
        first = prefix_cache.first_real_positions(mask)
        p = min(p, int((touched.to(first.device) - first).min()))  # cut before the step's first column
        return p if p >= prefix_cache.MIN_PREFIX else 0

    def _context(self, cache: KVCache | None):
        B, T = self.ids.shape
        if self.prefix is not None:
            cache = self.prefix.cache.expand(B)  # a fresh broadcast view: each branch appends its own keys
        return self.model.context(self.stream_mask, T, B, cache, explicit_attention=self.explicit)

    @property
    def prefix_length(self) -> int:
        """Tokens every row shares that ran once (0: the plain loop)."""
        return 0 if self.prefix is None else self.prefix.ids.shape[1]

    @property
    def cache(self) -> KVCache | None:
        return self.ctx.cache

    def run_to(self, index: int) -> "Forward":
        """Run blocks until hidden_states[index] exists (index <= max(keep))."""
        if index > self.deepest:
            raise ValueError(f"this forward keeps hidden states up to {self.deepest}, not {index}")
        while self.next_block < index:
            i = self.next_block
            self.h = self._block(i, self.step.before(i, self.h))
            self.next_block = i + 1
            if i + 1 in self.keep:
                self.states[i + 1] = self.h
        return self

    def _block(self, i: int, h: torch.Tensor) -> torch.Tensor:
        block, ctx = self.model.layers[i], (self.first_ctx if i == 0 else self.ctx)
        sites = self.step.sites(i)
        blocked = False
        if self.step.folds_patterns:
            start = self.fast.blocked_fusion_from
            blocked = start is not None and h.shape[1] >= start
            sites = _with_records(sites, {"q", "k"} if blocked else {"pattern"})
        if sites is None and self.fast.compiled:
            return compiled_block_forward(block, h, ctx)
        h = block(h, ctx, sites)
        if self.step.folds_patterns:
            if blocked:  # recompute the pattern a head at a time from q and k: T^2 memory once
                attn = block.self_attn
                for pattern in head_group_patterns(attn, sites.store["q"], sites.store["k"], ctx.masks[attn.layer_type]):
                    self.step.fold_pattern(i, pattern)
            else:
                self.step.fold_pattern(i, sites.store.pop("pattern"))
        return h

    def hidden(self, index: int) -> torch.Tensor:
        """hidden_states[index] (B, T, E) in the padded batch's layout, running the blocks it needs.
        Index L is after the final norm; when the prefix ran once, padded positions hold zeros."""
        self.run_to(index)
        state = self.states[index]
        if self.prefix is not None:
            state = prefix_cache.assemble(self.prefix.states[index], state, self.mask)
        return self.model.norm(state) if index == self.model.num_layers else state

    def fork(self, step: Step) -> "Forward":
        """A branch that continues from this forward's current state with `step` (a sweep's grid point).
        The step is given in batch columns, like the one this forward was built with; it must not touch
        the shared prefix, which was cut for the original step."""
        if self.prefix is not None:
            touched = step.first_touched(self.ids.shape[0])
            first = prefix_cache.first_real_positions(self.mask)
            p = self.prefix.ids.shape[1]
            if touched is None or int((touched.to(first.device) - first).min()) < p:
                raise ValueError("the forked step touches the shared prefix; build the forward with that step")
            step = step.shifted(p)
        branch = copy.copy(self)
        branch.step, branch.states = step, dict(self.states)
        if self.prefix is not None:
            branch.ctx = branch.first_ctx = branch._context(None)  # its own broadcast of the prefix's cache
        return branch


# ---- the audit view's hook: `minidecoder.explain` runs a method's own embed_batch and watches -------------
def watched(model, forward: Forward, step: Step, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Step:
    """The step a forward runs: `step` itself, unless a watcher is set on the model (`watching`), which may
    return an observer that delegates every call to `step` and writes down what it did."""
    watcher = getattr(model, "step_watcher", None)
    return step if watcher is None else watcher.watch(forward, step, input_ids, attention_mask)


@contextlib.contextmanager
def watching(model, watcher):
    """Every forward on `model` inside the block hands its step to `watcher.watch(forward, step, input_ids,
    attention_mask)` (running.explain's Recorder); outside it nothing is watched."""
    previous = getattr(model, "step_watcher", None)
    model.step_watcher = watcher
    try:
        yield watcher
    finally:
        model.step_watcher = previous


def _with_records(sites: Sites | None, names: set[str]) -> Sites:
    if sites is None:
        return Sites(record=set(names))
    sites.record = set(sites.record) | names
    return sites


def hidden_at(model, batch, layer: int, step: Step | None = None, extra_rows: dict | None = None) -> torch.Tensor:
    """hidden_states[layer] (B, T, E) of `batch` (a PromptBatch; negative layers count from the end),
    running only the blocks it needs (early exit)."""
    index = resolve_output_layer(layer, model.num_layers)
    return Forward(model, batch.input_ids, batch.attention_mask, step, keep={index}, extra_rows=extra_rows).hidden(index)


def hidden_states(model, batch, indices: Iterable[int], step: Step | None = None,
                  extra_rows: dict | None = None) -> dict[int, torch.Tensor]:
    """hidden_states[k] (B, T, E) for every k in `indices`, from one forward that stops at the deepest."""
    indices = set(indices)
    forward = Forward(model, batch.input_ids, batch.attention_mask, step, keep=indices, extra_rows=extra_rows)
    return {index: forward.hidden(index) for index in sorted(indices)}


def last_token(h: torch.Tensor, batch) -> torch.Tensor:
    """(B, T, E) -> (B, E): the last real token of each row (left or right padding)."""
    last = batch.last_positions(h.device)  # (B,)
    return h[torch.arange(h.shape[0], device=h.device), last]


def mean_over_spans(h: torch.Tensor, spans: list[list[tuple[int, int]]], occurrence: int = 0) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean over each row's token span number `occurrence` (e.g. the {text} tokens)."""
    rows = []
    for b, row_spans in enumerate(spans):
        start, end = row_spans[occurrence]
        if end <= start:
            raise ValueError(f"row {b} has an empty span to average")  # callers reject empty text first
        rows.append(h[b, start:end].mean(dim=0))
    return torch.stack(rows)


class Steps(Step):
    """Several steps in one forward, applied in order (CP's steering on top of TP's copies)."""

    def __init__(self, *steps: Step) -> None:
        self.steps = steps
        self.folds_patterns = any(s.folds_patterns for s in steps)

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            h = step.before(i, h)
        return h

    def sites(self, i: int) -> Sites | None:
        found = [s for s in (step.sites(i) for step in self.steps) if s is not None]
        if len(found) <= 1:
            return found[0] if found else None
        merged = Sites(record=set().union(*(s.record for s in found)))
        for s in found:
            if set(s.edit) & set(merged.edit):
                raise ValueError(f"two steps edit the same site(s) {sorted(set(s.edit) & set(merged.edit))} of block {i}")
            merged.edit.update(s.edit)
        return _sharing_store(merged, found)

    def fold_pattern(self, i: int, pattern: torch.Tensor) -> None:
        for step in self.steps:
            if step.folds_patterns:
                step.fold_pattern(i, pattern)

    def hides_first_block_keys(self) -> torch.Tensor | None:
        hidden = [h for h in (s.hides_first_block_keys() for s in self.steps) if h is not None]
        return None if not hidden else torch.stack(hidden).any(dim=0)

    def first_touched(self, batch_size: int) -> torch.Tensor | None:
        touched = [s.first_touched(batch_size) for s in self.steps]
        return None if any(t is None for t in touched) else torch.stack(touched).amin(dim=0)

    def shifted(self, columns: int) -> "Steps":
        return Steps(*(s.shifted(columns) for s in self.steps))


def _sharing_store(merged: Sites, parts: list[Sites]) -> Sites:
    """One Sites for the block whose store is also every part's store (each step reads its own)."""
    for part in parts:
        part.store = merged.store
    return merged
