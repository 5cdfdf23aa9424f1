"""Bootstrap intervals on cases whose answer is known, and verdicts that follow the intervals."""
from __future__ import annotations

import numpy as np
import pytest

from minidecoder.evaluation.bootstrap import Bootstrap, TaskLayout, rank_rows
from reproduce.pieces import order_codes
from reproduce.claims import CLAIMS, HOLDS, REVERSED, UNDECIDED, Claim, judge, sentence, verdict
from minidecoder.evaluation.bootstrap import pearson, rankdata, spearman


def layout(seed: int = 0) -> list[TaskLayout]:
    """Two tasks shaped like the real ones: an "all" year of three unequal subsets, and one split."""
    rng = np.random.default_rng(seed)
    year = rng.uniform(0, 5, 300).round(1)  # rounded: gold has ties, as the real gold does
    split = rng.uniform(0, 5, 200).round(1)
    return [TaskLayout("YEAR", "all", year, (0, 120, 200, 300)), TaskLayout("SPLIT", "test", split, (0, 200))]


def test_rank_rows_is_rankdata_row_by_row() -> None:
    x = np.random.default_rng(1).integers(0, 6, (5, 40)).astype(float)  # many ties
    ranks = rank_rows(x)
    for i in range(5):
        np.testing.assert_array_equal(ranks[i], rankdata(x[i]))


def test_order_codes_keep_every_spearman() -> None:
    rng = np.random.default_rng(2)
    gold = rng.uniform(0, 5, 500).round(1)
    sims = np.round(gold + rng.normal(0, 1, 500), 2)  # ties on both sides
    codes = order_codes(sims)
    assert codes.dtype == np.uint16
    assert spearman(codes, gold) == spearman(sims, gold)
    index = rng.integers(0, 500, 500)  # a resample: duplicated pairs tie
    assert spearman(codes[index], gold[index]) == pytest.approx(spearman(sims[index], gold[index]), abs=1e-12)


def test_replicates_recompute_the_harness_statistic() -> None:
    """Each replicate is the Spearman of the resampled pairs (one over the concatenated year for
    "all"); the indices never leave their subset."""
    tasks = layout()
    boot = Bootstrap(tasks, resamples=20, seed=3)
    rng = np.random.default_rng(4)
    sims = {t.name: t.gold + rng.normal(0, 2, t.pairs) for t in tasks}
    reps = boot.replicates({"a": sims})["a"]
    for k, task in enumerate(tasks):
        index = boot.indices(k)
        for a, b in zip(task.bounds[:-1], task.bounds[1:]):
            assert index[:, a:b].min() >= a and index[:, a:b].max() < b
        for r in (0, 7, 19):
            expected = 100 * pearson(rankdata(sims[task.name][index[r]]), rankdata(task.gold[index[r]]))
            assert reps[k, r] == pytest.approx(expected, abs=1e-9)
    np.testing.assert_allclose(reps[-1], reps[:-1].mean(axis=0))


def test_identical_methods_give_an_interval_containing_zero() -> None:
    tasks = layout()
    rng = np.random.default_rng(5)
    sims = {t.name: t.gold + rng.normal(0, 1.5, t.pairs) for t in tasks}
    boot = Bootstrap(tasks)
    reps = boot.replicates({"a": sims, "b": {k: v.copy() for k, v in sims.items()}})
    for name, (lo, hi) in boot.interval(reps["a"] - reps["b"]).items():
        assert lo <= 0 <= hi, name
    alone = boot.interval(reps["a"])["avg"]
    assert alone[1] - alone[0] > 2  # a noisy method alone has a wide interval, the paired one is exactly 0


def test_gold_plus_small_noise_gives_a_high_narrow_interval() -> None:
    tasks = layout()
    rng = np.random.default_rng(6)
    sims = {t.name: t.gold + rng.normal(0, 0.05, t.pairs) for t in tasks}
    boot = Bootstrap(tasks)
    for name, (lo, hi) in boot.interval(boot.replicates({"a": sims})["a"]).items():
        assert lo > 97 and hi - lo < 2, (name, lo, hi)


