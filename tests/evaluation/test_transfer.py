"""`eval transfer`: SentEval's probe against scikit-learn, its fold split and counters by hand, the data
readers' order and errors, the metric against sklearn's accuracy_score, resuming, and the command."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from minidecoder.errors import InputError
from minidecoder.evaluation import senteval_probe as sc
from minidecoder.evaluation import transfer
from minidecoder.evaluation.transfer import TRANSFER_TASKS, load_transfer_task, load_transfer_tasks
from minidecoder.sources.paths import senteval_data_dir
from test_sts_cli import fakes, run_cli  # noqa: F401  (the fake model, method and job of eval sts's tests)

SENTEVAL = senteval_data_dir()
needs_senteval = pytest.mark.skipif(SENTEVAL is None or not SENTEVAL.is_dir(), reason="SentEval data not found")


def gaussian_classes(n: int, dim: int, seed: int, classes: int = 2, spread: float = 1.2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(size=(classes, dim))  # the same classes for every split
    y = rng.integers(0, classes, size=n)
    return (centres[y] + spread * rng.normal(size=(n, dim))).astype(np.float32), y.astype(np.int64)


# ---- the probe ------------------------------------------------------------------------------------------
def test_probe_agrees_with_sklearn_logistic_regression() -> None:
    """SentEval's Adam-trained linear probe, chosen on dev, against an independent implementation (sklearn's
    lbfgs LogisticRegression, C=1) on the same features: the two test accuracies within 2 points (400 test
    items: one item is 0.25 points), both far from chance."""
    from sklearn.linear_model import LogisticRegression

    x, y = gaussian_classes(600, 16, seed=0)
    dx, dy = gaussian_classes(300, 16, seed=1)
    tx, ty = gaussian_classes(400, 16, seed=2)
    ours = sc.dev_selected(x, y, dx, dy, tx, ty, num_classes=2)
    theirs = 100 * LogisticRegression(C=1.0, max_iter=5000).fit(x, y).score(tx, ty)
    assert ours.test_accuracy > 75 and theirs > 75
    assert abs(ours.test_accuracy - theirs) <= 2.0
    assert ours.chosen_l2[0] in sc.L2_GRID and ours.test_accuracy == round(100 * float((ours.predictions == ty).mean()), 2)


def test_folds_are_a_stratified_partition_checked_by_hand() -> None:
    y = np.array([0] * 37 + [1] * 23 + [2] * 11)
    folds = sc._folds(y, 10, 1111)
    assert len(folds) == 10
    seen = np.concatenate([test for _, test in folds])
    assert sorted(seen.tolist()) == list(range(len(y)))  # every row tested exactly once
    for train, test in folds:
        assert set(train.tolist()) == set(range(len(y))) - set(test.tolist())
        for label, count in zip(*np.unique(y, return_counts=True)):
            assert abs(int((y[test] == label).sum()) - count / 10) < 1  # each class spread evenly
    assert [t.tolist() for _, t in folds] == [t.tolist() for _, t in sc._folds(y, 10, 1111)]  # seeded
    assert [t.tolist() for _, t in folds] != [t.tolist() for _, t in sc._folds(y, 10, 1112)]


@pytest.mark.parametrize("l2, classes", [(1e-5, 2), (1e-2, 6)])
def test_the_written_out_adam_trains_the_optimizers_weights_bit_for_bit(l2: float, classes: int) -> None:
    """Early stopping turns any rounding difference into another epoch count or another best model, so the
    probe's own Adam update must give the weights of SentEval's own loop (torch.optim.Adam; the peer
    tools/bench_probes.py times it against) exactly, through a whole fit (a last batch shorter than 64,
    several epochs, the best model kept)."""
    x, y = gaussian_classes(1000, 24, seed=3, classes=classes, spread=2.0)
    dev_x, dev_y = gaussian_classes(300, 24, seed=4, classes=classes, spread=2.0)
    import importlib.util

    from repo_paths import REPO

    spec = importlib.util.spec_from_file_location("bench_probes", REPO / "tools" / "bench_probes.py")
    bench_probes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_probes)
    ours, oracle = sc.LogisticRegressionProbe(24, classes, l2), bench_probes.SentEvalsOwnLoop(24, classes, l2)
    assert ours.fit(x, y, validation=(dev_x, dev_y)) == oracle.fit(x, y, validation=(dev_x, dev_y))
    assert ours.epochs == oracle.epochs > 2 * ours.config.epoch_size
    assert torch.equal(ours.model.weight, oracle.model.weight) and torch.equal(ours.model.bias, oracle.model.bias)


def test_tenacity_counts_every_miss_as_senteval_does() -> None:
    """SentEval's early-stopping counter is never reset on an improvement: with tenacity 5 training stops
    at the 6th non-improving check in all (here the 10th check), not after 6 in a row."""
    x, y = gaussian_classes(64, 4, seed=0)
    probe = sc.LogisticRegressionProbe(4, 2, 1e-5)
    checks = iter([0.5, 0.6, 0.55, 0.7, 0.65, 0.6, 0.8, 0.7, 0.7, 0.7, 0.95, 0.96])
    probe.score = lambda *_: next(checks)
    assert probe.fit(x, y, validation=(x, y)) == 0.8
    assert probe.epochs == 10 * 4  # ten checks of epoch_size 4 passes
    assert next(checks) == 0.95  # the 11th check never ran


def test_inner_kfold_scores_as_senteval_and_equals_sklearn_accuracy() -> None:
    """The k-fold task's score is SentEval's mean of per-fold accuracies (each rounded to 2 decimals); the
    pooled out-of-fold accuracy equals sklearn's accuracy_score on the same predictions."""
    from sklearn.metrics import accuracy_score

    x, y = gaussian_classes(200, 6, seed=3)
    result = sc.inner_kfold(x, y, num_classes=2, k=10, config=sc.ClassifierConfig(max_epoch=8))
    folds = sc._folds(y, 10, sc.SEED)
    per_fold = [round(100 * float((result.predictions[t] == y[t]).mean()), 2) for _, t in folds]
    assert result.test_accuracy == round(float(np.mean(per_fold)), 2)
    entry = transfer.task_result(load_stub_task(), result, 0)
    assert entry["pooled_accuracy"] == pytest.approx(100 * accuracy_score(y, result.predictions), abs=1e-12)
    lo, hi = entry["ci95"]
    assert lo < entry["pooled_accuracy"] < hi and hi - lo < 20


