"""What tools/reproduce_tasks.py (transfer, sts-long) and tools/reproduce_retrieval.py (retrieval,
classification, cmteb) share: the claims file of one (model, benchmark) that tools/claims_table.py reads.

    results/<model>-<benchmark>.json = {"settings": {"benchmark", "model", "limit", "bootstrap", ...},
                                        "rows_planned": [...], "rows_done": [...], "claims": [judge(...), ...]}

Each claim of `claims.BENCHMARK_CLAIMS` on the benchmark whose two rows are done is judged by `claims.judge`
from a paired interval of (method - base): the same resamples for both rows, per set or task and for "avg"
(the mean over them of the per-resample differences), and "avg without SET" for each set left out in turn
(claims.leave_one_out), from which claims.judge marks a fragile verdict. The row keys are claims.py's (see
BENCHMARK_CLAIMS); provenance.py says where each row's settings come from (written under each table).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from minidecoder.evaluation.bootstrap import LEVEL, RESAMPLES, SEED  # noqa: E402
from reproduce.claims import BENCHMARK_CLAIMS, BENCHMARKS, judge, leave_one_out  # noqa: E402
from reproduce.provenance import not_the_papers  # noqa: E402
from minidecoder.output_files import write_whole  # noqa: E402

# HTP Table 1 / Figure 1's "TP w. Mean": TP on the bare text (`<PST> {text}`), the paper's start 1 / end 7,
# the mean over the text's tokens (<PST> excluded) at the final layer, as Vanilla Mean reads it
TP_WITH_MEAN = {"prompt": "<PST> {text}", "start": 1, "end": 7, "layer": -1, "pooling": "mean"}
BOOTSTRAP = {"resamples": RESAMPLES, "seed": SEED, "level": LEVEL, "interval": "percentile"}
# point and interval of (method - base) per score name ("avg", a set, a length), or None when not comparable
Differences = Callable[[str, str], tuple[dict[str, float], dict[str, tuple[float, float]]] | None]


def percentile(replicates: np.ndarray) -> tuple[float, float]:
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    finite = replicates[np.isfinite(replicates)]
    if not finite.size:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return float(lo), float(hi)


def mean_replicates(values: np.ndarray) -> np.ndarray:
    """(B,) the mean of per-item values (a query's nDCG@10 x100, a test item's accuracy x100) on each resample of
    the items: bootstrap.mean_interval's draws, which depend on the number of items alone, so every row of a set
    gets the same ones (paired) and a set's interval is mean_interval's."""
    values = np.asarray(values, dtype=np.float64)
    draws = np.random.default_rng(SEED).integers(0, values.size, size=(RESAMPLES, values.size))
    return values[draws].mean(axis=1)


def paired_means(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]):
    """(point, intervals) of mean(a) - mean(b) per set and for "avg" (mean over the sets), from per-item values."""
    point, reps = {}, {}
    for name in a:
        point[name] = float(np.mean(a[name]) - np.mean(b[name]))
        reps[name] = mean_replicates(a[name]) - mean_replicates(b[name])
    return with_avg(point, reps)


def with_avg(point: dict[str, float], reps: dict[str, np.ndarray]):
    """Add "avg" (mean over the sets of the point and of the per-resample differences) and "avg without SET"
    for each set, then the intervals."""
    left_points, left_intervals = leave_one_out(point, reps, LEVEL)
    point["avg"] = float(np.mean(list(point.values())))
    reps["avg"] = np.mean(list(reps.values()), axis=0)
    return {**point, **left_points}, {**{name: percentile(values) for name, values in reps.items()}, **left_intervals}


def claims_report(benchmark: str, settings: dict, planned: list[str], done: list[str],
                  differences: Differences) -> dict:
    """The claims file of one (model, benchmark): `settings` must hold "model" and "limit" (None: full data), and
    may hold "rows_without_bos" and "rows_as_one_string" (the row keys that ran without a BOS first, and those that
    tokenized their template as one string: reproduce.provenance.not_the_papers)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}")
    records = []
    for claim in BENCHMARK_CLAIMS:
        if claim.benchmark != benchmark or claim.method not in done or claim.base not in done:
            continue
        compared = differences(claim.method, claim.base)
        if compared is None:
            continue
        point, intervals = compared  # a score with no interval (a set too small to resample) is left out
        intervals = {name: iv for name, iv in intervals.items() if np.all(np.isfinite(iv)) and name in point}
        if claim.score in intervals:
            records.append(judge(claim, point, intervals, not_the_papers(
                benchmark, claim.method, claim.base, settings.get("rows_without_bos", ()),
                settings.get("rows_as_one_string", ()))))
    return {"format": "minidecoder-claims/1", "settings": {**settings, "benchmark": benchmark, "bootstrap": BOOTSTRAP},
            "rows_planned": planned, "rows_done": [key for key in planned if key in done], "claims": records}