def test_a_better_method_shows_in_the_paired_interval() -> None:
    tasks = layout()
    rng = np.random.default_rng(7)
    good = {t.name: t.gold + rng.normal(0, 0.5, t.pairs) for t in tasks}
    bad = {t.name: t.gold + rng.normal(0, 3.0, t.pairs) for t in tasks}
    boot = Bootstrap(tasks)
    reps = boot.replicates({"good": good, "bad": bad})
    lo, hi = boot.interval(reps["good"] - reps["bad"])["avg"]
    assert lo > 5
    assert boot.interval(reps["bad"] - reps["good"])["avg"] == pytest.approx((-hi, -lo))


def test_seeded_and_independent_of_the_other_rows() -> None:
    tasks = layout()
    rng = np.random.default_rng(8)
    a = {t.name: t.gold + rng.normal(0, 1, t.pairs) for t in tasks}
    b = {t.name: t.gold + rng.normal(0, 1, t.pairs) for t in tasks}
    alone = Bootstrap(tasks).replicates({"a": a})["a"]
    together = Bootstrap(tasks).replicates({"b": b, "a": a})["a"]
    np.testing.assert_array_equal(alone, together)
    assert not np.array_equal(alone, Bootstrap(tasks, seed=1).replicates({"a": a})["a"])


@pytest.mark.parametrize("lo, hi, expected", [(0.4, 2.5, HOLDS), (-3.0, -0.1, REVERSED), (-1.0, 1.0, UNDECIDED),
                                              (0.0, 1.0, UNDECIDED), (-1.0, 0.0, UNDECIDED)])
def test_verdict_follows_the_interval(lo: float, hi: float, expected: str) -> None:
    assert verdict(lo, hi) == expected
    flipped = {HOLDS: REVERSED, REVERSED: HOLDS, UNDECIDED: UNDECIDED}[expected]
    assert verdict(lo, hi, direction=-1) == flipped


def test_verdict_refuses_a_non_interval() -> None:
    with pytest.raises(ValueError):
        verdict(float("nan"), 1.0)


def test_claim_sentences_are_built_from_the_intervals() -> None:
    """Intervals on each side of zero and across it: the sentence states the verdict and the numbers,
    and places the paper's size against the interval."""
    claim = next(c for c in CLAIMS if c.method == "prompteol+tp")
    assert claim.paper_delta == 7.16  # 77.19 - 70.03, docs/spec.md section 10
    for (lo, hi), word, where in [((1.0, 3.0), HOLDS, "above"), ((-4.0, -2.0), REVERSED, "above"),
                                  ((-1.5, 8.0), UNDECIDED, "inside"), ((7.5, 9.0), HOLDS, "below")]:
        point = {"STS12": (lo + hi) / 2, "avg": (lo + hi) / 2}
        record = judge(claim, point, {"STS12": (lo, hi), "avg": (lo, hi)})
        assert record["verdict"] == word and record["scores"]["STS12"]["verdict"] == word
        line = sentence(record, "PromptEOL + TP", "PromptEOL")
        assert f"**{word}**" in line and f"[{lo:+.2f}, {hi:+.2f}]" in line
        assert f"paper +7.16: {where} the interval" in line
    direction_only = judge(Claim("htp", "mean", "HTP improves on mean pooling"), {"avg": 1.0}, {"avg": (0.5, 1.5)})
    assert direction_only["paper_delta"] is None and "direction only" in direction_only["size"]


def test_every_comparison_of_the_issue_is_a_claim() -> None:
    pairs = {(c.method, c.base) for c in CLAIMS}
    for prompt in ("prompteol", "pretended_cot", "knowledge", "metaeol"):
        assert (f"{prompt}+tp", prompt) in pairs and (f"{prompt}+cp", prompt) in pairs
    assert {("htp", "mean"), ("reba-2", "mean"), ("metaeol", "prompteol"), ("echo", "mean")} <= pairs