def test_probes_trained_in_worker_processes_equal_those_trained_here() -> None:
    """train_all: the grid's probes in two spawned processes give the very same result as one after
    another in this process (each probe is seeded alone and trains on one thread either way)."""
    x, y = gaussian_classes(120, 6, seed=4)
    config = sc.ClassifierConfig(max_epoch=8)
    here = sc.inner_kfold(x, y, num_classes=2, k=3, config=config, workers=1)
    pooled = sc.inner_kfold(x, y, num_classes=2, k=3, config=config, workers=2)
    assert (here.dev_accuracy, here.test_accuracy, here.chosen_l2) == (pooled.dev_accuracy, pooled.test_accuracy,
                                                                      pooled.chosen_l2)
    assert np.array_equal(here.predictions, pooled.predictions)
    tx, ty = gaussian_classes(80, 6, seed=5)
    split = [sc.dev_selected(x[:80], y[:80], x[80:], y[80:], tx, ty, num_classes=2, config=config, workers=w)
             for w in (1, 2)]
    assert split[0].chosen_l2 == split[1].chosen_l2 and np.array_equal(split[0].predictions, split[1].predictions)
    kfold = [sc.kfold_then_test(x, y, tx, ty, num_classes=2, k=3, config=config, workers=w) for w in (1, 2)]
    assert kfold[0].chosen_l2 == kfold[1].chosen_l2 and np.array_equal(kfold[0].predictions, kfold[1].predictions)


def test_inner_kfold_running_all_folds_grids_together_equals_one_fold_after_another() -> None:
    """SentEval's InnerKFoldClassifier written plainly, fold by fold on copied rows: the L2 each fold's grid
    chose, its dev score and the fold's test predictions equal inner_kfold's, which runs the folds' grids
    together on shared rows."""
    x, y = gaussian_classes(90, 5, seed=10)
    config = sc.ClassifierConfig(max_epoch=6)
    result = sc.inner_kfold(x, y, num_classes=2, k=3, config=config, workers=2)
    predictions, chosen, devs = np.empty(len(y), dtype=np.int64), [], []
    for train, test in sc._folds(y, 3, config.seed):
        x_train, y_train = x[train], y[train]
        scores = []
        for l2 in sc.L2_GRID:
            accuracies = []
            for fit, check in sc._folds(y_train, 3, config.seed):
                probe = sc.LogisticRegressionProbe(5, 2, l2, config)
                probe.fit(x_train[fit], y_train[fit], validation=(x_train[check], y_train[check]))
                accuracies.append(probe.score(x_train[check], y_train[check]))
            scores.append(round(100 * float(np.mean(accuracies)), 2))
        best = int(np.argmax(scores))
        chosen.append(sc.L2_GRID[best])
        devs.append(scores[best])
        probe = sc.LogisticRegressionProbe(5, 2, sc.L2_GRID[best], config)
        probe.fit(x_train, y_train, validation_split=0.05)
        predictions[test] = probe.predict(x[test])
    assert result.chosen_l2 == chosen and result.dev_accuracy == round(float(np.mean(devs)), 2)
    assert np.array_equal(result.predictions, predictions)


