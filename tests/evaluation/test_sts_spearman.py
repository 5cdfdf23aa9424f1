"""Spearman without scipy must equal scipy.stats.spearmanr, ties included."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from minidecoder.evaluation.bootstrap import pearson, rankdata, spearman

# small integer pools force many ties; floats cover the generic case
tied = st.lists(st.integers(min_value=0, max_value=4), min_size=2, max_size=60)
floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


def scipy_spearman(x, y) -> float:
    return float(scipy.stats.spearmanr(x, y)[0])


def test_rankdata_average_ties() -> None:
    np.testing.assert_array_equal(rankdata([10, 20, 20, 5, 20]), [2, 4, 4, 1, 4])
    np.testing.assert_array_equal(rankdata([3.0, 3.0]), [1.5, 1.5])


@given(st.lists(floats | st.integers(-3, 3).map(float), min_size=1, max_size=80))
def test_rankdata_matches_scipy(values: list[float]) -> None:
    np.testing.assert_array_equal(rankdata(values), scipy.stats.rankdata(values, method="average"))


def test_known_values() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    x, y = [1, 2, 2, 3, 5], [2, 1, 4, 4, 5]
    assert spearman(x, y) == pytest.approx(scipy_spearman(x, y), abs=1e-15)


@settings(max_examples=200)
@given(st.data())
def test_matches_scipy_with_ties(data: st.DataObject) -> None:
    x = data.draw(tied)
    y = data.draw(st.lists(st.integers(0, 4), min_size=len(x), max_size=len(x)))
    expected = scipy_spearman(x, y)
    got = spearman(x, y)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200)
@given(st.data())
def test_matches_scipy_on_floats(data: st.DataObject) -> None:
    x = data.draw(st.lists(floats, min_size=2, max_size=100))
    y = data.draw(st.lists(floats, min_size=len(x), max_size=len(x)))
    expected = scipy_spearman(x, y)
    got = spearman(x, y)
    assert math.isnan(got) == math.isnan(expected)
    if not math.isnan(expected):
        assert got == pytest.approx(expected, abs=1e-12)


@given(st.lists(floats, min_size=3, max_size=50, unique=True))
def test_invariant_under_monotone_maps_and_symmetric(x: list[float]) -> None:
    y = list(reversed(x))
    base = spearman(x, y)
    # maps that are strictly monotone in floating point too (exp or +c could merge values)
    assert spearman(2.0 * np.asarray(x), y) == pytest.approx(base, abs=1e-12)
    assert spearman(-np.asarray(x), y) == pytest.approx(-base, abs=1e-12)
    assert spearman(y, x) == pytest.approx(base, abs=1e-12)
    assert -1.0 <= base <= 1.0


def test_large_tie_heavy_sample_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 26, size=5000) / 5  # STS-like 0..5 grid with heavy ties
    pred = np.round(gold + rng.normal(0, 1, size=5000), 2)
    assert spearman(pred, gold) == pytest.approx(scipy_spearman(pred, gold), abs=1e-13)


def test_constant_input_is_nan() -> None:
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(pearson([1.0], [2.0]))


def test_nan_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        rankdata([1.0, float("nan")])
