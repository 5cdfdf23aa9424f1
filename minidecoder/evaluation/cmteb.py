"""C-MTEB's sentence-pair sets (ReBA Tables 2-3) scored by the installed mteb's own task classes: the data,
the scorer and `minidecoder eval cmteb`.

    sets = [load_pair_set(name) for name in SETS]
    results = evaluate_cmteb(encode, sets)

Each set runs as mteb's own task (`ATEC`, ..., `QBQTC`: `AbsTaskSTS`; `Ocnli`: `AbsTaskPairClassification`)
fed the local file (`mteb_lookup.local_task`), so the numbers are mteb's: STS: Spearman of cosine
similarity against the label x100 (`cosine_spearman`, the main score) with Pearson beside it (ReBA's
Table 3 reports `cos_sim: pearson`); Ocnli: the best accuracy over cosine thresholds (mteb's main score
`max_ap` is reported beside it, with `cosine_ap`). Every set carries a 95% bootstrap interval over pairs
on the cosines mteb scored: STS by `bootstrap.Bootstrap` (the STS harness's resampling), Ocnli by
resampling pairs and choosing each resample's own best threshold, as the score does. No instruction: ReBA
encodes the sentences as they are.

mteb takes float32 cosines (`1 - paired_cosine_distances` of the float32 embeddings), so pairs whose
cosines tie exactly in float64 may be ordered by rounding; `eval sts` keeps such ties
(`sts.pair_cosines`). Here the numbers are mteb's, rounding included.

The data: C-MTEB's sentence-pair sets (ReBA Tables 2-3), read from the original files in `../shared/data/cmteb`.

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

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minidecoder.errors import InputError
from minidecoder.evaluation.bootstrap import Bootstrap, TaskLayout, item_interval
from minidecoder.evaluation.family import (Family, Kept, add_family_options, checked_limit, encode_sentences,
                                           family_parser, field, json_line, limit_that_cut, limited_note,
                                           markdown_report, numbered_lines, parse_names, require_file, require_rows,
                                           resolve_data_folder, run_limit)


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
    limit = checked_limit(limit)
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
    if len(labels) < 2:  # mteb's pair classification reads a split of one row as its own batched format, and fails
        raise InputError(f"{path}: " + (f"--limit {limit} keeps" if limit is not None else "it holds") + " one scored "
                         "pair; a score needs at least two", "use a --limit of 2 or more" if limit is not None
                         else "restore the file")
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


Encoder = Callable[[list[str]], torch.Tensor]  # texts -> (N, E)


def texts_needed(sets: Sequence[PairSet]) -> list[str]:
    """Every distinct sentence of the sets."""
    return list(dict.fromkeys(text for data in sets for text in data.sentences1 + data.sentences2))


def mteb_task(data: PairSet):
    from minidecoder.evaluation.mteb_lookup import local_task

    if data.kind == "sts":
        columns = {"sentence1": data.sentences1, "sentence2": data.sentences2, "score": data.labels}
    else:
        columns = {"sentence1": data.sentences1, "sentence2": data.sentences2, "labels": [int(x) for x in data.labels]}
    return local_task(data.name, {data.split: columns})


def evaluate_cmteb(encode: Encoder, sets: Sequence[PairSet], progress: bool = True, chunk_size: int = 256) -> dict:
    """Run mteb's evaluator of each set on `encode`'s embeddings. Returns {"sets": {name: {"kind", "split",
    "pairs", "score", "ci95", "pearson" | "ap", "mteb": mteb's scores}}, "avg_sts": mean Spearman of the STS
    sets, plus the stamp's data facts}; scores x100."""
    from minidecoder.evaluation.mteb_lookup import PrecomputedEncoder

    texts = texts_needed(sets)
    encoder = PrecomputedEncoder(texts, encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress))
    out = {}
    for data in sets:
        scores = mteb_task(data).evaluate(encoder, data.split, encode_kwargs={"batch_size": 256})["default"]
        similarity = pair_cosines(encoder, data)
        if data.kind == "sts":
            entry = {"score": 100.0 * scores["cosine_spearman"], "metric": "cosine Spearman",
                     "pearson": 100.0 * scores["cosine_pearson"], "ci95": pair_interval(similarity, data),
                     "cosines": similarity.tolist()}  # for paired intervals between rows
        else:
            entry = {"score": 100.0 * scores["cosine_accuracy"], "metric": "cosine best accuracy",
                     "ap": 100.0 * scores["cosine_ap"], "max_ap": 100.0 * scores["max_ap"],
                     "ci95": best_accuracy_interval(similarity, np.asarray(data.labels)), "cosines": similarity.tolist()}
        out[data.name] = {"kind": data.kind, "split": data.split, "pairs": len(data.labels), "dropped": data.dropped,
                          **entry, "mteb": {k: v for k, v in scores.items() if isinstance(v, float)}}
    sts = [entry["score"] for entry in out.values() if entry["kind"] == "sts"]
    return {
        "sets": out,
        "avg_sts": float(np.mean(sts)) if sts else None,
        "limit": run_limit(data.limit for data in sets),
        "data_dir": str(sets[0].data_dir) if sets else None,
        "data_files": [data.file for data in sets],
    }


def pair_cosines(encoder, data: PairSet) -> np.ndarray:
    """(P,) the cosines mteb's STS and pair-classification evaluators score: `1 - paired_cosine_distances` of
    the float32 embeddings."""
    from sklearn.metrics.pairwise import paired_cosine_distances

    return 1.0 - paired_cosine_distances(encoder.encode([{"text": data.sentences1}]),
                                         encoder.encode([{"text": data.sentences2}]))


def pair_bootstrap(data: PairSet) -> Bootstrap:
    """The STS harness's bootstrap over one set's pairs (the same resamples for every row: paired intervals)."""
    return Bootstrap([TaskLayout(data.name, data.split, np.asarray(data.labels, np.float64), (0, len(data.labels)))])


def pair_interval(cosines: np.ndarray, data: PairSet) -> tuple[float, float]:
    """95% bootstrap interval of the Spearman x100 over the set's pairs."""
    boot = pair_bootstrap(data)
    return boot.interval(boot.replicates({"row": {data.name: cosines}})["row"])[data.name]


def best_accuracy(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Best accuracy x100 over thresholds on the cosines, for each row of (B, P) `scores` and 0/1 `labels`: mteb's
    `AbsTaskPairClassification._find_best_acc_and_threshold` (higher is more similar; a threshold is placed
    between two neighbouring cosines, never between tied ones), vectorised over resamples."""
    scores, labels = np.atleast_2d(scores), np.atleast_2d(labels)
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked, positive = np.take_along_axis(scores, order, 1), np.take_along_axis(labels, order, 1) == 1
    positives_above = np.cumsum(positive, axis=1)[:, :-1]  # pairs ranked 0..i are called similar
    negatives_below = (~positive).sum(axis=1, keepdims=True) - np.cumsum(~positive, axis=1)[:, :-1]
    accuracy = (positives_above + negatives_below) / scores.shape[1]
    splits = ranked[:, :-1] != ranked[:, 1:]  # a cut between tied cosines would leak their order
    return 100.0 * np.where(splits, accuracy, 0.0).max(axis=1, initial=0.0)


def best_accuracy_interval(cosines: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """95% bootstrap interval of the best-threshold accuracy x100 over pairs: each resample draws the pairs
    with replacement and chooses its own best threshold, as the score does (`bootstrap.item_interval`:
    1,000 resamples, seed 0)."""
    cosines, labels = np.asarray(cosines), np.asarray(labels)
    return item_interval(len(labels), lambda draws: best_accuracy(cosines[draws], labels[draws]))


# what `minidecoder eval ... --help` prints
COMMAND_HELP = """`minidecoder eval cmteb`: C-MTEB's pair sets (ReBA Tables 2-3) of one method; PREFIX.json and PREFIX.md.

    minidecoder eval cmteb --method reba --limit 200 --output /tmp/z

ATEC, BQ, LCQMC, PAWSX, STSB, AFQMC, QBQTC (STS: cosine Spearman x100 with Pearson beside it, a 95%
bootstrap interval over pairs) and Ocnli (pair classification: best accuracy over cosine thresholds, AP
beside it), each scored by the installed mteb's own task class on the original files. No instruction
(ReBA encodes sentences as they are). Resumable: the same command (same --output) resumes.
"""


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "C-MTEB pair sets (ATEC ... QBQTC, Ocnli): ReBA Table 3", COMMAND_HELP)
    parser.add_argument("--tasks", default=",".join(SETS), help="comma-separated sets (default: all eight)")
    add_family_options(parser, "cmteb", "C-MTEB data folder (default: $MINIDECODER_CMTEB_DATA or ../shared/data/cmteb)",
                       "score only the first N pairs of each set")


def read(args: argparse.Namespace) -> list:
    names = parse_names(args.tasks, list(SETS))
    return [load_pair_set(name, args.data, args.limit) for name in names]


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    return texts_needed(loaded)


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's table is its kept work

    return evaluate_cmteb(encode, loaded, progress=False)


def table(results: dict) -> str:
    names = list(results["sets"])
    rows = ["| | " + " | ".join(names) + " | Avg. (STS) |", "|---|" + "---:|" * (len(names) + 1)]
    main = [f"{e['score']:.2f}" for e in results["sets"].values()]
    beside = [f"{e['pearson']:.2f}" if e["kind"] == "sts" else f"AP {e['ap']:.2f}" for e in results["sets"].values()]
    ci = [f"[{e['ci95'][0]:.1f}, {e['ci95'][1]:.1f}]" if e.get("ci95") else "" for e in results["sets"].values()]
    avg = f"{results['avg_sts']:.2f}" if results.get("avg_sts") is not None else "n/a"
    rows += ["| Spearman x100 (Ocnli: accuracy) | " + " | ".join(main) + f" | {avg} |",
             "| 95% CI over pairs | " + " | ".join(ci) + " | |",
             "| Pearson x100 (Ocnli: AP) | " + " | ".join(beside) + " | |"]
    if results.get("limit") is not None:
        rows.append(limited_note(f"--limit {results['limit']} pairs a set"))
    return "\n".join(rows)


def markdown(results: dict, stamp: dict) -> str:
    about = ("Scored by the installed mteb's own task classes on the local files: STS sets cosine Spearman x100 "
             "(main) and Pearson x100; Ocnli the best accuracy over cosine thresholds and its AP; splits as C-MTEB "
             "evaluates them (" + ", ".join(f"{n}: {e['split']}" for n, e in results["sets"].items()) + ").")
    return markdown_report("C-MTEB pair sets", about, table(results), stamp)


FAMILY = Family("cmteb", read, texts, evaluate, table, markdown, ("--tasks", "--limit"))
