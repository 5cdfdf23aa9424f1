"""SentEval transfer tasks (TP Table 5, CP Table 6): embed each text once, probe with SentEval's classifier:
the data, the run, the table and `minidecoder eval transfer`.

    results = evaluate_transfer(encode, tasks=("MR", "TREC"))   # encode(texts) -> (N, E)
    results["tasks"]["MR"]["score"], results["avg"]

Per task (the data below, senteval_probe.py trains the probe):

| task | scheme (SentEval) | features | score |
|---|---|---|---|
| MR, CR, SUBJ, MPQA | `InnerKFoldClassifier`: 10 outer folds, L2 chosen by an inner 10-fold | u | mean of the 10 fold accuracies x100 |
| SST2 | `SplitClassifier`: L2 chosen on dev | u | test accuracy x100 |
| TREC | `KFoldClassifier`: L2 chosen by 10-fold CV on train | u | test accuracy x100 |
| MRPC | `KFoldClassifier` | `np.c_[abs(u - v), u * v]` | test accuracy x100 (F1 beside it) |

"Avg." is the mean of the seven scores (only when all seven ran).

Intervals: a 95% percentile bootstrap over test items (1,000 resamples, seed 0; bootstrap.py's
constants): the items of the test set, or for the k-fold tasks every item with its out-of-fold
prediction. A resample's statistic is the accuracy x100 of the resampled items; for a k-fold task that is
the pooled out-of-fold accuracy, which differs from SentEval's mean of fold accuracies by well under 0.1
(folds differ in size by at most one item); both are reported. The draws depend only on (seed, task,
number of items), so two rows scored on the same task get the same resamples: `paired_interval` gives
the interval of their difference.

`kept` (a folder, optional) makes a run resumable at the grain of the slow steps: the embeddings once they
are computed, and each task's result once its probe is trained; a run given the same folder reuses both (a
task whose texts or options changed is computed again) and embeds only the texts of the tasks still to
score, so an interrupted run resumed gives the scores of an uninterrupted one. A task's result is kept under
what decides it (model, method and options; the task's texts and labels; the probe's settings), not under
its embeddings' bytes, so a run on another machine keeps the tasks already done; kept by a version that lacked
one of the method's options, it still serves a run that leaves that option at its default (running.jobs.serves).

`grain` says when the texts are embedded. "run" (the default) embeds every text of the tasks still to score
at once, longest first: one command, whose embedding job covers every text anyway. "task" embeds each task's
texts just before its probe, so a run that stops loses at most one task's embeddings.

The data: The seven SentEval transfer tasks read exactly as SentEval reads them (../shared/data/senteval).

facebookresearch/SentEval, read for this module: `senteval/binary.py` (MR, CR, SUBJ, MPQA),
`senteval/sst.py`, `senteval/trec.py`, `senteval/mrpc.py`:

- MR, CR, SUBJ, MPQA: `io.open(path, encoding='latin-1').read().splitlines()`, each line `split()`;
  samples = positive file + negative file, labels 1 then 0 (SUBJ: objective = 1, subjective = 0);
  one set, scored by inner k-fold cross-validation.
- SST2: `sentiment-{train,dev,test}`, UTF-8, `line.strip().split('\t')`: text column 0, label column 1.
- TREC: latin-1, `target, sample = line.strip().split(':', 1)`, the question is `sample.split(' ', 1)[1]`
  (the fine label dropped), coarse label one of ABBR, DESC, ENTY, HUM, LOC, NUM (0..5).
- MRPC: UTF-8, header skipped, `line.strip().split('\t')`: label column 0, sentences columns 3 and 4.

SentEval then sorts every split by (number of words, label) -- MRPC by (words of A, words of B, label)
-- with Python's stable sort, "to reduce padding", and hands the classifier the rows in **that** order;
since the folds (StratifiedKFold, shuffled) are drawn over row positions, the order decides the folds,
and it is kept here. A text reaches the method as its words joined by single spaces (SentEval's
batcher; the method applies the rest of the SentEval preparation, methods/text.py).

Blank lines: CR and MPQA contain 7 (CR 4, MPQA 3) that SentEval reads as samples with no words; its
batcher joins them into the empty text "", and the prompt methods embed it as their prompt around nothing
(`Method.reads_empty_text`). `blank_lines="read"` (the default) does the same, so every cell is SentEval's own
number; the report lists those lines per file in `blank_lines_read`. A method that pools over the text's own
tokens has nothing to pool there: `blank_lines="skip"` leaves them out and lists them in `skipped_blank`
(CR: 3,771 samples instead of 3,775, MPQA: 10,603 instead of 10,606; the folds then differ from SentEval's).
An empty text anywhere else (an SST, TREC or MRPC field) is an error naming file and line.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from minidecoder.errors import InputError, OutputError, describe_unusable_file
from minidecoder.evaluation.bootstrap import RESAMPLES, SEED, percentile_interval
from minidecoder.evaluation.family import (Encoder, Family, Kept, add_family_options, checked_count, checked_limit,
                                           encode_sentences, family_parser, limit_that_cut, longest_first,
                                           markdown_report, parse_names, refuse_reading_options, refuse_repeats,
                                           require_rows, resolve_data_folder, run_limit)
from minidecoder.evaluation.senteval_probe import (KFOLD, ClassifierConfig, ProbeResult, default_workers,
                                                   dev_selected, fits_needed, inner_kfold, kfold_then_test)
from minidecoder.output_files import read_kept_json, write_failure, write_streamed
from minidecoder.running.jobs import serves


TRANSFER_TASKS: tuple[str, ...] = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
BINARY_FILES: dict[str, tuple[str, str]] = {  # (label 1 file, label 0 file), SentEval's order
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.objective", "SUBJ/subj.subjective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
TREC_CLASSES: tuple[str, ...] = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
FIX = "restore the file unchanged from SentEval's download script (../shared/data/senteval; `sha256sum -c SHA256SUMS`)"


@dataclass
class Split:
    """Rows in SentEval's order: `texts[i]` (and `texts_b[i]` for a pair task) with label `labels[i]`."""

    texts: list[str]
    labels: np.ndarray  # (N,) int64
    texts_b: list[str] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def all_texts(self) -> list[str]:
        return self.texts + (self.texts_b or [])


