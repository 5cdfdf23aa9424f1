"""SentEval's logistic-regression probe and its three validation schemes, as the papers ran them, and the
worker processes that train a grid's probes.

TP (Table 5) and CP (Table 6) score the transfer tasks "in line with prior works (SimCSE; MetaEOL)":
SentEval with `usepytorch=True, kfold=10` and the classifier
`{'nhid': 0, 'optim': 'adam', 'batch_size': 64, 'tenacity': 5, 'epoch_size': 4}`, seed 1111
(docs/spec.md section 11). This module restates, step for step, what those settings run in
facebookresearch/SentEval (read for this module: `senteval/tools/classifier.py`, `PyTorchClassifier`
and `MLP`; `senteval/tools/validation.py`, `InnerKFoldClassifier`, `KFoldClassifier`, `SplitClassifier`):

- the model is one `nn.Linear(E, C)` (`nhid 0`), initialised right after `torch.manual_seed(seed)`;
  `np.random.seed(seed)` starts the stream of shuffles;
- Adam (torch defaults, lr 1e-3) with `weight_decay` = the L2 value under test; cross-entropy. SentEval
  sets `loss_fn.size_average = False` after building the loss, which every PyTorch since 0.4.1 ignores
  (the reduction is fixed at construction): the loss the papers trained on is the batch **mean**, as here;
- `fit`: while not stopped and `nepoch <= max_epoch` (200): `epoch_size` (4) passes over the training
  rows, each in a fresh `np.random.permutation`, batches of 64; then accuracy on the validation rows;
  the best model so far is kept; a non-improving check stops training once `tenacity` (5) earlier checks
  failed to improve (SentEval's counter is never reset, so it is the 6th non-improving check in all,
  not 6 in a row);
- validation rows: the given dev set, or (`validation_split=0.05`) the first 5% of a permutation drawn
  from the seeded stream, the rest training;
- L2 grid with `usepytorch=True`: `[10**t for t in range(-5, -1)]` = 1e-5, 1e-4, 1e-3, 1e-2 (the grids
  `2**t` in validation.py belong to the scikit-learn branch, which the papers did not run); a grid
  score is `round(100 * mean accuracy, 2)` and `np.argmax` takes the first best;
- folds: scikit-learn's `StratifiedKFold(n_splits=10, shuffle=True, random_state=1111)`, on the rows in
  the order the task hands them (SentEval's own sort; see transfer.py).

Predictions use `argmax` of the logits (`output.data.max(1)[1]`), the first class on a tie. The three
schemes also return each test row's prediction, for the bootstrap intervals (transfer.py).

The probes run in worker processes: the same accuracies as one after another, faster.

An inner k-fold task trains 410 probes, each a few seconds of small steps that
one CPU thread runs best, so a task takes tens of minutes on one core. The probes of one L2 grid do not
depend on each other: each is seeded alone (`LogisticRegressionProbe` seeds its own weights and its own
shuffles), so where it runs does not change it. Here they run in `workers` spawned processes, each on
one thread; with `workers=1`, in this process, also on one thread (`one_thread`), so both give the same
probes bit for bit (tests/evaluation/test_transfer.py checks it).

A task's rows are written once to a temporary folder that every worker memory-maps (`shared_rows`), and a
job names its rows by index: an inner k-fold task would otherwise pickle its training rows into each of
its 400 grid jobs (about 20 MB each for MR), which on 16 CPUs kept the workers waiting on the parent.
"""
from __future__ import annotations

import contextlib
import copy
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from minidecoder.errors import OutputError


