"""MTEB classification (HTP Table 12) on Banking77 and Emotion, by the installed mteb's own evaluator:
the data, the scorer and `minidecoder eval classification`.

    data = load_classification_set("Emotion")
    results = evaluate_classification(encode, data, instruction=INSTRUCTIONS["Emotion"])

Nothing of the protocol is restated here: the task is mteb's own class (`Banking77Classification`,
`EmotionClassification`: their `samples_per_label`, `n_experiments`, seed and `LogisticRegression(max_iter=100)`)
fed the local files (`mteb_lookup.local_task`), and its `evaluate` trains and scores as in any MTEB run.
mteb asks for the texts of the train rows its experiments sample and for every test text; `texts_needed`
computes that set with mteb's own sampler, so the embedding job embeds exactly those.

Accuracy x100 is the mean over the experiments. Its 95% interval is over test items: an item's score is
the fraction of experiments that got it right, the mean of those is the accuracy (exactly), and the
items are resampled (`bootstrap.mean_interval`).

The data: MTEB's Banking77 and Emotion classification sets, read from the original files in `../shared/data/mteb`.

    Banking77/train.csv, test.csv   CSV, header `text,category`; categories.json: the 77 labels in order
    Emotion/train.txt, test.txt     `text;label` a line; line 1 is a header `text;label_name` the source
                                    repository added (skipped)

Labels become the integers of the Hugging Face copies MTEB loads (Banking77: the index in
categories.json; Emotion: dair-ai's order sadness, joy, love, anger, fear, surprise), rows stay in file
order (MTEB's per-label sampling shuffles row indices, so the order is part of the protocol). A label
outside the task's set, a line that does not parse, or an empty text is an error naming file and line.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minidecoder.errors import InputError
from minidecoder.evaluation.bootstrap import mean_interval
from minidecoder.evaluation.family import (Family, Kept, add_family_options, checked_limit, encode_sentences,
                                           family_parser, instruction_for, instructions_line, limit_that_cut,
                                           limited_note, markdown_report, numbered_lines, parse_names, require_file,
                                           require_rows, resolve_data_folder)
from minidecoder.running.texts import refuse_placement_without_instruction, with_instruction


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
    limit = checked_limit(limit)
    root = resolve_mteb_dir(data_dir)
    if name == "Banking77":
        labels_path = require_file(root / name / "categories.json", "Banking77 label list")
        try:
            labels = json.loads(labels_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise InputError(f"{labels_path} is not a JSON list of labels ({error})", "restore the file") from None
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise InputError(f"{labels_path} holds a JSON {type(labels).__name__}, not a list of label names",
                             "restore the file")
        labels = tuple(labels)
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
    kept = len(splits["test"][0])
    if kept < 2:  # mteb scores one item, but its interval over test items is that one point
        raise InputError(f"{paths['test']}: " + (f"--limit (limit=) {limit} keeps" if limit is not None else
                                                 "it holds") + f" {kept} test item(s); an accuracy and its 95% "
                         "interval (a bootstrap over test items) need at least two",
                         "use a --limit of 2 or more (e.g. --limit 100, limit=100 from Python), or none"
                         if limit is not None else "restore the file")
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
    numbered = list(numbered_lines(path))  # blank lines left out: the reader's line k is the file's numbers[k - 1]
    numbers = [number for number, _ in numbered]
    rows = csv.reader(io.StringIO("\n".join(line for _, line in numbered)))
    header = next(rows, None)
    if header != ["text", "category"]:
        raise InputError(f"{path} line {numbers[0] if numbers else 1} is {header!r}, not the header text,category",
                         "restore the original file")
    for row in rows:
        line = numbers[rows.line_num - 1]
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


Encoder = Callable[[list], torch.Tensor]  # texts (or (context, text) pairs) -> (N, E)


def mteb_task(data: ClassificationSet, instruction: str | None, placement: str = "context"):
    """mteb's task for `data`, its texts carrying `instruction` where it is pooled ("{instruct} {text}"); as
    unpooled context (the default) the task holds the bare texts and the instruction travels beside them."""
    from minidecoder.evaluation.mteb_lookup import local_task

    joined = instruction if placement == "pooled" else None
    return local_task(data.mteb_name, {split: {"text": with_instruction(texts, joined, "pooled"), "label": labels}
                                       for split, (texts, labels) in data.splits.items()})


def texts_needed(data: ClassificationSet, instruction: str | None, placement: str = "context") -> list:
    """The texts mteb's evaluation will ask for: the train rows its experiments sample (by mteb's own
    `_undersample_data`, as `_evaluate_subset` calls it) and every test text; as (instruction, text) pairs
    where the instruction is unpooled context (running.texts.with_instruction)."""
    with_instruction([], instruction, placement)  # an unknown placement fails before mteb's work
    task = mteb_task(data, instruction, placement)
    task.load_data()
    train = task.dataset[task.train_split]
    chosen: set[int] = set()
    shuffled = None
    for i in range(task.n_experiments):
        _, shuffled, selected = task._undersample_data(train, i, shuffled)
        chosen.update(selected)
    texts = [train["text"][i] for i in sorted(chosen)] + list(task.dataset["test"]["text"])
    return texts if placement == "pooled" else with_instruction(texts, instruction, placement)


def evaluate_classification(encode: Encoder, data: ClassificationSet, instruction: str | None = None,
                            progress: bool = True, chunk_size: int = 256, placement: str = "context") -> dict:
    """Run mteb's classification evaluator on `data` with `encode`'s embeddings, each text under `instruction`
    (none by default) placed as `placement` says ("context", the default, or "pooled", refused without one).
    Returns {"task", "accuracy": {"score", "ci95"}, "f1": ..., "n_experiments", "samples_per_label",
    "experiments": mteb's per-experiment scores, "test_items", "instruction", "instruction_placement", plus the
    stamp's data facts}; scores x100."""
    from minidecoder.evaluation.mteb_lookup import PrecomputedEncoder

    refuse_placement_without_instruction("evaluate_classification", instruction, placement)
    texts = texts_needed(data, instruction, placement)
    vectors = encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress)  # (N, E)
    task = mteb_task(data, instruction, placement)
    asked = [text[1] if isinstance(text, tuple) else text for text in texts]  # what mteb's task holds and asks for
    scores = task.evaluate(PrecomputedEncoder(asked, vectors), "test", encode_kwargs={"batch_size": 256})["default"]
    gold = np.asarray(data.splits["test"][1])
    right = (np.asarray(task.predictions) == gold).mean(axis=0)  # (items,): fraction of experiments right
    return {
        "task": data.name,
        "mteb_task": data.mteb_name,
        "main_score": "accuracy",
        "accuracy": {"score": 100.0 * scores["accuracy"], "ci95": mean_interval(100.0 * right)},
        "f1": {"score": 100.0 * scores["f1"]},
        "n_experiments": task.n_experiments,
        "samples_per_label": task.samples_per_label,
        "seed": task.seed,
        "classifier": repr(task.evaluator_model),
        "experiments": scores["scores_per_experiment"],
        "test_items": len(gold),
        "per_item": (100.0 * right).tolist(),  # each test item's accuracy x100 over the experiments (paired intervals)
        "train_texts_embedded": len(texts) - len(gold),
        "instruction": instruction,
        "instruction_placement": placement if instruction else None,
        "limit": data.limit,
        "data_dir": str(data.data_dir),
        "data_files": data.files,
    }


