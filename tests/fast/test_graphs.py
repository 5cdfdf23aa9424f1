"""Buckets and captured graphs (minidecoder.fast.graphs) equal the plain loop.

On a CPU there are no CUDA graphs: the bank keeps the static buffers and calls the block on them, so the
tests here check everything around the capture (padding to a bucket, the steps seeing only the batch's
rows and shifted columns, static masks and RoPE tables refilled per forward, outputs copied out); the
capture itself runs in the GPU test, skipped without one."""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.fast.graphs import bucket, graph_bank
from minidecoder.fast.options import fast_paths_overridden
from tiny_models import checkpoint

TEXTS = ["a man plays a flute.", "the cat sat on the mat. It purred loudly.", "dogs run.", "Rain.",
         "two children play football in the park while their parents watch from a bench nearby."]
CASES = [("prompteol", {}), ("mean", {}), ("echo", {}), ("metaeol", {"tasks": [0, 4]}),
         ("tp", {"layer": -1, "end": 3}), ("htp", {"end": 3}), ("cp", {"steer_layer": 1}),
         ("cp", {"steer_layer": 2, "tp": True, "start": 0, "end": 2, "mode": "nr"}), ("reba", {})]
ATOL = RTOL = 2e-5  # fp32: a padded batch's matmuls have other shapes, so they round differently
# CP writes alpha (a - b) in place of a. The padding moves b by a rounding (1e-6 on gemma3); Gemma's norm
# after attention (sandwich_norms) rescales the small steered output to unit size, so its direction, which
# that rounding turns by |a| / |a - b|, carries on: measured, the embedding moves by 1.5e-4 (alpha=0: 9e-7)
CP_ATOL = CP_RTOL = 1e-3


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request):
    return minidecoder.load(checkpoint(request.param)[1], progress=False)


def test_buckets_are_few_and_tight() -> None:
    shapes = {bucket(rows, columns) for rows in range(1, 513) for columns in range(1, 513)}
    rows = {r for r, _ in shapes}
    assert len(rows) <= 4 * 9 + 8  # four an octave past 8 rows
    for r in range(1, 2049):
        padded, _ = bucket(r, 20)
        assert r <= padded <= max(r * 1.25, r + 1)
    for c in range(1, 2049):
        _, padded = bucket(4, c)
        assert c <= padded < c + (16 if c <= 256 else 64)


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{len(o)}" for n, o in CASES])
def test_bucket_padding_equals_the_plain_loop(model, name: str, options: dict) -> None:
    with fast_paths_overridden(model, buckets=False, graphs=False):
        plain = minidecoder.embed(model, TEXTS, name, batch_size=3, **options)
    with fast_paths_overridden(model, buckets=True, graphs=False, prefix_cache=False):
        padded = minidecoder.embed(model, TEXTS, name, batch_size=3, **options)
    tolerance = CP_ATOL if name == "cp" else ATOL
    assert_close(padded, plain, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{len(o)}" for n, o in CASES])
def test_graphed_calls_equal_the_padded_loop_exactly(model, monkeypatch, name: str, options: dict) -> None:
    """The same block calls on the same shapes: bit-identical (on a GPU a replay is the captured kernels)."""
    from minidecoder.fast.graphs import GraphBank

    with fast_paths_overridden(model, buckets=True, graphs=False, prefix_cache=False):
        padded = minidecoder.embed(model, TEXTS, name, batch_size=3, **options)
    calls = []
    original = GraphBank.forward
    monkeypatch.setattr(GraphBank, "forward", lambda self, *a: calls.append(1) or original(self, *a))
    with fast_paths_overridden(model, buckets=True, graphs=True, prefix_cache=False):
        graphed = minidecoder.embed(model, TEXTS, name, batch_size=3, **options)
        again = minidecoder.embed(model, TEXTS, name, batch_size=3, **options)  # reuses the buffers
    assert torch.equal(graphed, padded) and torch.equal(again, padded)
    # ReBA folds every block's pattern: none of its calls is site-free; MetaEOL's padded calls are all past
    # GRAPH_MAX_TOKENS, so the plan runs them eagerly
    assert (len(calls) > 0) == (name not in ("reba", "metaeol"))


def test_a_graph_is_kept_per_block_and_shape_and_its_static_context_is_refilled(model) -> None:
    """Two batches of one bucket shape reuse the same buffers: the second batch's masks and RoPE tables
    must replace the first's, or its rows would attend with the first batch's padding."""
    bank = graph_bank(model)
    with fast_paths_overridden(model, buckets=True, graphs=True, prefix_cache=False):
        first = minidecoder.embed(model, ["a b c d e f g h", "x"], "mean", batch_size=2)
        kept = {(shape, block) for shape, held in bank.shapes.items() for block in held.graphs}
        second = minidecoder.embed(model, ["x y", "a b c d e f g"], "mean", batch_size=2)  # same bucket, other masks
    with fast_paths_overridden(model, buckets=False, graphs=False):
        want = minidecoder.embed(model, ["x y", "a b c d e f g"], "mean", batch_size=2)
    assert_close(second, want, atol=ATOL, rtol=RTOL)
    assert (first - second).abs().max() > 1e-3
    assert kept == {(shape, block) for shape, held in bank.shapes.items() for block in held.graphs}
    assert kept  # the second batch ran on the first one's buffers


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_captured_graphs_on_a_gpu_equal_the_plain_loop_and_never_sync() -> None:
    model = minidecoder.load(checkpoint("llama")[1], progress=False, device="cuda", graphs=True)
    bank = graph_bank(model)
    with fast_paths_overridden(model, buckets=False, graphs=False):
        plain = minidecoder.embed(model, TEXTS * 4, "prompteol", batch_size=4)
    graphed = minidecoder.embed(model, TEXTS * 4, "prompteol", batch_size=4)  # small calls: under GRAPH_MAX_TOKENS
    assert bank.captures > 0
    assert_close(graphed, plain, atol=1e-4, rtol=1e-4)
    torch.cuda.set_sync_debug_mode("error")
    try:
        from minidecoder.fast.forward import executor
        from minidecoder.methods import build_method
        method = build_method("tp", layer=-1, end=3)
        with torch.inference_mode():
            method.embed_batch(model, TEXTS, forward=executor(model.fast_paths))
    finally:
        torch.cuda.set_sync_debug_mode(0)