T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """The CPUs this process may use: the probes run after the embeddings, so the cores are free."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread while probes train here, as in a worker; the earlier count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_all(train: Callable[[T], R], jobs: list[T], workers: int = 1,
              finished: Callable[[int], None] | None = None) -> list[R]:
    """`train(job)` for every job, in the jobs' order: here on one thread, or in `workers` processes
    (`train` must be a module-level function, so a spawned worker can import it). `finished(n)` is called
    as job n's result arrives, in the jobs' order (for a progress bar)."""
    if workers <= 1 or len(jobs) <= 1:
        with one_thread():
            return [_reported(n, train(job), finished) for n, job in enumerate(jobs)]
    pool = _pool(workers)
    try:
        return [_reported(n, result, finished) for n, result in enumerate(pool.map(train, jobs))]
    except BaseException:  # Ctrl-C, SIGTERM or a failed probe: stop at once, not after the queued probes
        _POOLS.pop(workers, None)
        processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise


_POOLS: dict[int, ProcessPoolExecutor] = {}  # kept for the process's life: an inner k-fold task asks 10 times


def _pool(workers: int) -> ProcessPoolExecutor:
    """The worker processes, started once (each imports torch, seconds) and started again if one died."""
    pool = _POOLS.get(workers)
    if pool is None or getattr(pool, "_broken", False):
        # spawn, not fork: a forked copy of a process whose torch already ran threads can hang
        pool = _POOLS[workers] = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                                     initializer=_start_worker)
    return pool


def _start_worker() -> None:
    """One thread, as `one_thread` here; Ctrl-C is the parent's to handle (a worker's would print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def _reported(n: int, result: R, finished: Callable[[int], None] | None) -> R:
    if finished is not None:
        finished(n)
    return result


@dataclass(frozen=True)
class SharedRows:
    """A task's rows (x: (N, E) features, y: (N,) labels) in a folder of .npy files that each process maps
    once; a job carries this (a path) and row indices, and `take` gives the very values indexing the
    arrays would."""

    folder: str

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, y = _mapped(self.folder)
        return np.asarray(x[rows]), np.asarray(y[rows])


_MAPPED: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # this process's maps: the current task's alone


def _mapped(folder: str) -> tuple[np.ndarray, np.ndarray]:
    if folder not in _MAPPED:
        _MAPPED.clear()  # an earlier task's folder is gone; let its pages go
        _MAPPED[folder] = (np.load(Path(folder) / "x.npy", mmap_mode="r"), np.load(Path(folder) / "y.npy", mmap_mode="r"))
    return _MAPPED[folder]


@contextlib.contextmanager
def shared_rows(x: np.ndarray, y: np.ndarray) -> Iterator[SharedRows]:
    """x and y written once to a temporary folder (removed after) for the jobs of one task."""
    with tempfile.TemporaryDirectory(prefix="minidecoder-probe-rows-") as folder:
        try:
            np.save(Path(folder) / "x.npy", np.ascontiguousarray(x))
            np.save(Path(folder) / "y.npy", np.ascontiguousarray(y))
        except OSError as error:
            raise OutputError(f"could not write the probes' rows ({x.nbytes / 2**20:.0f} MB) to {folder}: {error}",
                              "free space there, or point TMPDIR at a folder with room") from None
        try:
            yield SharedRows(folder)
        finally:
            _MAPPED.pop(folder, None)


