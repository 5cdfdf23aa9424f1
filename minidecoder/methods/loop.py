"""The one block loop every method runs, and the passes that describe a method's forwards.

    h = embed(ids)                                   hidden_states[0]
    for i in 0 .. depth-1:                           (blocks after the deepest output never run)
        h = step.before(i, h)                        TP / HTP: copy rows into the placeholders
        h = block_i(h, ctx, sites)                   sites: what `record` keeps, the step's edits (CP)
        A = step.fold(A, P_i)                        ReBA: fold the block's attention patterns
        keep h if i + 1 is an output asked for       hidden_states[i + 1]
    hidden_states[L] = norm(h)                       only the last entry is normed (transformers)

A method describes each forward it runs as a `Pass` (its batch, its `Step`, the layer it reads, its
pooling), listed by `Method.passes(model, texts)`. `run_passes` runs them in order and averages what
they pool; a step may take a value an earlier pass recorded (`Recorded`: CP's b, from its auxiliary
pass), which the runner reads from that pass's finished `Forward` before the step's forward starts. The sweeps fork the same passes (`Forward.fork`) and the audit view
watches them (`watch`), so nothing outside a method's file restates it.

A step is a frozen dataclass: what it does is fixed when it is built, and a variant is
`dataclasses.replace(step, ...)`. Fields that hold batch columns are declared with `column_field`;
this module alone decides, from the model's `FastPaths`, the device and those declarations, which
fast path applies (a method never branches on one):

    shared prompt prefix   the leading tokens every row shares run once (batch 1) and are reused through
                           the KV cache; the step's column fields are shifted for the rest (fast.prefix_cache)
    explicit attention     short inputs on a CPU take the explicit kernel (fast.attention)
    compiled blocks        site-free block calls go through torch.compile (fast.compiled)
    buckets, graphs        on a GPU a batch is padded to one of a bounded set of shapes, and each site-free
                           block call replays a captured CUDA graph (fast.graphs); the step sees the
                           batch's rows, its column fields shifted past the padding columns
    blocked fusion         a step that folds patterns gets a few heads at a time (fast.blocked_fusion)

Nothing inside a forward reads a device value back to the host: the decisions above are made on the
host's copy of the batch, and index tensors are built there and moved once, so a GPU never waits on
the Python loop (tests/fast/test_no_sync.py runs every method on the `meta` device, which cannot be
read back).

Layer numbers follow `minidecoder.methods.layers`: an output index k is hidden_states[k].
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from minidecoder.core.model import KVCache, Sites
from minidecoder.fast import prefix_cache
from minidecoder.fast.attention import explicit_is_faster
from minidecoder.fast.blocked_fusion import head_group_patterns
from minidecoder.fast.compiled import compiled_block_forward
from minidecoder.fast.graphs import bucket, graph_bank
from minidecoder.fast.options import FastPaths, fast_paths_of
from minidecoder.fast.prefix_cache import column_field
from minidecoder.methods.layers import resolve_output_layer

TOKEN_MAJOR_SITES = frozenset({"resid_pre", "z", "attn_out", "resid_mid", "mlp_out", "resid_post"})  # (B, T, ...)
__all__ = ["Step", "Steps", "Pass", "Recorded", "Forward", "run_passes", "column_field", "last_token",
           "mean_over_spans", "hidden_at", "to_device"]


# ---- steps: what a method does inside the loop --------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Step:
    """What a method does inside the loop; this base step does nothing (PromptEOL, pooling, Echo).

    `blocks`: the 0-based blocks it acts at (before them, at their sites, or on their patterns);
    a subclass declares it as a field. `hidden_keys`: (B, T) bool, keys block 0 must not attend to."""

    blocks: ClassVar[frozenset[int]] = frozenset()
    hidden_keys: ClassVar[torch.Tensor | None] = None
    folds: ClassVar[bool] = False  # True: the loop hands every block's attention patterns to `fold`

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """The residual stream (B, T, E) entering block i, rewired (a new tensor; `h` stays untouched)."""
        return h

    def edits(self, i: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """Site name (minidecoder.core.model.SITES) -> a function replacing its value in block i."""
        return {}

    def fold(self, A: torch.Tensor | None, pattern: torch.Tensor) -> torch.Tensor:
        """The running fold of post-softmax attention patterns (B, heads, T, S), given some of a block's
        heads at a time in groups the loop chooses (so it must not depend on the grouping); A starts None."""
        raise NotImplementedError

    # ---- for the audit view (minidecoder.running.explain): declared here, so it restates nothing ------
    def acts_on(self, row: int) -> list[dict]:
        """The positions this step acts on in batch row `row`, in batch columns."""
        return []

    def report(self, i: int, where: str, old: Any, new: Any, shift: int) -> list[dict]:
        """What the step did at block i: `where` is "stream" (before the block: old/new h), a site name
        (old/new value of an edit) or "fold" (old/new A). `shift`: batch column of the stream's column 0."""
        return []

    # ---- what the sweeps compare ---------------------------------------------------------------------
    def acting_before(self, block: int) -> frozenset[int]:
        """The blocks < `block` at which this step acts (block 0 too where it hides keys there)."""
        acting = {i for i in self.blocks if i < block}
        if self.hidden_keys is not None and block > 0:
            acting.add(0)
        return frozenset(acting)

    def same_before(self, other: "Step", block: int) -> bool:
        """This step and `other` compute the same stream up to block `block`, so a forward run with one
        can continue with the other from there (`Forward.fork`)."""
        mine, theirs = self.acting_before(block), other.acting_before(block)
        if not mine and not theirs:
            return True
        return type(self) is type(other) and mine == theirs and _same_fields(self, other, skip={"blocks"})


