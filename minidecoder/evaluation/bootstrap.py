"""The statistics every family shares: Spearman without scipy, and bootstrap intervals.

Spearman rank correlation without scipy: average ranks for ties, then Pearson on the ranks.

This is what `scipy.stats.spearmanr(x, y)[0]` returns for two 1-D inputs (SentEval's scorer):
`rankdata(method="average")` on each side and the Pearson coefficient of the two rank vectors,
all in float64. A constant input has no defined correlation and gives NaN, as scipy does.

Bootstrap intervals over STS pairs: one row's score, and the paired difference of two rows.

A resample draws pairs with replacement **within each subset** (so every subset keeps its size and
STS12-16 keep their mix of subsets), then recomputes the task score exactly as the harness forms it
(`sts.StsScorer.__call__`): a Spearman x100 of similarity against gold over the concatenation of
the year's subsets ("all", STS12-16), or over the single split (STS-B test, SICK-R test); Avg. is the
mean of the task scores of the same resample. Two rows compared on the same resamples (the indices
depend only on the seed and the data, never on the row) give a paired interval of their difference.
Percentile intervals; 1,000 resamples and seed 0 unless told otherwise.

numpy only. Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13 (percentile interval).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike



def rankdata(values: ArrayLike) -> np.ndarray:
    """1-based ranks of a 1-D array; tied values share the mean of the ranks they span. (N,) float64."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if np.isnan(x).any():
        raise ValueError("rankdata got NaN; NaNs have no rank (SentEval maps NaN cosines to 0 before ranking)")
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # start index of each run of equal values in sorted order
    starts = np.flatnonzero(np.concatenate(([True], sorted_x[1:] != sorted_x[:-1])))
    ends = np.concatenate((starts[1:], [x.size]))
    mean_rank = (starts + ends + 1) / 2.0  # mean of 1-based ranks starts+1 .. ends
    ranks = np.empty_like(x)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson correlation of two equal-length 1-D arrays in float64; NaN if either is constant."""
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.size != b.size:
        raise ValueError(f"pearson needs equal lengths, got {a.size} and {b.size}")
    if a.size < 2:
        return float("nan")
    a = a - a.mean()
    b = b - b.mean()
    denominator = np.sqrt(np.dot(a, a) * np.dot(b, b))
    if denominator == 0.0:
        return float("nan")
    # clip: rounding can push |r| a hair past 1 for (anti-)identical inputs, as scipy also clips
    return float(np.clip(np.dot(a, b) / denominator, -1.0, 1.0))


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation of two 1-D arrays (in [-1, 1]; NaN if either side is constant)."""
    return pearson(rankdata(x), rankdata(y))


RESAMPLES = 1000
SEED = 0
LEVEL = 0.95


@dataclass(frozen=True)
class TaskLayout:
    """What a resample of one task needs: its gold in the harness's pair order, and subset bounds."""

    name: str
    setting: str  # "all" (STS12-16) or the split's name
    gold: np.ndarray  # (P,) float64, subsets concatenated in the task's order (the harness's order)
    bounds: tuple[int, ...]  # subset s holds pairs bounds[s]:bounds[s+1]

    @property
    def pairs(self) -> int:
        return int(self.bounds[-1])