def write_claims(path: Path, report: dict, markdown: str) -> None:
    """PATH.json (claims_table's input) and PATH.md (the table it links to), each whole or not at all. Each
    kept row (`rows`: its per-item values, thousands of numbers) is one line: a line per number would double
    the file."""
    text = json.dumps({key: value for key, value in report.items() if key != "rows"}, indent=1, allow_nan=False,
                      default=float)
    if "rows" in report:
        rows = ",\n".join(f"  {json.dumps(key)}: {json.dumps(row, allow_nan=False, default=float, separators=(',', ':'))}"
                          for key, row in report["rows"].items())
        text = text[:-2] + ',\n "rows": {\n' + rows + "\n }\n}"
    write_whole(path, (text + "\n").encode(), overwrite=True)
    write_whole(path.with_suffix(".md"), markdown.encode(), overwrite=True)


# ---- transfer: each task's test accuracy beside its cross-validation accuracy on the training data ----------
CROSS_VALIDATED = {"inner_kfold": "test_items", "kfold": "train_items"}  # the items SentEval's 10 folds score


def cross_validation(entry: dict) -> tuple[float, tuple[float, float] | None, str]:
    """A transfer task's validation accuracy x100 (SentEval's 'devacc', kept as "dev"), a 95% interval and
    what it is. MR, CR, SUBJ, MPQA (inner 10-fold) and TREC, MRPC (10-fold on train) cross-validate on the
    training data; SST2 scores its dev split instead. The kept results keep the accuracy but not the folds'
    per-item predictions, so the interval is the binomial (normal) one over the items the folds score: it
    leaves out the L2 choice's optimism (the best of four) and the folds' training noise, so it is narrow."""
    items = entry.get(CROSS_VALIDATED.get(entry["scheme"], ""), entry.get("dev_items"))
    kind = "10-fold" if entry["scheme"] in CROSS_VALIDATED else "dev split"
    if not items:
        return entry["dev"], None, kind
    p = entry["dev"] / 100.0
    half = 100.0 * 1.96 * float(np.sqrt(p * (1.0 - p) / items))
    return entry["dev"], (entry["dev"] - half, entry["dev"] + half), kind


def parted(entry: dict) -> bool:
    """Whether the test accuracy's interval and the validation accuracy's do not overlap."""
    _, interval, _ = cross_validation(entry)
    return interval is not None and (entry["ci95"][1] < interval[0] or entry["ci95"][0] > interval[1])


def cross_validation_lines(report: dict, rows: list[tuple[str, str]], tasks: list[str]) -> list[str]:
    """The transfer table's second table: each row's validation accuracy per task, beside the test table
    above it, and a line for every cell whose two accuracies part by more than their intervals."""
    lines = ["", "## Validation accuracy on the training data, beside the test accuracy above", "",
             "SentEval's own validation score of each cell (its 'devacc': the 10-fold cross-validation accuracy of "
             "the chosen L2 on the training data; SST2: its dev split, SentEval's SplitClassifier has no folds), "
             "with a binomial 95% interval over the items the folds score (the kept results carry the accuracy, "
             "not the folds' per-item predictions, so the interval leaves out the L2 choice's optimism and the "
             "folds' training noise; SST2's needs its dev split's size, which the kept results lack and transfer.py "
             "records as `dev_items` from now on: `python tools/reproduce_tasks.py --model MODEL --family transfer "
             "--rows KEY --redo` would fill it). **parted**: the test interval and this one do not overlap.", "",
             "| row | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    split: list[str] = []
    for key, label in rows:
        row = report["rows"].get(key)
        if row is None:
            lines.append(f"| {label} | " + " | ".join("not run" for _ in tasks) + " |")
            continue
        cells = []
        for task in tasks:
            entry = row["tasks"].get(task)
            if entry is None:
                cells.append("-")
                continue
            value, interval, kind = cross_validation(entry)
            shown = f"{value:.2f} [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else f"{value:.2f} [no interval]"
            cells.append(shown + (" **parted**" if parted(entry) else ""))
            if parted(entry):
                split.append(f"{label} {task}: test {entry['score']:.2f} [{entry['ci95'][0]:.1f}, {entry['ci95'][1]:.1f}]"
                             f", {kind} {value:.2f} [{interval[0]:.1f}, {interval[1]:.1f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", ("Test and validation part by more than their intervals: " + "; ".join(split) + ".") if split
              else "No cell's test and validation accuracies part by more than their intervals."]
    return lines