SEED = 1111
L2_GRID: tuple[float, ...] = tuple(10.0 ** t for t in range(-5, -1))  # SentEval, usepytorch=True
KFOLD = 10


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's `params['classifier']` as the papers set it, plus MLP's defaults they left alone."""

    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200  # MLP's default
    learning_rate: float = 1e-3  # 'adam' -> torch.optim.Adam with its default lr
    seed: int = SEED


class LogisticRegressionProbe:
    """SentEval's `MLP` with `nhid 0`: a linear layer trained by Adam with L2 `weight_decay`."""

    def __init__(self, input_dim: int, num_classes: int, l2: float, config: ClassifierConfig = ClassifierConfig()) -> None:
        if not l2 >= 0 or not config.learning_rate >= 0:  # as torch.optim.Adam refuses them
            raise ValueError(f"invalid weight_decay (L2) {l2} or learning rate {config.learning_rate}: both must be >= 0")
        self.config, self.l2 = config, l2
        self.shuffles = np.random.RandomState(config.seed)  # = np.random.seed(seed) then np.random.permutation
        with torch.random.fork_rng(devices=[]):  # SentEval seeds the global generator; we leave it as it was
            torch.manual_seed(config.seed)
            self.model = nn.Linear(input_dim, num_classes)
        self.adam = [AdamMoments(p) for p in self.model.parameters()]  # weight, bias
        self.epochs = 0

    def fit(self, x: np.ndarray, y: np.ndarray, validation: tuple[np.ndarray, np.ndarray] | None = None,
            validation_split: float | None = None) -> float:
        """Train until early stopping; keep the model of best validation accuracy; return that accuracy."""
        if validation is not None:
            train_x, train_y, dev_x, dev_y = x, y, *validation
        else:  # SentEval's prepare_split: the first int(split * N) rows of one permutation validate
            order = self.shuffles.permutation(len(x))
            cut = int(validation_split * len(x))
            train_x, train_y, dev_x, dev_y = x[order[cut:]], y[order[cut:]], x[order[:cut]], y[order[:cut]]
        train_x, train_y = torch.as_tensor(train_x, dtype=torch.float32), torch.as_tensor(train_y, dtype=torch.long)
        best, best_state, misses, self.epochs = -1.0, None, 0, 0
        while self.epochs <= self.config.max_epoch:
            self._train_passes(train_x, train_y)
            accuracy = self.score(dev_x, dev_y)
            if accuracy > best:
                best, best_state = accuracy, copy.deepcopy(self.model.state_dict())
            else:
                if misses >= self.config.tenacity:  # SentEval's counter: never reset on an improvement
                    break
                misses += 1
        self.model.load_state_dict(best_state)
        return best

    def _train_passes(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One SentEval 'epoch': `epoch_size` passes, each over a fresh permutation, in batches."""
        size, weight, bias = self.config.batch_size, self.model.weight, self.model.bias
        for _ in range(self.config.epoch_size):
            order = torch.from_numpy(self.shuffles.permutation(len(x)))
            for start in range(0, len(x), size):
                rows = order[start:start + size]  # index_select: x[rows]'s rows, without advanced indexing's cost
                batch_x, batch_y = x.index_select(0, rows), y.index_select(0, rows)
                loss = nn.functional.cross_entropy(nn.functional.linear(batch_x, weight, bias), batch_y)  # batch mean
                gradients = torch.autograd.grad(loss, (weight, bias))
                with torch.no_grad():
                    for parameter, gradient, moments in zip((weight, bias), gradients, self.adam):
                        moments.update(parameter, gradient, self.config.learning_rate, self.l2)
        self.epochs += self.config.epoch_size

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        """(N,) class indices: the argmax of the logits, first class on a tie."""
        self.model.eval()
        logits = self.model(torch.as_tensor(x, dtype=torch.float32))  # (N, C)
        return logits.argmax(dim=1).numpy()

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.predict(x) == np.asarray(y)).mean())


class AdamMoments:
    """`torch.optim.Adam` (betas 0.9, 0.999, eps 1e-8, L2 as `weight_decay`) for one tensor: the update of its
    single-tensor path, the one a CPU runs, op for op, so the trained weights are the optimizer's bit for bit
    (tested against it). Written out because the optimizer's bookkeeping (param groups, state dicts,
    zero_grad) costs more than the update itself on a 2 x 576 probe: `python tools/bench_probes.py` times a
    fit against SentEval's own loop and prints the ratio."""

    def __init__(self, parameter: torch.Tensor, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(parameter), torch.zeros_like(parameter)  # m, v
        self.beta1, self.beta2, self.eps, self.step = beta1, beta2, eps, 0.0

    def update(self, parameter: torch.Tensor, gradient: torch.Tensor, lr: float, weight_decay: float) -> None:
        self.step += 1.0  # Adam keeps t as a float tensor and reads it back as a float
        if weight_decay != 0:
            gradient = gradient.add(parameter, alpha=weight_decay)  # g + lambda theta
        self.exp_avg.lerp_(gradient, 1 - self.beta1)  # m = beta1 m + (1 - beta1) g
        self.exp_avg_sq.mul_(self.beta2).addcmul_(gradient, gradient, value=1 - self.beta2)  # v = beta2 v + (1 - beta2) g^2
        bias_correction1 = 1 - self.beta1 ** self.step
        bias_correction2_sqrt = (1 - self.beta2 ** self.step) ** 0.5
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        parameter.addcdiv_(self.exp_avg, denom, value=-(lr / bias_correction1))  # theta -= lr m_hat / (sqrt(v_hat) + eps)


@dataclass
class ProbeResult:
    """A task's SentEval scores plus what the bootstrap needs: every test row's prediction and gold."""

    dev_accuracy: float  # x100, as SentEval reports 'devacc'
    test_accuracy: float  # x100, as SentEval reports 'acc'
    predictions: np.ndarray  # (N_test,) predicted class of each test row (out-of-fold for inner k-fold)
    gold: np.ndarray  # (N_test,)
    chosen_l2: list[float] = field(default_factory=list)  # per outer fold, or one value


Progress = Callable[[int], None] | None  # called with the number of fits just finished


def _folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SentEval's `StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(X, y)`: (train rows,
    test rows) per fold. scikit-learn itself, so the folds are SentEval's (an optional extra here)."""
    try:
        from sklearn.model_selection import StratifiedKFold
    except ImportError:
        from minidecoder.errors import InputError
        raise InputError("the transfer tasks need scikit-learn (SentEval's StratifiedKFold folds)",
                         "pip install 'minidecoder[transfer]' (or scikit-learn)") from None
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(folds.split(np.zeros((len(y), 1)), y))


