"""The plain per-layer loop with early exit, and the two poolings every method ends with.

Methods that intervene between blocks (TP, HTP, CP, ReBA) write their own loop with the same
pieces (`model.embed`, `model.context`, `model.layers`, `model.norm`); this file is the loop for
the methods that only read.
"""
from __future__ import annotations

import torch

from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.layers import resolve_output_layer


def hidden_at(model, batch: PromptBatch, layer: int, reuse_prefix: bool = True) -> torch.Tensor:
    """hidden_states[layer] (B, T, E), running only the blocks it needs (early exit)."""
    return hidden_at_layers(model, batch, [layer], reuse_prefix)[layer]


def hidden_at_layers(model, batch: PromptBatch, layers: list[int], reuse_prefix: bool = True) -> dict[int, torch.Tensor]:
    """Several output layers from one forward pass that stops at the deepest one requested.

    reuse_prefix: when every row begins with the same tokens (a prompt template's text before
    `{text}`), run them once and reuse their keys/values (minidecoder.fast.prefix_cache; same states up
    to float rounding, tested). Pass False for the plain loop."""
    L = model.num_layers
    wanted = {layer: resolve_output_layer(layer, L) for layer in layers}
    deepest = max(wanted.values())
    if reuse_prefix:
        from minidecoder.fast.prefix_cache import hidden_with_prefix, prefix_cache_applies
        p = prefix_cache_applies(model, batch)
        if p:
            return hidden_with_prefix(model, batch, wanted, p)
    ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
    h = model.embed(ids)  # (B, T, E)
    ctx = model.context(mask, ids.shape[1], ids.shape[0])
    keep = set(wanted.values())  # only the requested states stay alive (memory: not L x (B, T, E))
    states = {0: h} if 0 in keep else {}
    for i, block in enumerate(model.layers[:deepest]):
        h = block(h, ctx)
        if i + 1 in keep:
            states[i + 1] = h
    if deepest == L:
        states[L] = model.norm(h)  # only the last entry is normed (transformers' convention)
    return {layer: states[index] for layer, index in wanted.items()}


def last_token(h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
    """(B, T, E) -> (B, E): the last real token of each row (left or right padding)."""
    last = batch.last_positions(h.device)  # (B,)
    return h[torch.arange(h.shape[0], device=h.device), last]


def mean_over_spans(h: torch.Tensor, spans: list[list[tuple[int, int]]], occurrence: int = 0) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean over each row's token span number `occurrence` (e.g. the {text} tokens)."""
    rows = []
    for b, row_spans in enumerate(spans):
        start, end = row_spans[occurrence]
        if end <= start:
            raise ValueError(f"row {b} has an empty span to average")  # callers reject empty text first
        rows.append(h[b, start:end].mean(dim=0))
    return torch.stack(rows)
