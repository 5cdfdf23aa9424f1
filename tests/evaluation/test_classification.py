"""`eval classification`: mteb's own task classes on the local Banking77/Emotion files. The accuracy equals
scikit-learn's logistic regression fitted on mteb's documented per-label samples (an independent
restatement: numpy's RandomState(seed) shuffle, the first `samples_per_label` rows of each label), the
interval's centre equals the accuracy, the reader's errors name file and line, and the command runs end to
end on a tiny model."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score

from family_helpers import assert_input_error, bag_of_words, run_cli
from minidecoder.errors import InputError
from minidecoder.evaluation.classification import INSTRUCTIONS, evaluate_classification, load_classification_set, with_instruction
from minidecoder.sources.paths import shared_data_dir

MTEB_DATA = shared_data_dir("mteb", "MINIDECODER_MTEB_DATA")
needs_mteb_data = pytest.mark.skipif(MTEB_DATA is None or not (MTEB_DATA / "Emotion").is_dir(),
                                     reason="../shared/data/mteb absent")


def sklearn_accuracy(train_x, train_y, test_x, test_y, samples_per_label: int, n_experiments: int, seed: int = 42):
    """MTEB's classification protocol restated with numpy and scikit-learn only."""
    accuracies, order = [], list(range(len(train_y)))
    for _ in range(n_experiments):
        np.random.RandomState(seed).shuffle(order)  # mteb reshuffles the previous order each experiment
        counts, chosen = defaultdict(int), []
        for i in order:
            if counts[train_y[i]] < samples_per_label:
                chosen.append(i)
                counts[train_y[i]] += 1
        model = LogisticRegression(max_iter=100, random_state=seed).fit(train_x[chosen], np.asarray(train_y)[chosen])
        accuracies.append(accuracy_score(test_y, model.predict(test_x)))
    return 100.0 * float(np.mean(accuracies))


@needs_mteb_data
@pytest.mark.parametrize(("name", "limit", "samples_per_label"), [("Emotion", None, 16), ("Banking77", 600, 8)])
def test_accuracy_equals_sklearn_on_mtebs_samples(name: str, limit: int | None, samples_per_label: int) -> None:
    data = load_classification_set(name, MTEB_DATA, limit=limit)
    instruction = INSTRUCTIONS[name]
    results = evaluate_classification(bag_of_words, data, instruction, progress=False)
    assert (results["n_experiments"], results["samples_per_label"], results["seed"]) == (10, samples_per_label, 42)
    (train, train_y), (test, test_y) = data.splits["train"], data.splits["test"]
    expected = sklearn_accuracy(bag_of_words(with_instruction(train, instruction)).numpy(), train_y,
                                bag_of_words(with_instruction(test, instruction)).numpy(), test_y,
                                samples_per_label, 10)
    assert results["accuracy"]["score"] == pytest.approx(expected, abs=1e-9)
    assert results["test_items"] == (limit or 2000)
    lo, hi = results["accuracy"]["ci95"]
    assert lo < results["accuracy"]["score"] < hi and hi - lo < 12
    assert results["accuracy"]["score"] > 100.0 / len(data.labels) + 3  # above chance


@needs_mteb_data
def test_files_read_as_the_published_counts() -> None:
    emotion, banking = load_classification_set("Emotion", MTEB_DATA), load_classification_set("Banking77", MTEB_DATA)
    assert [len(emotion.splits[s][0]) for s in ("train", "test")] == [16000, 2000]
    assert [len(banking.splits[s][0]) for s in ("train", "test")] == [10003, 3080]
    assert len(banking.labels) == 77 and set(banking.splits["test"][1]) == set(range(77))
    assert emotion.splits["train"][0][0] == "i didnt feel humiliated" and emotion.splits["train"][1][0] == 0  # sadness


def write_emotion(folder: Path, rows_per_label: int = 20) -> Path:
    """A small Emotion-shaped folder: words that say the label, so a tiny model can separate some."""
    labels = ["sadness", "joy", "love", "anger", "fear", "surprise"]
    (folder / "Emotion").mkdir(parents=True)
    for split, n in (("train", rows_per_label), ("test", 5)):
        lines = ["text;label_name"] + [f"i feel {label} number {i}{' ' + label * (i % 3)};{label}"
                                       for i in range(n) for label in labels]
        (folder / "Emotion" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize(("change", "problem"), [
    (lambda f: (f / "Emotion" / "test.txt").unlink(), "Emotion test file"),
    (lambda f: (f / "Emotion" / "test.txt").write_text("text;label_name\ni am fine;happy\n"),
     "test.txt line 2: label 'happy' is not one of the task's 6 labels"),
    (lambda f: (f / "Emotion" / "test.txt").write_text("text;label_name\nno separator here\n"), "test.txt line 2 does not parse"),
    (lambda f: (f / "Emotion" / "train.txt").write_text("text;label_name\n ;joy\n"), "train.txt line 2 has an empty text"),
])
def test_bad_data_is_an_error_naming_file_line_and_fix(tmp_path: Path, change, problem: str) -> None:
    folder = write_emotion(tmp_path)
    change(folder)
    assert_input_error(lambda: load_classification_set("Emotion", folder), problem)


def test_banking77_csv_line_that_does_not_parse(tmp_path: Path) -> None:
    (tmp_path / "Banking77").mkdir()
    (tmp_path / "Banking77" / "categories.json").write_text('["card_arrival", "age_limit"]')
    (tmp_path / "Banking77" / "train.csv").write_text("text,category\nwhere is my card,card_arrival\n")
    (tmp_path / "Banking77" / "test.csv").write_text("text,category\nhow old,age_limit\nan, unquoted, comma,age_limit\n")
    with pytest.raises(InputError, match=r"test.csv line 3 does not parse"):
        load_classification_set("Banking77", tmp_path)


def test_cli_end_to_end_on_a_tiny_model(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_emotion(tmp_path / "data")
    prefix = tmp_path / "out" / "run"
    assert run_cli("eval", "classification", "--model", str(tiny_llama), "--method", "mean", "--tasks", "Emotion",
                   "--data", str(folder), "--limit", "24", "--output", str(prefix), "--no-progress") == 0
    saved = json.loads(prefix.with_suffix(".json").read_text())
    result = saved["results"]["tasks"]["Emotion"]
    assert result["test_items"] == 24 and result["instruction"] == INSTRUCTIONS["Emotion"]  # mean takes Table 11's
    assert 0.0 <= result["accuracy"]["score"] <= 100.0 and len(result["experiments"]) == 10
    assert saved["stamp"]["limit"] == 24 and set(saved["stamp"]["data_sha256"]) == {"Emotion/train.txt", "Emotion/test.txt"}
    markdown = prefix.with_suffix(".md").read_text()
    assert "Limited run" in markdown and f"{result['accuracy']['score']:.2f}" in markdown
