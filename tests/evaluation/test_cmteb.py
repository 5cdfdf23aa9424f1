"""`eval cmteb`: C-MTEB's pair sets through mteb's own task classes. The numbers equal scipy's Spearman and
Pearson of the cosines (STS) and a brute-force best threshold accuracy and scikit-learn's average precision
(Ocnli) on the same embeddings; the reader's errors name file and line; the command runs end to end."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import average_precision_score
from sklearn.metrics.pairwise import paired_cosine_distances

from family_helpers import assert_input_error, bag_of_words, run_cli
from minidecoder.evaluation.cmteb import SETS, evaluate_cmteb, load_pair_set
from minidecoder.sources.paths import shared_data_dir

CMTEB = shared_data_dir("cmteb", "MINIDECODER_CMTEB_DATA")
needs_cmteb = pytest.mark.skipif(CMTEB is None or not (CMTEB / "ATEC").is_dir(), reason="../shared/data/cmteb absent")


def characters(texts: list[str]):
    return bag_of_words(texts, characters=True)


def cosines(data) -> np.ndarray:
    """scikit-learn's cosines of the float32 embeddings, as mteb's evaluators see them. (float64 cosines of
    this bag of characters, which has many exact ties, move the Spearman by about 0.02: mteb's float32
    rounding breaks ties that float64 keeps; the STS harness keeps them, `sts.pair_cosines`.)"""
    a, b = characters(data.sentences1).numpy(), characters(data.sentences2).numpy()  # float32
    return 1.0 - paired_cosine_distances(a, b)


@needs_cmteb
def test_scores_equal_scipy_and_sklearn_on_the_same_embeddings() -> None:
    sets = [load_pair_set(name, CMTEB, limit=400) for name in SETS]
    results = evaluate_cmteb(characters, sets, progress=False)
    for data in sets:
        entry, similarity = results["sets"][data.name], cosines(data)
        if data.kind == "sts":
            assert entry["score"] == pytest.approx(100 * spearmanr(similarity, data.labels)[0], abs=1e-6)
            assert entry["pearson"] == pytest.approx(100 * pearsonr(similarity, data.labels)[0], abs=1e-6)
            lo, hi = entry["ci95"]
            assert lo < entry["score"] < hi
        else:
            labels = np.asarray(data.labels)
            best = max(((similarity > t) == labels).mean() for t in np.unique(similarity))  # every cut between values
            assert entry["score"] == pytest.approx(100 * best, abs=1e-9)
            assert entry["ap"] == pytest.approx(100 * average_precision_score(labels, similarity), abs=1e-6)
            lo, hi = entry["ci95"]
            assert lo < entry["score"] < hi and hi - lo < 20
    assert results["avg_sts"] == pytest.approx(np.mean([e["score"] for e in results["sets"].values() if e["kind"] == "sts"]))


def test_best_accuracy_is_mtebs_threshold_search_on_every_resample() -> None:
    """The vectorised search equals mteb's own `_find_best_acc_and_threshold` (ties included: resamples repeat
    pairs, and rounded cosines tie), so Ocnli's interval resamples exactly the statistic mteb reports."""
    from mteb.abstasks.pair_classification import AbsTaskPairClassification

    from minidecoder.evaluation.cmteb import best_accuracy, best_accuracy_interval

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, size=(40, 60))
    scores = np.round(rng.normal(size=(40, 60)) + 0.8 * labels, 1)  # rounded: many ties
    mtebs = [100 * AbsTaskPairClassification._find_best_acc_and_threshold(None, list(s), l, True)[0]
             for s, l in zip(scores, labels)]
    assert best_accuracy(scores, labels) == pytest.approx(mtebs, abs=1e-9)
    assert best_accuracy(np.zeros((1, 5)), np.array([[1, 0, 1, 0, 1]])) == pytest.approx([0.0])  # all tied: no cut
    lo, hi = best_accuracy_interval(scores[0], labels[0])
    assert lo < best_accuracy(scores[0], labels[0])[0] <= hi