def test_a_failed_probe_in_a_worker_ends_the_pool_and_the_next_call_starts_a_new_one() -> None:
    x, y = gaussian_classes(60, 4, seed=6)
    config = sc.ClassifierConfig(max_epoch=4)
    everything = np.arange(len(y))
    with sc.shared_rows(x, y) as rows:
        good, bad = [(rows, everything, everything, l2, 2, config) for l2 in (1e-4, -1.0)]  # Adam refuses -1
        with pytest.raises(ValueError, match="weight_decay"):
            sc.train_all(sc._trained_accuracy, [good, bad, good], workers=2)
        assert 2 not in sc._POOLS  # the broken pool is gone, its processes ended
        again = sc.train_all(sc._trained_accuracy, [good, good], workers=2)
        assert again[0] == again[1] == sc.train_all(sc._trained_accuracy, [good], workers=1)[0]
    assert not Path(rows.folder).exists()  # the shared rows go with the task


def test_shared_rows_give_the_values_indexing_gives_and_report_each_job_in_order() -> None:
    x, y = gaussian_classes(50, 5, seed=8)
    picked = np.array([7, 3, 3, 49, 0])
    with sc.shared_rows(x, y) as rows:
        taken_x, taken_y = rows.take(picked)
        assert taken_x.dtype == x.dtype and np.array_equal(taken_x, x[picked]) and np.array_equal(taken_y, y[picked])
        seen: list[int] = []
        assert sc.train_all(abs, [-3, 1, -2], workers=1, finished=seen.append) == [3, 1, 2]
        assert seen == [0, 1, 2]


def test_shared_rows_that_cannot_be_written_say_where_and_what_to_do(monkeypatch) -> None:
    from minidecoder.errors import OutputError

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sc.np, "save", full_disk)
    x, y = gaussian_classes(20, 3, seed=9)
    with pytest.raises(OutputError, match="No space left") as caught:
        with sc.shared_rows(x, y):
            pass
    assert "TMPDIR" in caught.value.fix


def load_stub_task():
    from minidecoder.evaluation.transfer import Split, TransferTask
    return TransferTask("MR", "inner_kfold", ("0", "1"), {"all": Split([], np.zeros(0, np.int64))}, Path("."), [])


def test_mrpc_features_are_senteval_s() -> None:
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]])
    assert transfer.mrpc_features(u, v).tolist() == [[2.0, 6.0, 3.0, -8.0]]


def test_paired_interval_uses_the_same_resamples() -> None:
    correct = np.random.default_rng(0).random(300) < 0.8
    assert transfer.paired_interval(correct, correct, 3) == (0.0, 0.0)
    assert np.array_equal(transfer.resample_indices(50, 2), transfer.resample_indices(50, 2))


# ---- the data ---------------------------------------------------------------------------------------------
def write_folder(root: Path, **overrides: str | bytes) -> Path:
    """A small SentEval folder: SST2 (train 40 / dev 12 / test 12) and TREC (train 60 / test 12), word-signal
    texts, plus MR with a blank line; `overrides` replace a file's content (key: path with / as __)."""
    files: dict[str, str | bytes] = {}
    good, bad = ["great fine lovely", "superb happy"], ["awful poor", "dreadful sad bad"]
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        files[f"SST/binary/sentiment-{split}"] = "".join(
            f"{(good if i % 2 else bad)[i % 4 // 2]} item{i} \t{i % 2}\n" for i in range(n))
    words = {"ABBR": "abbreviation", "DESC": "describe", "ENTY": "thing", "HUM": "who", "LOC": "where", "NUM": "many"}
    for name, n in (("train_5500.label", 60), ("TREC_10.label", 12)):
        files[f"TREC/{name}"] = "".join(f"{c}:x {words[c]} question {i} ?\n"
                                        for i in range(n) for c in [list(words)[i % 6]])
    files["MR/rt-polarity.pos"] = "a good film\n\nreally good\n" + "".join(f"good {i}\n" for i in range(20))
    files["MR/rt-polarity.neg"] = "bad\nnot good at all\n" + "".join(f"bad {i} film\n" for i in range(20))
    for key, text in overrides.items():
        files[key.replace("__", "/")] = text
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return root


@pytest.mark.parametrize("blank_lines, listed", [("read", "read_blank"), ("skip", "skipped_blank")])
def test_a_limited_run_lists_only_the_blank_lines_it_reached(tmp_path: Path, blank_lines: str, listed: str) -> None:
    """Found: `--limit 40` on CR listed blank lines 2323 and 2407 as "read here as the empty text" though the run
    read lines 1-40: every blank line of the file was listed, kept or not."""
    pos = "a good film\n\nreally good\n" + "".join(f"good {i}\n" for i in range(20)) + "\n" + "late one\n"  # blank 2, 24
    root = write_folder(tmp_path, **{"MR__rt-polarity.pos": pos})
    whole = load_transfer_task("MR", root, blank_lines=blank_lines)
    assert getattr(whole, listed) == {"MR/rt-polarity.pos": [2, 24]}
    limited = load_transfer_task("MR", root, limit=20, blank_lines=blank_lines)  # lines 1-20 (or 1-21, skipping 2)
    assert getattr(limited, listed) == {"MR/rt-polarity.pos": [2]}