@dataclass
class TransferTask:
    """One task: its splits ("all" for the k-fold tasks; "train"/"test", plus "dev" for SST2), how
    SentEval validates it (`scheme`: "inner_kfold", "kfold", "split") and the files read."""

    name: str
    scheme: str
    classes: tuple[str, ...]
    splits: dict[str, Split]
    data_dir: Path
    files: list[str]
    limit: int | None = None
    skipped_blank: dict[str, list[int]] = field(default_factory=dict)  # file -> 1-based line numbers left out
    read_blank: dict[str, list[int]] = field(default_factory=dict)  # file -> 1-based line numbers read as ""

    @property
    def test_split(self) -> str:
        return "all" if self.scheme == "inner_kfold" else "test"

    def texts(self) -> list[str]:
        return [text for split in self.splits.values() for text in split.all_texts()]


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """`data_dir` if given, else $MINIDECODER_SENTEVAL_DATA or ../shared/data/senteval; it must be a folder."""
    return resolve_data_folder(data_dir, "senteval", "the folder holding MR, CR, SUBJ, MPQA, SST, TREC and MRPC",
                               "SentEval transfer")


def _read(path: Path, encoding: str, splitlines: bool = False) -> list[str]:
    """The file's lines as SentEval reads them: `read().splitlines()` (binary tasks, `splitlines`), else
    `for line in open(...)` (universal newlines: breaks at \\n, \\r and \\r\\n only; latin-1 text may hold
    a \\x85 that `splitlines` would also break at)."""
    if not path.is_file():
        why = describe_unusable_file(path)
        raise InputError(f"SentEval data file {path} {'is missing' if why == 'does not exist' else why}",
                         "point --data at a complete SentEval transfer folder; " + FIX)
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise InputError(f"SentEval data file {path} line {line} is not valid {encoding} (byte {error.start})", FIX) from None
    return text.splitlines() if splitlines else list(io.StringIO(text, newline=None))


def _text(words: str, path: Path, number: int) -> str:
    text = " ".join(words.split())
    if not text:
        raise InputError(f"SentEval data file {path} line {number} has an empty text", FIX)
    return text


def _label(value: str, allowed: tuple[str, ...], path: Path, number: int) -> int:
    if value not in allowed:
        raise InputError(f"SentEval data file {path} line {number}: label {value!r} is not one of {', '.join(allowed)}", FIX)
    return allowed.index(value)


def _sorted(texts: list[str], labels: list[int], texts_b: list[str] | None = None) -> Split:
    """SentEval's `sorted(..., key=lambda z: (len(z[0]), z[1]))` over word lists (MRPC: both sides)."""
    rows = list(range(len(texts)))
    if texts_b is None:
        rows.sort(key=lambda i: (len(texts[i].split()), labels[i]))
    else:
        rows.sort(key=lambda i: (len(texts[i].split()), len(texts_b[i].split()), labels[i]))
    return Split([texts[i] for i in rows], np.asarray([labels[i] for i in rows], dtype=np.int64),
                 None if texts_b is None else [texts_b[i] for i in rows])


BLANK_LINES = ("read", "skip")  # a blank line of CR or MPQA: the empty text, as SentEval reads it, or left out


