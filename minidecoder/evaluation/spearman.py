"""Spearman rank correlation without scipy: average ranks for ties, then Pearson on the ranks.

This is what `scipy.stats.spearmanr(x, y)[0]` returns for two 1-D inputs (SentEval's scorer):
`rankdata(method="average")` on each side and the Pearson coefficient of the two rank vectors,
all in float64. A constant input has no defined correlation and gives NaN, as scipy does.
"""
from __future__ import annotations

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
