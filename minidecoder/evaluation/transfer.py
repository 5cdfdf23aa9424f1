"""SentEval transfer tasks (TP Table 5, CP Table 6): embed each text once, probe with SentEval's classifier.

    results = evaluate_transfer(encode, tasks=("MR", "TREC"))   # encode(texts) -> (N, E)
    results["tasks"]["MR"]["score"], results["avg"]

Per task (transfer_data.py reads the data, senteval_classifier.py trains the probe):

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
what decides it (the identity: model, method and options; the task's texts and labels; the probe's
settings), not under its embeddings' bytes: a later sitting on another machine, whose embeddings differ by
float rounding, keeps the tasks already done and embeds and trains only the rest, as the STS tables resume
piece by piece.

`grain` says when the texts are embedded. "run" (the default) embeds every text of the tasks still to score
at once, longest first: one command, whose embedding job covers every text anyway. "task" embeds each task's
texts just before its probe, so a sitting that stops loses at most one task's embeddings: the grain of a
table that spans sittings on fresh machines (tools/reproduce_tasks.py, where SST2 alone is 70k texts).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from minidecoder.evaluation.bootstrap import LEVEL, RESAMPLES, SEED
from minidecoder.evaluation.data_files import run_limit
from minidecoder.evaluation.harness import Encoder, encode_sentences, longest_first
from minidecoder.evaluation.senteval_classifier import (KFOLD, ClassifierConfig, ProbeResult, dev_selected,
                                                        fits_needed, inner_kfold, kfold_then_test)
from minidecoder.evaluation.transfer_data import TRANSFER_TASKS, TransferTask, load_transfer_tasks
from minidecoder.output_files import write_streamed

PROTOCOL = ("SentEval usepytorch=True, kfold=10, classifier {nhid: 0, optim: adam, batch_size: 64, tenacity: 5, "
            "epoch_size: 4}, seed 1111, L2 grid 1e-5..1e-2 (SentEval's pytorch grid), loss mean-reduced")


def mrpc_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """SentEval's MRPC features: `np.c_[np.abs(u - v), u * v]`, (N, 2E)."""
    return np.c_[np.abs(first - second), first * second]


def probe_task(task: TransferTask, rows: Callable[[list[str]], np.ndarray], progress: Callable[[int], None] | None = None,
               config: ClassifierConfig = ClassifierConfig(), workers: int = 1) -> ProbeResult:
    """Train and score SentEval's probe on one task; `rows(texts)` gives each text's (N, E) embedding;
    `workers` processes train the L2 grid's probes (the same result for any number: probe_pool.py)."""
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


def percentile_interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(replicates, [tail, 100.0 - tail])
    return float(lo), float(hi)


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

    def __init__(self, folder: str | Path, identity: str) -> None:
        self.folder, self.identity = Path(folder), identity  # identity: what made the embeddings (model, method, ...)
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
        if self.vectors_path.is_file() and self.texts_path.is_file():
            record = json.loads(self.texts_path.read_text())
            row = {text: k for k, text in enumerate(record.get("texts", []))}
            if record.get("identity") == self.identity_sha256 and all(text in row for text in texts):
                vectors = torch.from_numpy(np.load(self.vectors_path)[[row[text] for text in texts]])
                return vectors, record.get("seconds"), False
        start = time.perf_counter()
        vectors = compute()
        seconds = time.perf_counter() - start
        _keep(self.vectors_path, lambda handle: np.save(handle, vectors.numpy()))
        _keep(self.texts_path, lambda handle: handle.write(json.dumps(
            {"identity": self.identity_sha256, "texts": texts, "seconds": seconds}).encode()))
        return vectors, seconds, True

    def _task_path(self, name: str) -> Path:
        return self.folder / f"task-{name}.kept.json"

    def _task_key(self, key: str) -> str:
        return hashlib.sha256((self.identity + key).encode()).hexdigest()

    def task_result(self, name: str, key: str) -> dict | None:
        """The kept result of task `name`, if one was kept under the same identity and `key`."""
        path = self._task_path(name)
        if path.is_file():
            kept = json.loads(path.read_text())
            if kept.get("key") == self._task_key(key):
                return kept["result"]
        return None

    def kept_task_names(self, keys: dict[str, str]) -> list[str]:
        """The names of the tasks (name -> `task_key`) whose result this folder keeps under this identity."""
        return [name for name, key in keys.items() if self.task_result(name, key) is not None]

    def task_encode_seconds(self, name: str) -> float | None:
        """The embedding seconds kept beside task `name`'s result (None: kept by a version that kept none)."""
        path = self._task_path(name)
        return json.loads(path.read_text()).get("encode_seconds") if path.is_file() else None

    def keep_task(self, name: str, key: str, result: dict, encode_seconds: float | None = None) -> None:
        """Keep `result`, and beside it (not in it: a result is the same whichever sitting made it) the
        seconds its embedding took."""
        _keep(self._task_path(name), lambda handle: handle.write(json.dumps(
            {"key": self._task_key(key), "result": result, "encode_seconds": encode_seconds}).encode()))