def test_binary_task_reads_as_senteval_sorted_with_its_blank_line_the_empty_text(tmp_path: Path) -> None:
    task = load_transfer_task("MR", write_folder(tmp_path))
    split = task.splits["all"]
    # SentEval's sort: (number of words, label), stable; positives first in the unsorted list. The blank line is
    # a sample with no words (binary.py's `line.split()` of it), first in that order
    assert split.texts == (["", "bad", "really good"] + [f"good {i}" for i in range(20)]
                           + [f"bad {i} film" for i in range(20)] + ["a good film", "not good at all"])
    assert split.labels.tolist() == [1, 0] + [1] * 21 + [0] * 20 + [1] + [0]
    assert task.read_blank == {"MR/rt-polarity.pos": [2]} and task.skipped_blank == {}
    # blank_lines="skip": the line left out, and named
    skipped = load_transfer_task("MR", tmp_path, blank_lines="skip")
    assert skipped.splits["all"].texts == split.texts[1:] and skipped.splits["all"].labels.tolist() == [0] + [1] * 21 + [0] * 20 + [1] + [0]
    assert skipped.skipped_blank == {"MR/rt-polarity.pos": [2]} and skipped.read_blank == {}
    with pytest.raises(InputError, match="blank_lines='drop'"):
        load_transfer_task("MR", tmp_path, blank_lines="drop")


MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


@pytest.mark.parametrize(("key", "text", "problem"), [
    ("SST__binary__sentiment-dev", "fine film\t1\nbad film\t2\n", "sentiment-dev line 2: label '2'"),
    ("SST__binary__sentiment-test", "fine film 1\n", "sentiment-test line 1 has no tab"),
    ("SST__binary__sentiment-train", b"caf\xe9 ok\t1\n", "sentiment-train line 1 is not valid utf-8"),
    ("TREC__TREC_10.label", "WHAT:x what is it ?\n", "TREC_10.label line 1: label 'WHAT'"),
    ("TREC__train_5500.label", "NUM how many\nHUM:x who\n", "train_5500.label line 1 is not 'COARSE:fine question'"),
    ("MRPC__msr_paraphrase_train.txt", MRPC_HEADER + "1\t1\t2\ta b\t\n", "msr_paraphrase_train.txt line 2 has 4"),
    ("MRPC__msr_paraphrase_train.txt", MRPC_HEADER + "1\t1\t2\t \tb c\n", "msr_paraphrase_train.txt line 2 has an empty text"),
    ("MRPC__msr_paraphrase_test.txt", MRPC_HEADER + "0\t1\t2\ta\tb\n3\t1\t2\ta\tb\n", "msr_paraphrase_test.txt line 3: label '3'"),
])
def test_bad_lines_name_file_and_line(tmp_path: Path, key: str, text: str, problem: str) -> None:
    good_mrpc = MRPC_HEADER + "1\t1\t2\ta b\tb c\n"
    root = write_folder(tmp_path, **{"MRPC__msr_paraphrase_train.txt": good_mrpc,
                                     "MRPC__msr_paraphrase_test.txt": good_mrpc, key: text})
    with pytest.raises(InputError) as error:
        load_transfer_tasks([key.split("__")[0].replace("SST", "SST2")], root)
    assert problem in str(error.value) and "SHA256SUMS" in str(error.value.fix)


def test_missing_file_and_folder_and_unknown_task(tmp_path: Path) -> None:
    root = write_folder(tmp_path)
    (root / "TREC" / "TREC_10.label").unlink()
    with pytest.raises(InputError, match=r"TREC_10.label is missing"):
        load_transfer_task("TREC", root)
    with pytest.raises(InputError, match="SentEval transfer data folder") as error:
        load_transfer_task("MR", tmp_path / "nowhere")
    assert "MINIDECODER_SENTEVAL_DATA" in error.value.fix
    with pytest.raises(InputError, match="'STS'"):
        load_transfer_tasks(["MR", "STS"], root)
    with pytest.raises(InputError, match="the transfer task list names MR twice"):
        load_transfer_tasks(["MR", "CR", "MR"], root)
    with pytest.raises(InputError, match="MR has 24 rows to cross-validate, at most 12 of one class"):
        load_transfer_task("MR", root, limit=12)


@needs_senteval
def test_shared_data_reads_as_its_readme_counts() -> None:
    counts = {task.name: {name: len(split) for name, split in task.splits.items()} for task in load_transfer_tasks()}
    assert counts == {"MR": {"all": 10662}, "CR": {"all": 3775}, "SUBJ": {"all": 10000}, "MPQA": {"all": 10606},
                      "SST2": {"train": 67349, "dev": 872, "test": 1821}, "TREC": {"train": 5452, "test": 500},
                      "MRPC": {"train": 4076, "test": 1725}}  # SentEval's counts, blank lines read
    skipped = {task.name: len(task.splits["all"]) for task in load_transfer_tasks(["CR", "MPQA"], blank_lines="skip")}
    assert skipped == {"CR": 3771, "MPQA": 10603}


