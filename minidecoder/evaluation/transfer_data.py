"""The seven SentEval transfer tasks read exactly as SentEval reads them (../shared/data/senteval).

facebookresearch/SentEval, read for this module: `senteval/binary.py` (MR, CR, SUBJ, MPQA),
`senteval/sst.py`, `senteval/trec.py`, `senteval/mrpc.py`:

- MR, CR, SUBJ, MPQA: `io.open(path, encoding='latin-1').read().splitlines()`, each line `split()`;
  samples = positive file + negative file, labels 1 then 0 (SUBJ: objective = 1, subjective = 0);
  one set, scored by inner k-fold cross-validation.
- SST2: `sentiment-{train,dev,test}`, UTF-8, `line.strip().split('\\t')`: text column 0, label column 1.
- TREC: latin-1, `target, sample = line.strip().split(':', 1)`, the question is `sample.split(' ', 1)[1]`
  (the fine label dropped), coarse label one of ABBR, DESC, ENTY, HUM, LOC, NUM (0..5).
- MRPC: UTF-8, header skipped, `line.strip().split('\\t')`: label column 0, sentences columns 3 and 4.

SentEval then sorts every split by (number of words, label) -- MRPC by (words of A, words of B, label)
-- with Python's stable sort, "to reduce padding", and hands the classifier the rows in **that** order;
since the folds (StratifiedKFold, shuffled) are drawn over row positions, the order decides the folds,
and it is kept here. A text reaches the method as its words joined by single spaces (SentEval's
batcher; the method applies the rest of the SentEval preparation, methods/text.py).

Two departures, both stamped in every report: CR and MPQA contain 7 blank lines (CR 4, MPQA 3) that
SentEval reads as samples with no words; a sentence-embedding method has nothing to embed there
(minidecoder refuses an empty text), so those lines are skipped and listed per file in `skipped_blank`
(CR: 3,771 samples instead of 3,775, MPQA: 10,603 instead of 10,606; the folds differ from SentEval's
accordingly). An empty text anywhere else (an SST, TREC or MRPC field) is an error naming file and line.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minidecoder.errors import InputError, describe_unusable_file
from minidecoder.evaluation.data_files import limit_that_cut, require_rows
from minidecoder.sources.paths import senteval_data_dir

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
    skipped_blank: dict[str, list[int]] = field(default_factory=dict)  # file -> 1-based line numbers

    @property
    def test_split(self) -> str:
        return "all" if self.scheme == "inner_kfold" else "test"

    def texts(self) -> list[str]:
        return [text for split in self.splits.values() for text in split.all_texts()]


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    path = Path(data_dir).expanduser() if data_dir is not None else senteval_data_dir()
    if path is None or not path.is_dir():
        why = "(none found)" if path is None else f"{path} {describe_unusable_file(path, 'folder')}"
        raise InputError(f"SentEval transfer data folder {why}",
                         "pass --data DIR (or set MINIDECODER_SENTEVAL_DATA) to the folder holding MR, CR, SUBJ, "
                         "MPQA, SST, TREC and MRPC")
    return path


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


def load_binary(name: str, root: Path, limit: int | None) -> TransferTask:
    texts, labels, skipped, sizes = [], [], {}, []
    for label, relative in zip((1, 0), BINARY_FILES[name]):
        lines = _read(root / relative, "latin-1", splitlines=True)
        kept = [(number, line) for number, line in enumerate(lines, start=1) if line.split()]
        sizes.append(require_rows(root / relative, len(kept), "sentences", "it is empty or blank"))
        if len(kept) < len(lines):
            skipped[relative] = [number for number, line in enumerate(lines, start=1) if not line.split()]
        kept = kept[:limit] if limit is not None else kept
        texts += [" ".join(line.split()) for _, line in kept]
        labels += [label] * len(kept)
    return TransferTask(name, "inner_kfold", ("0", "1"), {"all": _sorted(texts, labels)}, root,
                        list(BINARY_FILES[name]), limit_that_cut(limit, sizes), skipped)


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


def load_transfer_task(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> TransferTask:
    """One task by name (`TRANSFER_TASKS`); `limit=N` keeps the first N rows of each file (a quick look)."""
    root = resolve_data_dir(data_dir)
    if name in BINARY_FILES:
        return _check_foldable(load_binary(name, root, limit))
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
                        limit: int | None = None) -> list[TransferTask]:
    unknown = [name for name in names if name not in TRANSFER_TASKS]
    if unknown or not names:
        raise InputError(f"unknown transfer task(s) {', '.join(map(repr, unknown)) or '(none given)'}",
                         "choose from " + ",".join(TRANSFER_TASKS))
    if len(set(names)) != len(names):
        raise InputError(f"transfer task list {list(names)} names a task twice", "list each task once")
    return [load_transfer_task(name, data_dir, limit) for name in names]