def _keep(path: Path, write: Callable) -> None:
    # whole, through a temporary file of this process's own, under the file's lock, waited for: another sitting
    # keeping the same file must not cost this one the hour it embedded, and a failed write leaves it as it was
    write_streamed(path, write, overwrite=True, wait=True)


def task_key(task: TransferTask, config: ClassifierConfig) -> str:
    """What decides a task's result besides the embeddings' identity: its texts, its labels, the probe."""
    return hashlib.sha256(json.dumps([task.texts(), [s.labels.tolist() for s in task.splits.values()],
                                      repr(config)]).encode()).hexdigest()


def evaluate_transfer(encode: Encoder, tasks: Sequence[str] | Sequence[TransferTask] = TRANSFER_TASKS,
                      data_dir: str | Path | None = None, limit: int | None = None, progress: bool = True,
                      chunk_size: int = 256, kept: str | Path | None = None, kept_identity: str = "",
                      config: ClassifierConfig = ClassifierConfig(), probe_workers: int = 1,
                      grain: str = "run") -> dict:
    """Score `encode` on the transfer tasks (names, or tasks already read by `load_transfer_tasks`).

    Each distinct text is encoded once per embedding (longest first), all at once or task by task (`grain`,
    see the module docstring). `kept` (a folder) keeps the work for a resumed call; `kept_identity` must name
    everything that makes the embeddings (model, dtype, method and options, truncation): kept work made under
    another identity is never reused. `probe_workers` processes train each task's probes (probe_pool.py: the
    same scores for any number). Returns {"tasks": {name: entry}, "avg", "avg_over", "limit",
    "skipped_blank", "texts", "encode_seconds", "data_dir", "data_files", "protocol"}; an entry is
    `task_result`'s dict.

    "encode_seconds" is the time the embeddings took, whichever sitting computed them, so a row that spans
    sittings reports its whole embedding: grain "task" keeps each task's seconds beside its kept result and
    sums them, grain "run" keeps the run's seconds beside the kept embeddings. "encode_seconds_unknown" names
    the tasks whose time is not in the sum (embedded by an earlier call that kept no time); a task whose
    embedding job was itself interrupted counts the sitting that finished it."""
    if grain not in ("run", "task"):
        raise ValueError(f"grain={grain!r}: 'run' (embed every text at once) or 'task' (task by task)")
    loaded = list(tasks) if tasks and all(isinstance(t, TransferTask) for t in tasks) else \
        load_transfer_tasks(list(tasks), data_dir, limit)
    store = KeptWork(kept, kept_identity) if kept is not None else None
    keys = {task.name: task_key(task, config) for task in loaded}
    done = {task.name: store.task_result(task.name, keys[task.name]) for task in loaded} if store else {}

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
            results["tasks"][task.name] = done[task.name]
            task_seconds[task.name] = store.task_encode_seconds(task.name)
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
    from minidecoder.evaluation.report import stamp_table

    method = stamp.get("method", {})
    name = method.get("method", "?") if isinstance(method, dict) else method
    details = ["| task | scheme | train | test items | dev acc. | pooled acc. | chosen L2 |", "|---|---|---:|---:|---:|---:|---|"]
    for task, entry in results["tasks"].items():
        l2 = ", ".join(f"{value:g}" for value in entry["chosen_l2"])
        details.append(f"| {task} | {entry['scheme']} | {entry['train_items']} | {entry['test_items']} | {entry['dev']:.2f} "
                       f"| {entry['pooled_accuracy']:.2f} | {l2} |" + (f" F1 {entry['f1']:.2f}" if "f1" in entry else ""))
    skipped = results.get("skipped_blank") or {}
    blank = ("\n\nBlank lines SentEval reads as empty samples, skipped here (nothing to embed): "
             + "; ".join(f"{file} lines {', '.join(map(str, lines))}" for file, lines in skipped.items()) + "." if skipped else "")
    return (f"# Transfer evaluation: {name} on {stamp.get('model', '?')}\n\nAccuracy x100 of SentEval's probe "
            f"({results['protocol']}), with a 95% bootstrap interval over test items (k-fold tasks: out-of-fold "
            f"predictions); Avg. of the seven.\n\n{transfer_table(results)}\n\n## Per task\n\n" + "\n".join(details)
            + blank + f"\n\n{_timing(results)}\n\n## Run\n\n"
            + stamp_table(stamp) + "\n")