# ---- the run: resumable, and the command ------------------------------------------------------------
def bag_of_words(texts: list[str]) -> torch.Tensor:
    out = torch.zeros(len(texts), 32)
    for row, text in enumerate(texts):
        for word in text.split():
            out[row, zlib.crc32(word.encode()) % 32] += 1.0
    return out


def test_interrupted_run_resumes_to_identical_scores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_folder(tmp_path / "data")
    tasks = load_transfer_tasks(["SST2", "TREC"], root)
    whole = transfer.evaluate_transfer(bag_of_words, tasks, progress=False)
    assert whole["tasks"]["SST2"]["score"] > 80 and whole["avg"] is None  # not all seven: no Avg.

    real_probe, calls = transfer.probe_task, []

    def probe_then_stop(task, *args, **kwargs):
        calls.append(task.name)
        if task.name == "TREC" and calls.count("TREC") == 1:
            raise KeyboardInterrupt  # Ctrl-C while TREC's probe trains
        return real_probe(task, *args, **kwargs)

    monkeypatch.setattr(transfer, "probe_task", probe_then_stop)
    kept = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept)  # identity "" (the default)

    def must_not_encode(texts):
        raise AssertionError("the kept embeddings should have been reused")

    resumed = transfer.evaluate_transfer(must_not_encode, tasks, progress=False, kept=kept)
    assert calls == ["SST2", "TREC", "TREC"]  # SST2's kept result reused, TREC trained once more
    for name in ("SST2", "TREC"):
        assert resumed["tasks"][name] == whole["tasks"][name]

    (kept / "embeddings.kept.npy").unlink()  # a later sitting on another machine: embeddings differ by rounding,
    nudged = transfer.evaluate_transfer(lambda texts: bag_of_words(texts) + 1e-7, tasks, progress=False, kept=kept)
    assert calls == ["SST2", "TREC", "TREC"]  # yet every finished task is kept, not trained again
    assert nudged["tasks"] == whole["tasks"]

    encoded = []  # kept work of another model or method is never reused
    other = transfer.evaluate_transfer(lambda texts: encoded.append(len(texts)) or 2 * bag_of_words(texts), tasks,
                                       progress=False, kept=kept, kept_identity="another method")
    assert encoded and calls[3:] == ["SST2", "TREC"] and other["tasks"]["SST2"]["predictions"] is not None


@pytest.mark.parametrize("grain", ["run", "task"])
def test_a_later_sitting_embeds_only_the_tasks_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        grain: str) -> None:
    """A table's row spans sittings on fresh machines (only task-*.kept.json is committed): the next sitting
    embeds the texts of the tasks still to score, not every task's again; grain="task" embeds each task just
    before its probe, so a stop loses at most that task's embedding."""
    tasks = load_transfer_tasks(["SST2", "TREC"], write_folder(tmp_path / "data"))
    whole = transfer.evaluate_transfer(bag_of_words, tasks, progress=False)
    steps: list[tuple[str, object]] = []
    real_probe, stops = transfer.probe_task, []

    def probe_then_stop(task, *args, **kwargs):
        steps.append(("probe", task.name))
        if task.name == "TREC" and not stops:
            stops.append(task.name)
            raise KeyboardInterrupt  # the sitting ends in TREC's probe
        return real_probe(task, *args, **kwargs)

    def encode(texts):
        steps.append(("embed", frozenset(texts)))
        return bag_of_words(texts)

    monkeypatch.setattr(transfer, "probe_task", probe_then_stop)
    kept = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        transfer.evaluate_transfer(encode, tasks, progress=False, kept=kept, grain=grain)
    sst2, trec = (frozenset(task.texts()) for task in tasks)
    if grain == "task":
        assert steps == [("embed", sst2), ("probe", "SST2"), ("embed", trec), ("probe", "TREC")]
    else:
        assert steps == [("embed", sst2 | trec), ("probe", "SST2"), ("probe", "TREC")]

    for path in kept.glob("embeddings.kept.*"):
        path.unlink()  # another machine: only the finished task's file came with the checkout
    steps.clear()
    resumed = transfer.evaluate_transfer(encode, tasks, progress=False, kept=kept, grain=grain)
    assert steps == [("embed", trec), ("probe", "TREC")]  # SST2 neither embedded nor trained again
    assert resumed["tasks"] == whole["tasks"] and resumed["texts"] == whole["texts"]


