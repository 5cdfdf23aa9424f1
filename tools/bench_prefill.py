"""A next-token call on a long prompt (the prefill of `generate`, `minidecoder logits`), against transformers.

    python tools/bench_prefill.py --model weights/gemma-3-270m --tokens 4096
    python tools/bench_prefill.py --model weights/smollm2-135m-instruct --tokens 2048,8192 --repeat 3

Each configuration runs in a fresh process (its peak memory is its own), on the same random prompt of T ids,
after a 16-token warm-up, float32 on the CPU:

    transformers forward           AutoModelForCausalLM(ids): every position's logits, (1, T, V) (the peer)
    transformers logits_to_keep=1  the same, the last position's logits alone (what its `generate` asks for)
    minidecoder logits_to_keep=1   `model(ids, logits_to_keep=1)`: what `generate` and `logits` call
    minidecoder forward            `model(ids)`: every position's logits

Printed: seconds (median of --repeat), the peak resident memory above that before the call, and each
time's ratio to the peer's. The logits of a long prompt are T x V x 4 bytes: on Gemma 3 (V = 262,144)
a gigabyte per thousand tokens, and its unembedding is most of a small model's matrix work.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = ("transformers forward", "transformers logits_to_keep=1", "minidecoder logits_to_keep=1",
           "minidecoder forward")
PEER = CONFIGS[0]


def measure(config: str, model: str, tokens: int, repeat: int) -> dict:
    """One configuration in this process: seconds per call and peak RSS (GiB) above that before the calls."""
    import torch

    torch.manual_seed(0)
    if config.startswith("transformers"):
        import transformers
        net = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    else:
        import minidecoder
        net = minidecoder.load(model, progress=False)
    vocab = net.config.vocab_size
    ids = torch.randint(10, min(vocab, 30000), (1, tokens))
    keep = {"logits_to_keep": 1} if config.endswith("logits_to_keep=1") else {}
    seconds = []
    with torch.inference_mode():
        net(ids[:, :16], **keep)  # warm-up
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(repeat):
            start = time.perf_counter()
            logits = net(ids, **keep).logits
            seconds.append(time.perf_counter() - start)
            del logits
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"seconds": statistics.median(seconds), "peak_gib": (peak - before) / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a checkpoint folder both libraries load")
    parser.add_argument("--tokens", default="4096", help="prompt lengths, comma-separated")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a configuration, in its own process
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    if args.one:
        print(json.dumps(measure(args.one, args.model, lengths[0], args.repeat)))
        return 0
    for tokens in lengths:
        results = {}
        for config in CONFIGS:
            run = subprocess.run([sys.executable, __file__, "--model", args.model, "--tokens", str(tokens),
                                  "--repeat", str(args.repeat), "--one", config], capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"{config} failed:\n{run.stderr[-2000:]}")
            results[config] = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"\n{args.model}, a prompt of {tokens} tokens (median of {args.repeat}):")
        print(f"  {'configuration':<32} {'seconds':>8} {'peak GiB':>9} {'time / peer':>12}")
        for config, got in results.items():
            print(f"  {config:<32} {got['seconds']:8.2f} {got['peak_gib']:9.2f} "
                  f"{got['seconds'] / results[PEER]['seconds']:11.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