def load_binary(name: str, root: Path, limit: int | None, blank_lines: str = "read") -> TransferTask:
    texts, labels, blank, sizes = [], [], {}, []
    for label, relative in zip((1, 0), BINARY_FILES[name]):
        lines = _read(root / relative, "latin-1", splitlines=True)
        blanks = [number for number, line in enumerate(lines, start=1) if not line.split()]
        require_rows(root / relative, len(lines) - len(blanks), "sentences", "it is empty or blank")
        kept = [(number, line) for number, line in enumerate(lines, start=1) if blank_lines == "read" or line.split()]
        sizes.append(len(kept))
        kept = kept[:limit] if limit is not None else kept
        reached = kept[-1][0] if kept and len(kept) < sizes[-1] else len(lines)  # the last line a --limit kept
        if any(number <= reached for number in blanks):  # the blank lines this run read (or skipped)
            blank[relative] = [number for number in blanks if number <= reached]
        texts += [" ".join(line.split()) for _, line in kept]  # SentEval's ' '.join(line.split()): "" for a blank
        labels += [label] * len(kept)
    return TransferTask(name, "inner_kfold", ("0", "1"), {"all": _sorted(texts, labels)}, root,
                        list(BINARY_FILES[name]), limit_that_cut(limit, sizes),
                        **{"read_blank" if blank_lines == "read" else "skipped_blank": blank})


def _limited(lines: list[str], limit: int | None, path: Path, sizes: list[int]) -> list[str]:
    """The rows a limit keeps; the file's size joins `sizes` (what `limit_that_cut` weighs), and a file with no
    rows is an error naming it."""
    sizes.append(require_rows(path, len(lines)))
    return lines if limit is None else lines[:limit]


def load_sst2(root: Path, limit: int | None) -> TransferTask:
    splits, files, sizes = {}, [], []
    for split in ("train", "dev", "test"):
        relative = f"SST/binary/sentiment-{split}"
        path = root / relative
        texts, labels = [], []
        for number, line in enumerate(_limited(_read(path, "utf-8"), limit, path, sizes), start=1):
            columns = line.strip().split("\t")
            if len(columns) < 2:
                raise InputError(f"SentEval data file {path} line {number} has no tab-separated label "
                                 "(or an empty text: SentEval's strip() eats a leading tab)", FIX)
            texts.append(_text(columns[0], path, number))
            labels.append(_label(columns[1], ("0", "1"), path, number))
        splits[split], files = _sorted(texts, labels), files + [relative]
    return TransferTask("SST2", "split", ("0", "1"), splits, root, files, limit_that_cut(limit, sizes))


def load_trec(root: Path, limit: int | None) -> TransferTask:
    splits, files, sizes = {}, [], []
    for split, relative in (("train", "TREC/train_5500.label"), ("test", "TREC/TREC_10.label")):
        path = root / relative
        texts, labels = [], []
        for number, line in enumerate(_limited(_read(path, "latin-1"), limit, path, sizes), start=1):
            target, colon, sample = line.strip().partition(":")
            fine, space, question = sample.partition(" ")
            if not colon or not space:
                raise InputError(f"SentEval data file {path} line {number} is not 'COARSE:fine question'", FIX)
            labels.append(_label(target, TREC_CLASSES, path, number))
            texts.append(_text(question, path, number))
        splits[split], files = _sorted(texts, labels), files + [relative]
    return TransferTask("TREC", "kfold", TREC_CLASSES, splits, root, files, limit_that_cut(limit, sizes))


def load_mrpc(root: Path, limit: int | None) -> TransferTask:
    splits, files, sizes = {}, [], []
    for split in ("train", "test"):
        relative = f"MRPC/msr_paraphrase_{split}.txt"
        path = root / relative
        first, second, labels = [], [], []
        lines = _read(path, "utf-8")
        if lines and not lines[0].lstrip("\ufeff").startswith("Quality\t"):  # SentEval skips line 1 unread
            raise InputError(f"SentEval data file {path} line 1 is not MRPC's header (Quality<TAB>#1 ID<TAB>...): "
                             f"{lines[0].strip()[:60]!r}; its first row would be skipped as one", FIX)
        lines = lines[1:]
        for number, line in enumerate(_limited(lines, limit, path, sizes), start=2):
            columns = line.strip().split("\t")
            if len(columns) < 5:
                raise InputError(f"SentEval data file {path} line {number} has {len(columns)} tab-separated fields, "
                                 "expected 5", FIX)
            labels.append(_label(columns[0], ("0", "1"), path, number))
            first.append(_text(columns[3], path, number))
            second.append(_text(columns[4], path, number))
        splits[split], files = _sorted(first, labels, second), files + [relative]
    return TransferTask("MRPC", "kfold", ("0", "1"), splits, root, files, limit_that_cut(limit, sizes))