@needs_cmteb
def test_files_read_as_the_published_counts() -> None:
    counts = {name: len(load_pair_set(name, CMTEB).labels) for name in SETS}
    assert counts == {"ATEC": 20000, "BQ": 10000, "LCQMC": 12500, "PAWSX": 2000, "STSB": 1361, "AFQMC": 4316,
                      "QBQTC": 5000, "Ocnli": 1847}


def write_cmteb(folder: Path) -> Path:
    (folder / "ATEC").mkdir(parents=True)
    (folder / "OCNLI").mkdir()
    words = ["a red car", "a blue car", "the red bus", "one small dog", "a big dog", "the cat", "a tall tree"]
    (folder / "ATEC" / "ATEC.test.data").write_text(
        "".join(f"{a}\t{b}\t{int(i % 3 == 0)}\n" for i, (a, b) in enumerate(zip(words, words[1:] + words[:1]))))
    labels = ["entailment", "contradiction", "neutral", "entailment", "contradiction", "-", "entailment"]
    (folder / "OCNLI" / "dev.json").write_text("".join(
        json.dumps({"sentence1": a, "sentence2": b, "label": label}) + "\n"
        for a, b, label in zip(words, words[2:] + words[:2], labels)))
    return folder


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("ATEC", "a\tb\t3\n", "line 1: label '3' is outside the task's range 0-1"),
    ("ATEC", "a\tb\n", "line 1 has 2 tab-separated fields"),
    ("ATEC", "a\tb\t1\n\t b\t0\n", "line 2 has an empty sentence"),
    ("Ocnli", '{"sentence1": "a", "sentence2": "b", "label": "maybe"}\n', "line 1: label 'maybe' is not one of OCNLI"),
    ("Ocnli", '{"sentence1": "a", "sentence2": "b", "label": "entailment"}\n{"sentence1": "a",\n', "line 2 is not JSON"),
    ("BQ", None, "C-MTEB BQ file"),
])
def test_bad_data_is_an_error_naming_file_line_and_fix(tmp_path: Path, name: str, content: str | None, problem: str) -> None:
    folder = write_cmteb(tmp_path)
    if content is not None:
        (folder / SETS[name][0]).write_text(content)
    assert_input_error(lambda: load_pair_set(name, folder), problem)


def test_ocnli_keeps_entailment_and_contradiction(tmp_path: Path) -> None:
    data = load_pair_set("Ocnli", write_cmteb(tmp_path))
    assert data.labels == [1, 0, 1, 0, 1] and data.dropped == 2 and data.split == "validation"


def test_cli_end_to_end_on_a_tiny_model(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_cmteb(tmp_path / "data")
    prefix = tmp_path / "run"
    assert run_cli("eval", "cmteb", "--model", str(tiny_llama), "--method", "reba", "--tasks", "ATEC,Ocnli",
                   "--data", str(folder), "--output", str(prefix), "--no-progress") == 0
    saved = json.loads(prefix.with_suffix(".json").read_text())
    sets = saved["results"]["sets"]
    assert sets["ATEC"]["pairs"] == 7 and sets["Ocnli"]["pairs"] == 5 and sets["ATEC"]["kind"] == "sts"
    assert saved["stamp"]["method"]["method"] == "reba" and "instruction" not in saved["stamp"]
    assert set(saved["stamp"]["data_sha256"]) == {"ATEC/ATEC.test.data", "OCNLI/dev.json"}
    assert f"{sets['ATEC']['score']:.2f}" in prefix.with_suffix(".md").read_text()


@pytest.mark.parametrize("flag", [["--instruction", "Judge these"], ["--instruction", "auto"],
                                  ["--instruction-placement", "pooled"]])
def test_cmteb_has_no_instruction_flags(tmp_path: Path, capsys, flag: list[str]) -> None:
    """Found: `--instruction auto` and `--instruction-placement pooled` were taken and stamped, and changed nothing
    (the C-MTEB sets take no instruction): cmteb has neither flag."""
    assert run_cli("eval", "cmteb", "--model", "no-such-model-folder", "--method", "mean", "--data",
                   str(write_cmteb(tmp_path)), "--tasks", "ATEC", *flag, "--output", str(tmp_path / "r")) == 2
    assert f"unrecognized arguments: {flag[0]}" in capsys.readouterr().err
