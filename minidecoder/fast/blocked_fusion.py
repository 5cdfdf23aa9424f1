"""ReBA's fused attention matrix, computed one head at a time: peak memory grows with T^2 once.

ReBA (arXiv 2502.20726, docs/spec.md section 7) needs, for every block and every head, the
post-softmax attention P (T x T), symmetrized and folded by elementwise maximum into one matrix A.
ReBA's step (`minidecoder.methods.reba.FoldAttention`) receives patterns through `fold`. The plain loop
hands it each block's whole (B, H, T, T) pattern from the eager path; the executor beneath it
(`fast.forward`), from `FastPaths.blocked_fusion_from` tokens on, hands it the patterns of one head at
a time from `head_group_patterns` below, for less memory:

    block i runs on its fast path (scaled-dot-product attention, no pattern materialized),
    recording only its queries and keys (B, H, T, D) through `Sites`;
    then, for each group of `heads_per_step` heads:
        P = softmax(q k^T * scale [softcap] + mask) in float32       (B, s, T, T)
        A = max(A, max over the group of (P + P^T) / 2)               (B, T, T)

Peak extra memory: A plus a few (B, s, T, T) temporaries (s = 1 by default), instead of several
(B, H, T, T) tensors per block (the eager pattern, its scores, the symmetrized copy), and instead of
the L x H matrices that `output_attentions=True` returns in the reference approach. The attention
scores are computed twice (once inside the fused kernel, once here); the FLOPs of QK^T are a small
share of a block's at sentence lengths.

The numerics mirror `Attention._eager` (scores in the activation dtype, softcap before the mask,
softmax in float32 then cast back), so A equals the eager fusion up to float rounding
(tests/fast/test_fast_paths.py).
"""
from __future__ import annotations

from collections.abc import Iterator

import torch


def head_group_patterns(attn, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None,
                        heads_per_step: int = 1) -> Iterator[torch.Tensor]:
    """The post-softmax patterns of one block's heads, `heads_per_step` at a time: (B, s, T, S) each."""
    H, Hkv = q.shape[1], k.shape[1]
    groups = H // Hkv  # GQA/MQA: query head j reads key head j // groups
    for first in range(0, H, heads_per_step):
        heads = torch.arange(first, min(first + heads_per_step, H), device=q.device)
        qh = q[:, heads]  # (B, s, T, D)
        kh = k[:, heads // groups]  # (B, s, S, D)
        # the same operations as Attention._eager, in place: each (B, s, T, S) temporary is one allocation
        scores = torch.matmul(qh, kh.transpose(2, 3)).mul_(attn.scale)  # (B, s, T, S)
        if attn.softcap is not None:  # Gemma2: c * tanh(scores / c), before the mask
            scores.div_(attn.softcap).tanh_().mul_(attn.softcap)
        if mask is not None:
            scores.add_(mask)
        pattern = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # (B, s, T, S)
        del scores  # not kept alive while the step folds the pattern (the generator waits at the yield)
        yield pattern
