"""Greedy decoding with a KV cache: enough to see that a model is sane, nothing more.

The prompt runs once and fills the cache; each new token then runs alone against the cache
(one query row, all earlier keys), so the cost per token is one row, not the whole sequence.
On a GPU each token runs as one replay of a captured decode step over a static cache
(minidecoder.fast.static_cache), where the host's kernel launches would otherwise set the pace.
"""
from __future__ import annotations

import torch

from minidecoder.core.model import KVCache
from minidecoder.fast.static_cache import DecodeStep, StaticKVCache, static_decoding_applies
from minidecoder.errors import ArgumentTypeError, ContextLengthError, InputError


@torch.inference_mode()
def greedy(model, input_ids: torch.Tensor | list[int], max_new_tokens: int = 32,
           stop_at_eos: bool = True, static: bool | None = None) -> list[int]:
    """The ids of up to `max_new_tokens` greedily chosen tokens after `input_ids` (one sequence).
    static: decode over a static cache, one captured step a token (None: on a GPU)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ArgumentTypeError(f"max_new_tokens={max_new_tokens!r} must be an integer, 0 or more",
                                "e.g. max_new_tokens=32 (CLI --max-new-tokens 32)")
    ids = torch.as_tensor(input_ids, dtype=torch.long, device=model.device).reshape(1, -1)  # (1, T)
    if ids.shape[1] == 0:
        raise InputError("the prompt has no tokens", "give a prompt that encodes to at least one token")
    limit = getattr(model, "max_context", None)
    if limit is not None and ids.shape[1] + max_new_tokens > limit:  # refused up front, not after a long run
        room = limit - ids.shape[1]
        raise ContextLengthError(
            f"the prompt is {ids.shape[1]} tokens; with max_new_tokens={max_new_tokens} the sequence would reach "
            f"{ids.shape[1] + max_new_tokens} tokens, past the model's context of {limit}",
            f"ask for at most {room} new tokens (--max-new-tokens {room})" if room >= 0 else "shorten the prompt",
            length=ids.shape[1] + max_new_tokens, limit=limit)
    eos = _eos_ids(model)
    cache = KVCache.empty(model.num_layers)
    logits = model(ids, cache=cache).logits[:, -1]  # (1, V)
    if static is None:
        static = model.device.type == "cuda"
    if static and static_decoding_applies(model) and max_new_tokens > 1:
        step = DecodeStep(model, StaticKVCache.from_prefill(cache, ids.shape[1] + max_new_tokens))
        advance = lambda token, position: step(token, position)  # noqa: E731
    else:
        advance = lambda token, position: model(torch.tensor([[token]], device=model.device),  # noqa: E731
                                                cache=cache).logits[:, -1]
    new: list[int] = []
    for k in range(max_new_tokens):
        next_id = int(logits.argmax(-1))
        new.append(next_id)
        if stop_at_eos and next_id in eos or k + 1 == max_new_tokens:
            break
        logits = advance(next_id, ids.shape[1] + k)  # the new token sits at position T + k
    return new


def _eos_ids(model) -> set[int]:
    ids = model.config.eos_token_id
    found = set(ids) if isinstance(ids, list) else ({ids} if ids is not None else set())
    if model.tokenizer is not None and model.tokenizer.eos_id is not None:
        found.add(model.tokenizer.eos_id)
    return found