def load_transfer_task(name: str, data_dir: str | Path | None = None, limit: int | None = None,
                       blank_lines: str = "read") -> TransferTask:
    """One task by name (`TRANSFER_TASKS`); `limit=N` keeps the first N rows of each file (a quick look);
    `blank_lines`: "read" (a blank line of CR or MPQA is the empty text, as SentEval reads it) or "skip"."""
    if blank_lines not in BLANK_LINES:
        raise InputError(f"blank_lines={blank_lines!r} is not one of {', '.join(BLANK_LINES)}",
                         "pass 'read' (SentEval's reading: the empty text) or 'skip' (left out)")
    limit = checked_limit(limit)
    root = resolve_data_dir(data_dir)
    if name in BINARY_FILES:
        return _check_foldable(load_binary(name, root, limit, blank_lines))
    loaders = {"SST2": load_sst2, "TREC": load_trec, "MRPC": load_mrpc}
    if name not in loaders:
        raise InputError(f"unknown transfer task {name!r}", "choose from " + ", ".join(TRANSFER_TASKS))
    return _check_foldable(loaders[name](root, limit))


def _check_foldable(task: TransferTask) -> TransferTask:
    """SentEval's StratifiedKFold(10) needs a class of at least 10 rows in every set it folds (20 where an
    inner 10-fold runs inside each outer training part): found now, not after the embedding."""
    if task.scheme == "split":
        return task
    rows = task.splits["all" if task.scheme == "inner_kfold" else "train"].labels
    largest, needed = int(np.bincount(rows).max()) if len(rows) else 0, 20 if task.scheme == "inner_kfold" else 10
    if largest < needed:
        raise InputError(f"{task.name} has {len(rows)} rows to cross-validate, at most {largest} of one class; "
                         f"SentEval's 10-fold cross-validation needs {needed} of one class",
                         "use more rows (a larger --limit, or none), or a complete data folder")
    return task


def load_transfer_tasks(names: list[str] | tuple[str, ...] = TRANSFER_TASKS, data_dir: str | Path | None = None,
                        limit: int | None = None, blank_lines: str = "read") -> list[TransferTask]:
    unknown = [name for name in names if name not in TRANSFER_TASKS]
    if unknown or not names:
        raise InputError(f"unknown transfer task(s) {', '.join(map(repr, unknown)) or '(none given)'}",
                         "choose from " + ",".join(TRANSFER_TASKS))
    refuse_repeats(list(names), "the transfer task list")
    return [load_transfer_task(name, data_dir, limit, blank_lines) for name in names]


PROTOCOL = ("SentEval usepytorch=True, kfold=10, classifier {nhid: 0, optim: adam, batch_size: 64, tenacity: 5, "
            "epoch_size: 4}, seed 1111, L2 grid 1e-5..1e-2 (SentEval's pytorch grid), loss mean-reduced")


def mrpc_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """SentEval's MRPC features: `np.c_[np.abs(u - v), u * v]`, (N, 2E)."""
    return np.c_[np.abs(first - second), first * second]


def probe_task(task: TransferTask, rows: Callable[[list[str]], np.ndarray], progress: Callable[[int], None] | None = None,
               config: ClassifierConfig = ClassifierConfig(), workers: int = 1) -> ProbeResult:
    """Train and score SentEval's probe on one task; `rows(texts)` gives each text's (N, E) embedding;
    `workers` processes train the L2 grid's probes (the same result for any number: senteval_probe.train_all)."""
    classes = len(task.classes)

    def features(split: str) -> np.ndarray:
        part = task.splits[split]
        if part.texts_b is None:
            return rows(part.texts)
        return mrpc_features(rows(part.texts), rows(part.texts_b))

    labels = {name: split.labels for name, split in task.splits.items()}
    if task.scheme == "inner_kfold":
        return inner_kfold(features("all"), labels["all"], classes, KFOLD, config, progress, workers)
    if task.scheme == "kfold":
        return kfold_then_test(features("train"), labels["train"], features("test"), labels["test"], classes,
                               KFOLD, config, progress, workers)
    return dev_selected(features("train"), labels["train"], features("dev"), labels["dev"], features("test"),
                        labels["test"], classes, config, progress, workers)


