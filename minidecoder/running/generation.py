"""Greedy decoding with a KV cache: enough to see that a model is sane, nothing more.

The prompt runs once and fills the cache; each new token then runs alone against the cache
(one query row, all earlier keys), so the cost per token is one row, not the whole sequence.
"""
from __future__ import annotations

import torch

from minidecoder.core.model import KVCache


@torch.inference_mode()
def greedy(model, input_ids: torch.Tensor | list[int], max_new_tokens: int = 32,
           stop_at_eos: bool = True) -> list[int]:
    """The ids of up to `max_new_tokens` greedily chosen tokens after `input_ids` (one sequence)."""
    ids = torch.as_tensor(input_ids, dtype=torch.long, device=model.device).reshape(1, -1)  # (1, T)
    eos = _eos_ids(model)
    cache = KVCache.empty(model.num_layers)
    logits = model(ids, cache=cache).logits[:, -1]  # (1, V)
    new: list[int] = []
    for _ in range(max_new_tokens):
        next_id = int(logits.argmax(-1))
        new.append(next_id)
        if stop_at_eos and next_id in eos:
            break
        logits = model(torch.tensor([[next_id]], device=model.device), cache=cache).logits[:, -1]
    return new


def _eos_ids(model) -> set[int]:
    ids = model.config.eos_token_id
    found = set(ids) if isinstance(ids, list) else ({ids} if ids is not None else set())
    if model.tokenizer is not None and model.tokenizer.eos_id is not None:
        found.add(model.tokenizer.eos_id)
    return found
