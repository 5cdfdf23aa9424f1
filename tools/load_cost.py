"""What the finiteness check costs at load: `minidecoder.load()` of the default model with and without it.

    python tools/load_cost.py        # one CPU thread, the weights in the page cache; best of 3 per case
"""
from __future__ import annotations

import time

import torch

import minidecoder


def main() -> int:
    torch.set_num_threads(1)
    minidecoder.load(progress=False)  # fetch/convert once and bring the file into the page cache
    for dtype in ("float32", "bfloat16"):
        for check in (False, True):
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                minidecoder.load(dtype=dtype, progress=False, check_finite=check)
                best = min(best, time.perf_counter() - start)
            print(f"{dtype:>8}, check_finite={check!s:>5}: {best:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