def rank_rows(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of every row of a (B, n) array, float64;
    row by row what `spearman.rankdata` returns."""
    x = np.asarray(x, dtype=np.float64)
    B, n = x.shape
    order = np.argsort(x, axis=1, kind="stable")  # (B, n)
    s = np.take_along_axis(x, order, axis=1)  # (B, n)
    position = np.broadcast_to(np.arange(n), (B, n))
    new_run = np.ones((B, n), dtype=bool)
    new_run[:, 1:] = s[:, 1:] != s[:, :-1]
    last_of_run = np.ones((B, n), dtype=bool)
    last_of_run[:, :-1] = new_run[:, 1:]
    first = np.maximum.accumulate(np.where(new_run, position, 0), axis=1)  # run start for each sorted slot
    last = np.flip(np.minimum.accumulate(np.flip(np.where(last_of_run, position, n - 1), axis=1), axis=1), axis=1)
    ranks = np.empty((B, n))
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks


def pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Pearson of two (B, n) arrays; NaN where a row is constant (as `spearman.pearson`)."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(axis=1) / denominator
    return np.clip(np.where(denominator == 0.0, np.nan, r), -1.0, 1.0)


class Bootstrap:
    """Resamples fixed by (data, resamples, seed); scores any number of rows on the same resamples.

        boot = Bootstrap(layouts)                     # a TaskLayout per task
        reps = boot.replicates({"a": sims_a, "b": sims_b})  # sims: {task name: (P,) similarities}
        boot.interval(reps["a"])                              # {task: (lo, hi), ..., "avg": (lo, hi)}
        boot.interval(reps["a"] - reps["b"])                  # the paired difference's interval
    """

    def __init__(self, layout: Sequence[TaskLayout], resamples: int = RESAMPLES, seed: int = SEED,
                 level: float = LEVEL) -> None:
        self.layout = list(layout)
        self.resamples, self.seed, self.level = resamples, seed, level

    def indices(self, k: int) -> np.ndarray:
        """(B, P) pair indices of task k's resamples: each subset's pairs drawn with replacement from
        that subset only. Depends on (seed, k, subset sizes) alone, so every row sees the same draws."""
        task = self.layout[k]
        rng = np.random.default_rng([self.seed, k])
        parts = [a + rng.integers(0, b - a, size=(self.resamples, b - a))
                 for a, b in zip(task.bounds[:-1], task.bounds[1:])]
        return np.concatenate(parts, axis=1)

    def replicates(self, rows: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Per row, a (T + 1, B) array: the score x100 of every task (layout order) on each resample,
        and last the Avg. of those T task scores. rows: {row: {task name: (P,) similarities or codes}}."""
        T, B = len(self.layout), self.resamples
        out = {row: np.empty((T + 1, B)) for row in rows}
        for k, task in enumerate(self.layout):
            index = self.indices(k)  # (B, P)
            gold = rank_rows(task.gold[index])  # (B, P), shared by every row
            for row, sims in rows.items():
                values = np.asarray(sims[task.name], dtype=np.float64)
                if values.shape != (task.pairs,):
                    raise ValueError(f"{row}/{task.name}: {values.shape} similarities for {task.pairs} pairs")
                out[row][k] = 100.0 * pearson_rows(rank_rows(values[index]), gold)
        for reps in out.values():
            reps[T] = reps[:T].mean(axis=0)
        return out

    @property
    def names(self) -> list[str]:
        """Row labels of a replicates array: the task names, then "avg"."""
        return [task.name for task in self.layout] + ["avg"]

    def interval(self, replicates: np.ndarray) -> dict[str, tuple[float, float]]:
        """Percentile interval at `level` of each line of a (T + 1, B) replicates array (a row's
        scores, or the difference of two rows' replicates for a paired interval)."""
        out = {}
        for name, values in zip(self.names, replicates):
            finite = values[np.isfinite(values)]  # a resample whose similarities are all equal has no Spearman
            out[name] = percentile_interval(finite, self.level) if finite.size else (np.nan, np.nan)
        return out


def mean_interval(values: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED,
                  level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the mean of per-item scores (a query's nDCG@10, a test item's accuracy over
    experiments), items drawn with replacement: the bootstrap over queries or over test items."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return (float("nan"), float("nan"))
    return item_interval(values.size, lambda draws: values[draws].mean(axis=1), resamples, seed, level)


def item_interval(items: int, statistic, resamples: int = RESAMPLES, seed: int = SEED,
                  level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of `statistic` (a (B, items) array of item indices -> (B,) values) over resamples
    that draw the items with replacement."""
    draws = np.random.default_rng(seed).integers(0, items, size=(resamples, items))
    return percentile_interval(statistic(draws), level)


def percentile_interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` share of the replicates: the percentile interval every table reports."""
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(replicates, [tail, 100.0 - tail])
    return float(lo), float(hi)
