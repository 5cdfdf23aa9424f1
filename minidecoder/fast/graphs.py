"""Launch overhead gone on a GPU: each site-free block call replayed from a captured CUDA graph, on batches
padded to a bounded set of shapes.

On a GPU a block is about fifteen kernels, each launched by the host; at sentence lengths the host
launches them more slowly than the GPU runs them, and the GPU waits. A CUDA graph records a block's
kernels once and replays them with one launch. A graph is fixed to its tensors' shapes and addresses,
so:

    buckets    a batch is padded to a bucket shape (`bucket`: at most a quarter more rows, columns to a
               multiple of 16, then of 64), every padded row and column masked, so real rows compute what they would unpadded (up to rounding: the shapes differ).
               A bounded number of shapes means a bounded number of captures.
    capture    per (block, shape, mask kinds): a static input buffer; the forward's masks and RoPE tables
               in static buffers shared by its blocks; two warm-up calls on a side stream, then the capture.
               Every graph draws from one memory pool: they never run at once, and each output is copied
               out before the next replay.
    replay     copy h into the static input, replay, copy the static output out (a copy, so no kept
               hidden state ever aliases a buffer that the next replay overwrites).

`Block.forward` is what is captured: the same code a reader audits. The loop (minidecoder.methods.loop)
pads the batch (`Forward`, when `FastPaths.buckets` is on) and sends site-free block calls here (when
`FastPaths.graphs` is on); calls that record or edit a site, fold patterns or read a KV cache run
plain. On a CPU there are no CUDA graphs: `GraphBank(capture=False)` keeps the static buffers and calls
the block on them instead of replaying, which is how the CPU tests check everything around the capture
(tests/fast/test_graphs.py); the capture itself runs only on a GPU.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from minidecoder.core.model import Block, Context


def bucket(rows: int, columns: int) -> tuple[int, int]:
    """The padded shape of a (rows, columns) batch: rows exact up to 8, then in steps of a quarter of the
    power of two below (9..16 by 2, 17..32 by 4, ...: at most a quarter more rows, four shapes an octave);
    columns a multiple of 16 up to 256, then of 64."""
    power = 2 ** math.floor(math.log2(max(rows, 1)))
    step = max(power // 4, 1)
    columns_step = 16 if columns <= 256 else 64
    return -(-rows // step) * step, -(-columns // columns_step) * columns_step


@dataclass
class _Captured:
    graph: object  # torch.cuda.CUDAGraph, or None when nothing is captured (CPU)
    h: torch.Tensor  # the static input
    out: torch.Tensor  # the static output (the graph writes it on every replay)


class GraphBank:
    """The captured block calls of one model, by (block, input shape, dtype, mask kinds)."""

    def __init__(self, capture: bool, key: tuple = ()) -> None:
        self.capture = capture
        self.key = key  # (device, dtype) of the model the graphs were captured on
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.graphs: dict[tuple, _Captured] = {}
        self.contexts: dict[tuple, Context] = {}  # static masks and RoPE tables, per shape
        self.filled_from: dict[tuple, Context] = {}  # which forward's context each static one holds (held, so
        #                                             that no later context can take its id)
        self.captures = 0

    def forward(self, block: Block, h: torch.Tensor, ctx: Context) -> torch.Tensor:
        """`block(h, ctx)` (site-free), replayed from its captured graph."""
        shape = (tuple(h.shape), h.dtype, tuple(sorted((kind, mask is None) for kind, mask in ctx.masks.items())),
                 ctx.explicit_attention)
        static_ctx = self._context(shape, ctx)
        key = (block.layer_idx, shape)
        captured = self.graphs.get(key)
        if captured is None:
            captured = self.graphs[key] = self._capture(block, h, static_ctx)
        captured.h.copy_(h)
        if captured.graph is not None:
            captured.graph.replay()
            return captured.out.clone()
        return block(captured.h, static_ctx).clone()  # CPU: the same call on the same buffers, no replay

    def _context(self, shape: tuple, ctx: Context) -> Context:
        """The static context of this shape, holding `ctx`'s masks and RoPE tables (copied once a forward)."""
        static = self.contexts.get(shape)
        if static is None:
            static = self.contexts[shape] = Context(
                cos_sin={kind: (cos.clone(), sin.clone()) for kind, (cos, sin) in ctx.cos_sin.items()},
                masks={kind: None if mask is None else mask.clone() for kind, mask in ctx.masks.items()},
                explicit_attention=ctx.explicit_attention)
        elif self.filled_from.get(shape) is not ctx:
            for kind, (cos, sin) in ctx.cos_sin.items():
                static.cos_sin[kind][0].copy_(cos)
                static.cos_sin[kind][1].copy_(sin)
            for kind, mask in ctx.masks.items():
                if mask is not None:
                    static.masks[kind].copy_(mask)
        self.filled_from[shape] = ctx
        return static

    def _capture(self, block: Block, h: torch.Tensor, ctx: Context) -> _Captured:
        static_h = h.clone()
        if not self.capture:
            return _Captured(None, static_h, static_h)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: library workspaces and kernel choices, outside the graph
            for _ in range(2):
                block(static_h, ctx)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = block(static_h, ctx)
        self.captures += 1
        return _Captured(graph, static_h, out)


_BANKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its GraphBank


def graph_bank(model) -> GraphBank:
    """The model's bank of captured calls (made on first use; the CPU's keeps buffers and captures nothing).
    A model moved to another device or dtype gets a new bank (the captured addresses are the old ones')."""
    key = (model.device, model.dtype)
    bank = _BANKS.get(model)
    if bank is None or bank.key != key:
        bank = _BANKS[model] = GraphBank(capture=model.device.type == "cuda", key=key)
    return bank
