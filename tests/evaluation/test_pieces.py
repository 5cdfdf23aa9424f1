"""Test scoring in pieces (reproduce.pieces): the pieces' cosines are the one-table cosines,
every distinct sentence is timed exactly once, and a resume on an empty memory gives the same numbers."""
from __future__ import annotations

import numpy as np
import pytest

from minidecoder.evaluation import ALL_SEVEN, StsScorer, load_tasks, unique_sentences
from minidecoder.evaluation.family import encode_sentences
from reproduce.pieces import PieceEncoder, PiecePlan, cosines_text, parse_cosines
from test_sts_data import DATA, needs_data
from test_sts_harness import CountingEncoder


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(list(ALL_SEVEN), DATA, 40)  # 40 pairs per subset: STS12 has 200, so several pieces


@needs_data
def test_pieces_give_the_one_table_cosines_and_time_each_sentence_once(tasks) -> None:
    plan = PiecePlan(tasks, size=64)
    assert [p.label() for p in plan.pieces[:4]] == ["STS12[0:64]", "STS12[64:128]", "STS12[128:192]", "STS12[192:200]"]
    encoder = CountingEncoder()
    pieces = PieceEncoder(plan, encoder, chunk_size=50)
    cosines, timed = [], []
    for index in range(len(plan.pieces)):
        c, spent = pieces.run(index)
        cosines.append(c)
        timed.append(spent)
    sentences = unique_sentences(tasks)
    scorer = StsScorer(tasks, sentences)
    whole = scorer.cosines(encode_sentences(CountingEncoder(), sentences, chunk_size=50, progress=False))
    for mine, theirs in zip(plan.by_task(cosines), whole):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-12)
    assert scorer.score(plan.by_task(cosines))["avg"] == pytest.approx(scorer.score(whole)["avg"], abs=1e-9)
    # uninterrupted: each distinct sentence is encoded once, and that once is inside a timed step
    encoded = [s for call in encoder.calls for s in call]
    assert sorted(encoded) == sorted(sentences)
    assert sum(t["sentences"] for t in timed) == len(sentences) and all(t["catch_up"] == 0 for t in timed)


@needs_data
def test_a_resume_on_an_empty_memory_reencodes_untimed_and_gives_the_same_cosines(tasks) -> None:
    plan = PiecePlan(tasks, size=64)
    straight = [PieceEncoder(plan, CountingEncoder(), chunk_size=50).run(i)[0] for i in range(len(plan.pieces))]
    kept = parse_cosines(cosines_text(plan, straight[:5]).decode(), plan)  # what a killed sitting left on disk
    for mine, theirs in zip(kept, straight[:5]):
        assert np.array_equal(mine, theirs)  # repr of a float64 round-trips exactly
    resumed = PieceEncoder(plan, CountingEncoder(), chunk_size=50)  # a new machine: nothing in memory
    spent = []
    for index in range(5, len(plan.pieces)):
        c, s = resumed.run(index)
        kept.append(c)
        spent.append(s)
    assert all(np.array_equal(a, b) for a, b in zip(kept, straight))
    assert sum(s["catch_up"] for s in spent) > 0  # STS12's later pieces repeat sentences of its first five
    assert [s["sentences"] for s in spent] == [len(plan.first[i]) for i in range(5, len(plan.pieces))]


@needs_data
def test_cosines_of_another_plan_are_refused(tasks) -> None:
    plan = PiecePlan(tasks, size=64)
    text = cosines_text(plan, [np.zeros(64), np.zeros(64)]).decode()
    with pytest.raises(ValueError, match="STS12\\[0:100\\]"):
        parse_cosines(text, PiecePlan(tasks, size=100))
