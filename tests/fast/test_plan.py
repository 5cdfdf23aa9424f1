"""`fast.plan.plan`: the executor's decisions as data, from host tensors and settings alone (no model, no
device: the GPU rows below are decided for a device named "cuda" without one)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from minidecoder.fast import graphs as graphs_module, prefix_cache
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
    wide_ids = torch.ones(rows, graphs_module.GRAPH_MAX_TOKENS // rows + 1, dtype=torch.long)
    wide = plan(CONFIG, "cuda", torch.float32, graphs, wide_ids, None)
    assert wide.bucket[0] * wide.bucket[1] > graphs_module.GRAPH_MAX_TOKENS and wide.block_call == "plain"
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


def test_buckets_following_graphs_pad_only_a_batch_that_runs_as_a_graph() -> None:
    """A batch too large for a graph runs eagerly: padded to a bucket it would compute more tokens for
    nothing (mean at the token budget: 1.79x the real tokens padded against 1.23x unpadded)."""
    follows = FastPaths(prefix_cache=False, graphs=True)
    rows = 8
    wide_ids = torch.ones(rows, graphs_module.GRAPH_MAX_TOKENS // rows + 3, dtype=torch.long)
    wide = plan(CONFIG, "cuda", torch.float32, follows, wide_ids, None)
    assert wide.bucket is None and wide.block_call == "plain"
    asked = plan(CONFIG, "cuda", torch.float32, FastPaths(prefix_cache=False, graphs=True, buckets=True), wide_ids, None)
    assert asked.bucket == bucket(*wide_ids.shape)  # buckets asked for themselves still pad


def test_the_graph_threshold_is_read_where_it_is_defined(monkeypatch) -> None:
    """One threshold, fast.graphs.GRAPH_MAX_TOKENS: the plan reads it there (it once kept a copy of its own)."""
    follows = FastPaths(prefix_cache=False, graphs=True)
    padded = bucket(*IDS.shape)
    assert plan(CONFIG, "cuda", torch.float32, follows, IDS, MASK).block_call == "graph"
    monkeypatch.setattr(graphs_module, "GRAPH_MAX_TOKENS", padded[0] * padded[1] - 1)
    assert plan(CONFIG, "cuda", torch.float32, follows, IDS, MASK).block_call == "plain"


def test_on_a_gpu_a_short_template_over_many_rows_is_cached() -> None:
    """On a GPU the rule is the tokens saved, (rows - 1) x prefix >= GPU_MIN_SAVED_TOKENS, alone (as `describe`
    says): a 3-token template over 600 rows saves 1,797 tokens, though it is shorter than the CPU's MIN_PREFIX."""
    template = [1, 5, 6]
    assert len(template) < prefix_cache.MIN_PREFIX
    ids, mask = left_padded([template + [20 + i % 50, 30 + i % 7] for i in range(600)])
    assert (600 - 1) * 3 >= prefix_cache.GPU_MIN_SAVED_TOKENS
    assert plan(CONFIG, "cuda", torch.float32, FastPaths(), ids, mask).prefix == 3
    assert plan(CONFIG, "cpu", torch.float32, FastPaths(), ids, mask).prefix == 0  # the CPU's rule: >= MIN_PREFIX
    few, few_mask = left_padded([template + [20 + i] for i in range(5)])
    assert plan(CONFIG, "cuda", torch.float32, FastPaths(), few, few_mask).prefix == 0  # 12 tokens saved
