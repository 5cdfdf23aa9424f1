"""The opt-in compiled blocks (minidecoder.fast.compiled) compute what the plain blocks compute.

Two families whose quirks touch every fused region: llama (plain RMSNorm, SiLU) and gemma3 (unit-offset
norms, q/k norms, sandwich norms, GELU, scaled embeddings, sliding window shorter than the input).
Float32 on the CPU: inductor reorders reductions, so equality is to a stated tolerance, not bitwise.
No timings here; the speed is measured by tools/bench.py (`md:prompteol+compile`).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters
from torch.testing import assert_close

import minidecoder
from minidecoder.core.model import Sites
from tiny_models import random_ids, tiny_checkpoint

ATOL = RTOL = 2e-5
TEXTS = ["a man is playing a flute", "ok", "The quick brown fox jumps over the lazy dog near the river bank."]


def plain_and_compiled(name: str):
    folder = Path(tempfile.mkdtemp(prefix=f"compiled-{name}-"))
    tiny_checkpoint(name, folder)
    plain = minidecoder.load(folder, progress=False)
    compiled = minidecoder.load(folder, progress=False, compile=True)
    return plain, compiled


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_compiled_blocks_equal_plain_blocks(name: str) -> None:
    plain, compiled = plain_and_compiled(name)
    assert compiled.compiled and not plain.compiled
    frames_before = counters["frames"]["ok"]
    ids = random_ids(batch=2, length=12)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding: the mask path, not only the all-real one
    with torch.inference_mode():
        want = plain(ids, attention_mask=mask, output_hidden_states=True)
        got = compiled(ids, attention_mask=mask, output_hidden_states=True)
    assert counters["frames"]["ok"] > frames_before, "torch.compile never ran: the test would compare plain to plain"
    if name == "gemma3":
        assert plain.config.sliding_window < ids.shape[1]  # the window really cuts
    for layer, (g, w) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(g, w, atol=ATOL, rtol=RTOL, msg=lambda m: f"hidden_states[{layer}]: {m}")
    assert_close(got.logits, want.logits, atol=ATOL, rtol=RTOL)
    # the embedding route (buckets, prefix cache through KVCache, early exit) as a user calls it
    assert_close(minidecoder.embed(compiled, TEXTS, "prompteol"), minidecoder.embed(plain, TEXTS, "prompteol"),
                 atol=ATOL, rtol=RTOL)


def test_calls_with_sites_run_the_plain_code() -> None:
    """A call that edits a site must run the Python that edits it; a compiled copy would not see it."""
    _, compiled = plain_and_compiled("llama")
    block = compiled.layers[0]
    x = torch.randn(1, 5, compiled.config.hidden_size)
    ctx = compiled.context(None, 5, 1)
    seen = []
    sites = Sites(record={"z"}, edit={"z": lambda z: seen.append(z.shape) or torch.zeros_like(z)})
    out = block(x, ctx, sites)
    assert seen, "the edit function never ran"
    assert "z" in sites.store and torch.count_nonzero(sites.store["z"]) == 0
    assert not torch.equal(out, block(x, ctx)), "the edit did not change the block's output"
