"""The fused block (minidecoder.fast.fused, the GPU default) computes what the plain block computes.

Every family variant of tests/tiny_models.py (sliding windows shorter than the input, soft-capping, q/k
norms, sandwich norms, biases, GQA/MQA, RoPE scaling), float32 on the CPU with the fused path forced on:
equal to the plain block to a stated tolerance (a fused reduction and a fused multiply-add round
differently in the last bits), hidden state by hidden state, with left padding and through the prefix
cache's KV cache. No timings here: tools/bench_gpu.py measures the speed.
"""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.fast.forward import FastForward
from minidecoder.fast.fused import fused_block_forward, merge_projections
from minidecoder.fast.options import fast_paths_overridden
from tiny_models import VARIANTS, checkpoint, random_ids

ATOL = RTOL = 1e-5
TEXTS = ["a man is playing a flute", "ok", "The quick brown fox jumps over the lazy dog near the river bank."]


def loaded(name: str, fused: bool):
    return minidecoder.load(checkpoint(name)[1], progress=False, fused=fused)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fused_blocks_equal_plain_blocks(name: str) -> None:
    plain, fused = loaded(name, False), loaded(name, True)
    assert fused.fast_paths.fused and all(hasattr(block, "merged") for block in fused.layers)
    assert not any(hasattr(block, "merged") for block in plain.layers)
    ids = random_ids(batch=2, length=12 if name == "llama_rope_dynamic" else 20)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    L = plain.num_layers
    calls = []
    for block in fused.layers:  # the fused path really runs (it calls the block's pre-hooks itself)
        block.register_forward_pre_hook(lambda module, args: calls.append(module.layer_idx))
    with torch.inference_mode():
        want = FastForward(plain, ids, mask, keep=range(L + 1))
        got = FastForward(fused, ids, mask, keep=range(L + 1))
        assert got.plan.fused and not want.plan.fused
        pairs = [(got.hidden(k), want.hidden(k)) for k in range(L + 1)]
    assert calls == list(range(L))
    real = mask.bool()
    for layer, (g, w) in enumerate(pairs):
        assert_close(g[real], w[real], atol=ATOL, rtol=RTOL, msg=lambda m: f"hidden_states[{layer}]: {m}")


@pytest.mark.parametrize("name", ["llama", "qwen2_window", "gemma3"])
def test_fused_embeddings_equal_plain_through_the_prefix_cache(name: str) -> None:
    """PromptEOL's template runs once through a KV cache (the fused block appends to it) and TP's copies edit
    states between fused blocks."""
    plain, fused = loaded(name, False), loaded(name, True)
    for method, options in (("prompteol", {}), ("tp", dict(start=1, end=3)), ("mean", {})):
        with fast_paths_overridden(plain, prefix_cache=True), fast_paths_overridden(fused, prefix_cache=True):
            assert_close(minidecoder.embed(fused, TEXTS, method, **options),
                         minidecoder.embed(plain, TEXTS, method, **options),
                         atol=ATOL, rtol=RTOL, msg=lambda m: f"{method}: {m}")


def test_each_fused_piece_matters() -> None:
    """The test above can fail: a fused block with RoPE left out (cos 1, sin 0) differs from the plain one."""
    fused = loaded("llama", True)
    ids = random_ids(batch=1, length=10)
    with torch.inference_mode():
        ctx = fused.context(None, ids.shape[1], 1)
        h = fused.embed(ids)
        want = fused.layers[0](h, ctx)
        assert_close(fused_block_forward(fused.layers[0], h, ctx), want, atol=ATOL, rtol=RTOL)
        broken = fused.context(None, ids.shape[1], 1)
        broken.cos_sin = {kind: (torch.ones_like(c), torch.zeros_like(s)) for kind, (c, s) in ctx.cos_sin.items()}
        assert not torch.allclose(fused_block_forward(fused.layers[0], h, broken), want, atol=1e-3)


def test_merged_weights_are_views_and_a_replaced_weight_runs_plain() -> None:
    """The merge holds no second copy of a weight; a Parameter replaced after it sends the block to the plain
    code (a stale merge must never change a number)."""
    model = loaded("llama", True)
    block = model.layers[0]
    attn = block.self_attn
    assert attn.q_proj.weight.data_ptr() == block.merged.qkv_weight.data_ptr()
    assert attn.k_proj.weight.untyped_storage().data_ptr() == block.merged.qkv_weight.untyped_storage().data_ptr()
    names = [name for name, _ in model.named_parameters()]
    assert "model.layers.0.self_attn.q_proj.weight" in names  # Hugging Face's names unchanged
    ids = random_ids(batch=1, length=8)
    with torch.inference_mode():
        ctx = model.context(None, ids.shape[1], 1)
        h = model.embed(ids)
        attn.q_proj.weight.mul_(2.0)  # an in-place edit: seen through the view by both paths
        assert_close(fused_block_forward(block, h, ctx), block(h, ctx), atol=ATOL, rtol=RTOL)
        attn.q_proj.weight = torch.nn.Parameter(attn.q_proj.weight.detach().clone() * 0.5, requires_grad=False)
        assert not block.merged.current(block)
        assert torch.equal(fused_block_forward(block, h, ctx), block(h, ctx))  # the plain code ran
    merge_projections(model)  # merging again picks the new weight up
    assert block.merged.current(block)


def test_fused_is_off_on_a_cpu_by_default() -> None:
    model = minidecoder.load(checkpoint("llama")[1], progress=False)
    assert model.fast_paths.fused is None and not hasattr(model.layers[0], "merged")
    with torch.inference_mode():
        assert not FastForward(model, random_ids(batch=1, length=6), None).plan.fused


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none; run on a lent GPU)")
@pytest.mark.parametrize("name", ["llama", "mistral_window", "gemma2", "gemma3"])
def test_fused_is_the_cuda_default_and_equals_the_plain_blocks_on_cuda(name: str) -> None:
    folder = checkpoint(name)[1]
    fused = minidecoder.load(folder, progress=False, device="cuda")
    plain = minidecoder.load(folder, progress=False, device="cuda", fused=False)
    assert all(hasattr(block, "merged") for block in fused.layers)
    for method, options in (("prompteol", {}), ("mean", {}), ("tp", dict(start=1, end=3))):
        got = minidecoder.embed(fused, TEXTS, method, **options)
        want = minidecoder.embed(plain, TEXTS, method, **options)
        assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m: f"{method}: {m}")


def test_a_forward_hook_sees_and_replaces_the_fused_output() -> None:
    model = loaded("llama", True)
    seen = []

    def probe(module, args, out):
        seen.append(module.layer_idx)
        return out * 0 if module.layer_idx == 0 else None

    model.layers[0].register_forward_hook(probe)
    model.layers[1].register_forward_hook(probe)
    ids = random_ids(batch=1, length=6)
    with torch.inference_mode():
        forward = FastForward(model, ids, None, keep={1, 2})
        assert forward.plan.fused
        after_block_0 = forward.hidden(1)
        forward.hidden(2)
    assert seen == [0, 1] and torch.count_nonzero(after_block_0) == 0