# what `minidecoder eval ... --help` prints
COMMAND_HELP = """`minidecoder eval classification`: MTEB classification (HTP Table 12) of one method; PREFIX.json and .md.

    minidecoder eval classification --method mean --tasks Emotion --limit 100 --output /tmp/c

Banking77 and Emotion from their original files, scored by the installed mteb's own task classes and
evaluator (logistic regression on per-label train samples, n_experiments repeats, mteb's seed): accuracy
x100, mean over the experiments, with a 95% bootstrap interval over test items. Texts take HTP Table 11's
instruction for mean, last, echo, htp, reba and tp with pooling=mean (--instruction), read as unpooled context
(--instruction-placement pooled joins it as "{instruct} {text}"). Resumable: the same command (same --output)
resumes from the chunks an interrupted run kept.
"""


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "MTEB classification (Banking77, Emotion): HTP Table 12", COMMAND_HELP)
    parser.add_argument("--tasks", default="Banking77,Emotion", help="comma-separated tasks (default: both)")
    add_family_options(parser, "classification",
                       "MTEB data folder (default: $MINIDECODER_MTEB_DATA or ../shared/data/mteb)",
                       "score only the first N test items", instruction=True)


def read(args: argparse.Namespace) -> list:
    return [load_classification_set(name, args.data, args.limit) for name in parse_names(args.tasks, TASKS)]


def _instruction(args: argparse.Namespace, data) -> str | None:
    return instruction_for(args, INSTRUCTIONS[data.name])


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    return [text for data in loaded
            for text in texts_needed(data, _instruction(args, data), args.instruction_placement)]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's table is its kept work
    from minidecoder.evaluation.family import run_limit

    tasks = {data.name: evaluate_classification(encode, data, _instruction(args, data), progress=False,
                                                placement=args.instruction_placement) for data in loaded}
    for result in tasks.values():
        result.pop("data_dir"), result.pop("data_files")
    return {"tasks": tasks, "limit": run_limit(data.limit for data in loaded), "data_dir": str(loaded[0].data_dir),
            "data_files": [f for data in loaded for f in data.files]}


def table(results: dict) -> str:
    lines = ["| task | test items | experiments x samples/label | accuracy x100 [95% CI] | macro F1 x100 |",
             "|---|---:|---:|---:|---:|"]
    for name, r in results["tasks"].items():
        acc = r["accuracy"]
        lines.append(f"| {name} | {r['test_items']} | {r['n_experiments']} x {r['samples_per_label']} | "
                     f"{acc['score']:.2f} [{acc['ci95'][0]:.2f}, {acc['ci95'][1]:.2f}] | {r['f1']['score']:.2f} |")
    if results.get("limit") is not None:
        lines.append(limited_note(f"--limit {results['limit']} test items"))
    return "\n".join(lines)


def markdown(results: dict, stamp: dict) -> str:
    about = ("Accuracy x100 by the installed mteb's classification evaluator (its task classes and defaults; "
             "classifier " + ", ".join(sorted({r['classifier'] for r in results['tasks'].values()})) + "), mean over "
             "the experiments; [95% bootstrap interval over test items]. "
             + instructions_line(results["tasks"]) + ".")
    return markdown_report("Classification (MTEB)", about, table(results), stamp)


FAMILY = Family("classification", read, texts, evaluate, table, markdown, ("--tasks", "--limit", "--instruction",
                                                                           "--instruction-placement"))
