"""C-MTEB's sentence-pair sets (ReBA Tables 2-3), read from the original files in `../shared/data/cmteb`.

    ATEC, BQ, LCQMC, PAWSX, STSB   `<SET>.test.data`: sentence1<TAB>sentence2<TAB>label, UTF-8, no header
    AFQMC                          dev.json: JSON lines {"sentence1", "sentence2", "label": "0"/"1"}
    QBQTC                          test_public.json: JSON lines {"query", "title", "label": "0"/"1"/"2"}
    Ocnli                          dev.json: JSON lines; C-MTEB keeps entailment (1) and contradiction (0)
                                   and drops neutral and "-" (no majority)

Each set is read as the split C-MTEB evaluates (test, or validation for AFQMC and Ocnli). An STS label
outside the mteb task's [min_score, max_score], an OCNLI label outside its four, an empty sentence or a
line that does not parse is an error naming the file and line; so is a file with no pairs, and an STS set
whose (kept) labels are all equal, which no correlation can score.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minidecoder.errors import InputError
from minidecoder.evaluation.data_files import (field, json_line, limit_that_cut, numbered_lines, require_file, require_rows,
                                               resolve_data_folder)

# name: (file under the folder, format, split C-MTEB evaluates, label range or None for Ocnli)
SETS = {
    "ATEC": ("ATEC/ATEC.test.data", "tsv", "test", (0, 1)),
    "BQ": ("BQ/BQ.test.data", "tsv", "test", (0, 1)),
    "LCQMC": ("LCQMC/LCQMC.test.data", "tsv", "test", (0, 1)),
    "PAWSX": ("PAWSX/PAWSX.test.data", "tsv", "test", (0, 1)),
    "STSB": ("STSB/STS-B.test.data", "tsv", "test", (0, 5)),
    "AFQMC": ("AFQMC/dev.json", "json", "validation", (0, 1)),
    "QBQTC": ("QBQTC/test_public.json", "qbqtc", "test", (0, 2)),
    "Ocnli": ("OCNLI/dev.json", "ocnli", "validation", None),
}
OCNLI_LABELS = {"entailment": 1, "contradiction": 0, "neutral": None, "-": None}  # None: dropped, as C-MTEB


@dataclass
class PairSet:
    name: str  # also the mteb task's name
    kind: str  # "sts" or "pair-classification"
    split: str
    sentences1: list[str]
    sentences2: list[str]
    labels: list[float]
    data_dir: Path
    file: str
    limit: int | None = None
    dropped: int = 0  # Ocnli's neutral and "-" rows


def resolve_cmteb_dir(data_dir: str | Path | None) -> Path:
    return resolve_data_folder(data_dir, "cmteb", "the folder holding ATEC/, BQ/, ..., OCNLI/")


def load_pair_set(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> PairSet:
    """Read and check one set; `limit` keeps its first N pairs (a limit that keeps them all is none)."""
    if name not in SETS:
        raise InputError(f"unknown C-MTEB set {name!r}", "choose from " + ",".join(SETS))
    root = resolve_cmteb_dir(data_dir)
    relative, kind, split, bounds = SETS[name]
    path = require_file(root / relative, f"C-MTEB {name} file")
    first, second, labels, dropped = [], [], [], 0
    for number, line in numbered_lines(path):
        a, b, raw = _fields(path, number, line, kind)
        label = _label(path, number, raw, bounds)
        if label is None:
            dropped += 1
            continue
        for text in (a, b):
            if not text.strip():
                raise InputError(f"{path} line {number} has an empty sentence", "remove that line or give it text")
        first.append(a), second.append(b), labels.append(label)
    require_rows(path, len(labels), "sentence pairs", f"every one of its {dropped} pairs is neutral or unlabelled, "
                 "which C-MTEB drops" if dropped else "it is empty")
    limit = limit_that_cut(limit, [len(labels)])
    if limit is not None:
        first, second, labels = first[:limit], second[:limit], labels[:limit]
    if bounds is not None and len(set(labels)) == 1:  # mteb's Spearman against a constant is nan, said nowhere
        cut = f"the first {limit} of " if limit is not None else ""
        raise InputError(f"{path}: {cut}its pairs all have the label {labels[0]:g}, so their Spearman correlation "
                         "with any similarity is undefined (mteb would print nan)",
                         "use a larger --limit, or none" if limit is not None else "restore the file")
    return PairSet(name, "pair-classification" if bounds is None else "sts", split, first, second, labels, root,
                   relative, limit, dropped)


def _fields(path: Path, number: int, line: str, kind: str) -> tuple[str, str, str]:
    if kind == "tsv":
        cells = line.split("\t")
        if len(cells) != 3:
            raise InputError(f"{path} line {number} has {len(cells)} tab-separated fields, not "
                             "sentence1<TAB>sentence2<TAB>label", "fix or remove that line")
        return cells[0], cells[1], cells[2]
    record = json_line(path, number, line)
    keys = ("query", "title") if kind == "qbqtc" else ("sentence1", "sentence2")
    return field(path, number, record, keys[0]), field(path, number, record, keys[1]), field(path, number, record, "label")


def _label(path: Path, number: int, raw: str, bounds: tuple[int, int] | None) -> float | None:
    if bounds is None:
        if raw not in OCNLI_LABELS:
            raise InputError(f"{path} line {number}: label {raw!r} is not one of OCNLI's "
                             + ", ".join(map(repr, OCNLI_LABELS)), "fix the label")
        return OCNLI_LABELS[raw]
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not bounds[0] <= value <= bounds[1]:
        raise InputError(f"{path} line {number}: label {raw!r} is outside the task's range {bounds[0]}-{bounds[1]}",
                         "fix the label (a gold similarity in the task's range)")
    return value