# ---- bootstrap over test items ---------------------------------------------------------------------------
def resample_indices(items: int, task_index: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(B, N) item indices drawn with replacement; they depend on (seed, task index, N) only."""
    return np.random.default_rng([seed, task_index]).integers(0, items, size=(resamples, items))


def accuracy_replicates(correct: np.ndarray, task_index: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(B,) accuracy x100 of each resample of the items; `correct` (N,) bool."""
    return 100.0 * np.asarray(correct, dtype=np.float64)[resample_indices(len(correct), task_index, resamples, seed)].mean(axis=1)


def paired_interval(correct_a: np.ndarray, correct_b: np.ndarray, task_index: int) -> tuple[float, float]:
    """95% interval of accuracy(a) - accuracy(b) x100 on the same resamples of the same items."""
    return percentile_interval(accuracy_replicates(correct_a, task_index) - accuracy_replicates(correct_b, task_index))


def task_result(task: TransferTask, probe: ProbeResult, task_index: int) -> dict:
    """The JSON entry of one task: SentEval's scores, the interval, and each test item's prediction."""
    correct = probe.predictions == probe.gold
    entry = {
        "score": probe.test_accuracy,  # SentEval's 'acc' (k-fold tasks: mean of fold accuracies)
        "dev": probe.dev_accuracy,  # SentEval's 'devacc'
        # the items 'devacc' scores (the folds' items; SST2: its dev split), for its interval beside the test's
        "dev_items": int(len(task.splits[{"inner_kfold": "all", "kfold": "train"}.get(task.scheme, "dev")])),
        "pooled_accuracy": 100.0 * float(correct.mean()),
        "ci95": list(percentile_interval(accuracy_replicates(correct, task_index))),
        "scheme": task.scheme,
        "test_items": int(len(correct)),
        "train_items": int(sum(len(split) for name, split in task.splits.items() if name != task.test_split)),
        "chosen_l2": probe.chosen_l2,
        "predictions": probe.predictions.tolist(),
        "gold": probe.gold.tolist(),
    }
    if task.name == "MRPC":  # SentEval reports F1 beside accuracy for MRPC
        from sklearn.metrics import f1_score
        entry["f1"] = round(100 * float(f1_score(probe.gold, probe.predictions)), 2)
    return entry


# ---- the run ------------------------------------------------------------------------------------------
class KeptWork:
    """A folder that keeps the slow steps' results of one run (see the module docstring)."""

    def __init__(self, folder: str | Path, identity: str, embeddings_kept: Callable[[], None] | None = None) -> None:
        self.folder, self.identity = Path(folder), identity  # identity: what made the embeddings (model, method, ...)
        self.made_under = _parsed(identity)  # kept beside the work, so a later version can tell whether it serves
        self.embeddings_kept = embeddings_kept  # called once embeddings computed here are kept whole
        self.folder.mkdir(parents=True, exist_ok=True)
        # named `*.kept.npy` / `.json`: running.jobs.holds_kept_work counts them, so no run removes them unfinished
        self.vectors_path, self.texts_path = self.folder / "embeddings.kept.npy", self.folder / "embeddings.kept.json"
        self.identity_sha256 = hashlib.sha256(identity.encode()).hexdigest()  # what embeddings.kept.json records

    def embeddings(self, texts: list[str],
                   compute: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, float | None, bool]:
        """The (N, E) embeddings of `texts`, the seconds computing them took, and whether they were computed
        now: read from the kept ones when they cover every text (a resumed run asks only for the tasks not yet
        scored), with the seconds kept beside them (None where an older version kept none), else computed,
        timed and kept in their place."""
        kept = self._kept_embeddings()
        if kept is not None:
            table, record = kept
            row = {text: k for k, text in enumerate(record["texts"])}
            if all(text in row for text in texts):
                return torch.from_numpy(table[[row[text] for text in texts]]), record.get("seconds"), False
        start = time.perf_counter()
        vectors = compute()
        seconds = time.perf_counter() - start
        _keep(self.vectors_path, lambda handle: np.save(handle, vectors.numpy()))
        _keep(self.texts_path, lambda handle: handle.write(json.dumps(
            {"identity": self.identity_sha256, "made_under": self.made_under, "texts": texts,
             "seconds": seconds}).encode()))
        if self.embeddings_kept is not None:
            self.embeddings_kept()
        return vectors, seconds, True

    def _kept_embeddings(self) -> tuple[np.ndarray, dict] | None:
        """The kept (N, E) table and its record, when both are whole and kept under this identity. Kept ones that
        are not what `embeddings` writes (cut short, edited; a table that is not one finite row per text written
        beside it: `encode_sentences` refuses NaN) are None, and computed again as missing ones are: they are
        this folder's own derived work."""
        record = read_kept_json(self.texts_path)
        if not isinstance(record, dict) or not (record.get("identity") == self.identity_sha256
                                                or self._serves(record.get("made_under"))):
            return None
        texts, seconds = record.get("texts"), record.get("seconds")
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts) or not _is_seconds(seconds):
            return None
        try:
            table = np.load(self.vectors_path)
        except (OSError, ValueError, EOFError):  # missing, a folder, cut short, not a .npy
            return None
        if table.ndim != 2 or len(table) != len(texts) or table.dtype.kind != "f" or not np.isfinite(table).all():
            return None
        return table, record

    def _task_path(self, name: str) -> Path:
        return self.folder / f"task-{name}.kept.json"

    def _task_key(self, key: str) -> str:
        return hashlib.sha256((self.identity + key).encode()).hexdigest()

    def _serves(self, made_under: Any) -> bool:
        """Whether work kept under `made_under` (what a record says made it; None where a version wrote none) is
        this identity's, an option added since at its default aside."""
        return made_under is not None and self.made_under is not None and serves(made_under, self.made_under)

    def kept_task(self, name: str, key: str) -> tuple[dict, float | None] | None:
        """The result of task `name` kept whole under the same identity and `key`, and the seconds its embedding
        took (None: kept by a version that kept none), read in one go so both come from one sitting; None where
        none was kept (one cut short or edited is trained again, as a missing one is)."""
        kept = read_kept_json(self._task_path(name))
        if not isinstance(kept, dict) or not (kept.get("key") == self._task_key(key) or (
                kept.get("task_key") == key and self._serves(kept.get("made_under")))) or not _is_seconds(
                kept.get("encode_seconds")) or not isinstance(kept.get("result"), dict):
            return None
        return kept["result"], kept.get("encode_seconds")

    def keep_task(self, name: str, key: str, result: dict, encode_seconds: float | None = None) -> None:
        """Keep `result`, and beside it (not in it: a result is the same whichever sitting made it) the
        seconds its embedding took."""
        _keep(self._task_path(name), lambda handle: handle.write(json.dumps(
            {"key": self._task_key(key), "task_key": key, "made_under": self.made_under, "result": result,
             "encode_seconds": encode_seconds}).encode()))


