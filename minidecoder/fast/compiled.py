"""Opt-in speed: the same `Block.forward`, compiled by torch.compile so its elementwise work is fused.

On a CPU the matrix products already run near the machine's peak (see docs/benchmarks.md); what is
left is the elementwise work around them (RMSNorm's six passes, RoPE, SiLU * up, the residual adds),
each a separate pass over memory. Inductor fuses those passes into a few loops; nothing else
changes, the code it compiles is `Block.forward` itself.

Only calls without `Sites` are compiled: a call that records or edits a site (CP, ReBA, the NaN
tracer) runs the plain Python code, so what a reader audits is what runs there. The compiled path is
tested equal to the plain one (tests/test_compiled.py). `dynamic=True` compiles once for every batch
size and length, instead of once per shape.

Costs: the first call compiles (tens of seconds on a 2-core CPU; inductor caches the result on disk
for later processes), and a C++ compiler (CPU) or Triton (GPU) must be installed.
"""
from __future__ import annotations

import types

import torch

from minidecoder.core.model import Block, Context, Decoder, Sites

_compiled_block_forward = None


def _shared_compiled_forward():
    """One compiled function for every block (parameters are its inputs, so no per-layer copies)."""
    global _compiled_block_forward
    if _compiled_block_forward is None:
        # Each kind of call (with or without a mask, a KV cache, a sliding window; each model family)
        # is a separate compiled variant of this one function. Past torch's default of 8 it would
        # silently fall back to the plain code, so allow more.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        _compiled_block_forward = torch.compile(Block.forward, dynamic=True)
    return _compiled_block_forward


def _forward_choosing_path(block: Block, x: torch.Tensor, ctx: Context, sites: Sites | None = None) -> torch.Tensor:
    if sites is not None:
        return Block.forward(block, x, ctx, sites)
    return _shared_compiled_forward()(block, x, ctx)


def compile_blocks(model: Decoder) -> Decoder:
    """Route every block's site-free calls through the compiled forward; returns the model."""
    for block in model.layers:
        block.forward = types.MethodType(_forward_choosing_path, block)
    model.compiled = True
    return model
