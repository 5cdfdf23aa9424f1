"""Which attention kernel a block call takes: the explicit matmul-softmax-matmul or the fused SDPA.

On a CPU, up to this many keys the explicit path (`Attention._eager`) beats the fused
scaled-dot-product kernel, whose fixed cost dominates at sentence lengths: 0.55-0.85x its time in
float32 up to about 80 keys (mixed beyond), 0.35-0.75x in bfloat16 up to about 320
(tools/bench_attention.py, docs/benchmarks.md). Other dtypes and devices take the fused kernel. Both
compute the same attention (tests/core/test_parity.py forces each).
"""
from __future__ import annotations

import torch

EXPLICIT_ATTENTION_MAX_KEYS = {torch.float32: 80, torch.bfloat16: 256}


def explicit_is_faster(device: torch.device, dtype: torch.dtype, num_keys: int) -> bool:
    return device.type == "cpu" and num_keys <= EXPLICIT_ATTENTION_MAX_KEYS.get(dtype, 0)
