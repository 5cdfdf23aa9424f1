"""The one block loop every method runs, and the passes that describe a method's forwards.

    h = embed(ids)                                   hidden_states[0]
    for i in 0 .. depth-1:                           (blocks after the deepest output never run)
        h = step.before(i, h)                        TP / HTP: copy rows into the placeholders
        h = block_i(h, ctx, sites)                   sites: what the pass records, the step's edits (CP)
        A = step.fold(A, P_i)                        ReBA: fold the block's attention patterns
        keep h if i + 1 is an output asked for       hidden_states[i + 1]
    hidden_states[L] = norm(h)                       only the last entry is normed (transformers)

A method's forwards are `Pass`es (batch, `Step`, layer read, pooling); `run_passes` runs them and averages
what they pool. The fast paths live beneath this loop (`fast.forward.FastForward` overrides `block`,
`hidden`, `recorded`; tested equal to this `Forward` for every method); the caller picks which runs
(`run_passes(..., forward)`), so nothing here or in a method imports them. Here too the loop's shared
vocabulary: `column_field` (a step field holding batch columns), `CopyRows` (TP's and HTP's step) and
`masked_mean`, the one mean over tokens every pooling uses. What a step tells the audit view is apart,
in methods.audit. Layers: methods.layers.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from minidecoder.core.model import Context, Sites
from minidecoder.methods.audit import Audited, CopiesAudited
from minidecoder.methods.layers import resolve_output_layer


COLUMNS = "batch columns"  # metadata key of a step field that holds positions in the padded batch's rows


def column_field(rows: str | None = None) -> Any:
    """Declare a step field that holds batch columns (a long tensor): one entry per batch row in dimension
    0, or, with `rows`, (K,) entries whose batch rows are in the field named `rows`. Positions change when
    the stream does not start at batch column 0 (a shared prompt prefix run once, beneath the loop:
    fast.prefix_cache cuts before the first column such a field names and shifts the rest)."""
    return dataclasses.field(metadata={COLUMNS: rows})


@dataclass(frozen=True, eq=False, kw_only=True)
class Step(Audited):
    """What a method does inside the loop; this base step does nothing (PromptEOL, pooling, Echo). Its
    audit hooks (`acts_on`, `report`) come from methods.audit. `blocks`: the 0-based blocks it acts at (before them, at their sites, or on their patterns);
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
        """The running fold of post-softmax patterns (B, heads, T, S), A starting None; independent of how a
        block's heads are grouped (the executor may hand them over a few at a time)."""
        raise NotImplementedError

    def to(self, device: torch.device) -> "Step":
        """This step with its tensor fields on `device` (built on the host; moved once, not blocking it)."""
        moved = {f.name: value.to(device, non_blocking=True) for f in dataclasses.fields(self)
                 if isinstance(value := getattr(self, f.name), torch.Tensor) and value.device != device}
        return dataclasses.replace(self, **moved) if moved else self


@dataclass(frozen=True, eq=False, kw_only=True)
class CopyRows(CopiesAudited, Step):
    """Before every block in `blocks`: h[rows[k], target[k]] <- h[rows[k], source[k]] for every k, all
    sources read before any target is written (TP's and HTP's step). Index tensors are (K,) long."""

    blocks: frozenset[int]
    rows: torch.Tensor
    target: torch.Tensor = column_field(rows="rows")
    source: torch.Tensor = column_field(rows="rows")

    @classmethod
    def of_pairs(cls, blocks: set[int], pairs: list[tuple[int, int, int]], **fields) -> "CopyRows":
        """From (row, target, source) triples."""
        rows, target, source = (torch.tensor([p[k] for p in pairs], dtype=torch.long) for k in range(3))
        return cls(blocks=frozenset(blocks), rows=rows, target=target, source=source, **fields)

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        if i not in self.blocks:
            return h
        out = h.clone()  # a copy: rows read later keep their values (the references wrote in place)
        out[self.rows, self.target] = h[self.rows, self.source]  # the whole vector is replaced
        return out


