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
    capture    on a GPU the step is captured once per generation (static token and position inputs) and
               replayed per token; on a CPU it runs as it is (no graphs there)

The prompt itself runs through the ordinary forward with the dynamic cache, which is then copied into the
static one. Dynamic-NTK RoPE (its frequencies depend on the sequence length) takes the plain path.
Tested against the plain greedy loop (tests/core/test_generation.py).
"""
from __future__ import annotations

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
        """The dynamic cache of a prompt, copied into buffers of `length` positions."""
        def grown(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros(*t.shape[:2], length, t.shape[3])
            out[:, :, :t.shape[2]] = t
            return out
        position = torch.zeros(1, dtype=torch.long, device=cache.keys[0].device)
        return cls([grown(k) for k in cache.keys], [grown(v) for v in cache.values], position)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this call's k, v (1, Hkv, T, D) at `position`; return every position's (1, Hkv, S_max, D)."""
        self.keys[layer].index_copy_(2, self.position, k)
        self.values[layer].index_copy_(2, self.position, v)
        return self.keys[layer], self.values[layer]


class DecodeStep:
    """One token through the model at a position held on the device: (1, 1) id -> (1, V) logits."""

    def __init__(self, model, cache: StaticKVCache) -> None:
        self.model, self.cache = model, cache
        self.token = torch.zeros(1, 1, dtype=torch.long, device=model.device)  # static inputs
        self.position = cache.position  # (1,): the step writes and reads here
        self.graph, self.logits = None, None

    def __call__(self, token: int, position: int) -> torch.Tensor:
        self.token.fill_(token)
        self.position.fill_(position)
        if self.model.device.type != "cuda":
            return self._step()
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
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph; it rewrites the same cache entry
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._step()


def static_decoding_applies(model) -> bool:
    """Dynamic-NTK RoPE recomputes its frequencies from the sequence length: it keeps the plain path."""
    return not any(spec.rope_type == "dynamic" for spec in model.config.rope.values())
