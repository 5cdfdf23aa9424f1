"""The opt-in compiled blocks (minidecoder.fast.compiled) compute what the plain blocks compute.

Two families whose quirks touch every fused region: llama (plain RMSNorm, SiLU) and gemma3 (unit-offset
norms, q/k norms, sandwich norms, GELU, scaled embeddings, sliding window shorter than the input).
Float32 on the CPU: inductor reorders reductions, so equality is to a stated tolerance, not bitwise.
No timings here; the speed is measured by tools/bench.py (`md:prompteol+compile`).
"""
from __future__ import annotations

from dataclasses import dataclass


import pytest
import torch
from torch._dynamo.utils import counters
from torch.testing import assert_close

import minidecoder
from minidecoder.fast.forward import FastForward
from minidecoder.methods.loop import Step
from tiny_models import checkpoint, random_ids

ATOL = RTOL = 2e-5
TEXTS = ["a man is playing a flute", "ok", "The quick brown fox jumps over the lazy dog near the river bank."]


def plain_and_compiled(name: str):
    # A fresh compile cache: another test may have compiled the same graphs, and then `frames` (the count
    # of compiled frames this file checks to know compile ran) would not move.
    torch._dynamo.reset()
    from minidecoder.fast.compiled import _shared_compiled_forward
    _shared_compiled_forward.cache_clear()
    folder = checkpoint(name)[1]
    plain = minidecoder.load(folder, progress=False)
    compiled = minidecoder.load(folder, progress=False, compile=True)
    return plain, compiled


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_compiled_blocks_equal_plain_blocks(name: str) -> None:
    plain, compiled = plain_and_compiled(name)
    assert compiled.fast_paths.compiled and not plain.fast_paths.compiled
    frames_before = counters["frames"]["ok"]
    ids = random_ids(batch=2, length=12)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding: the mask path, not only the all-real one
    L = plain.num_layers
    with torch.inference_mode():
        want = FastForward(plain, ids, mask, keep=range(L + 1))
        got = FastForward(compiled, ids, mask, keep=range(L + 1))
        pairs = [(got.hidden(k), want.hidden(k)) for k in range(L + 1)]
    assert counters["frames"]["ok"] > frames_before, "torch.compile never ran: the test would compare plain to plain"
    if name == "gemma3":
        assert plain.config.sliding_window < ids.shape[1]  # the window really cuts
    real = mask.bool()
    for layer, (g, w) in enumerate(pairs):
        assert_close(g[real], w[real], atol=ATOL, rtol=RTOL, msg=lambda m: f"hidden_states[{layer}]: {m}")
    # the embedding route (buckets, prefix cache through KVCache, early exit) as a user calls it
    assert_close(minidecoder.embed(compiled, TEXTS, "prompteol"), minidecoder.embed(plain, TEXTS, "prompteol"),
                 atol=ATOL, rtol=RTOL)


def test_calls_with_sites_run_the_plain_code() -> None:
    """A block call that edits a site must run the Python that edits it; a compiled copy would not see it.
    The loop sends such calls (CP's steering) to the plain Block.forward."""
    _, compiled = plain_and_compiled("llama")
    ids = random_ids(batch=1, length=5)
    seen = []

    @dataclass(frozen=True, eq=False, kw_only=True)
    class ZeroHeads(Step):
        blocks: frozenset[int] = frozenset({0})

        def edits(self, i: int) -> dict:
            return {"z": lambda z: seen.append(z.shape) or torch.zeros_like(z)} if i in self.blocks else {}

    L = compiled.num_layers
    with torch.inference_mode():
        edited = FastForward(compiled, ids, None, ZeroHeads(), keep={L}).hidden(L)
        untouched = FastForward(compiled, ids, None, keep={L}).hidden(L)
    assert seen == [(1, 5, compiled.config.num_heads, compiled.config.head_dim)], "the edit function never ran"
    assert not torch.equal(edited, untouched), "the edit did not change the output"


def test_compiled_blocks_run_their_forward_hooks(monkeypatch) -> None:
    """Calling Block.forward directly skips nn.Module.__call__: a forward hook (a user's probe) must still see
    every compiled block call, and what it returns must replace the block's output, as on the plain path.
    The compiled function is stood in for by the plain forward (compiling costs 10-30 s here), counted, so
    the test knows the compiled route ran."""
    from minidecoder.core.model import Block
    from minidecoder.fast import compiled as compiled_module

    routed = []

    def counted_forward():
        def forward(block, x, ctx):
            routed.append(block.layer_idx)
            return Block.forward(block, x, ctx)
        return forward

    monkeypatch.setattr(compiled_module, "_shared_compiled_forward", counted_forward)
    folder = checkpoint("llama")[1]
    results = {}
    for compile in (False, True):
        model = minidecoder.load(folder, progress=False, compile=compile)
        seen = []
        model.layers[1].register_forward_hook(lambda module, args, out: seen.append(out.shape) or out * 0.5)
        with torch.inference_mode():
            results[compile] = minidecoder.embed(model, TEXTS, "mean", batch_size=3)
        assert len(seen) == 1, f"compile={compile}: the forward hook saw {len(seen)} of 1 block-1 calls"
    assert 1 in routed, "no call went through the compiled route"
    assert_close(results[True], results[False], atol=ATOL, rtol=RTOL)