class Forward:
    """One forward of a batch, advanced block by block (`run_to`), read at the hidden states in `keep`
    (`hidden`) and the sites in `record` (`recorded`). A subclass changes how a block is called and how
    states are read back, never the order in `run_to`."""

    prefix_length = 0  # tokens every row shares that ran once, for the counts: none here (a prefix cache's are)

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 step: Step | None = None, keep: Iterable[int] = (), extra_rows: Mapping | None = None,
                 record: Mapping[int, Iterable[str]] | None = None, context: Context | None = None) -> None:
        """keep: hidden_states indices kept (0..L; none deeper runs); extra_rows: input rows of placeholder
        ids (`Decoder.embed`); record: block -> sites `recorded` gives; context: masks and RoPE tables made
        by the caller (the executor's), by default the model's."""
        self.model, self.step = model, (step if step is not None else Step()).to(model.device)
        self.keep = frozenset(keep)
        self.deepest = max(self.keep, default=0)
        self.record = {i: frozenset(names) for i, names in (record or {}).items()}
        B, T = input_ids.shape
        longest = T if attention_mask is None else int(attention_mask.sum(dim=1).max())  # host-known: no read-back
        ids = input_ids.to(model.device, non_blocking=True)
        mask = None if attention_mask is None else attention_mask.to(model.device, non_blocking=True).bool()
        self.ctx = context if context is not None else model.context(mask, T, B, longest=longest)
        self.first_ctx = self.ctx  # block 0's: the step's hidden keys masked out for every query (TP Table 15)
        if self.step.hidden_keys is not None:  # positions passed, or mask-derived ones would skip the hidden key
            real = mask if mask is not None else torch.ones(B, T, dtype=torch.bool, device=ids.device)
            self.first_ctx = model.context(real & ~self.step.hidden_keys, T, B, position_ids=self.ctx.positions,
                                           explicit_attention=self.ctx.explicit_attention, longest=longest)
        rows = {i: row.to(model.device, non_blocking=True) for i, row in (extra_rows or {}).items()}
        self.h, self.next_block = model.embed(ids, rows), 0  # (B, T, E): hidden_states[0]
        self.states: dict[int, torch.Tensor] = {0: self.h} if 0 in self.keep else {}
        self.records: dict[tuple[int, str], torch.Tensor] = {}
        self.folded: torch.Tensor | None = None  # the step's fold of every pattern so far (ReBA's A)

    def run_to(self, index: int) -> "Forward":  # until hidden_states[index] exists
        if index > self.deepest:
            raise ValueError(f"this forward keeps hidden states up to {self.deepest}, not {index}")
        while self.next_block < index:
            i = self.next_block
            self.h, patterns = self.block(i, self.step.before(i, self.h))
            for pattern in patterns:  # (B, heads, T, S): every head of block i, in one or more groups
                self.folded = self.step.fold(self.folded, pattern)
            self.next_block = i + 1
            if i + 1 in self.keep:
                self.states[i + 1] = self.h
        return self

    def block(self, i: int, h: torch.Tensor) -> tuple[torch.Tensor, Iterable[torch.Tensor]]:
        """Block i on h with the step's edits, keeping the sites asked for; and the patterns to fold."""
        folding = self.step.folds and i in self.step.blocks
        keep, edits = self.record.get(i, frozenset()) | ({"pattern"} if folding else set()), self.step.edits(i)
        sites = Sites(record=keep, edit=edits) if keep or edits else None
        h = self.model.layers[i](h, self.first_ctx if i == 0 else self.ctx, sites)
        for name in self.record.get(i, ()):
            self.records[(i, name)] = sites.store[name]
        return h, [sites.store["pattern"]] if folding else []

    def hidden(self, index: int) -> torch.Tensor:
        """hidden_states[index] (B, T, E), running the blocks it needs; index L is after the final norm."""
        state = self.run_to(index).states[index]
        return self.model.norm(state) if index == self.model.num_layers else state

    def recorded(self, block: int, site: str) -> torch.Tensor:
        """`site` of block `block` (asked for in `record`): (B, T, H, D) for z, (B, T, E) residual sites."""
        return self.run_to(block + 1).records[(block, site)]


