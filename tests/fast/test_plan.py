"""`fast.plan.plan`: the executor's decisions as data, from host tensors and settings alone (no model, no
device: the GPU rows below are decided for a device named "cuda" without one)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from minidecoder.fast import plan as plan_module, prefix_cache
from minidecoder.fast.graphs import bucket
from minidecoder.fast.options import FastPaths
from minidecoder.fast.plan import plan
from minidecoder.methods.reba import FoldAttention
from minidecoder.methods.tp import CopyRows

CONFIG = SimpleNamespace(rope={"default": SimpleNamespace(rope_type="default")}, sliding_window=None,
                         layer_types=["full_attention"] * 4)
OFF = FastPaths(prefix_cache=False, explicit_attention=False, buckets=False, graphs=False, blocked_fusion_from=None)


def left_padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(map(len, rows))
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, T - len(row):], mask[b, T - len(row):] = torch.tensor(row), True
    return ids, mask


SHARED = [1, 5, 6, 7, 8, 9, 10]  # a template's first tokens, in every row
IDS, MASK = left_padded([SHARED + [20, 21, 22], SHARED + [30], SHARED + [40, 41]])


def test_the_shared_prefix_is_read_from_the_ids_and_cut_before_a_steps_first_column() -> None:
    paths = FastPaths(prefix_cache=None)
    assert plan(CONFIG, "cpu", torch.float32, paths, IDS, MASK).prefix == len(SHARED)
    assert plan(CONFIG, "cpu", torch.float32, OFF, IDS, MASK).prefix == 0
    # a copy into column 2 of row 0's real tokens (batch column T - 10 + 2): the prefix stops before it
    T = IDS.shape[1]
    copy = CopyRows.of_pairs({1}, [(0, T - 10 + 5, T - 1), (1, T - 8 + 7, T - 1)])
    assert plan(CONFIG, "cpu", torch.float32, paths, IDS, MASK, (copy,)).prefix == 5
    early = CopyRows.of_pairs({1}, [(0, T - 10 + 2, T - 1)])  # cut to 2 tokens: whether they pay is `pays`'
    want = 2 if prefix_cache.pays(torch.device("cpu"), 2, 3, None) else 0
    assert plan(CONFIG, "cpu", torch.float32, paths, IDS, MASK, (early,)).prefix == want


def test_a_fold_keeps_every_column_and_gets_heads_a_few_at_a_time_from_the_threshold() -> None:
    fold = FoldAttention(blocks=frozenset(range(4)))
    T = IDS.shape[1]
    on = FastPaths(prefix_cache=True, buckets=True, blocked_fusion_from=T)
    got = plan(CONFIG, "cpu", torch.float32, on, IDS, MASK, (fold,))
    assert got.prefix == 0 and got.bucket is None and got.heads_per_fold == 1
    later = plan(CONFIG, "cpu", torch.float32, FastPaths(blocked_fusion_from=T + 1), IDS, MASK, (fold,))
    assert later.heads_per_fold is None
    assert plan(CONFIG, "cpu", torch.float32, FastPaths(blocked_fusion_from=0), IDS, MASK).heads_per_fold is None


def test_on_a_gpu_the_default_is_the_eager_unpadded_batch() -> None:
    """Issue 33: buckets and graphs only where asked for (True), never from the device alone."""
    got = plan(CONFIG, "cuda", torch.float32, FastPaths(), IDS, MASK)
    assert got.bucket is None and got.block_call == "plain" and not got.explicit
    assert got.prefix == 0  # (rows - 1) x prefix = 14 saved tokens: not worth a second pass on a GPU
    many_ids, many_mask = left_padded([SHARED * 20 + [i] for i in range(12)])
    assert plan(CONFIG, "cuda", torch.float32, FastPaths(), many_ids, many_mask).prefix == 140


def test_graphs_only_on_a_bucket_and_only_for_small_block_calls() -> None:
    graphs = FastPaths(prefix_cache=False, buckets=True, graphs=True)
    small = plan(CONFIG, "cuda", torch.float32, graphs, IDS, MASK)
    assert small.bucket == bucket(*IDS.shape) and small.block_call == "graph"
    rows, columns = small.bucket
    wide_ids = torch.ones(rows, plan_module.GRAPH_MAX_TOKENS // rows + 1, dtype=torch.long)
    wide = plan(CONFIG, "cuda", torch.float32, graphs, wide_ids, None)
    assert wide.bucket[0] * wide.bucket[1] > plan_module.GRAPH_MAX_TOKENS and wide.block_call == "plain"
    follows = plan(CONFIG, "cuda", torch.float32, FastPaths(prefix_cache=False, graphs=True), IDS, MASK)
    assert follows.bucket == small.bucket and follows.block_call == "graph"  # buckets follow graphs unless set
    unbounded = FastPaths(prefix_cache=False, graphs=True, buckets=False)
    assert plan(CONFIG, "cuda", torch.float32, unbounded, IDS, MASK).block_call == "plain"  # no bounded shapes
    compiled = FastPaths(prefix_cache=False, buckets=True, graphs=True, compiled=True)
    assert plan(CONFIG, "cuda", torch.float32, compiled, wide_ids, None).block_call == "compiled"


def test_the_explicit_kernel_for_short_inputs_on_a_cpu_and_a_cached_pass_runs_plain() -> None:
    assert plan(CONFIG, "cpu", torch.float32, FastPaths(prefix_cache=False), IDS, MASK).explicit
    long_ids = torch.ones(2, 500, dtype=torch.long)
    assert not plan(CONFIG, "cpu", torch.float32, FastPaths(), long_ids, None).explicit
    assert not plan(CONFIG, "cuda", torch.float32, FastPaths(), IDS, MASK).explicit
    cached = plan(CONFIG, "cpu", torch.float32, FastPaths(compiled=True, buckets=True), IDS[:1], None, cached=True)
    assert cached.prefix == 0 and cached.bucket is None and cached.block_call == "plain"
    assert cached.longest == IDS.shape[1]