Grid = list[tuple[np.ndarray, np.ndarray]]  # (fit rows, check rows) of each fold, as indices into a task's rows


def _grid_scores(rows: SharedRows, grids: list[Grid], num_classes: int, config: ClassifierConfig,
                 progress: Progress, workers: int = 1) -> list[tuple[float, float]]:
    """(best L2, its score) of each grid, as SentEval's grid search finds it: for each L2 value, a probe
    trained on each fold's fit rows, early-stopped on its check rows and scored there; the L2's score is
    `round(100 * mean accuracy, 2)` and `np.argmax` keeps the first best. The probes are independent (each
    seeded alone), so all the grids' probes go to the `workers` processes at once, which keeps them busy
    across an inner k-fold task's outer folds: the same accuracies bit for bit (`train_all`; every probe
    trains on one thread, here or there)."""
    jobs = [(rows, fit, check, l2, num_classes, config) for grid in grids for fit, check in grid for l2 in L2_GRID]

    def finished(n: int) -> None:
        if progress and n % len(L2_GRID) == len(L2_GRID) - 1:
            progress(1)  # a fold's four probes are done

    accuracies = iter(train_all(_trained_accuracy, jobs, workers, finished))  # in the jobs' order
    chosen = []
    for grid in grids:
        per_fold = [[next(accuracies) for _ in L2_GRID] for _ in grid]
        scores = [round(100 * float(np.mean(per_l2)), 2) for per_l2 in zip(*per_fold)]  # over folds, per L2
        best = int(np.argmax(scores))
        chosen.append((L2_GRID[best], scores[best]))
    return chosen


def _trained_accuracy(job: tuple) -> float:
    """One grid probe (a job of `_grid_scores`): trained on the fit rows, early-stopped on the check rows, and
    its accuracy there."""
    rows, fit, check, l2, num_classes, config = job
    (fit_x, fit_y), (check_x, check_y) = rows.take(fit), rows.take(check)
    probe = LogisticRegressionProbe(fit_x.shape[1], num_classes, l2, config)
    probe.fit(fit_x, fit_y, validation=(check_x, check_y))
    return probe.score(check_x, check_y)


def _fold_predictions(job: tuple) -> np.ndarray:
    """An outer fold's model (a job of `inner_kfold`): trained on the fold's training rows with 5% held out
    for early stopping, at the L2 its grid chose; its predictions for the fold's test rows."""
    rows, train, test, l2, num_classes, config = job
    train_x, train_y = rows.take(train)
    probe = LogisticRegressionProbe(train_x.shape[1], num_classes, l2, config)
    probe.fit(train_x, train_y, validation_split=0.05)
    return probe.predict(rows.take(test)[0])


