"""Time SentEval's L2-grid probes one after another against the same probes in worker processes.

    python tools/bench_probes.py                      # MR-sized: 10 inner folds x 4 L2 values on 9,596 x 576
    python tools/bench_probes.py --rows 2000 --folds 3

One outer fold of an inner k-fold task (minidecoder/evaluation/senteval_classifier.py: 10 such folds
make MR, CR, SUBJ or MPQA) on random features shaped like a SmolLM2 task, timed with `workers=1` (this
process, one thread) and with one worker per CPU; prints both and their ratio, and checks that the two
give the same L2 and score (probe_pool.py's promise).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minidecoder.evaluation import senteval_classifier as sc  # noqa: E402
from minidecoder.evaluation.probe_pool import default_workers  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=9596, help="rows of the outer fold's training part (MR: 9,596)")
    parser.add_argument("--dim", type=int, default=576, help="embedding width (SmolLM2: 576)")
    parser.add_argument("--folds", type=int, default=sc.KFOLD, help="inner folds (SentEval: 10)")
    parser.add_argument("--workers", type=int, default=default_workers(), help="processes (default: one per CPU)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, args.rows)
    x = (rng.standard_normal((args.rows, args.dim)) + 0.1 * y[:, None]).astype(np.float32)
    folds = sc._fold_rows(x, y, sc._folds(y, args.folds, sc.SEED))
    print(f"{args.folds} inner folds x {len(sc.L2_GRID)} L2 values on {args.rows:,} x {args.dim} rows", flush=True)
    timings = {}
    for workers in (1, args.workers):
        start = time.perf_counter()
        chosen = sc._grid_score(folds, 2, sc.ClassifierConfig(), None, workers)
        timings[workers] = time.perf_counter() - start, chosen
        print(f"workers={workers}: {timings[workers][0]:.1f} s, L2 {chosen[0]:g}, score {chosen[1]:.2f}", flush=True)
    (alone, first), (pooled, second) = timings[1], timings[args.workers]
    print(f"one after another / {args.workers} workers: {alone / pooled:.2f}x; same L2 and score: {first == second}")
    return 0 if first == second else 1


if __name__ == "__main__":
    raise SystemExit(main())
