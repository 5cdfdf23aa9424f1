"""Time SentEval's probe: one fit against SentEval's own training loop, and the L2 grid one probe after
another against the same probes in worker processes.

    python tools/bench_probes.py                      # MR-sized: 10 inner folds x 4 L2 values on 9,596 x 576
    python tools/bench_probes.py --rows 2000 --folds 3

On random features shaped like a SmolLM2 task:
- one probe fit (L2 1e-4, early-stopped on the first inner fold's held-out rows), minidecoder's
  `LogisticRegressionProbe` against SentEval's own loop (`SentEvalsOwnLoop`: nn.Linear, zero_grad,
  backward, torch.optim.Adam), both on one thread; prints both, their ratio, and whether the trained
  weights are equal bit for bit (tests/evaluation/test_transfer.py holds the probe to that);
- one outer fold of an inner k-fold task (minidecoder/evaluation/senteval_classifier.py: 10 such folds
  make MR, CR, SUBJ or MPQA), timed with `workers=1` (this process, one thread) and with one worker per
  CPU; prints both and their ratio, and checks that the two give the same L2 and score (probe_pool.py's
  promise).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minidecoder.evaluation import senteval_classifier as sc  # noqa: E402
from minidecoder.evaluation.probe_pool import default_workers, one_thread  # noqa: E402


class SentEvalsOwnLoop(sc.LogisticRegressionProbe):
    """The peer: SentEval's PyTorchClassifier.trainepoch as it is, an nn.Linear stepped by torch.optim.Adam
    after zero_grad and backward, in place of the probe's written-out Adam update (AdamMoments)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config.learning_rate, weight_decay=self.l2)

    def _train_passes(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.model.train()
        for _ in range(self.config.epoch_size):
            order = torch.from_numpy(self.shuffles.permutation(len(x)))
            for start in range(0, len(x), self.config.batch_size):
                rows = order[start:start + self.config.batch_size]
                loss = torch.nn.functional.cross_entropy(self.model(x[rows]), y[rows])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.epochs += self.config.epoch_size


def time_one_fit(probe_class: type, fit: tuple) -> tuple[float, sc.LogisticRegressionProbe]:
    fit_x, fit_y, check_x, check_y = fit
    with one_thread():
        probe = probe_class(fit_x.shape[1], 2, 1e-4)
        start = time.perf_counter()
        probe.fit(fit_x, fit_y, validation=(check_x, check_y))
    return time.perf_counter() - start, probe


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
    first_fold = next(iter(folds()))
    peer, theirs = time_one_fit(SentEvalsOwnLoop, first_fold)
    ours_time, ours = time_one_fit(sc.LogisticRegressionProbe, first_fold)
    same = torch.equal(theirs.model.weight, ours.model.weight) and torch.equal(theirs.model.bias, ours.model.bias)
    print(f"one fit ({ours.epochs} epochs): SentEval's loop {peer:.2f} s, minidecoder's probe {ours_time:.2f} s: "
          f"{peer / ours_time:.2f}x; the same weights bit for bit: {same}", flush=True)
    print(f"{args.folds} inner folds x {len(sc.L2_GRID)} L2 values on {args.rows:,} x {args.dim} rows", flush=True)
    timings = {}
    for workers in (1, args.workers):
        start = time.perf_counter()
        chosen = sc._grid_score(folds, 2, sc.ClassifierConfig(), None, workers)
        timings[workers] = time.perf_counter() - start, chosen
        print(f"workers={workers}: {timings[workers][0]:.1f} s, L2 {chosen[0]:g}, score {chosen[1]:.2f}", flush=True)
    (alone, first), (pooled, second) = timings[1], timings[args.workers]
    print(f"one after another / {args.workers} workers: {alone / pooled:.2f}x; same L2 and score: {first == second}")
    return 0 if first == second and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
