"""Which attention path is faster at which length: the fused kernel against the explicit one.

    python tools/bench_attention.py                      # the crossover quoted in docs/benchmarks.md
    python tools/bench_attention.py --dtype bfloat16 --heads 9 --kv-heads 3

`Attention.forward` (minidecoder/model.py) runs the explicit matmul-softmax-matmul path
(`Attention._eager`) on a CPU when the keys number at most `EXPLICIT_ATTENTION_MAX_KEYS[dtype]`, and the fused
`F.scaled_dot_product_attention` kernel otherwise. This script times both on one attention layer of
SmolLM2's shape (9 query heads, 3 kv heads, head_dim 64 by default) with a causal additive mask and a
4-token cached prefix, at a fixed budget of about 608 query rows per call (batch = 608 // length,
as the embedding batches of 32 STS-B sentences), and prints the ratio explicit / fused per length.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidecoder.core.config import parse_config  # noqa: E402
from minidecoder.core.model import Attention  # noqa: E402

ROWS = 608  # query rows per call: 32 sentences of ~19 tokens
PREFIX = 4  # cached prompt prefix (PromptEOL's 'This sentence : "')


def seconds_per_call(fn, calls: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="one dtype (default: both)")
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--lengths", default="19,40,80,128,160,320,640")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    H, Hkv, D = args.heads, args.kv_heads, args.head_dim
    config = parse_config({"model_type": "llama", "vocab_size": 8, "hidden_size": H * D, "intermediate_size": 8,
                           "num_hidden_layers": 1, "num_attention_heads": H, "num_key_value_heads": Hkv,
                           "head_dim": D})
    attn = Attention(config, layer_idx=0)
    print(f"# {torch.get_num_threads()} threads, torch {torch.__version__}, H={H} Hkv={Hkv} D={D}, "
          f"{ROWS} query rows per call, {PREFIX}-token cached prefix")
    print("| dtype | T (keys) | batch | fused us | explicit us | explicit / fused |")
    print("|---|---|---|---|---|---|")
    for dtype in [torch.float32, torch.bfloat16] if args.dtype is None else [getattr(torch, args.dtype)]:
        for T in (int(t) for t in args.lengths.split(",")):
            B, S = max(1, ROWS // T), T + PREFIX
            q = torch.randn(B, H, T, D, dtype=dtype)
            k, v = torch.randn(B, Hkv, S, D, dtype=dtype), torch.randn(B, Hkv, S, D, dtype=dtype)
            causal = torch.full((T, S), float("-inf")).triu(PREFIX + 1)  # row i sees the prefix and 0..i
            mask = causal.to(dtype).expand(B, 1, T, S)
            calls = max(5, 20_000 // T)
            with torch.inference_mode():
                fused = seconds_per_call(lambda: F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=attn.scale, enable_gqa=Hkv != H), calls)
                explicit = seconds_per_call(lambda: attn._eager(q, k, v, mask, None), calls)
            print(f"| {str(dtype).removeprefix('torch.')} | {S} | {B} | {fused * 1e6:.0f} | {explicit * 1e6:.0f} "
                  f"| {explicit / fused:.2f} |")


if __name__ == "__main__":
    main()