KEPT_DAMAGE = [  # what a full disk, a crash, a hand edit or a copy between machines leaves in the kept folder
    ("embeddings cut short", "embeddings.kept.npy", lambda p: p.write_bytes(p.read_bytes()[:200])),
    ("embeddings empty", "embeddings.kept.npy", lambda p: p.write_bytes(b"")),
    ("embeddings one row short", "embeddings.kept.npy", lambda p: np.save(p, np.load(p)[:-1])),
    ("embeddings NaN", "embeddings.kept.npy", lambda p: np.save(p, np.full_like(np.load(p), np.nan))),
    ("texts cut short", "embeddings.kept.json", lambda p: p.write_text(p.read_text()[:30])),
    ("texts a list", "embeddings.kept.json", lambda p: p.write_text("[]")),
    ("seconds a text", "embeddings.kept.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "seconds": "1.5"}))),
    ("task cut short", "task-SST2.kept.json", lambda p: p.write_text(p.read_text()[:40])),
    ("task a list", "task-SST2.kept.json", lambda p: p.write_text("[]")),
    ("task without its result", "task-SST2.kept.json", lambda p: p.write_text(json.dumps(
        {key: value for key, value in json.loads(p.read_text()).items() if key != "result"}))),
]


def _identity_of(shape: str, described: dict) -> str:
    """A kept-work identity as each caller writes one: the eval command's stamp (a dict naming the method) and
    the transfer table tool's row_identity (a list: settings, weights, the method)."""
    if shape == "eval command":
        return json.dumps({"method": described, "model": {"config_sha256": "c0"}, "truncate": None}, sort_keys=True)
    return json.dumps([{"device": "cpu", "dtype": "float32"}, {"model.safetensors": "w0"}, described], sort_keys=True)


@pytest.mark.parametrize("shape", ["eval command", "table tool"])
def test_work_kept_before_an_option_was_added_serves_while_the_option_keeps_its_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """A later version adds a method option (`pieces` was one); at its default it computes what the version
    that kept the work did, so that work (the embeddings, each task's probe) still serves, as a job's kept
    chunks do (running.jobs.serves); set otherwise, it does not. Before, the identity's hash differed: every
    task of an in-progress transfer row was embedded and trained again."""
    from minidecoder.methods import build_method

    tasks = load_transfer_tasks(["SST2", "TREC"], write_folder(tmp_path / "data"))
    now = json.loads(json.dumps(build_method("last").describe()))
    then = {option: value for option, value in now.items() if option != "pieces"}  # as a version without it wrote
    assert then != now and now["pieces"] is False
    kept = tmp_path / "kept"
    whole = transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept,
                                       kept_identity=_identity_of(shape, then))
    real_probe, probed, encoded = transfer.probe_task, [], []
    monkeypatch.setattr(transfer, "probe_task", lambda task, *a, **k: probed.append(task.name) or real_probe(task, *a, **k))

    def encode(texts):
        encoded.append(len(texts))
        return bag_of_words(texts)

    resumed = transfer.evaluate_transfer(encode, tasks, progress=False, kept=kept, kept_identity=_identity_of(shape, now))
    assert (encoded, probed) == ([], []) and resumed["tasks"] == whole["tasks"]
    for path in kept.glob("task-*.kept.json"):
        path.unlink()  # the probes to train again: the kept embeddings alone serve them
    transfer.evaluate_transfer(encode, tasks, progress=False, kept=kept, kept_identity=_identity_of(shape, now))
    assert encoded == [] and probed == ["SST2", "TREC"]
    transfer.evaluate_transfer(encode, tasks, progress=False, kept=kept,
                               kept_identity=_identity_of(shape, {**now, "pieces": True}))
    assert encoded and probed == ["SST2", "TREC"] * 2  # the option set otherwise: computed afresh
    retired = {**now, "retired_option": 3}  # an option the kept work had and this version lacks never serves
    other = tmp_path / "other"
    transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=other, kept_identity=_identity_of(shape, retired))
    encoded.clear()
    probes_before = len(probed)
    transfer.evaluate_transfer(encode, tasks, progress=False, kept=other, kept_identity=_identity_of(shape, now))
    assert encoded and probed[probes_before:] == ["SST2", "TREC"]


@pytest.mark.parametrize("name, damage", [case[1:] for case in KEPT_DAMAGE], ids=[case[0] for case in KEPT_DAMAGE])
def test_damaged_kept_work_is_computed_again(tmp_path: Path, name: str, damage) -> None:
    """A kept file is this folder's own derived work: one that is not what a run writes is computed again, to the
    scores of a clean run. Before, a file cut short was a JSON or NumPy traceback, a list an AttributeError, a
    result missing a KeyError, a table one row short or NaN was read back as the texts' embeddings, and
    seconds kept as a text were reported as the embedding time."""
    root = write_folder(tmp_path / "data")
    tasks = load_transfer_tasks(["SST2", "TREC"], root)
    whole = transfer.evaluate_transfer(bag_of_words, tasks, progress=False)
    kept = tmp_path / "kept"
    transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept)
    damage(kept / name)
    (kept / "task-TREC.kept.json").unlink()  # TREC to score again: the kept embeddings are read back for it
    again = transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept)
    assert again["tasks"] == whole["tasks"] and isinstance(again["encode_seconds"], float)


