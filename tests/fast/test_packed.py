"""Packed linear weights (minidecoder.fast.packed) compute what the plain weights compute.

The packed path calls oneDNN's linear kernel on a copy of each weight reordered once at load time.
Checked: equality with the plain model (float32 and bfloat16, two families, with and without compile),
that the packed copy is really what runs, that a weight changed after packing falls back to the plain
product instead of using a stale copy, and the errors. No timings here: tools/bench.py
(`md:prompteol+pack`) measures the speed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import MinidecoderError
from minidecoder.fast.packed import pack_linear_weights
from minidecoder.fast.forward import FastForward
from minidecoder.methods.loop import Forward
import tiny_models
from tiny_models import random_ids

TEXTS = ["a man is playing a flute", "ok", "The quick brown fox jumps over the lazy dog near the river bank."]
# float32: MKL (plain F.linear) and oneDNN (packed) sum in different orders; bfloat16: both are oneDNN.
TOLERANCE = {"float32": 2e-5, "bfloat16": 1e-2}

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


def forward(model, ids: torch.Tensor, mask: torch.Tensor):
    with torch.inference_mode():
        return model(ids, attention_mask=mask, output_hidden_states=True)


BF16_PACKING = torch.ops.mkldnn._is_mkldnn_bf16_supported()  # oneDNN's bf16 layout needs AVX-512 or AVX-NE-CONVERT
needs_bf16_cpu = pytest.mark.skipif(not BF16_PACKING, reason="this CPU has no oneDNN bfloat16 weight layout "
                                                             "(test_bf16_packing_refused_clearly covers it)")


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=needs_bf16_cpu)])
@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_packed_weights_equal_plain_weights(name: str, dtype: str) -> None:
    folder = tiny_models.checkpoint(name)[1]
    plain = minidecoder.load(folder, dtype=dtype, progress=False)
    packed = minidecoder.load(folder, dtype=dtype, progress=False, pack_weights=True)
    assert packed.fast_paths.packed and not plain.fast_paths.packed
    ids = random_ids(batch=2, length=12)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    want, got = forward(plain, ids, mask), forward(packed, ids, mask)
    tol = TOLERANCE[dtype]
    for layer, (g, w) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(g, w, atol=tol, rtol=tol, msg=lambda m: f"hidden_states[{layer}]: {m}")
    assert_close(got.logits, want.logits, atol=tol, rtol=tol)
    for method, options in (("prompteol", {}), ("cp", {"steer_layer": 1})):  # cp edits a site (`z`)
        assert_close(minidecoder.embed(packed, TEXTS, method, **options),
                     minidecoder.embed(plain, TEXTS, method, **options),
                     atol=tol, rtol=tol, msg=lambda m: f"{method}: {m}")


def test_the_packed_copy_is_what_runs(tiny_llama: Path) -> None:
    """Swap one layer's packed copy for a packed zero matrix: if the output does not change, the packed
    path was never taken and the equality test above compared plain to plain."""
    model = minidecoder.load(tiny_llama, progress=False, pack_weights=True)
    layer = model.layers[0].mlp.down_proj
    x = torch.randn(3, layer.in_features)
    with torch.inference_mode():
        before = layer(x)
        _, data_ptr, version = layer.weight.onednn_packed
        zeros = torch.ops.mkldnn._reorder_linear_weight(torch.zeros_like(layer.weight), None)
        layer.weight.onednn_packed = (zeros, data_ptr, version)
        after = layer(x)
    assert torch.count_nonzero(before) > 0
    assert torch.count_nonzero(after) == 0


def test_a_weight_changed_after_packing_runs_the_plain_product(tiny_llama: Path) -> None:
    model = minidecoder.load(tiny_llama, progress=False, pack_weights=True)
    layer = model.layers[1].self_attn.q_proj
    x = torch.randn(2, 4, layer.in_features)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # in place: same storage, new version counter
        assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    model.to(torch.bfloat16)  # a cast replaces each weight's data: the copies no longer match
    ids = random_ids(batch=1, length=6)
    reference = minidecoder.load(tiny_llama, dtype="bfloat16", progress=False)
    with torch.no_grad():
        reference.layers[1].self_attn.q_proj.weight.mul_(2.0)
        assert_close(model(ids).logits, reference(ids).logits, atol=0, rtol=0)


def test_packed_weights_combine_with_compile(tiny_llama: Path) -> None:
    plain = minidecoder.load(tiny_llama, progress=False)
    both = minidecoder.load(tiny_llama, progress=False, compile=True, pack_weights=True)
    frames_before = counters["frames"]["ok"]
    ids = random_ids(batch=2, length=12)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    L = plain.num_layers
    with torch.inference_mode():  # compile applies in the method loop (Decoder.forward stays plain)
        want, got = Forward(plain, ids, mask, keep=range(L + 1)), FastForward(both, ids, mask, keep=range(L + 1))
        pairs = [(got.hidden(k), want.hidden(k)) for k in range(L + 1)]
    assert counters["frames"]["ok"] > frames_before, "torch.compile never ran"
    real = mask.bool()
    for g, w in pairs:
        assert_close(g[real], w[real], atol=2e-5, rtol=2e-5)


def test_packing_errors_name_the_problem(tiny_llama: Path) -> None:
    with pytest.raises(MinidecoderError, match="float32 and bfloat16"):
        minidecoder.load(tiny_llama, dtype="float16", progress=False, pack_weights=True)
    model = minidecoder.load(tiny_llama, progress=False)
    model.to("meta")  # any non-CPU device: the check reads model.device
    with pytest.raises(MinidecoderError, match="CPU fast path"):
        pack_linear_weights(model)


@pytest.mark.skipif(BF16_PACKING, reason="this CPU packs bfloat16 (test_packed_weights_equal_plain_weights covers it)")
def test_bf16_packing_refused_clearly(tiny_llama: Path) -> None:
    with pytest.raises(MinidecoderError, match="AVX-512"):
        minidecoder.load(tiny_llama, dtype="bfloat16", progress=False, pack_weights=True)