@dataclass(frozen=True, eq=False)
class Pass:
    """One forward of a method: what `run_passes`, the sweeps and the audit view all read. layer: the hidden_states index read (None: the pass only records, as CP's auxiliary pass);
    depth: blocks to run (default: up to `layer`; ReBA folds every block whatever it reads);
    pool: the finished forward -> (B, E) (None: nothing pooled); record: block -> sites kept;
    made: the step, made from the earlier passes' finished forwards (CP's b), instead of `step`."""

    batch: Any  # a methods.inputs.PromptBatch
    step: Step = Step()
    layer: int | None = None
    pool: Callable[[Forward], torch.Tensor] | None = None
    depth: int | None = None
    record: Mapping[int, frozenset[str]] = field(default_factory=dict)
    extra_rows: Mapping[int, torch.Tensor] = field(default_factory=dict)
    made: Callable[[Sequence[Forward]], Step] | None = None
    role: str = "prompt"  # the audit view's name for it ("auxiliary prompt", ...)
    reads: str = ""  # what `pool` takes, in words (the audit view)
    details: Callable[[Forward], dict] | None = None  # the audit view's extra tensors (ReBA: A and w)

    @property
    def blocks(self) -> int:  # the blocks this pass runs
        return self.depth if self.depth is not None else (self.layer or 0)

    def resolved(self, finished: Sequence[Forward]) -> "Pass":
        """This pass with its step made from the finished forwards of the passes before it, in order."""
        return self if self.made is None else dataclasses.replace(self, step=self.made(finished), made=None)

    def start(self, model, forward: Callable[..., Forward] = Forward) -> Forward:
        """This pass's forward, built (nothing run yet) by `forward` (the plain loop, or an executor)."""
        keep = {self.blocks} | ({self.layer} if self.layer is not None else set())
        return forward(model, self.batch.input_ids, self.batch.attention_mask, self.step, keep, self.extra_rows,
                       self.record)


def run_passes(model, passes: Iterable[Pass], forward: Callable[..., Forward] | None = None) -> torch.Tensor:
    """(B, E) float32: each pass run in order (its step made first where it takes what earlier ones recorded),
    the mean of what they pool. forward: runs each pass (default: this loop; embed_batch gives the executor)."""
    pooled, finished = [], []
    for p in passes:
        p = p.resolved(finished)
        finished.append(p.start(model, forward or Forward).run_to(p.blocks))
        if p.pool is not None:
            pooled.append(p.pool(finished[-1]).float())
    return torch.stack(pooled).mean(dim=0)  # one pass: the vector itself


def last_token(h: torch.Tensor, batch) -> torch.Tensor:
    """(B, T, ...) -> (B, ...): the last real token of each row (left or right padding)."""
    last = batch.last.to(h.device, non_blocking=True)  # (B,), built on the host
    return h[torch.arange(h.shape[0], device=h.device), last]


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, E) -> (B, E): the mean of h over each row's columns where `mask` (B, T, bool, built on the host)
    is true, summed in h's dtype: the one masked mean every pooling uses (pass h.float() to sum in float32)."""
    weights = mask.to(h.device, h.dtype, non_blocking=True).unsqueeze(-1)  # (B, T, 1)
    return (h * weights).sum(dim=1) / weights.sum(dim=1)


def mean_over_spans(h: torch.Tensor, spans: list[list[tuple[int, int]]], occurrence: int = 0) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean over each row's token span number `occurrence` (e.g. the {text} tokens), one
    masked sum for the batch, not a launch per row."""
    bounds = torch.tensor([row[occurrence] for row in spans], dtype=torch.long)  # (B, 2) [start, end)
    for row in torch.nonzero(bounds[:, 1] <= bounds[:, 0])[:1].tolist():
        raise ValueError(f"row {row[0]} has an empty span to average")  # callers reject empty text first
    columns = torch.arange(h.shape[1])[None, :]  # (1, T)
    return masked_mean(h, (columns >= bounds[:, :1]) & (columns < bounds[:, 1:]))


def hidden_at(model, batch, layer: int, step: Step | None = None, extra_rows: Mapping | None = None) -> torch.Tensor:
    """hidden_states[layer] (B, T, E) of `batch` (negatives count from the end), running only the blocks it
    needs (early exit): the plain loop in one line, for tests and tools."""
    index = resolve_output_layer(layer, model.num_layers)
    return Forward(model, batch.input_ids, batch.attention_mask, step, keep={index}, extra_rows=extra_rows).hidden(index)
