"""MTEB's Banking77 and Emotion classification sets, read from the original files in `../shared/data/mteb`.

    Banking77/train.csv, test.csv   CSV, header `text,category`; categories.json: the 77 labels in order
    Emotion/train.txt, test.txt     `text;label` a line; line 1 is a header `text;label_name` the source
                                    repository added (skipped)

Labels become the integers of the Hugging Face copies MTEB loads (Banking77: the index in
categories.json; Emotion: dair-ai's order sadness, joy, love, anger, fear, surprise), rows stay in file
order (MTEB's per-label sampling shuffles row indices, so the order is part of the protocol). A label
outside the task's set, a line that does not parse, or an empty text is an error naming file and line.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from minidecoder.errors import InputError
from minidecoder.evaluation.data_files import limit_that_cut, numbered_lines, require_file, require_rows, resolve_data_folder

EMOTION_LABELS = ("sadness", "joy", "love", "anger", "fear", "surprise")  # dair-ai/emotion's ClassLabel order
# HTP Table 11's instructions
INSTRUCTIONS = {
    "Banking77": "Given an online banking query, find the corresponding intents",
    "Emotion": "Classify the emotion expressed in the given Twitter message into one of the six emotions: anger, "
               "fear, joy, love, sadness, and surprise",
}
MTEB_NAMES = {"Banking77": "Banking77Classification", "Emotion": "EmotionClassification"}
TASKS = tuple(MTEB_NAMES)


@dataclass
class ClassificationSet:
    name: str  # Banking77 or Emotion
    mteb_name: str
    data_dir: Path
    splits: dict[str, tuple[list[str], list[int]]]  # {"train": (texts, labels), "test": (texts, labels)}
    labels: tuple[str, ...]
    files: list[str]
    limit: int | None = None


def resolve_mteb_dir(data_dir: str | Path | None) -> Path:
    return resolve_data_folder(data_dir, "mteb", "the folder holding Banking77/ and Emotion/")


def load_classification_set(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> ClassificationSet:
    """Read and check one task; `limit` keeps the first N test items (the train split stays whole: MTEB
    samples from all of it; a limit that keeps every item is no limit, `limit_that_cut`)."""
    if name not in MTEB_NAMES:
        raise InputError(f"unknown classification task {name!r}", "choose from " + ", ".join(TASKS))
    root = resolve_mteb_dir(data_dir)
    if name == "Banking77":
        labels_path = require_file(root / name / "categories.json", "Banking77 label list")
        try:
            labels = tuple(json.loads(labels_path.read_text(encoding="utf-8")))
        except (ValueError, UnicodeDecodeError) as error:
            raise InputError(f"{labels_path} is not a JSON list of labels ({error})", "restore the file") from None
        paths = {split: root / name / f"{split}.csv" for split in ("train", "test")}
        reader = _read_csv
    else:
        labels, paths, reader = EMOTION_LABELS, {split: root / name / f"{split}.txt" for split in ("train", "test")}, _read_semicolon
    splits = {}
    for split, path in paths.items():
        texts, names = reader(require_file(path, f"{name} {split} file"))
        require_rows(path, len(texts), f"{name} {split} rows")
        index = {label: i for i, label in enumerate(labels)}
        splits[split] = (texts, [_label(path, line, label, index) for line, label in names])
    limit = limit_that_cut(limit, [len(splits["test"][0])])
    if limit is not None:
        texts, ids = splits["test"]
        splits["test"] = (texts[:limit], ids[:limit])
    files = [str(p.relative_to(root)) for p in paths.values()] + (["Banking77/categories.json"] if name == "Banking77" else [])
    return ClassificationSet(name, MTEB_NAMES[name], root, splits, labels, files, limit)


def _label(path: Path, line: int, label: str, index: dict[str, int]) -> int:
    if label not in index:
        raise InputError(f"{path} line {line}: label {label!r} is not one of the task's {len(index)} labels",
                         "fix the label (the task's labels: " + ", ".join(list(index)[:8])
                         + (", ..." if len(index) > 8 else "") + ")")
    return index[label]


def _text(path: Path, line: int, text: str) -> str:
    if not text.strip():
        raise InputError(f"{path} line {line} has an empty text", "remove that line or give it text")
    return text


def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    """Banking77's `text,category` CSV: texts, and (line, label) pairs."""
    texts, labels = [], []
    rows = csv.reader(io.StringIO("\n".join(line for _, line in numbered_lines(path))))
    header = next(rows, None)
    if header != ["text", "category"]:
        raise InputError(f"{path} line 1 is {header!r}, not the header text,category", "restore the original file")
    for row in rows:
        line = rows.line_num
        if len(row) != 2:
            raise InputError(f"{path} line {line} does not parse as `text,category` ({len(row)} fields)",
                             "quote a text holding a comma, as the original file does")
        texts.append(_text(path, line, row[0]))
        labels.append((line, row[1]))
    return texts, labels


def _read_semicolon(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    """Emotion's `text;label` lines after its header line."""
    texts, labels = [], []
    for line, content in numbered_lines(path):
        if line == 1 and content == "text;label_name":
            continue
        text, sep, label = content.rpartition(";")
        if not sep:
            raise InputError(f"{path} line {line} does not parse as `text;label`: {content!r}", "fix or remove that line")
        texts.append(_text(path, line, text))
        labels.append((line, label))
    return texts, labels
