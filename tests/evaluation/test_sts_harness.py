"""The STS harness on fixed embeddings, against an independent SentEval-style scorer with scipy.

The encoder is a deterministic hashed bag of words: each word gets a seeded Gaussian vector, and a
sentence is the position-weighted sum of its words' vectors (position weights keep permuted
sentences apart, so mathematically equal cosines only come from identical sentences).
"""
from __future__ import annotations

import functools
import math
import zlib

import numpy as np
import pytest
import scipy.stats
import torch

from minidecoder.errors import NumericsError
from minidecoder.evaluation import ALL_SEVEN, StsScorer, evaluate_sts, load_tasks, unique_sentences
from minidecoder.evaluation.family import encode_sentences
from test_sts_data import DATA, needs_data, senteval_task

DIM = 32


@functools.lru_cache(maxsize=None)
def word_vector(word: str) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(DIM).astype(np.float32)


@functools.lru_cache(maxsize=None)
def bag_of_words(sentence: str) -> np.ndarray:
    vector = np.zeros(DIM, np.float32)
    for position, word in enumerate(sentence.split()):
        vector += np.float32(1 + 0.1 * position) * word_vector(word)
    return vector


class CountingEncoder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        self.calls.append(list(sentences))
        return torch.from_numpy(np.stack([bag_of_words(s) for s in sentences]))  # (N, DIM)


def reference_scores(name: str, dtype: type, identical_is_one: bool) -> tuple[float, dict[str, float]]:
    """SentEval's STSEval.run written out: cosine per pair, scipy Spearman per subset and over the
    concatenation ("all"); x100. `identical_is_one` applies minidecoder's rule for s1 == s2."""
    all_sys, all_gold, per_subset = [], [], {}
    for subset, (words1, words2, gold) in senteval_task(name, DATA).items():
        sys_scores = []
        for w1, w2 in zip(words1, words2):
            s1, s2 = " ".join(w1), " ".join(w2)
            u, v = bag_of_words(s1).astype(dtype), bag_of_words(s2).astype(dtype)
            cosine = np.nan_to_num(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))
            sys_scores.append(1.0 if identical_is_one and s1 == s2 else float(cosine))
        per_subset[subset] = 100 * scipy.stats.spearmanr(sys_scores, gold)[0]
        all_sys += sys_scores
        all_gold += gold
    return 100 * scipy.stats.spearmanr(all_sys, all_gold)[0], per_subset


@pytest.fixture(scope="module")
def full_run() -> tuple[dict, CountingEncoder]:
    encoder = CountingEncoder()
    return evaluate_sts(encoder, data_dir=DATA, progress=False), encoder


@needs_data
@pytest.mark.parametrize("name", ALL_SEVEN)
def test_matches_independent_senteval_aggregation(full_run: tuple[dict, CountingEncoder], name: str) -> None:
    results, _ = full_run
    task = results["tasks"][name]
    score, per_subset = reference_scores(name, np.float64, identical_is_one=True)
    assert task["score"] == pytest.approx(score, abs=1e-9)
    assert list(task["subsets"]) == list(per_subset)
    for subset, value in per_subset.items():
        assert task["subsets"][subset]["spearman"] == pytest.approx(value, abs=1e-9)
    if task["setting"] == "all":  # "all" is one Spearman over the concatenation, not a mean of subsets
        assert task["subset_mean"] == pytest.approx(np.mean(list(per_subset.values())), abs=1e-9)
        assert abs(task["score"] - task["subset_mean"]) > 1e-3


@needs_data
@pytest.mark.parametrize("name", ALL_SEVEN)
def test_close_to_senteval_float32_cosines(full_run: tuple[dict, CountingEncoder], name: str) -> None:
    """SentEval's own float32 cosines (identical pairs at 1 +- noise) differ by rounding only."""
    results, _ = full_run
    score, _ = reference_scores(name, np.float32, identical_is_one=False)
    assert results["tasks"][name]["score"] == pytest.approx(score, abs=5e-3)


