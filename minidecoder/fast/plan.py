"""What the executor does with one batch, decided on the host before any block runs: the decisions as data.

    prefix            leading tokens every row shares, run once at batch 1 and reused through the KV cache
                      (fast.prefix_cache): cut before the first column any step names, off for a step that
                      reads every column (ReBA's fold) or hides keys from block 0
    bucket            (rows, columns) the batch is padded to (fast.graphs): when `FastPaths.buckets` is set on, or,
                      following graphs, only when the padded batch will run as a graph (padding a batch that then
                      runs eagerly costs its FLOPs and saves nothing)
    explicit          the explicit attention kernel (short inputs on a CPU, fast.attention)
    block_call        how a site-free block call runs: "plain", "compiled" (fast.compiled) or "graph" (a
                      captured CUDA graph, fast.graphs; only on a bucket, and only for calls of at most
                      fast.graphs.GRAPH_MAX_TOKENS rows x columns: above that a block's work hides its launches)
    fused             a site-free block call that is neither compiled nor captured (a call through a KV cache
                      included) runs fused (fast.fused: the GPU default)
    heads_per_fold    patterns handed to a folding step a few heads at a time (fast.blocked_fusion), or
                      None: a block's whole (B, H, T, S) pattern at once

`plan` reads only host tensors and settings, so it is unit-tested without a model (tests/fast/test_plan.py)
and nothing it decides waits for a GPU. Buckets and graphs are on only where they are asked for
(`FastPaths.graphs` True, buckets following it unless set): the default on every device is the eager,
unpadded batch.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from minidecoder.fast import graphs as graph_bank, prefix_cache
from minidecoder.fast.attention import explicit_is_faster
from minidecoder.fast.options import FastPaths, fused_on

TOKEN_MAJOR_SITES = frozenset({"resid_pre", "z", "attn_out", "resid_mid", "mlp_out", "resid_post"})  # (B, T, ...)


@dataclass(frozen=True)
class Plan:
    prefix: int = 0  # shared leading tokens run once (0: none)
    bucket: tuple[int, int] | None = None  # (rows, columns) the batch is padded to (None: as it is)
    explicit: bool = False  # the explicit attention kernel for every block call
    block_call: str = "plain"  # a site-free block call: "plain", "compiled" or "graph"
    fused: bool = False  # a site-free call that is neither compiled nor captured runs fast.fused (a cached one too)
    heads_per_fold: int | None = None  # a folding step gets this many heads at a time (None: all at once)
    longest: int = 0  # positions the longest row reaches, prefix included (host-known: no read-back)


def columns_may_move(steps: Iterable, record: Mapping[int, frozenset[str]]) -> bool:
    """Whether the stream's columns may differ from the batch's (a prefix cut off, padding columns added):
    not for a fold (it reads every column's attention) or hidden keys (they change block 0 for every
    query), and only token-major sites can be put back in the batch's layout."""
    return (not any(step.folds or step.hidden_keys is not None for step in steps)
            and all(names <= TOKEN_MAJOR_SITES for names in record.values()))


def shared_prefix(config, device, paths: FastPaths, ids: torch.Tensor, mask: torch.Tensor | None,
                  steps: tuple, record: Mapping[int, frozenset[str]]) -> int:
    """How many leading tokens every row shares and may run once (0: none), from the host's ids."""
    if paths.prefix_cache is False or mask is None or not columns_may_move(steps, record):
        return 0
    p = prefix_cache.cacheable_prefix(config, ids, mask, prefix_cache.shortest_template(device, paths.prefix_cache))
    if not p:
        return 0
    first = prefix_cache.first_real_positions(mask)
    for step in steps:  # cut before the first column any step reads or writes
        p = min(p, int((prefix_cache.first_touched(step, ids.shape[0]) - first).min()))
    return p if prefix_cache.pays(device, p, ids.shape[0], paths.prefix_cache) else 0


def plan(config, device, dtype: torch.dtype, paths: FastPaths, ids: torch.Tensor, mask: torch.Tensor | None,
         steps: tuple = (), record: Mapping[int, frozenset[str]] | None = None, cached: bool = False) -> Plan:
    """The plan for a (B, T) batch of host `ids` / `mask` whose forward runs `steps` (its own and any a
    sweep will fork to) and records `record`; `cached`: the forward fills a KV cache (the shared prefix's
    own pass: then no prefix, bucket or compiled call, since a cached call runs plain, fast/compiled.py)."""
    record = record or {}
    B, T = ids.shape
    p = 0 if cached else shared_prefix(config, device, paths, ids, mask, steps, record)
    graphs = paths.graphs is True  # opt-in on every device: never turned on by the device alone
    padded = None
    if not cached and not p and paths.buckets is not False and columns_may_move(steps, record):
        shape = graph_bank.bucket(B, T)
        graphed = graphs and shape[0] * shape[1] <= graph_bank.GRAPH_MAX_TOKENS
        # buckets left to follow graphs pad a batch only where a graph then runs on it (a graph needs a
        # bounded set of shapes; an eager call gains nothing from the padding and pays its FLOPs)
        padded = shape if paths.buckets or graphed else None
    columns = padded[1] if padded else T - p
    real = T if mask is None else int(mask.sum(dim=1).max())  # real tokens of the longest row
    if cached:
        call = "plain"
    elif graphs and padded and padded[0] * padded[1] <= graph_bank.GRAPH_MAX_TOKENS:
        call = "graph"
    else:
        call = "compiled" if paths.compiled else "plain"
    folding = any(step.folds for step in steps)
    blocked = folding and paths.blocked_fusion_from is not None and T >= paths.blocked_fusion_from
    explicit = paths.explicit_attention and explicit_is_faster(torch.device(device), dtype, columns + p)
    return Plan(prefix=p, bucket=padded, explicit=explicit, block_call=call, fused=fused_on(paths, device),
                heads_per_fold=1 if blocked else None, longest=real)
