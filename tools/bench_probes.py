"""Time SentEval's probe: one fit against SentEval's own training loop, and a whole inner k-fold task with
its folds' grids run together against one fold after another.

    python tools/bench_probes.py                      # MR-shaped: 10,662 x 576, 10 outer x 10 inner folds
    python tools/bench_probes.py --rows 2000 --folds 3

On random features shaped like a SmolLM2 task:
- one probe fit (L2 1e-4, early-stopped on the first inner fold's held-out rows), minidecoder's
  `LogisticRegressionProbe` against SentEval's own loop (`SentEvalsOwnLoop`: nn.Linear, zero_grad,
  backward, torch.optim.Adam), both on one thread; prints both, their ratio, and whether the trained
  weights are equal bit for bit (tests/evaluation/test_transfer.py holds the probe to that);
- one inner k-fold task (MR, CR, SUBJ and MPQA are such tasks), both with one worker process per CPU:
  `inner_kfold` (every outer fold's grid at once, on rows the workers map from one shared file) against
  `fold_after_fold`, the scheduling it replaced (each outer fold's 40 grid probes alone, each job carrying
  copies of its rows, then the fold's model in this process); prints both, their ratio, and whether the
  two chose the same L2 values and predicted the same test labels.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minidecoder.evaluation import senteval_probe as sc  # noqa: E402
from minidecoder.evaluation.senteval_probe import default_workers, one_thread  # noqa: E402


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


def _probe_on_copies(job: tuple) -> float:
    """The grid job before shared rows: it carried its own copies of the fit and check rows."""
    fit_x, fit_y, check_x, check_y, l2 = job
    probe = sc.LogisticRegressionProbe(fit_x.shape[1], 2, l2)
    probe.fit(fit_x, fit_y, validation=(check_x, check_y))
    return probe.score(check_x, check_y)


def fold_after_fold(x: np.ndarray, y: np.ndarray, folds: int, workers: int) -> tuple[list[float], np.ndarray]:
    """The peer: SentEval's InnerKFoldClassifier scheduled as before, one outer fold at a time (its grid's
    jobs to the workers, then its model here on one thread). Returns the chosen L2s and the predictions."""
    chosen, predictions = [], np.empty(len(y), dtype=np.int64)
    for train, test in sc._folds(y, folds, sc.SEED):
        x_train, y_train = x[train], y[train]
        inner = sc._folds(y_train, folds, sc.SEED)
        jobs = [(x_train[fit], y_train[fit], x_train[check], y_train[check], l2) for fit, check in inner
                for l2 in sc.L2_GRID]
        accuracies = sc.train_all(_probe_on_copies, jobs, workers)
        scores = [round(100 * float(np.mean(accuracies[n::len(sc.L2_GRID)])), 2) for n in range(len(sc.L2_GRID))]
        chosen.append(sc.L2_GRID[int(np.argmax(scores))])
        with one_thread():
            probe = sc.LogisticRegressionProbe(x.shape[1], 2, chosen[-1])
            probe.fit(x_train, y_train, validation_split=0.05)
            predictions[test] = probe.predict(x[test])
    return chosen, predictions


def time_one_fit(probe_class: type, fit: tuple) -> tuple[float, sc.LogisticRegressionProbe]:
    fit_x, fit_y, check_x, check_y = fit
    with one_thread():
        probe = probe_class(fit_x.shape[1], 2, 1e-4)
        start = time.perf_counter()
        probe.fit(fit_x, fit_y, validation=(check_x, check_y))
    return time.perf_counter() - start, probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10662, help="rows of the task (MR: 10,662)")
    parser.add_argument("--dim", type=int, default=576, help="embedding width (SmolLM2: 576)")
    parser.add_argument("--folds", type=int, default=sc.KFOLD, help="outer and inner folds (SentEval: 10)")
    parser.add_argument("--workers", type=int, default=default_workers(), help="processes (default: one per CPU)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, args.rows)
    x = (rng.standard_normal((args.rows, args.dim)) + 0.1 * y[:, None]).astype(np.float32)
    train, _ = sc._folds(y, args.folds, sc.SEED)[0]
    fit, check = sc._folds(y[train], args.folds, sc.SEED)[0]
    first_fold = (x[train][fit], y[train][fit], x[train][check], y[train][check])
    peer, theirs = time_one_fit(SentEvalsOwnLoop, first_fold)
    ours_time, ours = time_one_fit(sc.LogisticRegressionProbe, first_fold)
    same = torch.equal(theirs.model.weight, ours.model.weight) and torch.equal(theirs.model.bias, ours.model.bias)
    print(f"one fit ({ours.epochs} epochs): SentEval's loop {peer:.2f} s, minidecoder's probe {ours_time:.2f} s: "
          f"{peer / ours_time:.2f}x; the same weights bit for bit: {same}", flush=True)
    print(f"an inner k-fold task: {args.folds} outer x {args.folds} inner folds x {len(sc.L2_GRID)} L2 values on "
          f"{args.rows:,} x {args.dim} rows, {args.workers} worker processes", flush=True)
    sc.train_all(_probe_on_copies, [first_fold + (1e-2,)] * args.workers, args.workers)  # start them
    start = time.perf_counter()
    peer_chosen, peer_predictions = fold_after_fold(x, y, args.folds, args.workers)
    before = time.perf_counter() - start
    print(f"fold after fold (the peer): {before:.1f} s", flush=True)
    start = time.perf_counter()
    result = sc.inner_kfold(x, y, 2, k=args.folds, workers=args.workers)
    now = time.perf_counter() - start
    agree = result.chosen_l2 == peer_chosen and np.array_equal(result.predictions, peer_predictions)
    print(f"inner_kfold (grids together, shared rows): {now:.1f} s: {before / now:.2f}x the peer; "
          f"the same L2 values and predictions: {agree}")
    return 0 if agree and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
