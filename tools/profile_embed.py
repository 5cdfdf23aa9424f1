"""Where the time of an embedding run goes: torch.profiler's operator table for minidecoder.embed.

    python tools/profile_embed.py --dtype bfloat16 --compile     # where the time goes, operator by operator

Embeds the first --limit STS-B test sentences (as tools/bench.py does) after a warm-up run that
also compiles, then prints the operators by self CPU time and the share of `aten::mm`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minidecoder  # noqa: E402
from bench_common import sts_sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="known name or folder (default: the SmolLM2 model)")
    parser.add_argument("--method", default="prompteol")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--limit", type=int, default=128, help="sentences profiled")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rows", type=int, default=12, help="operators shown")
    args = parser.parse_args()

    model = minidecoder.load(args.model, dtype=args.dtype, compile=args.compile, progress=False)
    sentences, _ = sts_sentences(2 * args.limit)
    minidecoder.embed(model, sentences[args.limit:], args.method, batch_size=args.batch_size)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        minidecoder.embed(model, sentences[:args.limit], args.method, batch_size=args.batch_size)
        seconds = time.perf_counter() - start
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    mm = sum(e.self_cpu_time_total for e in events if e.key == "aten::mm")
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    print(f"{args.limit} sentences in {seconds:.2f} s ({args.limit / seconds:.1f} sent/s under the profiler); "
          f"aten::mm {100 * mm / total:.0f}% of self CPU time")


if __name__ == "__main__":
    main()
