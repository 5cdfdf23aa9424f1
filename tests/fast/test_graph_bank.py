"""The graph bank's memory, safety and defaults, checked on the CPU.

On a CPU `GraphBank(capture=False)` allocates the buffers a GPU bank allocates and calls `Block.forward` on
them where a GPU replays, so what the bank holds, when it falls back and when it is dropped are all visible
here. The planning test runs the project's own batching on STS-B's lengths for a Llama-2-7B-shaped model on
the `meta` device (shapes, no values), so the GPU defaults are checked without a GPU."""
from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.core.model import Decoder
from minidecoder.evaluation.sweep import BlockCounter
from minidecoder.fast import prefix_cache
from minidecoder.fast.graphs import GRAPH_BANK_MAX_BYTES, GRAPH_MAX_TOKENS, GraphBank, bucket, graph_bank
from minidecoder.fast.options import FastPaths, describe, fast_paths_overridden
from minidecoder.methods import build_method
from minidecoder.fast.forward import FastForward, executor
from repo_paths import SHARED

TEXTS = ["a man plays a flute.", "the cat sat on the mat.", "dogs run.", "Rain.", "two kids play.", "a b c d"]
GRAPHS = dict(buckets=True, graphs=True, prefix_cache=False)  # graphs forced (the prefix would skip buckets)
EAGER = dict(buckets=True, graphs=False, prefix_cache=False)  # the same padded shapes, no bank


@pytest.fixture()
def model(tiny_llama):
    return minidecoder.load(tiny_llama, progress=False)  # a fresh model (and bank) per test


def _held_bytes(bank: GraphBank) -> int:
    """Bytes of every distinct tensor storage the bank holds, found by walking it (not by trusting `bytes`)."""
    seen: dict[int, int] = {}

    def walk(value, depth=0):
        if depth > 6:
            return
        if isinstance(value, torch.Tensor):
            seen[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        elif isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, depth + 1)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module):
            walk(vars(value), depth + 1)

    walk(vars(bank))
    return sum(seen.values())


def _deeper(model, num_layers: int):
    """`model`'s config with `num_layers` blocks, random weights (seeded), its tokenizer and settings."""
    config = dataclasses.replace(model.config, num_layers=num_layers,
                                 layer_types=(model.config.layer_types[0],) * num_layers)
    torch.manual_seed(0)
    deep = Decoder(config)
    deep.tokenizer, deep.fast_paths = model.tokenizer, model.fast_paths
    return deep


def test_graphs_are_off_by_default_and_opt_in(tiny_llama) -> None:
    for device in ("cpu", "cuda"):
        paths = FastPaths().for_device(torch.device(device))
        assert paths.graphs is False and paths.buckets is False
    assert FastPaths(graphs=True).for_device("cuda").buckets is True  # buckets follow graphs
    assert FastPaths(graphs=True, buckets=False).for_device("cuda").buckets is False
    model = minidecoder.load(tiny_llama, progress=False, graphs=True)
    assert model.fast_paths.graphs is True
    said = describe(model)
    assert said["graphs"].startswith("on") and str(GRAPH_MAX_TOKENS) in said["graphs"] and "graphs=True" in said["why"]
    assert describe(minidecoder.load(tiny_llama, progress=False))["graphs"] == "off"


def test_the_cli_has_a_graphs_switch(tiny_llama) -> None:
    import argparse

    from minidecoder.running.command_line import add_model_options, load_model

    parser = argparse.ArgumentParser()
    add_model_options(parser)
    for flags, graphs in (([], False), (["--graphs"], True)):
        model = load_model(parser.parse_args(["--model", str(tiny_llama), *flags]))
        assert model.fast_paths.graphs is graphs and model.fast_paths.for_device("cuda").buckets is graphs


def test_the_bank_does_not_grow_with_the_number_of_blocks(model) -> None:
    """One static input and output per shape shared by every block: 2 and 8 blocks hold the same bytes
    (the bank used to keep a buffer per block and shape: 4x more here, 32x on a 7B model)."""
    held = {}
    for layers in (2, 8):
        deep = _deeper(model, layers)
        with fast_paths_overridden(deep, **GRAPHS):
            minidecoder.embed(deep, TEXTS, "prompteol", batch_size=3)
        bank = graph_bank(deep)
        assert bank.captures == layers * len(bank.shapes) > 0
        held[layers] = _held_bytes(bank)
        assert held[layers] == bank.bytes
    assert held[2] == held[8] > 0