@needs_data
def test_average_and_stamp_fields(full_run: tuple[dict, CountingEncoder]) -> None:
    results, _ = full_run
    assert list(results["tasks"]) == list(ALL_SEVEN)
    assert results["avg"] == pytest.approx(np.mean([results["tasks"][n]["score"] for n in ALL_SEVEN]))
    assert results["avg_is_published_avg"] and results["limit"] is None
    assert results["tasks"]["STS12"]["pairs"] == 3108 and results["tasks"]["SICKRelatedness"]["pairs"] == 4927
    assert "STS.input.MSRpar.txt" in " ".join(results["data_files"])


@needs_data
def test_each_distinct_sentence_is_encoded_once(full_run: tuple[dict, CountingEncoder]) -> None:
    results, encoder = full_run
    encoded = [s for call in encoder.calls for s in call]
    assert len(encoded) == len(set(encoded)) == results["sentences"]
    # across tasks too: STS-B reuses STS12-16 sentences
    assert results["sentences"] < sum(len(t.sentences()) for t in load_tasks(ALL_SEVEN, DATA))
    assert all(len(call) <= 256 for call in encoder.calls)


@needs_data
def test_scorer_reuse_for_many_embedding_sets() -> None:
    tasks = load_tasks(["STSBenchmark-dev", "STS13"], DATA)
    sentences = unique_sentences(tasks)
    vectors = CountingEncoder()(sentences)
    scorer = StsScorer(tasks, sentences)
    first = scorer(vectors)
    assert scorer(vectors.clone()) == first  # deterministic
    assert scorer(vectors.double() * 3.0)["tasks"]["STS13"]["score"] == pytest.approx(first["tasks"]["STS13"]["score"], abs=1e-9)
    # a "layer sweep": a second table scores differently, with the same scorer
    shuffled = vectors[torch.randperm(len(sentences), generator=torch.Generator().manual_seed(0))]
    assert abs(scorer(shuffled)["tasks"]["STS13"]["score"]) < 10
    assert first["avg_over"] == ["STS13"] and not first["avg_is_published_avg"]
    assert first["tasks"]["STSBenchmark-dev"]["setting"] == "dev"


@needs_data
def test_limit_is_stamped_and_applied() -> None:
    encoder = CountingEncoder()
    results = evaluate_sts(encoder, tasks=["STS12", "SICKRelatedness"], data_dir=DATA, limit=10, progress=False)
    assert results["limit"] == 10
    assert results["tasks"]["STS12"]["pairs"] == 50 and results["tasks"]["SICKRelatedness"]["pairs"] == 10
    assert all(entry["pairs"] == 10 for entry in results["tasks"]["STS12"]["subsets"].values())


def _tiny_tasks(tmp_path, rows: list[tuple[str, str, float]]):
    folder = tmp_path / "STSBenchmark"
    folder.mkdir(parents=True)
    lines = [f"g\tf\t2012\t{i:04d}\t{score}\t{a}\t{b}" for i, (a, b, score) in enumerate(rows)]
    (folder / "sts-dev.csv").write_text("\n".join(lines) + "\n")
    return load_tasks(["STSBenchmark-dev"], tmp_path)


def test_identical_sentences_score_one_and_zero_vectors_zero(tmp_path) -> None:
    tasks = _tiny_tasks(tmp_path, [("a b", "a b", 5.0), ("a b", "c", 1.0), ("zero", "a b", 0.0), ("c", "a b", 2.0)])
    sentences = unique_sentences(tasks)
    rows = {"a b": [1.0, 2.0], "c": [3.0, -1.0], "zero": [0.0, 0.0]}
    vectors = torch.tensor([rows[s] for s in sentences])  # (N, 2)
    (cosine,) = StsScorer(tasks, sentences).cosines(vectors)
    assert cosine[0] == 1.0 and cosine[2] == 0.0
    assert cosine[1] == pytest.approx(cosine[3]) and cosine[1] == pytest.approx(1 / math.sqrt(50))