def inner_kfold(x: np.ndarray, y: np.ndarray, num_classes: int, k: int = KFOLD,
                config: ClassifierConfig = ClassifierConfig(), progress: Progress = None,
                workers: int = 1) -> ProbeResult:
    """SentEval's `InnerKFoldClassifier` (MR, CR, SUBJ, MPQA): k outer folds; in each, the L2 value is
    chosen by an inner k-fold over the outer training rows, then a model trained on all of them (5% held
    out for early stopping) predicts the outer test fold. Test accuracy: the mean of the k fold accuracies,
    each rounded to 2 decimals as SentEval does. The folds' grids run together, then the folds' models."""
    outer = _folds(y, k, config.seed)
    # SentEval's innerskf splits the outer training rows with the same seed; as indices into all rows
    grids = [[(train[fit], train[check]) for fit, check in _folds(y[train], k, config.seed)] for train, _ in outer]
    with shared_rows(x, y) as rows:
        chosen = _grid_scores(rows, grids, num_classes, config, progress, workers)
        jobs = [(rows, train, test, l2, num_classes, config) for (train, test), (l2, _) in zip(outer, chosen)]
        fold_predictions = train_all(_fold_predictions, jobs, workers)
    predictions = np.empty(len(y), dtype=np.int64)
    fold_scores = []
    for (_, test), predicted in zip(outer, fold_predictions):
        predictions[test] = predicted
        fold_scores.append(round(100 * float((predicted == y[test]).mean()), 2))
    dev_scores = [dev for _, dev in chosen]
    return ProbeResult(round(float(np.mean(dev_scores)), 2), round(float(np.mean(fold_scores)), 2),
                       predictions, np.asarray(y), [l2 for l2, _ in chosen])


def kfold_then_test(x: np.ndarray, y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, num_classes: int,
                    k: int = KFOLD, config: ClassifierConfig = ClassifierConfig(), progress: Progress = None,
                    workers: int = 1) -> ProbeResult:
    """SentEval's `KFoldClassifier` (TREC, MRPC): the L2 value chosen by k-fold cross-validation on the
    training set, then a model trained on all of it (5% held out for early stopping) scored on the test set."""
    with shared_rows(x, y) as rows:
        [(l2, dev)] = _grid_scores(rows, [_folds(y, k, config.seed)], num_classes, config, progress, workers)
    return _final(x, y, test_x, test_y, num_classes, l2, dev, config, validation_split=0.05)


def dev_selected(x: np.ndarray, y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray, test_x: np.ndarray,
                 test_y: np.ndarray, num_classes: int, config: ClassifierConfig = ClassifierConfig(),
                 progress: Progress = None, workers: int = 1) -> ProbeResult:
    """SentEval's `SplitClassifier` (SST2): each L2 value trained on train (early stopping on dev) and
    scored on dev; the best is trained again the same way and scored on test."""
    with shared_rows(np.concatenate([x, dev_x]), np.concatenate([y, dev_y])) as rows:
        train_and_dev = [(np.arange(len(x)), np.arange(len(x), len(x) + len(dev_x)))]
        [(l2, dev)] = _grid_scores(rows, [train_and_dev], num_classes, config, progress, workers)
    return _final(x, y, test_x, test_y, num_classes, l2, dev, config, validation=(dev_x, dev_y))


def _final(x, y, test_x, test_y, num_classes: int, l2: float, dev: float, config: ClassifierConfig,
           **validation) -> ProbeResult:
    with one_thread():
        probe = LogisticRegressionProbe(x.shape[1], num_classes, l2, config)
        probe.fit(x, y, **validation)
        predictions = probe.predict(test_x)
    accuracy = round(100 * float((predictions == np.asarray(test_y)).mean()), 2)
    return ProbeResult(dev, accuracy, predictions, np.asarray(test_y), [l2])


def fits_needed(scheme: str, k: int = KFOLD) -> int:
    """How many folds of the L2 grid a scheme reports to `progress` (for a progress bar's total)."""
    return {"inner_kfold": k * k, "kfold": k, "split": 1}[scheme]