def _parsed(identity: str) -> Any:
    """An identity written as JSON (the eval command's, the table tools'), read; None where it is other text."""
    try:
        return json.loads(identity)
    except json.JSONDecodeError:
        return None


def _is_seconds(value: Any) -> bool:
    """A kept time: a finite number, or None where a version kept none."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _keep(path: Path, write: Callable) -> None:
    # whole, through a temporary file of this process's own, under the file's lock, waited for: another sitting
    # keeping the same file must not cost this one the hour it embedded, and a failed write leaves it as it was
    try:
        write_streamed(path, write, overwrite=True, wait=True)
    except OSError as error:  # what else the folder keeps, the eval command says (family.run_family)
        cause, way_out = write_failure(error, path)
        raise OutputError(f"keeping {path.name} in {path.parent} failed: {cause}",
                          f"{way_out}, then run the same command again") from None


def task_key(task: TransferTask, config: ClassifierConfig) -> str:
    """What decides a task's result besides the embeddings' identity: its texts, its labels, the probe."""
    return hashlib.sha256(json.dumps([task.texts(), [s.labels.tolist() for s in task.splits.values()],
                                      repr(config)]).encode()).hexdigest()


def evaluate_transfer(encode: Encoder, tasks: Sequence[str] | Sequence[TransferTask] = TRANSFER_TASKS,
                      data_dir: str | Path | None = None, limit: int | None = None, progress: bool = True,
                      chunk_size: int = 256, kept: str | Path | None = None, kept_identity: str = "",
                      config: ClassifierConfig = ClassifierConfig(), probe_workers: int = 1,
                      grain: str = "run", embeddings_kept: Callable[[], None] | None = None) -> dict:
    """Score `encode` on the transfer tasks (names, or tasks already read by `load_transfer_tasks`).

    Each distinct text is encoded once per embedding (longest first), all at once or task by task (`grain`,
    see the module docstring). `kept` (a folder) keeps the work for a resumed call; `kept_identity` must name
    everything that makes the embeddings (model, dtype, method and options, truncation): kept work made under
    another identity is never reused; `embeddings_kept()` is called once embeddings computed here are kept whole
    there (the caller may then drop its own copy). `probe_workers` processes train each task's probes
    (senteval_probe.train_all: the same scores for any number). Returns {"tasks": {name: entry}, "avg",
    "avg_over", "limit", "skipped_blank", "texts", "encode_seconds", "data_dir", "data_files", "protocol"}; an
    entry is `task_result`'s dict.

    "encode_seconds" is the time the embeddings took, whichever sitting computed them, so a row that spans
    sittings reports its whole embedding: grain "task" keeps each task's seconds beside its kept result and
    sums them, grain "run" keeps the run's seconds beside the kept embeddings. "encode_seconds_unknown" names
    the tasks whose time is not in the sum (embedded by an earlier call that kept no time); a task whose
    embedding job was itself interrupted counts the sitting that finished it."""
    if grain not in ("run", "task"):
        raise InputError(f"grain={grain!r} is not a grain", "pass 'run' (embed every text at once) or 'task' (task "
                         "by task)")
    probe_workers = checked_count(probe_workers, "probe_workers", "processes", 1)  # 0 or -1: as one, unsaid
    if tasks and all(isinstance(t, TransferTask) for t in tasks):
        refuse_reading_options("evaluate_transfer", "load_transfer_tasks(names, data_dir, limit)", data_dir=data_dir,
                               limit=limit)
        loaded = list(tasks)
    else:
        loaded = load_transfer_tasks(list(tasks), data_dir, limit)
    store = KeptWork(kept, kept_identity, embeddings_kept) if kept is not None else None
    keys = {task.name: task_key(task, config) for task in loaded}
    done = {task.name: store.kept_task(task.name, keys[task.name]) for task in loaded} if store else {}

    def embedded(of: list[TransferTask]) -> tuple[Callable[[list[str]], np.ndarray], float | None, bool]:
        """`rows(texts)`: each text's (N, E) embedding, the texts of `of` embedded (or read back) once; the
        seconds the embedding took (None: read back from a store that kept no time); whether computed now."""
        texts = longest_first(text for task in of for text in task.texts())

        def compute() -> torch.Tensor:
            return encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress, desc="transfer texts")

        if store:
            vectors, seconds, computed = store.embeddings(texts, compute)
        else:
            start = time.perf_counter()
            vectors, computed = compute(), True
            seconds = time.perf_counter() - start
        table = vectors.numpy().astype(np.float32)  # (N, E)
        index = {text: row for row, text in enumerate(texts)}
        return (lambda some: table[[index[text] for text in some]]), seconds, computed

    todo = [task for task in loaded if done.get(task.name) is None]
    rows_of_run, run_seconds, run_computed = embedded(todo) if grain == "run" and todo else (None, None, False)
    results: dict = {"tasks": {}}
    task_seconds: dict[str, float | None] = {}
    for task in loaded:
        if done.get(task.name) is not None:
            results["tasks"][task.name], task_seconds[task.name] = done[task.name]
            continue
        rows, seconds, _ = (rows_of_run, None, False) if rows_of_run else embedded([task])
        with tqdm(total=fits_needed(task.scheme, KFOLD), unit="fold", desc=f"{task.name} L2 grid",
                  file=sys.stderr, disable=not progress, dynamic_ncols=True) as bar:
            entry = task_result(task, probe_task(task, rows, bar.update, config, probe_workers),
                                TRANSFER_TASKS.index(task.name))
        task_seconds[task.name] = seconds
        if store:
            store.keep_task(task.name, keys[task.name], entry, seconds)
        results["tasks"][task.name] = entry
    if grain == "task":
        encode_seconds = sum(value for value in task_seconds.values() if value is not None)
        unknown = [name for name, value in task_seconds.items() if value is None]
    else:  # one embedding: kept ones read back cover the tasks kept with them, a new one only `todo`
        encode_seconds = run_seconds or 0.0
        if run_seconds is None:  # nothing to embed, or read back from a store that kept no time
            unknown = [task.name for task in loaded]
        else:
            unknown = [task.name for task in loaded if task not in todo] if run_computed else []
    scores = [entry["score"] for entry in results["tasks"].values()]
    complete = sorted(results["tasks"]) == sorted(TRANSFER_TASKS)
    results.update(
        avg=float(np.mean(scores)) if complete else None,
        avg_over=list(results["tasks"]) if complete else [],
        limit=limit if not loaded else run_limit(task.limit for task in loaded),
        skipped_blank={file: lines for task in loaded for file, lines in task.skipped_blank.items()},
        blank_lines_read={file: lines for task in loaded for file, lines in task.read_blank.items()},
        texts=len({text for task in loaded for text in task.texts()}),  # distinct texts: a count needs no order
        encode_seconds=encode_seconds,
        encode_seconds_unknown=unknown,
        data_dir=str(loaded[0].data_dir) if loaded else None,
        data_files=[name for task in loaded for name in task.files],
        protocol=PROTOCOL,
    )
    return results


def transfer_table(results: dict) -> str:
    """One row: each task's accuracy x100 with its 95% interval, and Avg. when all seven ran."""
    names = list(results["tasks"])
    cells = [f"{results['tasks'][n]['score']:.2f} [{results['tasks'][n]['ci95'][0]:.1f}, "
             f"{results['tasks'][n]['ci95'][1]:.1f}]" for n in names]
    if results.get("avg") is not None:
        names, cells = names + ["Avg."], cells + [f"{results['avg']:.2f}"]
    lines = ["| " + " | ".join(names) + " |", "|" + "|".join("---:" for _ in names) + "|", "| " + " | ".join(cells) + " |"]
    if results.get("limit") is not None:
        lines.append(f"\n**Limited run:** only the first {results['limit']} rows of each file were used; a quick "
                     "look, not comparable to published results.")
    return "\n".join(lines)