@dataclass(frozen=True, eq=False, kw_only=True)
class Steps(Step):
    """Several steps in one forward, applied in order (CP's steering on top of TP's copies)."""

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

    def acts_on(self, row: int) -> list[dict]:
        return [act for part in self.parts for act in part.acts_on(row)]

    def report(self, i: int, where: str, old: Any, new: Any, shift: int) -> list[dict]:
        return [event for part in self.parts for event in part.report(i, where, old, new, shift)]

    def same_before(self, other: Step, block: int) -> bool:
        if isinstance(other, Steps) and len(other.parts) == len(self.parts):
            return all(a.same_before(b, block) for a, b in zip(self.parts, other.parts))
        return super().same_before(other, block)


def _same_fields(a: Any, b: Any, skip: frozenset[str] | set[str] = frozenset()) -> bool:
    """Field-by-field equality of two steps (tensors by value)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a, b.to(a.device)))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same_fields(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a) if f.name not in skip)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_fields(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_fields(a[k], b[k]) for k in a)
    return a == b


def _mapped(value: Any, change: Callable[[Any], Any]) -> Any:
    """`value` with `change` applied to every leaf, through nested dataclasses, tuples, lists and dicts; an
    object none of whose leaves changed is returned as it is (a step is rebuilt only when it must be)."""
    changed = change(value)
    if changed is not value:
        return changed
    if isinstance(value, (tuple, list)):
        items = [_mapped(item, change) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    if isinstance(value, dict):
        items = {key: _mapped(item, change) for key, item in value.items()}
        return value if all(items[key] is value[key] for key in value) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _mapped(getattr(value, f.name), change) for f in dataclasses.fields(value)}
        changes = {name: new for name, new in changes.items() if new is not getattr(value, name)}
        return dataclasses.replace(value, **changes) if changes else value
    return value


def to_device(value: Any, device: torch.device) -> Any:
    """A tensor (or every tensor field of a step, through nested dataclasses and tuples) on `device`.
    To a GPU the copy is made from pinned memory without blocking, so the host never waits for the GPU."""
    def moved(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.device == device:
            return leaf
        if device.type == "cuda" and leaf.device.type == "cpu":
            return leaf.pin_memory().to(device, non_blocking=True)
        return leaf.to(device)
    return _mapped(value, moved)


# ---- one forward --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Setup:
    """What a forward and all its forks share: nothing here changes once the forward is built."""

    model: Any
    fast: FastPaths  # decided for the model's device
    ids: torch.Tensor  # (B', T') on the device: the batch, its rest after the shared prefix, or its bucket
    mask: torch.Tensor | None  # (B, T) bool on the device: the whole batch's (assembles states)
    stream_mask: torch.Tensor | None  # (B', T') the stream's
    extra_rows: Mapping[int, torch.Tensor]
    keep: frozenset[int]
    deepest: int
    record: Mapping[int, frozenset[str]]
    prefix: "Forward | None"
    first: torch.Tensor | None  # (B,) on the host: each row's first real column (whether a fork touches the prefix)
    offset: int  # stream column j is batch column j + offset (the prefix: p; bucket padding: minus its columns)
    rows: int  # the batch's rows; a bucket-padded stream has more, all padding, after them
    bucketed: bool  # padded to a bucket shape: its site-free block calls may replay captured graphs
    explicit: bool
    longest: int  # positions the longest row reaches (host-known: no read-back)
    watch: Any


class Forward:
    """One forward pass of a batch, advanced block by block (`run_to`), read at the hidden-state indices
    in `keep` (`hidden`) and at the recorded sites (`recorded`), and forked into a branch that continues
    with another step (`fork`)."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 step: Step | None = None, keep: Iterable[int] = (), extra_rows: Mapping | None = None,
                 fast: FastPaths | None = None, cache: KVCache | None = None,
                 record: Mapping[int, Iterable[str]] | None = None, touched_by: Iterable[Step] = (),
                 watch: Any = None) -> None:
        """keep: hidden_states indices to keep (0..L); the forward can run no deeper than max(keep).
        extra_rows: input-embedding rows of placeholder ids (`Decoder.embed`).
        record: block -> the sites whose values `recorded` gives (CP's auxiliary read, the NaN tracer).
        cache: a KV cache to fill (the shared-prefix pass); then no other fast path is considered.
        touched_by: steps that will later `fork` from this forward; the shared prefix stays clear of them.
        watch: the audit view's observer (`started`, `ran`, `saw`), or None."""
        step = step if step is not None else Step()
        keep = frozenset(keep)
        record = {i: frozenset(names) for i, names in (record or {}).items()}
        device = model.device
        fast = (fast if fast is not None else fast_paths_of(model)).for_device(device)
        ids = input_ids.cpu()  # decisions are made on the host's copy: no device value is read back
        mask = None if attention_mask is None else attention_mask.cpu().bool()
        steps = (step, *touched_by)
        first = None if mask is None else prefix_cache.first_real_positions(mask)
        p = 0 if cache is not None else _prefix_length(model, fast, ids, mask, first, steps, record)
        prefix, offset, bucketed = None, p, False
        stream_ids, stream_mask = ids, mask
        if p:
            # The shared prefix, once (batch 1), through every block this forward may run; its keys and
            # values are then broadcast to the batch, and the rest of every row runs against them.
            prefix_ids, stream_ids, stream_mask = prefix_cache.split(ids, mask, p)
            prefix = Forward(model, prefix_ids, None, keep=keep | {max(keep, default=0)}, fast=fast,
                             cache=KVCache.empty(model.num_layers), record=record)
            prefix.run_to(prefix.setup.deepest)
        elif cache is None and fast.buckets and watch is None and _columns_may_move(steps, record):
            stream_ids, stream_mask, offset = _padded_to_bucket(ids, mask)  # a bounded set of shapes (fast.graphs)
            bucketed = True
        past = p or (cache.length if cache is not None else 0)
        real = stream_ids.shape[1] if stream_mask is None else int(stream_mask.sum(dim=1).max())
        explicit = fast.explicit_attention and explicit_is_faster(device, model.dtype, stream_ids.shape[1] + past)
        device_mask = to_device(mask, device)
        self.setup = _Setup(model, fast, to_device(stream_ids, device), device_mask,
                            device_mask if stream_mask is mask else to_device(stream_mask, device),
                            to_device(dict(extra_rows or {}), device), keep, max(keep, default=0), record, prefix,
                            first, offset, ids.shape[0], bucketed, explicit, past + real, watch)
        self.step = to_device(prefix_cache.shifted(step, offset) if offset else step, device)
        self.ctx = self._context(cache)
        self.first_ctx = self._first_context()
        self.h = model.embed(self.setup.ids, self.setup.extra_rows)  # (B, T, E): hidden_states[0]
        self.next_block = 0
        self.states: dict[int, torch.Tensor] = {0: self.h} if 0 in keep else {}
        self.records: dict[tuple[int, str], torch.Tensor] = {}
        self.folded: torch.Tensor | None = None  # the step's fold of every pattern so far (ReBA's A)
        if watch is not None:
            watch.started(self)

    def _context(self, cache: KVCache | None):
        s = self.setup
        B, T = s.ids.shape
        if s.prefix is not None:
            cache = s.prefix.cache.expand(B)  # a fresh broadcast view: each branch appends its own keys
        return s.model.context(s.stream_mask, T, B, cache, explicit_attention=s.explicit, longest=s.longest)

    def _first_context(self):
        """Block 0's context: the step's hidden keys are masked out for every query (TP's Table 15);
        positions are passed explicitly, or mask-derived positions would skip the hidden token."""
        hidden = self.step.hidden_keys
        if hidden is None:
            return self.ctx
        s = self.setup
        B, T = s.ids.shape
        real = s.stream_mask if s.stream_mask is not None else torch.ones(B, T, dtype=torch.bool, device=s.ids.device)
        return s.model.context(real & ~hidden, T, B, position_ids=self.ctx.positions,
                               explicit_attention=s.explicit, longest=s.longest)

    @property
    def prefix_length(self) -> int:
        """Tokens every row shares that ran once (0: the plain loop)."""
        return 0 if self.setup.prefix is None else self.setup.prefix.setup.ids.shape[1]

    @property
    def cache(self) -> KVCache | None:
        return self.ctx.cache

    def run_to(self, index: int) -> "Forward":
        """Run blocks until hidden_states[index] exists (index <= max(keep))."""
        if index > self.setup.deepest:
            raise ValueError(f"this forward keeps hidden states up to {self.setup.deepest}, not {index}")
        while self.next_block < index:
            i = self.next_block
            h = self._before(i, self.h)
            if self.setup.watch is not None:
                self.setup.watch.ran(self, i)
                if h is not self.h:
                    self.setup.watch.saw(self, i, "stream", self.h, h)
            self.h = self._block(i, h)
            self.next_block = i + 1
            if i + 1 in self.setup.keep:
                self.states[i + 1] = self.h
        return self

    def _before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """The step's `before`, on the batch's rows only (a bucket's padding rows are none of its business)."""
        rows = self.setup.rows
        if h.shape[0] == rows:
            return self.step.before(i, h)
        real = h[:rows]
        out = self.step.before(i, real)
        return h if out is real else torch.cat([out, h[rows:]])

    def _block(self, i: int, h: torch.Tensor) -> torch.Tensor:
        s = self.setup
        block, ctx = s.model.layers[i], (self.first_ctx if i == 0 else self.ctx)
        record, edits = set(s.record.get(i, ())), self.step.edits(i)
        folding = self.step.folds and i in self.step.blocks
        blocked = folding and s.fast.blocked_fusion_from is not None and h.shape[1] >= s.fast.blocked_fusion_from
        wanted = record | ({"q", "k"} if blocked else {"pattern"} if folding else set())
        if not wanted and not edits and ctx.cache is None:  # cached calls run plain: fast/compiled.py
            if s.fast.graphs and s.bucketed:  # a bounded set of shapes, so a bounded set of captures
                return graph_bank(s.model).forward(block, h, ctx)  # one captured graph a block (fast/graphs.py)
            if s.fast.compiled:
                return compiled_block_forward(block, h, ctx)
        if h.shape[0] != s.rows:  # a step edits the batch's rows only
            edits = {name: _on_rows(edit, s.rows) for name, edit in edits.items()}
        if s.watch is not None:
            edits = {name: self._watched(i, name, edit) for name, edit in edits.items()}
        sites = Sites(record=wanted, edit=edits) if wanted or edits else None
        h = block(h, ctx, sites)
        for name in record:
            self.records[(i, name)] = sites.store[name]
        if folding:
            before = self.folded
            if blocked:  # recompute the pattern a head at a time from q and k: T^2 memory once
                attn = block.self_attn
                for pattern in head_group_patterns(attn, sites.store["q"], sites.store["k"], ctx.masks[attn.layer_type]):
                    self.folded = self.step.fold(self.folded, pattern)
            else:
                self.folded = self.step.fold(self.folded, sites.store["pattern"])
            if s.watch is not None:
                s.watch.saw(self, i, "fold", before, self.folded)
        return h

    def _watched(self, i: int, name: str, edit: Callable) -> Callable:
        def watched(value: torch.Tensor) -> torch.Tensor:
            out = edit(value)
            self.setup.watch.saw(self, i, name, value, out)
            return out
        return watched

    def _batch_layout(self, value: torch.Tensor, prefix_value: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A token-major (B', T', ...) value of the stream in the padded batch's layout (B, T, ...)."""
        s = self.setup
        if s.prefix is not None:
            return prefix_cache.assemble(prefix_value(), value, s.mask)
        if s.offset < 0:  # bucket padding: drop its rows and its leading columns
            return value[:s.rows, -s.offset:]
        return value

    def hidden(self, index: int) -> torch.Tensor:
        """hidden_states[index] (B, T, E) in the padded batch's layout, running the blocks it needs.
        Index L is after the final norm; when the prefix ran once, padded positions hold zeros."""
        self.run_to(index)
        state = self._batch_layout(self.states[index], lambda: self.setup.prefix.states[index])
        return self.setup.model.norm(state) if index == self.setup.model.num_layers else state

    def recorded(self, block: int, site: str) -> torch.Tensor:
        """The value of `site` in block `block` (asked for with `record`), in the padded batch's layout,
        as `hidden` reads a layer: (B, T, H, D) for z, (B, T, E) for the residual sites."""
        self.run_to(block + 1)
        return self._batch_layout(self.records[(block, site)], lambda: self.setup.prefix.records[(block, site)])

    def fork(self, step: Step) -> "Forward":
        """A branch that continues from this forward's current state with `step` (a sweep's grid point).
        The step is given in batch columns, like the one this forward was built with; it must not touch
        the shared prefix, which was cut for the original step (pass it in `touched_by` to keep it clear)."""
        s = self.setup
        if s.prefix is None and self.ctx.cache is not None:
            raise ValueError("a forward that fills a KV cache cannot be forked (its branches would share the cache)")
        p = self.prefix_length
        if p:
            touched = prefix_cache.first_touched(step, s.rows)
            if step.folds or step.hidden_keys is not None or int((touched - s.first).min()) < p:
                raise ValueError("the forked step touches the shared prefix; build the forward with it in touched_by")
        if s.offset:
            step = prefix_cache.shifted(step, s.offset)
        branch = object.__new__(Forward)
        branch.setup, branch.step = s, to_device(step, s.model.device)
        branch.ctx = branch._context(None) if s.prefix is not None else self.ctx  # its own broadcast of the prefix
        branch.first_ctx = branch._first_context() if self.next_block == 0 else self.first_ctx
        branch.h, branch.next_block, branch.folded = self.h, self.next_block, self.folded  # tensors never change
        branch.states, branch.records = dict(self.states), dict(self.records)  # in place: each branch its own dict
        return branch


def _on_rows(edit: Callable, rows: int) -> Callable:
    """An edit applied to the first `rows` rows of a site's value only (the rest: a bucket's padding)."""
    return lambda value: torch.cat([edit(value[:rows]), value[rows:]])


def _columns_may_move(steps: tuple[Step, ...], record: Mapping[int, frozenset[str]]) -> bool:
    """Whether the stream's columns may differ from the batch's (a shared prefix cut off, or a bucket's
    padding columns added): not for a fold (it reads every column's attention) or hidden keys (they change
    block 0 for every query), and only token-major sites can be put back in the batch's layout."""
    return (not any(step.folds or step.hidden_keys is not None for step in steps)
            and all(names <= TOKEN_MAJOR_SITES for names in record.values()))


def _padded_to_bucket(ids: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(ids, mask) padded to `fast.graphs.bucket`'s shape: padding rows after the batch's, padding columns
    before its first (masked, pad id 0); and the column offset, minus the columns added."""
    B, T = ids.shape
    rows, columns = bucket(B, T)
    padded_ids = torch.zeros(rows, columns, dtype=ids.dtype)
    padded_mask = torch.zeros(rows, columns, dtype=torch.bool)
    padded_ids[:B, columns - T:] = ids
    padded_mask[:B, columns - T:] = True if mask is None else mask
    return padded_ids, padded_mask, -(columns - T)


def _prefix_length(model, fast: FastPaths, ids: torch.Tensor, mask: torch.Tensor | None, first: torch.Tensor | None,
                   steps: tuple[Step, ...], record: Mapping[int, frozenset[str]]) -> int:
    """How many leading tokens every row shares and may run once (0: the plain loop), from the host's ids;
    first: each row's first real column."""
    if fast.prefix_cache is False or mask is None or not _columns_may_move(steps, record):
        return 0
    p = prefix_cache.cacheable_prefix(model.config, ids, mask)
    if not p:
        return 0
    for step in steps:  # cut before the first column any step reads or writes
        p = min(p, int((prefix_cache.first_touched(step, ids.shape[0]) - first).min()))
    return p if prefix_cache.pays(model.device, p, ids.shape[0], fast.prefix_cache) else 0


# ---- passes: a method's forwards, described -------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Pass:
    """One forward of a method: what `run_passes`, the sweeps and the audit view all read.

    layer: the hidden_states index read (None: the pass only records, as CP's auxiliary pass);
    depth: blocks to run (default: up to `layer`; ReBA folds every block whatever it reads);
    pool: the finished forward -> (B, E) (None: nothing pooled); record: block -> sites kept."""

    batch: Any  # a methods.inputs.PromptBatch
    step: Step = Step()
    layer: int | None = None
    pool: Callable[[Forward], torch.Tensor] | None = None
    depth: int | None = None
    record: Mapping[int, frozenset[str]] = field(default_factory=dict)
    extra_rows: Mapping[int, torch.Tensor] = field(default_factory=dict)
    role: str = "prompt"  # the audit view's name for it ("auxiliary prompt", ...)
    reads: str = ""  # what `pool` takes, in words (the audit view)
    details: Callable[[Forward], dict] | None = None  # the audit view's extra tensors (ReBA: A and w)

    def same_inputs(self, other: "Pass") -> bool:
        """The same tokens and placeholder rows: the two passes can share one forward (the sweeps)."""
        return self.batch.same_tokens(other.batch) and _same_fields(dict(self.extra_rows), dict(other.extra_rows))

    @property
    def blocks(self) -> int:
        """The blocks this pass runs."""
        return self.depth if self.depth is not None else (self.layer or 0)

    def resolved(self, finished: Mapping[int, Forward]) -> "Pass":
        """This pass with every `Recorded` value of its step read from the finished earlier pass it names
        (`finished`: id of a pass -> its forward)."""
        step = _mapped(self.step, lambda leaf: leaf.value(finished) if isinstance(leaf, Recorded) else leaf)
        return self if step is self.step else dataclasses.replace(self, step=step)

    def start(self, model, touched_by: Iterable[Step] = (), watch: Any = None, also_keep: Iterable[int] = (),
              record: Mapping[int, Iterable[str]] | None = None) -> Forward:
        """This pass's forward, built (nothing run yet); its step must be resolved."""
        keep = {self.blocks, *also_keep} | ({self.layer} if self.layer is not None else set())
        return Forward(model, self.batch.input_ids, self.batch.attention_mask, self.step, keep, self.extra_rows,
                       record=self.record if record is None else record, touched_by=touched_by, watch=watch)


@dataclass(frozen=True, eq=False)
class Recorded:
    """A value a step takes from an earlier pass of the same method: what `source` recorded at `site` of
    block `block`, read at each row's last token (CP's b, from its auxiliary pass). The runner puts the
    value in before the step's forward starts (`Pass.resolved`)."""

    source: Pass
    block: int
    site: str

    def value(self, finished: Mapping[int, Forward]) -> torch.Tensor:
        forward = finished[id(self.source)]
        return last_token(forward.recorded(self.block, self.site), self.source.batch)  # (B, ...)


def run_passes(model, passes: Iterable[Pass], watch: Any = None) -> torch.Tensor:
    """(B, E) float32: each pass run to its depth in order (its step first given what earlier passes
    recorded), and the mean of what the passes pool (MetaEOL's eight prompts, CP's normal prompts...)."""
    pooled, finished = [], {}
    for p in passes:
        forward = p.resolved(finished).start(model, watch=watch).run_to(p.blocks)
        finished[id(p)] = forward
        if watch is not None:
            watch.finished(p, forward)
        if p.pool is not None:
            pooled.append(p.pool(forward).float())
    return torch.stack(pooled).mean(dim=0)  # one pass: the vector itself


# ---- poolings and shortcuts -------------------------------------------------------------------------------
def last_token(h: torch.Tensor, batch) -> torch.Tensor:
    """(B, T, ...) -> (B, ...): the last real token of each row (left or right padding)."""
    last = to_device(batch.last, h.device)  # (B,), built on the host
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


def hidden_at(model, batch, layer: int, step: Step | None = None, extra_rows: Mapping | None = None) -> torch.Tensor:
    """hidden_states[layer] (B, T, E) of `batch` (negative layers count from the end), running only the
    blocks it needs (early exit): the plain loop in one line, for tests and tools."""
    index = resolve_output_layer(layer, model.num_layers)
    return Forward(model, batch.input_ids, batch.attention_mask, step, keep={index}, extra_rows=extra_rows).hidden(index)