def test_kept_embeddings_serve_any_texts_they_cover_and_only_under_their_identity(tmp_path: Path) -> None:
    store, texts = transfer.KeptWork(tmp_path, "model A"), ["a b", "c", "d e f"]
    vectors, seconds, computed = store.embeddings(texts, lambda: bag_of_words(texts))
    assert torch.equal(vectors, bag_of_words(texts)) and computed and seconds > 0

    def must_not_compute():
        raise AssertionError("the kept embeddings cover these texts")

    vectors, kept_seconds, computed = store.embeddings(["d e f", "a b"], must_not_compute)
    assert torch.equal(vectors, bag_of_words(["d e f", "a b"]))
    assert not computed and kept_seconds == seconds  # the time the kept ones took, not the read-back's
    vectors, _, computed = store.embeddings(["new", "a b"], lambda: 3 * bag_of_words(["new", "a b"]))
    assert torch.equal(vectors, 3 * bag_of_words(["new", "a b"])) and computed  # a text not kept: computed, kept instead
    other = transfer.KeptWork(tmp_path, "model B")
    assert torch.equal(other.embeddings(["a b"], lambda: 2 * bag_of_words(["a b"]))[0], 2 * bag_of_words(["a b"]))
    with pytest.raises(InputError, match="grain='chunk' is not a grain"):  # the library's error, as every argument's
        transfer.evaluate_transfer(bag_of_words, [], grain="chunk")
    for workers in (0, -1, 2.5):  # 0 and -1 ran as one process, unsaid
        with pytest.raises(InputError, match=r"probe_workers=.* must be a positive whole number of processes"):
            transfer.evaluate_transfer(bag_of_words, [], probe_workers=workers)


def test_a_kept_task_waits_for_another_sittings_lock_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    """Another sitting writing the same kept file holds its lock (output_files.output_lock): this one waits
    for it, then writes through a temporary file of its own, so neither write is torn and nothing is left."""
    from lock_holder import lock_held

    store = transfer.KeptWork(tmp_path, "model A")
    let_go = tmp_path.parent / f"{tmp_path.name}-let-go"
    with lock_held(tmp_path / "task-TREC.kept.json", 1.5, let_go):
        store.keep_task("TREC", "key", {"acc": 91.0}, encode_seconds=2.0)
        assert let_go.exists()  # it wrote only once the holder had finished
    assert store.kept_task("TREC", "key") == ({"acc": 91.0}, 2.0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["task-TREC.kept.json"]


@pytest.mark.parametrize("grain", ["run", "task"])
def test_a_row_that_spans_sittings_reports_the_embedding_time_of_every_sitting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grain: str) -> None:
    """encode_seconds is what the embeddings took, not what the last sitting spent: a resumed call adds the
    kept tasks' (grain "task") or reports the kept embeddings' (grain "run") recorded seconds; a task kept
    with no time is named, never counted as zero."""
    tasks = load_transfer_tasks(["SST2", "TREC"], write_folder(tmp_path / "data"))
    clock = iter(range(0, 10_000, 10))  # each perf_counter call 10 s after the last: every span is known
    monkeypatch.setattr(transfer.time, "perf_counter", lambda: float(next(clock)))
    real_probe = transfer.probe_task

    def probe_then_stop(task, *args, **kwargs):
        if task.name == "TREC":
            raise KeyboardInterrupt  # the first sitting ends in TREC's probe
        return real_probe(task, *args, **kwargs)

    kept = tmp_path / "kept"
    monkeypatch.setattr(transfer, "probe_task", probe_then_stop)
    with pytest.raises(KeyboardInterrupt):
        transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept, grain=grain)
    monkeypatch.setattr(transfer, "probe_task", real_probe)
    resumed = transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept, grain=grain)
    if grain == "task":  # SST2 embedded in the first sitting, TREC in the second: 10 s each, both counted
        assert resumed["encode_seconds"] == 20.0 and resumed["encode_seconds_unknown"] == []
    else:  # one embedding of both, made by the first sitting and read back by the second
        assert resumed["encode_seconds"] == 10.0 and resumed["encode_seconds_unknown"] == []
        assert json.loads((kept / "embeddings.kept.json").read_text())["seconds"] == 10.0

    sst2 = kept / "task-SST2.kept.json"  # as the version before this one kept it: a result and no time
    sst2.write_text(json.dumps({key: value for key, value in json.loads(sst2.read_text()).items()
                                if key != "encode_seconds"}))
    (kept / "task-TREC.kept.json").unlink()
    (kept / "embeddings.kept.npy").unlink()
    again = transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept, grain=grain)
    assert again["encode_seconds"] == 10.0 and again["encode_seconds_unknown"] == ["SST2"]
    assert "in 10.0 s (not counting SST2: embedded by an earlier call that kept no time)" in \
        transfer.transfer_markdown(again, {"model": "m"})
    if grain == "run":  # embeddings read back from a store that kept no time: no task's time is known
        record = kept / "embeddings.kept.json"
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "seconds"}))
        (kept / "task-TREC.kept.json").unlink()
        untimed = transfer.evaluate_transfer(bag_of_words, tasks, progress=False, kept=kept, grain=grain)
        assert untimed["encode_seconds"] == 0.0 and untimed["encode_seconds_unknown"] == ["SST2", "TREC"]