def _timing(results: dict) -> str:
    """The embedding time line of PREFIX.md, naming the tasks whose time no sitting recorded."""
    line = f"Encoded {results['texts']} distinct texts in {results['encode_seconds']:.1f} s"
    unknown = results.get("encode_seconds_unknown") or []
    if not unknown:
        return line + "."
    return line + f" (not counting {', '.join(unknown)}: embedded by an earlier call that kept no time)."


def transfer_markdown(results: dict, stamp: dict) -> str:
    """PREFIX.md of `eval transfer`: the table, per-task details and the stamp."""
    details = ["| task | scheme | train | test items | dev acc. | pooled acc. | chosen L2 |", "|---|---|---:|---:|---:|---:|---|"]
    for task, entry in results["tasks"].items():
        l2 = ", ".join(f"{value:g}" for value in entry["chosen_l2"])
        details.append(f"| {task} | {entry['scheme']} | {entry['train_items']} | {entry['test_items']} | {entry['dev']:.2f} "
                       f"| {entry['pooled_accuracy']:.2f} | {l2} |" + (f" F1 {entry['f1']:.2f}" if "f1" in entry else ""))
    blank = "".join(f"\n\nBlank lines SentEval reads as empty samples, {how}: "
                    + "; ".join(f"{file} lines {', '.join(map(str, lines))}" for file, lines in listed.items()) + "."
                    for how, listed in (("read here as the empty text, as SentEval's batchers do",
                                         results.get("blank_lines_read")),
                                        ("skipped here (--blank-lines skip)", results.get("skipped_blank"))) if listed)
    about = (f"Accuracy x100 of SentEval's probe ({results['protocol']}), with a 95% bootstrap interval over test "
             "items (k-fold tasks: out-of-fold predictions); Avg. of the seven.")
    more = "## Per task\n\n" + "\n".join(details) + blank + f"\n\n{_timing(results)}\n\n"
    return markdown_report("Transfer evaluation", about, transfer_table(results), stamp, more)


