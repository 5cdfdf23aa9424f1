"""Greedy decoding's fast path: a static KV cache, and the one-token decode step captured once (gpt-fast's
approach), still the plain `Block.forward` underneath.

At batch 1 a decode step is one token through every block: on a GPU the host's kernel launches, not the
GPU, set the pace (about fifteen launches a block). A CUDA graph replays the whole step with one launch,
but it is fixed to its tensors' addresses and shapes, and the dynamic cache (`core.model.KVCache`) grows
by concatenation every step. So:

    cache      `StaticKVCache`: keys and values of every block preallocated to the longest sequence the
               call can reach, (1, Hkv, S_max, D); a step writes its token's k and v at `position` (a
               device tensor) with index_copy_, and attends over all S_max keys, the unwritten ones masked
    step       `DecodeStep`: embed -> every Block.forward -> final norm -> unembed, for one token at a
               position held in a device tensor: the RoPE tables and the mask are computed from it on the
               device, so nothing in the step depends on a host value
    capture    on a GPU the step is captured once (static token and position inputs) and replayed per token;
               on a CPU it runs as it is (no graphs there)
    reuse      `decode_step(model, ...)` keeps one step per model across `generate` calls, so a capture is
               paid once, not per call: the next call copies its prompt's cache into the same buffers (the
               addresses the graph reads) and replays. The step is made again when the model's device,
               dtype or parameter tensors change (a graph would read the old ones' memory), or when a call
               needs more positions than it holds, or fewer than half of them (sizes are rounded up to a
               multiple of SIZE_STEP, so calls of similar length share one step; a short call never attends
               over a long call's positions). The buffers are the model's: a thread decodes on them alone
               (`one_decoder`), and another waits for them.

The prompt itself runs through the ordinary forward with the dynamic cache, which is then copied into the
static one. Dynamic-NTK RoPE (its frequencies depend on the sequence length) takes the plain path.
Tested against the plain greedy loop (tests/core/test_generation.py).
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

from minidecoder.core.model import Context, KVCache
from minidecoder.core.rope import cos_sin


@dataclass
class StaticKVCache:
    """Keys and values of every block, (1, Hkv, S_max, D) each, written in place at `position`."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    position: torch.Tensor  # (T,) long on the device: the positions this call's tokens are written at

    @classmethod
    def from_prefill(cls, cache: KVCache, length: int) -> "StaticKVCache":
        """The dynamic cache of a prompt, copied into new buffers of `length` positions."""
        with torch.inference_mode(False):  # plain tensors: written in place under inference_mode or no_grad alike
            empty = lambda t: t.new_zeros(*t.shape[:2], length, t.shape[3])  # noqa: E731
            position = torch.zeros(1, dtype=torch.long, device=cache.keys[0].device)
            static = cls([empty(k) for k in cache.keys], [empty(v) for v in cache.values], position)
        static.load(cache)
        return static

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def load(self, cache: KVCache) -> None:
        """A prompt's dynamic cache copied into the first positions, in place. What is left of an earlier call
        beyond them is never read: the step's mask hides every key past the query's position."""
        for static, dynamic in zip(self.keys + self.values, cache.keys + cache.values):
            static[:, :, :dynamic.shape[2]].copy_(dynamic)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this call's k, v (1, Hkv, T, D) at `position`; return every position's (1, Hkv, S_max, D)."""
        self.keys[layer].index_copy_(2, self.position, k)
        self.values[layer].index_copy_(2, self.position, v)
        return self.keys[layer], self.values[layer]


class DecodeStep:
    """One token through the model at a position held on the device: (1, 1) id -> (1, V) logits."""

    def __init__(self, model, cache: StaticKVCache) -> None:
        # a weak reference: the step is kept per model (`decode_step`) and must not keep the model alive
        self._model, self.cache = weakref.ref(model), cache
        self.identity = identity(model)  # what the captured graph reads; `decode_step` compares it
        with torch.inference_mode(False):
            self.token = torch.zeros(1, 1, dtype=torch.long, device=model.device)  # static inputs
        self.position = cache.position  # (1,): the step writes and reads here
        self.graph, self.logits = None, None
        self.captures = 0  # graphs captured (0 or 1: the benchmark and tests read it)

    @property
    def model(self):
        return self._model()

    def __call__(self, token: int, position: int) -> torch.Tensor:
        self.token.fill_(token)
        self.position.fill_(position)
        if self.model.device.type != "cuda":
            return self._step()
        with torch.cuda.device(self.model.device):  # the model's device, whichever is current
            if self.graph is None:
                self._capture()
            self.graph.replay()
        return self.logits

    def _step(self) -> torch.Tensor:
        model = self.model
        h = model.embed(self.token)  # (1, 1, E)
        ctx = self._context()
        for block in model.layers:
            h = block(h, ctx)  # the plain Block.forward, reading and writing the static cache
        return model.unembed(model.norm(h))[:, -1]  # (1, V)

    def _context(self) -> Context:
        """RoPE tables and masks for one query at `position`, computed on the device from it."""
        model, S = self.model, self.cache.keys[0].shape[2]
        positions = self.position[None]  # (1, 1)
        tables = {}
        for kind in model.config.rope:
            inv_freq, scaling = model.rope_frequencies(kind)
            tables[kind] = cos_sin(inv_freq, scaling, positions, model.dtype)
        j = torch.arange(S, device=positions.device)[None, :]  # (1, S) key positions
        zero = torch.zeros((), dtype=model.dtype, device=j.device)
        masks = {}
        for kind in set(model.config.layer_types):
            visible = j <= positions[0][:, None]  # (1, S): written keys up to the query's position
            window = model.config.sliding_window if kind == "sliding_attention" else None
            if window is not None:
                visible = visible & (positions[0][:, None] - j < window)  # transformers' `kv_idx > q_idx - window`
            masks[kind] = torch.where(visible, zero, torch.finfo(model.dtype).min)[None, None]  # (1, 1, 1, S)
        return Context(cos_sin=tables, masks=masks, cache=self.cache, positions=positions)

    def _capture(self) -> None:
        # Every stream named on the model's device: torch.cuda.graph's own default capture stream is made once
        # per process, on whichever device was current then.
        device = self.model.device
        with torch.cuda.device(device):
            current = torch.cuda.current_stream(device)
            side = torch.cuda.Stream(device=device)
            side.wait_stream(current)
            try:
                with torch.cuda.stream(side):  # warm-up outside the graph; it rewrites the same cache entry
                    for _ in range(2):
                        self._step()
                current.wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=side):  # a failed capture leaves no half-made graph behind
                    logits = self._step()
            finally:  # torch.cuda.graph ends a capture before it restores the stream: a failed end left it
                torch.cuda.set_stream(current)
        self.graph, self.logits = graph, logits
        self.captures += 1


SIZE_STEP = 256  # a step's positions are rounded up to a multiple of this, so calls of similar length share it
_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its DecodeStep


def identity(model) -> tuple:
    """What a captured step depends on: the device, the dtype and the address of every parameter and buffer
    (a replaced tensor, or a model moved or cast, leaves a graph reading memory that is no longer the model's)."""
    tensors = [*model.parameters(), *model.buffers()]
    return model.device, model.dtype, tuple(t.data_ptr() for t in tensors)


def decode_step(model, cache: KVCache, length: int) -> DecodeStep:
    """The model's decode step, with the prompt's dynamic `cache` loaded, holding at least `length` positions:
    the one kept from an earlier call where it still fits this model, else a new one (kept for the next)."""
    step = _STEPS.get(model)
    size = -(-length // SIZE_STEP) * SIZE_STEP
    # Kept while it fits and is at most twice this call's size: a step only ever grown would make every later
    # short call attend over the longest call's positions.
    if step is not None and step.identity == identity(model) and length <= step.cache.length <= 2 * size:
        step.cache.load(cache)
        return step
    if getattr(model, "max_context", None) is not None:
        size = max(min(size, model.max_context), length)
    step = _STEPS[model] = DecodeStep(model, StaticKVCache.from_prefill(cache, size))
    return step


_DECODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> the lock of its step's buffers
_DECODERS_LOCK = threading.Lock()  # two threads' first calls on one model make one lock, not one each


def one_decoder(model) -> threading.Lock:
    """The lock a thread holds from loading its prompt's cache into the model's step to its last token: two
    threads decoding at once would load their caches into the same buffers and read each other's keys."""
    with _DECODERS_LOCK:
        return _DECODERS.setdefault(model, threading.Lock())


def kept_step(model) -> DecodeStep | None:
    """The decode step `decode_step` keeps for `model` (None before the first static call)."""
    return _STEPS.get(model)


def drop_step(model) -> None:
    """Forget `model`'s kept step (its graph and buffers are freed with it; the next call makes a new one)."""
    _STEPS.pop(model, None)


def static_decoding_applies(model) -> bool:
    """Dynamic-NTK RoPE recomputes its frequencies from the sequence length: it keeps the plain path."""
    return not any(spec.rope_type == "dynamic" for spec in model.config.rope.values())