def test_non_finite_embeddings_are_loud() -> None:
    def encode(sentences: list[str]) -> torch.Tensor:
        out = torch.ones(len(sentences), 4)
        out[-1, 0] = float("nan")
        return out

    with pytest.raises(NumericsError, match="'c'"):
        encode_sentences(encode, ["a", "b", "c"], progress=False)


def test_wrong_shape_is_a_bug_report() -> None:
    with pytest.raises(RuntimeError, match=r"\(3, D\)"):
        encode_sentences(lambda s: torch.ones(2, 4), ["a", "b", "c"], progress=False)


def test_longest_sentences_first(tmp_path) -> None:
    tasks = _tiny_tasks(tmp_path, [("a", "bbb", 1.0), ("cc", "a", 2.0)])
    assert unique_sentences(tasks) == ["bbb", "cc", "a"]


def test_self_pairs_are_exactly_one_and_tied_unlike_senteval(tmp_path) -> None:
    """The harness's chosen rule, pinned: a sentence paired with itself scores exactly 1.0, so all such
    pairs tie, whatever rounding noise the embedding carries. SentEval embeds the two sides in separate
    batches and takes float32 cosines, so its self-pairs sit at 1 - (rounding noise) and are ordered
    among themselves, and against near-1 pairs, by that noise: two noise draws give two Spearmans."""
    pairs = [("s1", "s1", 5.0), ("s2", "s2", 3.0), ("s3", "s3", 4.0), ("s4", "s4", 1.0),
             ("s1", "n1", 4.5), ("s2", "n2", 2.0), ("s3", "n3", 0.5)]
    tasks = _tiny_tasks(tmp_path, pairs)
    sentences = unique_sentences(tasks)
    rng = np.random.default_rng(0)
    base = {s: rng.standard_normal(8) for s in sentences}
    for i, near in enumerate(("n1", "n2", "n3")):  # near-duplicates: cosines within 1e-3 of 1
        base[near] = base[f"s{i + 1}"] + 1e-2 * rng.standard_normal(8)
    vectors = torch.tensor(np.stack([base[s] for s in sentences]), dtype=torch.float32)  # (N, 8)
    scorer = StsScorer(tasks, sentences)
    (cosine,) = scorer.cosines(vectors)
    assert list(cosine[:4]) == [1.0, 1.0, 1.0, 1.0]  # exact, hence one tied rank
    harness = scorer(vectors)["tasks"]["STSBenchmark-dev"]["score"]
    gold = [g for _, _, g in pairs]

    def senteval_like(seed: int) -> float:  # the two sides as two separately computed float32 vectors
        noise = np.random.default_rng(seed)
        a = np.stack([base[s1] for s1, _, _ in pairs]).astype(np.float32)
        b = np.stack([base[s2] * (1 + 1e-6 * noise.standard_normal(8)) for _, s2, _ in pairs]).astype(np.float32)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        return 100 * scipy.stats.spearmanr(cos, gold).statistic

    draws = {round(senteval_like(seed), 6) for seed in range(20)}
    assert max(draws) - min(draws) > 5  # SentEval's score depends on the noise, by points here ...
    tied = [1.0 if s1 == s2 else float(np.dot(base[s1], base[s2]) / np.linalg.norm(base[s1]) / np.linalg.norm(base[s2]))
            for s1, s2, _ in pairs]  # ... while the harness scores the self-pairs as one tie at exactly 1
    assert harness == pytest.approx(100 * scipy.stats.spearmanr(tied, gold).statistic, abs=1e-9)
    assert scorer(vectors * (1 + 1e-6 * torch.randn_like(vectors)))["tasks"]["STSBenchmark-dev"]["score"] == harness