def test_the_bank_stays_under_its_cap_evicting_the_least_recent_shape(model) -> None:
    bank = graph_bank(model)
    with fast_paths_overridden(model, **GRAPHS):
        minidecoder.embed(model, TEXTS[:2], "mean", batch_size=2)
        two_rows = set(bank.shapes)
        bank.max_bytes = 2 * bank.bytes  # room for the 2-row shape, or the 3-row one, never both
        minidecoder.embed(model, TEXTS[:3], "mean", batch_size=3)
        three_rows = set(bank.shapes)
        assert len(three_rows) == 1 and three_rows != two_rows and bank.bytes <= bank.max_bytes
        minidecoder.embed(model, TEXTS[:2], "mean", batch_size=2)
    assert set(bank.shapes) == two_rows and bank.bytes <= bank.max_bytes
    bank.max_bytes = bank.bytes - 1  # a shape alone over the cap runs eagerly, holding nothing
    bank.clear()
    with fast_paths_overridden(model, **GRAPHS):
        graphed = minidecoder.embed(model, TEXTS[:2], "mean", batch_size=2)
    assert bank.bytes == 0
    with fast_paths_overridden(model, **EAGER):
        assert torch.equal(graphed, minidecoder.embed(model, TEXTS[:2], "mean", batch_size=2))


def test_large_block_calls_run_eagerly(model) -> None:
    """Above GRAPH_MAX_TOKENS (rows x columns) a graph cannot pay: the bank holds nothing for such a call."""
    rows = 40
    texts = ["a man plays a flute."] * rows
    assert rows * bucket(rows, len(texts[0]))[1] > GRAPH_MAX_TOKENS  # (the tiny tokenizer: a token a character)
    with fast_paths_overridden(model, **GRAPHS):
        graphed = minidecoder.embed(model, texts, "mean", batch_size=rows)
    assert graph_bank(model).bytes == 0
    with fast_paths_overridden(model, **EAGER):
        assert torch.equal(graphed, minidecoder.embed(model, texts, "mean", batch_size=rows))


def test_same_shape_calls_under_inference_mode_then_no_grad(model) -> None:
    """Buffers made under inference_mode used to be inference tensors, and the next call of the same shape
    under plain no_grad raised "Inplace update to inference tensor outside InferenceMode"."""
    method = build_method("prompteol")
    with fast_paths_overridden(model, **GRAPHS):
        with torch.inference_mode():
            first = method.embed_batch(model, TEXTS[:3], forward=executor(model.fast_paths))
        with torch.no_grad():
            second = method.embed_batch(model, TEXTS[:3], forward=executor(model.fast_paths))
    assert graph_bank(model).captures > 0
    assert torch.equal(first, second)


def test_block_counts_are_right_with_graphs_forced(model) -> None:
    """Hooks fire at a capture and never at a replay, so the sweep's BlockCounter (a forward pre-hook) would
    count capture calls only. A block with a hook runs eagerly: the count is the one without graphs."""
    counts = {}
    for name, paths in (("graphs", GRAPHS), ("eager", EAGER)):
        with fast_paths_overridden(model, **paths), BlockCounter(model) as counter:
            minidecoder.embed(model, TEXTS, "prompteol", batch_size=3)
            minidecoder.embed(model, TEXTS, "prompteol", batch_size=3)  # the second time replays on a GPU
        counts[name] = counter.count
    assert counts["graphs"] == counts["eager"] > 0