def test_eval_transfer_command_writes_a_stamped_report(fakes: dict, tmp_path: Path,  # noqa: F811
                                                       capsys: pytest.CaptureFixture) -> None:
    root = write_folder(tmp_path / "data")
    prefix = tmp_path / "out" / "run"
    status = run_cli(["eval", "transfer", "--model", "tiny", "--method", "prompteol", "--data", str(root),
                      "--tasks", "SST2,MR,TREC", "--limit", "59", "--output", str(prefix), "--no-progress"])
    assert status == 0
    saved = json.loads(prefix.with_suffix(".json").read_text())
    stamp, results = saved["stamp"], saved["results"]
    assert stamp["limit"] == 59 and stamp["tasks"] == ["SST2", "MR", "TREC"] and "tenacity: 5" in stamp["protocol"]
    assert stamp["blank_lines"] == "read" and stamp["skipped_blank_lines"] == {}
    assert results["blank_lines_read"] == {"MR/rt-polarity.pos": [2]} and results["tasks"]["MR"]["test_items"] == 45
    assert stamp["truncation"]["truncate"] is None and "TREC/TREC_10.label" in stamp["data_sha256"]
    assert set(results["tasks"]) == {"SST2", "MR", "TREC"}
    printed = capsys.readouterr().out
    assert "Limited run" in printed and f"{results['tasks']['SST2']['score']:.2f}" in printed
    assert "read here as the empty text" in prefix.with_suffix(".md").read_text()
    assert not (prefix.parent / ".run.json.partial").exists()  # the kept work goes once the report is written


def test_eval_transfer_refuses_bad_data_before_the_model_loads(fakes: dict, tmp_path: Path) -> None:  # noqa: F811
    root = write_folder(tmp_path / "data", **{"SST__binary__sentiment-dev": "ok film\tyes\n"})
    with pytest.raises(InputError, match="label 'yes'"):
        run_cli(["eval", "transfer", "--method", "prompteol", "--data", str(root), "--tasks", "SST2",
                 "--output", str(tmp_path / "r")])
    assert "load" not in fakes
    with pytest.raises(InputError, match="STS12"):
        run_cli(["eval", "transfer", "--method", "prompteol", "--tasks", "MR,STS12", "--output", str(tmp_path / "r")])
    # MR's blank line, read as SentEval does, is the empty text: a mean over the text has nothing to pool there
    root = write_folder(tmp_path / "blank")
    with pytest.raises(InputError, match="holds 1 empty text.* method 'mean' pools") as error:
        run_cli(["eval", "transfer", "--method", "mean", "--data", str(root), "--tasks", "MR",
                 "--output", str(tmp_path / "r")])
    assert "--blank-lines skip" in error.value.fix
    # found: --probe-workers had no upper bound; each worker is a process that imports torch
    more = sc.default_workers() + 1
    with pytest.raises(InputError, match=f"--probe-workers {more}: this process may use {more - 1} CPU"):
        run_cli(["eval", "transfer", "--method", "prompteol", "--data", str(root), "--tasks", "SST2",
                 "--probe-workers", str(more), "--output", str(tmp_path / "r")])
    assert "load" not in fakes


def test_all_seven_tasks_are_known() -> None:
    assert TRANSFER_TASKS == ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")


def test_reproduce_tasks_judges_a_claim_by_a_paired_interval() -> None:
    """tools/reproduce_tasks.py: CP's claim on PromptEOL 'holds' when CP is right on every item PromptEOL is
    right on and on 60 more of 300, 'reversed' the other way round, per task and for Avg. (CP's row is its
    paper's setup; TP's transfer rows are not, so their claims get no verdict: provenance.py)."""
    import importlib.util

    from repo_paths import REPO

    spec = importlib.util.spec_from_file_location("reproduce_tasks", REPO / "tools" / "reproduce_tasks.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    gold = np.zeros(300, dtype=int)
    better, worse = np.where(np.arange(300) < 240, 0, 1), np.where(np.arange(300) < 180, 0, 1)

    def row(predictions):
        accuracy = 100 * float((predictions == gold).mean())
        return {"tasks": {"MR": {"score": accuracy, "predictions": predictions.tolist(), "gold": gold.tolist()}}}

    claims = tool.transfer_claims({"prompteol+cp": row(better), "prompteol": row(worse)})
    assert [c["method"] for c in claims] == ["prompteol+cp"]
    scores = claims[0]["scores"]
    assert scores["MR"]["diff"] == pytest.approx(20.0) and scores["MR"]["verdict"] == "holds"
    assert scores["avg"]["lo"] > 0 and scores["avg"]["verdict"] == "holds"
    reversed_claim = tool.transfer_claims({"prompteol+cp": row(worse), "prompteol": row(better)})[0]
    assert reversed_claim["scores"]["avg"]["verdict"] == "reversed"

