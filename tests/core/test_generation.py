"""Greedy decoding with the KV cache equals transformers' greedy generate and a cache-free loop."""
from __future__ import annotations

import pytest
import torch

import minidecoder
from tiny_models import checkpoint
from tiny_models import random_ids


def _without_cache(model, ids: torch.Tensor, steps: int) -> list[int]:
    ids = ids.clone()
    new = []
    for _ in range(steps):
        next_id = int(model(ids).logits[0, -1].argmax())
        new.append(next_id)
        ids = torch.cat([ids, torch.tensor([[next_id]])], dim=1)
    return new


@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3"])
def test_greedy_with_cache_equals_transformers_generate(name: str) -> None:
    hf, folder = checkpoint(name)
    model = minidecoder.load(folder)
    prompt = random_ids(1, 6, seed=3)  # 6 + 20 new tokens: past every sliding window (5)
    with torch.no_grad():
        ours = minidecoder.generate(model, prompt[0].tolist(), max_new_tokens=20, stop_at_eos=False)
        reference = hf.generate(prompt, max_new_tokens=20, do_sample=False, min_new_tokens=20,
                                pad_token_id=0)[0, prompt.shape[1]:].tolist()
        assert ours == _without_cache(model, prompt, 20)
    assert ours == reference


def test_cached_step_logits_equal_full_forward() -> None:
    _, folder = checkpoint("gemma2")
    model = minidecoder.load(folder)
    ids = random_ids(1, 12)
    cache = minidecoder.KVCache.empty(model.num_layers)
    with torch.no_grad():
        model(ids[:, :8], cache=cache)
        stepped = model(ids[:, 8:], cache=cache).logits
        full = model(ids).logits[:, 8:]
    torch.testing.assert_close(stepped, full, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3"])
def test_static_cache_decoding_equals_the_dynamic_cache(name: str) -> None:
    """The static cache and its one-token step (what a GPU captures and replays): the same tokens as the
    dynamic cache, past every sliding window, and the same logits to float tolerance."""
    from minidecoder.fast.static_cache import DecodeStep, StaticKVCache

    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    plain = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=False)
    static = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=True)
    assert static == plain
    with torch.inference_mode():
        cache = minidecoder.KVCache.empty(model.num_layers)
        model(torch.tensor([prompt]), cache=cache)
        step = DecodeStep(model, StaticKVCache.from_prefill(cache, len(prompt) + 3))
        got = step(plain[0], len(prompt))
        want = model(torch.tensor([prompt + plain[:1]])).logits[:, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_captured_decode_step_on_a_gpu_equals_the_dynamic_cache() -> None:
    model = minidecoder.load(checkpoint("gemma3")[1], device="cuda")
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    assert (minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=True)
            == minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=False))
