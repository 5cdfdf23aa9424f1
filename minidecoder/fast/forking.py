"""Many configurations' passes in shared forwards: a trunk runs while their steps agree and forks into a
branch where one starts doing something else (the sweeps, minidecoder.evaluation.sweep).

    acting_before(step, b)    the blocks < b at which a step acts (before them, at their sites, on patterns)
    hides_before(step, b)     whether it hides keys from block 0 and block 0 is < b (apart: hiding is not acting)
    same_before(a, b, block)  two steps compute the same stream up to `block`: one may continue the other
    fork(forward, step)       a branch continuing a forward's current state with another step
    run_shared(model, passes) every pass of the same tokens finished, each block computed once per
                              distinct history of the passes' steps

Every branch performs exactly the operations of a separate run of its pass on the same batch, so a
sweep's embeddings equal separate runs' (tests/evaluation/test_sweep.py). Nothing here names a method:
steps are compared field by field.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch

from minidecoder.fast.forward import FastForward
from minidecoder.methods import Method
from minidecoder.methods.composite import Steps
from minidecoder.methods.loop import Forward, Pass, Step


def acting_before(step: Step, block: int) -> frozenset[int]:
    """The blocks < `block` at which `step` acts: before them, at their sites or on their patterns."""
    return frozenset(i for i in step.blocks if i < block)


def hides_before(step: Step, block: int) -> bool:
    """Whether `step` hides keys from a block < `block` (only block 0 can). Kept apart from `acting_before`:
    TP with mask_pst_first_layer hides <PST> in block 0 whether or not it also copies before block 0, so
    counting the hiding as acting at block 0 made a step that copies there (start=0) look the same as one
    that only hides (start=2, or start=end), and the latter continued a trunk holding the former's copy."""
    return step.hidden_keys is not None and block > 0


def same_before(a: Step, b: Step, block: int) -> bool:
    """`a` and `b` compute the same stream up to block `block`, so a forward run with one can continue with
    the other from there (`fork`)."""
    if isinstance(a, Steps) and isinstance(b, Steps) and len(a.parts) == len(b.parts):
        return all(same_before(x, y, block) for x, y in zip(a.parts, b.parts))
    mine, theirs = acting_before(a, block), acting_before(b, block)
    hides = hides_before(a, block), hides_before(b, block)
    if not mine and not theirs and not any(hides):
        return True
    return type(a) is type(b) and mine == theirs and hides[0] == hides[1] and _same_fields(a, b, skip={"blocks"})


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


def same_inputs(a: Pass, b: Pass) -> bool:
    """The same tokens and placeholder rows: the two passes can share one forward."""
    return a.batch.same_tokens(b.batch) and _same_fields(dict(a.extra_rows), dict(b.extra_rows))


def fork(forward: FastForward, step: Step) -> FastForward:
    """A branch that continues from `forward`'s current state (blocks 0..next_block-1 run) with `step`, given
    in batch columns like the forward's own; it must not touch a shared prefix the forward cut (build the
    trunk with it in `touched_by`). Tensors are never changed in place, so the branch shares them."""
    if forward.next_block == 0:
        raise ValueError("fork after block 0 has run; before it, start a forward with the step")
    if forward.prefix is None and forward.ctx.cache is not None:
        raise ValueError("a forward that fills a KV cache cannot be forked (its branches would share the cache)")
    branch = copy.copy(forward)
    branch.step = forward.stream_step(step).to(forward.model.device)
    if forward.prefix is not None:
        branch.ctx = forward.stream_context()  # its own broadcast of the prefix's keys
    branch.states, branch.records = dict(forward.states), dict(forward.records)  # each branch its own dict
    return branch


def run_shared(model, passes: list[Pass]) -> list[Forward]:
    """The finished forward of every pass (all of the same tokens), computing each block once per distinct
    history of the passes' steps: a group of passes shares a forward while their steps agree, and a
    cluster whose step does something else at block i gets a fork of it there."""
    depth = [p.blocks for p in passes]
    keep = set(depth) | {p.layer for p in passes if p.layer is not None}
    record: dict[int, set[str]] = {}
    for p in passes:
        for block, names in p.record.items():
            record.setdefault(block, set()).update(names)
    steps = [p.step for p in passes]
    first = passes[0]

    def started(step: Step) -> FastForward:  # a forward of these tokens, planned for every step
        return FastForward(model, first.batch.input_ids, first.batch.attention_mask, step, keep, first.extra_rows,
                           record, touched_by=steps)

    def branch(forward: FastForward, step: Step) -> FastForward:
        return fork(forward, step) if forward.next_block else started(step)

    groups = [(started(steps[0]), steps[0], list(range(len(passes))))]  # (forward, its step, members)
    finished: list[Forward | None] = [None] * len(passes)
    for i in range(max(depth) + 1):  # every forward of `groups` has run blocks 0..i-1
        next_groups = []
        for forward, step, members in groups:
            for m in members:
                if depth[m] == i:
                    finished[m] = branch(forward, steps[m])  # a snapshot: later blocks stay the group's
            clusters: list[list[int]] = []  # the members still running, by what their step does at block i
            for m in (m for m in members if depth[m] > i):
                for cluster in clusters:
                    if same_before(steps[m], steps[cluster[0]], i + 1):
                        cluster.append(m)
                        break
                else:
                    clusters.append([m])
            continued = False
            for cluster in clusters:
                lead = steps[cluster[0]]
                if not continued and same_before(step, lead, i + 1):
                    next_groups.append((forward, step, cluster))
                    continued = True
                else:
                    next_groups.append((branch(forward, lead), lead, cluster))
        groups = next_groups
        for forward, _, _ in groups:
            forward.run_to(i + 1)
    return finished


def embed_points(model, methods: list[Method], texts: list[str]) -> tuple[list[torch.Tensor], int]:
    """Each configuration's (B, E) embeddings of `texts` (one batch), and the rows x blocks their separate
    runs would compute. The configurations' passes advance together: the k-th pass of every one that has
    one runs at once (`run_shared`), each given what its own earlier passes recorded, as `run_passes` does."""
    lists = [list(method.passes(model, texts)) for method in methods]
    pooled: list[list[torch.Tensor]] = [[] for _ in methods]
    finished: list[list[Forward]] = [[] for _ in methods]
    naive = 0
    for k in range(max(len(passes) for passes in lists)):
        current = {m: passes[k].resolved(finished[m]) for m, passes in enumerate(lists) if k < len(passes)}
        for group in _grouped_by_inputs(current):
            for m, forward in zip(group, run_shared(model, [current[m] for m in group])):
                p = current[m]
                # a separate run of this pass runs its rows, and its shared prompt prefix once (one row) where
                # the prefix cache ran one here: counted on both sides, as BlockCounter counts it
                naive += p.blocks * (p.batch.input_ids.shape[0] + (1 if forward.prefix_length else 0))
                finished[m].append(forward)
                if p.pool is not None:
                    pooled[m].append(p.pool(forward).float())
    return [torch.stack(vectors).mean(dim=0) for vectors in pooled], naive


def _grouped_by_inputs(passes: dict[int, Pass]) -> list[list[int]]:
    """The keys of `passes` grouped by their tokens and placeholder rows (what a shared forward needs)."""
    groups: list[list[int]] = []
    for k, p in passes.items():
        for group in groups:
            if same_inputs(p, passes[group[0]]):
                group.append(k)
                break
        else:
            groups.append([k])
    return groups
