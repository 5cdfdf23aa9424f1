"""Launch overhead gone for small block calls on a GPU: each small site-free block call replayed from a
captured CUDA graph, on batches padded to a bounded set of shapes. Opt-in (`load(graphs=True)`, `--graphs`).

On a GPU a block is about fifteen kernels, each launched by the host; for a small call the host launches
them more slowly than the GPU runs them, and the GPU waits. A CUDA graph records a block's kernels once and
replays them with one launch. A graph is fixed to its tensors' shapes and addresses, so:

    buckets    a batch is padded to a bucket shape (`bucket`: at most a quarter more rows, columns to a
               multiple of 16, then of 64), every padded row and column masked, so real rows compute what
               they would unpadded (up to rounding: the shapes differ). A bounded set of shapes.
    small      only block calls of at most GRAPH_MAX_TOKENS (rows x columns) get a graph; larger ones run
               eagerly, because their GPU work already hides the host's launches (below).
    buffers    per shape ONE static input, ONE static output and one static context (masks, RoPE tables),
               shared by every block: each block's graph reads the input and copies its result into the
               output inside the capture. The graphs draw their scratch memory from one pool and run one at
               a time, in block order, so the bank's memory does not grow with the number of blocks.
    cap        the static buffers of all shapes stay under GRAPH_BANK_MAX_BYTES: the least recently used
               shape (its buffers and graphs) is dropped first.
    capture    per (shape, block): two warm-up calls on the bank's own stream, then the capture, all under
               `torch.cuda.device(the model's device)` (a model on cuda:1 while cuda:0 is current captures on
               cuda:1's stream). A capture that raises turns the bank off with one warning; every call then
               runs eagerly, with the same results.
    replay     copy h into the static input, replay, copy the static output out (a copy: no kept hidden
               state may alias a buffer the next replay overwrites).
    callers    the buffers are the bank's, not a caller's: one caller at a time holds them (a lock around
               filling the context, capture, copy-in, replay and copy-out), and on a GPU a caller on another
               stream first waits for the last caller's stream, so two threads calling one model never read
               each other's inputs. Every capture and replay runs on the model's device, whichever is current.

Where a replay would be wrong, the block runs eagerly instead: a module hook on the block (hooks are Python:
they fire at capture, never at replay, so `evaluation.sweep.BlockCounter` would count nothing), autograd
on. A block whose parameters were replaced (their addresses moved) drops the bank: a graph reads the
addresses it was captured with. The static buffers are made outside `inference_mode`, so a later call of
the same shape under plain `no_grad` can still write them.

Why GRAPH_MAX_TOKENS = 512: one Llama-2-7B block over 64 x 48 = 3,072 tokens is about 1.7 ms of GPU work
(2 x 202 M parameters x 3,072 tokens at ~700 TFLOP/s, about 0.55 us a token), against 0.15-0.3 ms of host
time to launch its kernels. A graph saves at most that host time, so it pays only where the GPU work is
shorter: below 0.15-0.3 ms / 0.55 us, about 270-550 tokens (300-900 on slower or smaller models). The
token-budget batches the embedding loop makes on a GPU (8,192 tokens, `running.memory.GPU_MAX_TOKENS`) are
far above it: graphs are for many small calls (a few texts a call), never the bulk path.

`Block.forward` is what is captured: the same code a reader audits. The loop (minidecoder.methods.loop)
pads the batch when `FastPaths.buckets` is on and sends site-free block calls here when `FastPaths.graphs`
is on. On a CPU there are no CUDA graphs: `GraphBank(capture=False)` allocates the same buffers and calls
`Block.forward` on them where a GPU would replay (no hooks, as at a replay), which is how the CPU tests
check everything around the capture (tests/fast/test_graphs.py); the capture itself runs only on a GPU.
"""
from __future__ import annotations

import math
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from minidecoder.core.model import Block, Context

GRAPH_MAX_TOKENS = 512  # rows x columns of the largest block call that gets a graph (the docstring's reasoning)
GRAPH_BANK_MAX_BYTES = 1 << 30  # static buffers of all shapes together; beyond it the least recent shape goes


