"""How much memory a forward over a batch needs, estimated before it runs, so a batch that would not fit
is split (or a single text that cannot fit is refused with a message) instead of a RuntimeError
asking the allocator for 40 GB.

The estimate is an upper bound of the largest transient tensors of one block, the eager attention
path's (which methods reading the pattern take):

    scores + probabilities   2 x B x H x T x T x 4 bytes (softmax runs in float32)
    activations              B x T x (4 E + 3 I) x dtype bytes (residual, norm, q/k/v/o, MLP)

The budget is 80% of what the device has free (/proc/meminfo MemAvailable on a CPU, cudaMemGetInfo on a GPU).

`token_budget` is the other side: how many padded tokens a batch should hold to keep the device busy
without padding much, as embedding servers size batches (`minidecoder.embed`'s default, instead of a count of sentences).
"""
from __future__ import annotations

import torch

from minidecoder.errors import InputError

BUDGET_FRACTION = 0.8


def forward_bytes(model, batch: int, tokens: int) -> int:
    """Estimated peak transient bytes of one forward over `batch` rows of `tokens` tokens."""
    config = model.config
    dtype_bytes = torch.finfo(model.dtype).bits // 8
    attention = 2 * batch * config.num_heads * tokens * tokens * 4
    activations = batch * tokens * (4 * config.hidden_size + 3 * config.intermediate_size) * dtype_bytes
    return attention + activations


# Padded tokens per batch. On a CPU the matrix products run near the machine's peak from a few hundred
# rows on, so the budget keeps the prompt methods' batches on STS-B sentences near the 32 sentences the CPU
# figures were measured with (a row counts its tokens past the shared prompt prefix). On a GPU a batch is
# large enough for full-speed matrix products and small enough that length-sorted rows pad little: 8,192
# tokens make a 7B block's products 8,192 x 4,096 by 4,096 x 11,008 and pad about 9% on STS-B
# (`python tools/plan_budget.py` prints the padding of each budget); their largest 7B forward is about
# 0.8 GiB (forward_bytes, bf16), so memory rarely lowers it (GPU_MEMORY_SHARE).
CPU_TOKENS = 1024
GPU_MAX_TOKENS = 8192
GPU_MEMORY_SHARE = 0.25  # of the free memory, for one batch's activations (the rest: fragmentation, ReBA's A)


def token_budget(model, free: int | None) -> int:
    """Padded tokens (rows x longest row) one batch should hold on `model`'s device, `free` bytes free."""
    if model.device.type == "cpu" or free is None:
        return CPU_TOKENS
    per_token = max(forward_bytes(model, 1, 512) // 512, 1)  # activations + attention at a sentence's length
    return int(max(1024, min(GPU_MAX_TOKENS, free * GPU_MEMORY_SHARE // per_token)))


def available_bytes(device: torch.device) -> int | None:
    """Free memory on `device` in bytes, or None when it cannot be read (then nothing is split)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, RuntimeError):
        return None
    return None


def split_for_memory(model, index: list[int], lengths: list[int], longest: int, free: int | None) -> list[list[int]]:
    """`index` (rows sorted by length) cut into sub-batches whose estimated forward fits the budget.

    lengths: text tokens per row of `index`; longest: the tokens of the method's forward on the longest
    (running.embedding.forward_length); free: the bytes free (`available_bytes`, None: unknown, nothing
    is split). A single row that alone does not fit is refused, naming it, its length and the memory
    it would take.
    """
    if free is None or not index:
        return [index]
    budget = int(free * BUDGET_FRACTION)
    if forward_bytes(model, len(index), longest) <= budget:
        return [index]
    one = forward_bytes(model, 1, longest)
    if one > budget:
        row = index[max(range(len(index)), key=lambda k: lengths[k])]
        raise InputError(
            f"text {row} is {max(lengths)} tokens; one forward over it needs about {one / 2**30:.1f} GiB of attention "
            f"and activation memory, and {free / 2**30:.1f} GiB is free on {model.device.type}",
            "shorten it or pass truncate=N (CLI --truncate N) to keep the first N tokens of each text; "
            "or free memory / use a larger machine")
    size = max(1, budget // one)
    return [index[k:k + size] for k in range(0, len(index), size)]
