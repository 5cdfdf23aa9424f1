"""Opt-in speed: the same `Block.forward`, compiled by torch.compile so its elementwise work is fused.

On a CPU the matrix products already run near the machine's peak (see docs/benchmarks.md); what is
left is the elementwise work around them (RMSNorm's six passes, RoPE, SiLU * up, the residual adds),
each a separate pass over memory. Inductor fuses those passes into a few loops; nothing else
changes, the code it compiles is `Block.forward` itself.

Only calls without `Sites` are compiled, and the executor beneath the method loop (fast.plan,
fast.forward) is what decides: a call that records or edits a site (CP, ReBA, the NaN tracer) runs the plain Python code,
so what a reader audits is what runs there. `Decoder.forward` (logits, generation) stays plain. The
compiled path is tested equal to the plain one (tests/fast/test_compiled.py). `dynamic=True`
compiles once for every batch size and length, instead of once per shape.

A call through the prefix cache (fast.prefix_cache: PromptEOL and the other prompt methods) runs the
plain code too (the plan decides): traced, the cache's bookkeeping (`KVCache.append(layer, ...)` indexes a
Python list by the block's layer) specializes the compiled block on every layer and cache state, so it
recompiles again and again for a gain within the noise (docs/benchmarks.md, "Compiled blocks"). Inductor caches what it compiles on disk for later
processes (`python tools/compile_cost.py` measures the first compile). A C++ compiler (CPU) or Triton (GPU)
must be installed.
"""
from __future__ import annotations

import functools

import torch

from minidecoder.core.model import Block, Context
from minidecoder.fast.hooks import with_block_hooks


@functools.cache
def _shared_compiled_forward():
    """One compiled function for every block (parameters are its inputs, so no per-layer copies)."""
    # Each kind of call (with or without a mask, a KV cache, a sliding window; each model family) is a
    # separate compiled variant of this one function. Past torch's default of 8 it would silently fall
    # back to the plain code, so allow more.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(Block.forward, dynamic=True)


def compiled_block_forward(block: Block, x: torch.Tensor, ctx: Context) -> torch.Tensor:
    """`block(x, ctx)` through the compiled `Block.forward` (same code, elementwise work fused), with the
    block's hooks run around it as `nn.Module.__call__` runs them (fast.hooks). The executor sends no call
    through a KV cache here (see the module docstring)."""
    return with_block_hooks(block, lambda x, ctx: _shared_compiled_forward()(block, x, ctx), x, ctx)