# what `minidecoder eval ... --help` prints
COMMAND_HELP = """`minidecoder eval transfer`: SentEval's seven transfer tasks (TP Table 5, CP Table 6) for one method.

    minidecoder eval transfer --method prompteol --tasks MR,TREC --limit 200 --output /tmp/transfer-smoke

Accuracy x100 of SentEval's logistic-regression probe (usepytorch=True, kfold=10, nhid 0, adam, batch 64,
tenacity 5, epoch_size 4, seed 1111; minidecoder.evaluation.senteval_probe), each with a 95% bootstrap
interval over test items, and Avg. of the seven. Data: --data, $MINIDECODER_SENTEVAL_DATA or
../shared/data/senteval. Resumable: the embeddings and every finished task are kept in `.PREFIX.json.partial/`
beside the report; the same command (same --output) resumes from them, to the same scores.
"""


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "SentEval's seven transfer tasks (TP / CP)", COMMAND_HELP)
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: MR,CR,SUBJ,MPQA,SST2,TREC,MRPC)")
    parser.add_argument("--blank-lines", choices=BLANK_LINES, default="read",
                        help="a blank line of CR or MPQA: read as the empty text, as SentEval does (default; a prompt "
                             "method embeds its prompt around nothing), or skip it (a method that pools over the "
                             "text has nothing to pool there; the folds then differ from SentEval's)")
    parser.add_argument("--probe-workers", type=int, default=None, metavar="N",
                        help="processes that train the probes, one thread each (default: one per CPU; any N gives "
                             "the same scores)")
    add_family_options(parser, "transfer",
                       "SentEval transfer folder (default: $MINIDECODER_SENTEVAL_DATA or ../shared/data/senteval)",
                       "use only the first N rows of each data file (a quick look, stamped as such)")


def read(args: argparse.Namespace) -> list:
    if args.probe_workers is not None and args.probe_workers < 1:
        raise InputError(f"--probe-workers {args.probe_workers}: at least one process trains the probes",
                         "pass --probe-workers 1 or more, or leave it out for one per CPU")
    cpus = default_workers()
    if args.probe_workers is not None and args.probe_workers > cpus:  # each one a process that imports torch
        raise InputError(f"--probe-workers {args.probe_workers}: this process may use {cpus} CPU(s), and each worker "
                         "is a process of its own on one of them", f"pass --probe-workers {cpus} or fewer, or leave it "
                         "out for one per CPU")

    names = parse_names(args.tasks, TRANSFER_TASKS)
    if args.blank_lines == "skip" and not any(name in BINARY_FILES for name in names):  # their loaders read no blank
        raise InputError(f"--blank-lines skip leaves out the blank lines of the files of {', '.join(BINARY_FILES)}, "
                         f"and --tasks {args.tasks} names none of them: the flag would change nothing, and the report "
                         "would say blank lines were skipped", "leave --blank-lines out, or add CR or MPQA (whose "
                         "files hold blank lines) to --tasks")
    return load_transfer_tasks(names, args.data, args.limit, args.blank_lines)


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    return [text for task in loaded for text in task.texts()]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:
    # the embeddings and each trained probe are kept beside the job: a Ctrl-C in the probes loses neither
    return evaluate_transfer(encode, loaded, progress=not args.no_progress, chunk_size=1 << 62, kept=kept.folder,
                             kept_identity=kept.identity, probe_workers=args.probe_workers or default_workers(),
                             embeddings_kept=kept.embeddings_kept)


def stamp(loaded: list, args: argparse.Namespace) -> dict:
    return {"tasks": [task.name for task in loaded], "protocol": PROTOCOL, "blank_lines": args.blank_lines,
            "skipped_blank_lines": {file: lines for task in loaded for file, lines in task.skipped_blank.items()}}


FAMILY = Family("transfer", read, texts, evaluate, transfer_table, transfer_markdown,
                ("--tasks", "--limit", "--blank-lines"), stamp,
                empty_text_fix="pass --blank-lines skip to leave SentEval's blank lines out (the folds then differ "
                               "from SentEval's), or use a prompt method read at its last token (e.g. prompteol)")