def test_a_capture_that_raises_falls_back_with_one_warning(model, monkeypatch) -> None:
    with fast_paths_overridden(model, **EAGER):
        want = minidecoder.embed(model, TEXTS, "prompteol", batch_size=2)

    def broken(self, block, *args):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(GraphBank, "_capture", broken)
    with fast_paths_overridden(model, **GRAPHS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = minidecoder.embed(model, TEXTS, "prompteol", batch_size=2)  # three batches, many block calls
    assert torch.equal(got, want)
    said = [w for w in caught if "graph" in str(w.message)]
    assert len(said) == 1 and "eagerly" in str(said[0].message)


def test_replaced_parameters_drop_the_bank(model) -> None:
    """A graph reads the addresses it was captured with: a replaced parameter drops the bank, and the next
    call captures against the new one (on a GPU the old graph would read freed memory)."""
    bank = graph_bank(model)
    with fast_paths_overridden(model, **GRAPHS):
        minidecoder.embed(model, TEXTS[:3], "prompteol", batch_size=3)
        before = bank.captures
        assert before > 0
        block = model.layers[1]
        block.mlp.down_proj.weight = torch.nn.Parameter(block.mlp.down_proj.weight.detach() * 2)
        got = minidecoder.embed(model, TEXTS[:3], "prompteol", batch_size=3)
    assert bank.captures > before and bank.parameters[1] == tuple(p.data_ptr() for p in block.parameters())
    with fast_paths_overridden(model, **EAGER):
        assert torch.equal(got, minidecoder.embed(model, TEXTS[:3], "prompteol", batch_size=3))


@pytest.mark.real
def test_a_row_starting_with_a_quote_keeps_the_shared_prefix() -> None:
    """PromptEOL's template ends in ` "`; a sentence starting with a quote merges with it (` "'`), so that
    row shares one token less. It used to switch the prefix off for its whole batch (3 < MIN_PREFIX)."""
    model = minidecoder.load(progress=False)  # the default model: its BPE merges across the boundary
    texts = ["a man plays a flute.", '"Hello" he said.', "dogs run in the park.", "the cat sat."]
    batch = build_method("prompteol").passes(model, texts)[0].batch
    shared = prefix_cache.shared_prefix_length(batch.input_ids, batch.attention_mask)
    quoted = build_method("prompteol").passes(model, [t for t in texts if not t.startswith('"')])[0].batch
    assert shared == prefix_cache.shared_prefix_length(quoted.input_ids, quoted.attention_mask) - 1  # the merge
    assert prefix_cache.cacheable_prefix(model.config, batch.input_ids, batch.attention_mask) == shared > 0
    forward = build_method("prompteol").passes(model, texts)[0].start(model, FastForward)
    assert forward.prefix_length == shared
    with torch.inference_mode():
        cached = minidecoder.embed(model, texts, "prompteol")
        with fast_paths_overridden(model, prefix_cache=False):
            plain = minidecoder.embed(model, texts, "prompteol")
    assert_close(cached, plain, atol=1e-4, rtol=1e-4)


def test_a_chance_run_of_most_rows_is_not_forgiven(tiny_llama) -> None:
    """Only the one merged token is forgiven: rows that share 1 token, most of them 5, cache nothing."""
    model = minidecoder.load(tiny_llama, progress=False)
    ids = torch.tensor([[1, 9, 9, 9, 9, 9, 7], [1, 9, 9, 9, 9, 9, 8], [1, 5, 5, 5, 5, 5, 5]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    assert prefix_cache.shared_prefix_length(ids, mask) == 1
    assert prefix_cache.cacheable_prefix(model.config, ids, mask) == 0


def test_on_a_gpu_the_prefix_is_decided_by_tokens_saved() -> None:
    gpu = torch.device("cuda")
    assert prefix_cache.pays(gpu, 4, 257, None) and not prefix_cache.pays(gpu, 4, 256, None)
    assert prefix_cache.pays(gpu, 3, 400, None)  # a short run on many rows saves many tokens
    assert prefix_cache.pays("cpu", 3, 4, None) and not prefix_cache.pays(gpu, 3, 4, None)
    assert not prefix_cache.pays("cpu", 8, 40, False)


# ---- the GPU defaults planned over STS-B for a 7B shape (meta device: shapes, no values) ---------------
def _llama2_7b_meta(model, num_layers: int = 32):
    config = dataclasses.replace(model.config, hidden_size=4096, num_layers=num_layers, num_heads=32,
                                 num_kv_heads=32, head_dim=128, intermediate_size=11008,
                                 layer_types=("full_attention",) * num_layers)
    with torch.device("meta"):
        big = Decoder(config).to(torch.bfloat16)
    big.tokenizer = model.tokenizer
    return big


def _sts_b() -> list[str]:
    path = SHARED / "data" / "sts"
    if not (path / "STSBenchmark" / "sts-test.csv").is_file():
        pytest.skip(f"STS data not found at {path}")
    from minidecoder.evaluation.sts import load_task

    subset = load_task("STSBenchmark", path).subsets["test"]
    return subset.sentences1 + subset.sentences2


@pytest.mark.real
def test_gpu_defaults_planned_over_sts_b_for_a_7b_shape() -> None:
    """At the new defaults a GPU runs eager, unpadded batches of GPU_MAX_TOKENS: on STS-B test's lengths
    they compute <= 1.12x the real tokens (1.31x at the old 32,768) and pin no graph memory. With graphs
    on, small calls (8 texts a call) pin a bounded number of bytes, the same for 2 blocks as for 32 (the
    old bank pinned a buffer per block and shape: 32 times as much here, 36.5 GiB at its 32,768 budget)."""
    from minidecoder.running.embedding import forward_length, plan_batches
    from minidecoder.running.memory import GPU_MAX_TOKENS, token_budget

    small = minidecoder.load(progress=False)
    big = _llama2_7b_meta(small)
    texts = _sts_b()
    assert len(texts) == 2758
    method = build_method("prompteol")
    budget = token_budget(big, 80 * 2**30)  # an H100's free memory
    assert budget == GPU_MAX_TOKENS <= 8192
    lengths = [len(ids) for ids in small.tokenizer.encode_batch(texts, add_special_tokens=False)]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    length = forward_length(big, method)
    batches = plan_batches(order, lengths, None, budget, lambda n: length.per_row(n, False))
    computed = sum(len(b) * math.ceil(length(max(lengths[i] for i in b))) for b in batches)
    real = sum(length(n) for n in lengths)
    assert computed / real <= 1.12
    assert not FastPaths().for_device("cuda").graphs  # so nothing is pinned at the defaults

    pinned = {}
    for layers in (2, 32):
        model = _llama2_7b_meta(small, layers)
        model.fast_paths = FastPaths(graphs=True, prefix_cache=False)
        with torch.inference_mode():
            for first in range(0, len(order), 8 * 40):  # every 40th call of 8 texts, across all lengths
                method.embed_batch(model, [texts[i] for i in order[first:first + 8]], forward=executor(model.fast_paths))
        bank = graph_bank(model)
        assert bank.captures > 0
        pinned[layers] = bank.bytes
    assert pinned[2] == pinned[32] <= GRAPH_BANK_MAX_BYTES
    assert pinned[32] < 256 * 2**20  # MiB: the old bank's were GiB


# ---- on a GPU (skipped without one) ----------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_captured_graphs_on_a_gpu_hold_the_same_bytes_for_more_blocks(model) -> None:
    """The bank's static bytes on a GPU are those the CPU test counts; its graphs replay what eager computes."""
    held = {}
    for layers in (2, 8):
        deep = _deeper(model, layers).to("cuda")
        with fast_paths_overridden(deep, **EAGER):
            want = minidecoder.embed(deep, TEXTS, "prompteol", batch_size=3)
        with fast_paths_overridden(deep, **GRAPHS):
            got = minidecoder.embed(deep, TEXTS, "prompteol", batch_size=3)
            again = minidecoder.embed(deep, TEXTS, "prompteol", batch_size=3)  # replays only
        bank = graph_bank(deep)
        assert bank.capture and bank.captures == layers * len(bank.shapes) > 0
        assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert_close(again, want, atol=1e-5, rtol=1e-5)
        held[layers] = bank.bytes
    assert held[2] == held[8]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_a_model_on_the_second_gpu_captures_on_its_own_device(tiny_llama) -> None:
    """cuda:0 current, the model on cuda:1: captures and replays must run on cuda:1's streams."""
    model = minidecoder.load(tiny_llama, progress=False, device="cuda:1", graphs=True)
    with fast_paths_overridden(model, **EAGER):
        want = minidecoder.embed(model, TEXTS, "prompteol", batch_size=3)
    torch.cuda.set_device(0)
    got = minidecoder.embed(model, TEXTS, "prompteol", batch_size=3)
    again = minidecoder.embed(model, TEXTS, "prompteol", batch_size=3)
    assert graph_bank(model).captures > 0
    assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert_close(again, want, atol=1e-5, rtol=1e-5)