def bucket(rows: int, columns: int) -> tuple[int, int]:
    """The padded shape of a (rows, columns) batch: rows exact up to 8, then in steps of a quarter of the
    power of two below (9..16 by 2, 17..32 by 4, ...: at most a quarter more rows, four shapes an octave);
    columns a multiple of 16 up to 256, then of 64."""
    power = 2 ** math.floor(math.log2(max(rows, 1)))
    step = max(power // 4, 1)
    columns_step = 16 if columns <= 256 else 64
    return -(-rows // step) * step, -(-columns // columns_step) * columns_step


class _BufferCall:
    """What a CPU bank does where a GPU replays: the block's own forward on the static buffers, without its
    hooks (a replay runs none either)."""

    def __init__(self, block: Block, shape: "_Shape") -> None:
        self.block, self.shape = block, shape

    def run(self) -> None:
        self.shape.out.copy_(self.block.forward(self.shape.h, self.shape.ctx))


@dataclass
class _Shape:
    """The static buffers of one input shape, shared by every block's graph."""

    h: torch.Tensor  # (B, T, E) the static input
    out: torch.Tensor  # (B, T, E) the static output: each graph copies its block's result here
    ctx: Context  # static masks and RoPE tables
    filled_from: "weakref.ref | None" = None  # the forward's context `ctx` holds (a weak reference: a dead one
    #                                             never matches, so a later context at its address is copied)
    graphs: dict[int, object] = field(default_factory=dict)  # block index -> CUDAGraph (a _BufferCall on a CPU)

    @property
    def bytes(self) -> int:
        tensors = [self.h, self.out, *(t for pair in self.ctx.cos_sin.values() for t in pair),
                   *(m for m in self.ctx.masks.values() if m is not None)]
        return sum(t.numel() * t.element_size() for t in tensors)


def _normal_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy that is not an inference tensor, so a later call under plain `no_grad` may write into it."""
    with torch.inference_mode(False):
        return tensor.clone()


def _parameter_addresses(block: Block) -> tuple[int, ...]:
    return tuple(p.data_ptr() for p in block.parameters())


def _has_hooks(block: Block) -> bool:
    """Whether a forward hook would fire for `block` or any of its modules (they cannot be replayed)."""
    from torch.nn.modules import module as nn_module

    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in block.modules())


class GraphBank:
    """The captured small block calls of one model, by input shape (buffers shared by the blocks) and block."""

    def __init__(self, capture: bool, key: tuple = (), max_bytes: int = GRAPH_BANK_MAX_BYTES) -> None:
        self.capture = capture
        self.key = key  # (device, dtype) of the model the graphs were captured on
        self.max_bytes = max_bytes
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.shapes: OrderedDict[tuple, _Shape] = OrderedDict()  # least recently used first
        self.parameters: dict[int, tuple[int, ...]] = {}  # block index -> its parameters' addresses at capture
        self.captures = 0  # graphs made (on a CPU: buffer calls set up), recaptures included
        self.failed: str | None = None  # why captures stopped (then every call runs eagerly)
        self.lock = threading.Lock()  # held by one caller from filling the buffers to copying the output out
        self.last_stream = None  # the stream the last caller's work on the buffers was queued on (a GPU's)

    @property
    def bytes(self) -> int:
        """Bytes held in static buffers (on a GPU the graphs' shared scratch pool comes on top: about one
        block call's transient memory at the largest shape, GRAPH_MAX_TOKENS tokens at most)."""
        return sum(shape.bytes for shape in self.shapes.values())

    def clear(self) -> None:
        """Drop every graph and buffer (the next call captures afresh)."""
        self.shapes.clear()
        self.parameters.clear()

    def forward(self, block: Block, h: torch.Tensor, ctx: Context) -> torch.Tensor:
        """`block(h, ctx)` (site-free): replayed from its captured graph where that is right and pays, else
        run eagerly; the results are the same."""
        if (self.failed is not None or h.shape[0] * h.shape[1] > GRAPH_MAX_TOKENS or torch.is_grad_enabled()
                or _has_hooks(block)):
            return block(h, ctx)
        with self.lock:  # the static buffers are shared by every caller: one at a time
            self._after_the_last_caller(h.device)
            return self._forward_locked(block, h, ctx)

    def _forward_locked(self, block: Block, h: torch.Tensor, ctx: Context) -> torch.Tensor:
        addresses = _parameter_addresses(block)
        if self.parameters.get(block.layer_idx, addresses) != addresses:
            self.clear()  # a parameter was replaced: the graphs read the old addresses
        shape = self._shape(h, ctx)
        if shape is None:  # this shape alone is over the cap
            return block(h, ctx)
        graph = shape.graphs.get(block.layer_idx)
        if graph is None:
            try:
                graph = self._capture(block, shape)
            except Exception as error:  # noqa: BLE001 - any failure of the capture machinery: run eagerly
                self.failed = f"{type(error).__name__}: {error}"
                self.clear()
                warnings.warn(f"capturing a CUDA graph of block {block.layer_idx} failed ({self.failed}); graphs are "
                              "off for this model from here on and every block call runs eagerly (same results)",
                              RuntimeWarning, stacklevel=3)
                return block(h, ctx)
            shape.graphs[block.layer_idx] = graph
            self.parameters[block.layer_idx] = addresses
            self.captures += 1
        if not self.capture:  # a CPU's buffer call
            shape.h.copy_(h)
            graph.run()
            return shape.out.clone()
        with torch.cuda.device(h.device):  # replay on the current stream of the model's device
            shape.h.copy_(h)
            graph.replay()
            return shape.out.clone()

    def _after_the_last_caller(self, device: torch.device) -> None:
        """On a GPU, queue this caller's work on the buffers after the last caller's: the lock orders the
        host's calls, but a caller on another stream would otherwise overwrite the static input before the
        last caller's replay has read it."""
        if not self.capture:
            return
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device)
            if self.last_stream is not None and self.last_stream != stream:
                stream.wait_stream(self.last_stream)
            self.last_stream = stream

    def _shape(self, h: torch.Tensor, ctx: Context) -> _Shape | None:
        """The static buffers of `h`'s shape holding `ctx`'s masks and RoPE tables (copied once a forward);
        made (evicting the least recently used shapes past the cap) on first use."""
        key = (tuple(h.shape), h.dtype, tuple(sorted((kind, mask is None) for kind, mask in ctx.masks.items())),
               ctx.explicit_attention)
        shape = self.shapes.get(key)
        if shape is None:
            tables = {kind: (_normal_copy(cos), _normal_copy(sin)) for kind, (cos, sin) in ctx.cos_sin.items()}
            masks = {kind: None if mask is None else _normal_copy(mask) for kind, mask in ctx.masks.items()}
            static = Context(cos_sin=tables, masks=masks, explicit_attention=ctx.explicit_attention)
            shape = _Shape(_normal_copy(h), _normal_copy(h), static, filled_from=weakref.ref(ctx))
            if shape.bytes > self.max_bytes:
                return None
            while self.shapes and self.bytes + shape.bytes > self.max_bytes:
                self.shapes.popitem(last=False)
            self.shapes[key] = shape
            return shape
        self.shapes.move_to_end(key)
        if shape.filled_from() is not ctx:
            for kind, (cos, sin) in ctx.cos_sin.items():
                shape.ctx.cos_sin[kind][0].copy_(cos)
                shape.ctx.cos_sin[kind][1].copy_(sin)
            for kind, mask in ctx.masks.items():
                if mask is not None:
                    shape.ctx.masks[kind].copy_(mask)
            shape.filled_from = weakref.ref(ctx)
        return shape

    def _capture(self, block: Block, shape: _Shape):
        """Block `block`'s graph on `shape`'s buffers: it reads `shape.h` and writes `shape.out`."""
        if not self.capture:
            return _BufferCall(block, shape)
        device = shape.h.device
        with torch.cuda.device(device):
            caller = torch.cuda.current_stream(device)
            side = torch.cuda.Stream(device)  # the capture's own stream, on the model's device
            side.wait_stream(caller)
            try:
                with torch.cuda.stream(side):  # warm-up: library workspaces and kernel choices, outside the graph
                    for _ in range(2):
                        shape.out.copy_(block(shape.h, shape.ctx))
                caller.wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, stream=side):
                    shape.out.copy_(block(shape.h, shape.ctx))  # the result lands in the shared output buffer
            finally:
                # torch.cuda.graph ends the capture before it restores the caller's stream, so a capture that
                # fails to end would leave the side stream current: every later kernel of this thread would
                # queue there. Put the caller's stream back however the capture ended.
                torch.cuda.set_stream(caller)
            caller.wait_stream(side)
        return graph


_BANKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its GraphBank
_BANKS_LOCK = threading.Lock()  # two threads' first calls on one model make one bank, not one each


def graph_bank(model) -> GraphBank:
    """The model's bank of captured calls (made on first use; the CPU's keeps buffers and captures nothing).
    A model moved to another device or dtype gets a new bank (the captured addresses are the old ones')."""
    key = (model.device, model.dtype)
    with _BANKS_LOCK:
        bank = _BANKS.get(model)
        if bank is None or bank.key != key:
            bank = _BANKS[model] = GraphBank(capture=model.device.type == "cuda", key=key)
        return bank
