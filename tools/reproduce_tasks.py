"""The papers' claims on their own benchmarks beyond STS, for one model: SentEval transfer (TP Table 5, CP
Table 6) and HTP's long-context STS (Figure 1); resumable by row and, within a row, by task / chunk.

    python tools/reproduce_tasks.py --model smollm2-135m-instruct                       # both tables (hours)
    python tools/reproduce_tasks.py --model smollm2-135m-instruct --family transfer --rows prompteol,prompteol+tp
    python tools/reproduce_tasks.py --model smollm2-135m-instruct --limit 40 --out /tmp/look   # a stamped quick look

Rows (claims.py's row keys). Transfer: prompteol, prompteol+tp, prompteol+cp, pretended_cot(+tp),
knowledge(+tp); a `+tp-transfer` row is TP with its end chosen for transfer (TP section 5.8's layers 14-21 of 32,
scaled to depth) on SST2 dev, the test split unused (`choose_transfer_end`); the `+tp` rows, whose end is the
STS-B-dev one, stay as the ablation. Long STS: last, mean-final, mean, prompteol, mean+tp ("TP w. Mean": TP on
the bare text, `<PST> {text}`, start 1 / end 7, pooling=mean at the final layer), htp. Each row's configuration (output layer,
TP end, CP steer layer and alpha) is the one tools/reproduce.py chose **on STS-B dev** for that row (read from
results/<model>.json; HTP's and TP w. Mean's start 1 / end 7 are the papers'), but for a `+tp-transfer` row's
TP end, chosen on SST2 dev; none is chosen on a test split (SentEval's own validation otherwise chooses only
the probe's L2). "last" and "mean-final" read the final layer, as HTP Figure 1's vanilla readouts do; "mean", at
the STS-B-dev layer, stays as an ablation. Under the long-STS table, a per-length control (each row's k = 1
cosines averaged over each long pair's k sub-pairs) separates what length costs a readout from what averaging
k measurements gives, computed from the kept rows (`--render` adds it to a table made before it).

Files: OUT/<model>-transfer.json / .md and OUT/<model>-sts-long.json / .md (OUT = results/ by default),
rewritten after every row; a finished row is never recomputed (`--redo` with `--rows` recomputes those).
A transfer row longer than a sitting: commit OUT/<model>-transfer-work/<row>/task-*.kept.json as tasks
finish (.gitignore keeps only those); a row embeds and probes task by task (evaluate_transfer's
grain="task"), so the next sitting, on any machine, embeds and trains only the tasks not kept.
Each JSON is also the claims file tools/claims_table.py reads (tools/family_claims.py: settings.benchmark,
rows_planned, rows_done, and `claims` judged by claims.judge; sts-long's claims on the score "16").
Blank lines: a new transfer table reads CR's and MPQA's blank lines as SentEval does (the empty text); a table
written when they were skipped goes on skipping them (its rows are paired item by item) until
`--reread-blank-lines` has re-run CR and MPQA of every row with them read, a row at a time (each kept in the
file as it finishes); the table then takes the new cells at once.
A file made with other settings (model, dtype, limit) is refused, never mixed; the device is each row's own
(a row run on a lent GPU joins the CPU's rows in one table, each naming where it ran), while a row's kept
tasks resume only on the device that began it: a sitting on another device skips that row and says so
(`--rows KEY --redo` starts it over there). Two sittings may write one table: a run re-reads the file before
each row and before writing, so it skips a row finished elsewhere and never drops another's row, and
`--merge FILE` adds another sitting's rows (a GPU sitting's res.tgz, unpacked beside the checkout) to OUT's,
keeping OUT's own where both have one. Within a row, the work
kept in OUT/<model>-<family>-work/<row>/ (the embeddings, each finished task's probe, the embedding job's
chunks) lets the next sitting go on from where this one stopped.

Statistics: every cell a 95% bootstrap interval (transfer: over test items / out-of-fold predictions;
long STS: over long pairs); every paper comparison (TP or CP vs its prompt) a paired interval of the
difference on the same resamples, per task / length and for Avg. (mean over them of the per-resample
differences), judged by `reproduce.claims.judge` for each claim of `claims.BENCHMARK_CLAIMS`.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # family_claims, when loaded from elsewhere
sys.path.insert(0, str(REPO))  # first: the reproduce/ package, not tools/reproduce.py

import minidecoder  # noqa: E402
from minidecoder.errors import MinidecoderError  # noqa: E402
from family_claims import TP_WITH_MEAN, claims_report, cross_validation_lines, with_avg  # noqa: E402
from reproduce.claims import shown  # noqa: E402
from reproduce.provenance import BLANK_LINES, provenance_lines  # noqa: E402
from reproduce import read_json, run_tool  # noqa: E402
from minidecoder.evaluation.bootstrap import Bootstrap, TaskLayout  # noqa: E402
from minidecoder.evaluation.family import run_limit  # noqa: E402
from minidecoder.evaluation.report import _json_safe, build_stamp  # noqa: E402
from minidecoder.evaluation.bootstrap import spearman  # noqa: E402
from minidecoder.output_files import output_lock, write_whole  # noqa: E402
from minidecoder.evaluation.senteval_probe import default_workers  # noqa: E402
from minidecoder.evaluation.senteval_probe import ClassifierConfig  # noqa: E402
from minidecoder.evaluation.transfer import KeptWork, accuracy_replicates, evaluate_transfer, task_key  # noqa: E402
from minidecoder.evaluation.transfer import TRANSFER_TASKS, load_transfer_tasks  # noqa: E402
from minidecoder.methods import build_method  # noqa: E402
from minidecoder.sources.checksums import model_identity  # noqa: E402

TRANSFER_ROWS = [("prompteol", "PromptEOL"), ("prompteol+tp-transfer", "PromptEOL + TP"),
                 ("prompteol+tp", "PromptEOL + TP (STS end)"), ("prompteol+cp", "PromptEOL + CP (NS)"),
                 ("pretended_cot", "Pretended CoT"), ("pretended_cot+tp-transfer", "Pretended CoT + TP"),
                 ("pretended_cot+tp", "Pretended CoT + TP (STS end)"),
                 ("knowledge", "Knowledge"), ("knowledge+tp-transfer", "Knowledge + TP"),
                 ("knowledge+tp", "Knowledge + TP (STS end)")]
TRANSFER_TP = "+tp-transfer"  # a row whose TP end is chosen for transfer (`choose_transfer_end`)
# TP section 5.8: for transfer, "ending token prepending at deeper layers typically between layer index 14 and
# 21" of Llama-2-7B's 32, "differs significantly from the optimal layer for STS"
TRANSFER_END_RANGE = (14, 21, 32)
STS_LONG_ROWS = [("last", "Last token"), ("mean-final", "Mean pooling (final layer)"),
                 ("mean", "Mean pooling (STS-B-dev layer)"), ("prompteol", "PromptEOL"), ("mean+tp", "TP w. Mean"),
                 ("htp", "HTP")]
LONGEST = "16"  # the length Figure 1's claims are judged at


def files_identity(model) -> dict:
    """`model_identity` less the folder: what the outputs depend on and nothing of where the files sit, so work
    kept under it (a committed transfer task, a TP end's SST2 dev accuracy) resumes in any checkout, on any
    machine that converted the same files."""
    return {key: value for key, value in model_identity(model).items() if key != "source"}


def table_name(model: str) -> str:
    """The name every file of a model goes by: a folder's last part, or the model's name (what tools/reproduce.py
    names results/<name>.json by), so `--model /abs/checkpoint` and `--model checkpoint` find the same files."""
    return Path(model).name


def read_table(path: Path, what: str = "table file") -> dict:
    """The JSON object at `path`, or a SystemExit naming the file when it is not one: cut short (a full disk, a
    copy interrupted), hand-edited, or another kind of file."""
    data, problem = read_json(path)
    if problem:
        raise SystemExit(f"reproduce_tasks: {path} {problem}; restore it (git checkout -- {path}, or copy it "
                         "again), or move it away")
    if not isinstance(data, dict) or not isinstance(data.get("settings", {}), dict) \
            or not isinstance(data.get("rows", {}), (dict, list)):
        raise SystemExit(f"reproduce_tasks: {path} is not a {what} (a JSON object with its settings and rows); "
                         "name the file the tool wrote, or move this one away")
    return data


def chosen_methods(model: str) -> dict[str, dict]:
    """Each STS row's dev-chosen method (results/<name>.json, written by tools/reproduce.py)."""
    path = REPO / "results" / f"{table_name(model)}.json"
    if not path.is_file():
        raise SystemExit(f"reproduce_tasks: {path} is missing; its rows' dev-chosen configurations are what this "
                         f"tool scores. Run `python tools/reproduce.py --model {model}` first.")
    rows = read_table(path, "results table of tools/reproduce.py").get("rows", [])
    return {row["key"]: row["method"] for row in rows}


def row_method(key: str, chosen: dict[str, dict]):
    if key in ("last", "mean-final"):  # HTP Figure 1's vanilla readouts: the final layer
        return build_method(key.removesuffix("-final"))
    spec = dict({"method": "tp", **TP_WITH_MEAN} if key == "mean+tp" else chosen[key])
    name = spec.pop("method")
    spec.pop("pst_init_detail", None)  # a description the method writes, not an option
    spec.pop("sentence_splitter", None)
    return build_method(name, **spec)


def load_report(path: Path, benchmark: str, settings: dict, planned: list[str], redo: set[str],
                fix: str = "choose another --out or remove it") -> dict:
    """The table file so far (its rows; `redo` removed), or a new one; one made with other settings is refused.
    The device is a row's, not the file's (a row run on a GPU scores what the CPU does, to float rounding), so
    rows from both join one table, as retrieval's do; a file written before rows named theirs gives its rows
    the device its settings named."""
    new = {**claims_report(benchmark, without_device(settings), planned, [], lambda *_: None), "rows": {}}
    if path.is_file():
        report = read_table(path)
        if not isinstance(report.get("rows"), dict):
            raise SystemExit(f"reproduce_tasks: {path} holds no rows of a {benchmark} table (a reproduce.py table's "
                             "rows are a list); name a <model>-<family>.json this tool wrote")
        report["settings"] = recorded_settings(report.get("settings") or {})
        if without_device(report["settings"]) != new["settings"]:
            raise SystemExit(f"reproduce_tasks: {path} was made with other settings ({report.get('settings')}); "
                             + fix)
        for row in report["rows"].values():
            row["stamp"].setdefault("device", report["settings"].get("device", "cpu"))
        for key in redo:
            report["rows"].pop(key, None)
        return report
    return new


def add_rows(report: dict, path: Path, benchmark: str, settings: dict, planned: list[str],
             leave_out: set[str], fix: str = "choose another --out or remove it") -> list[str]:
    """Add to `report` the rows of the table file `path` it lacks (not those in `leave_out`: rows being redone),
    in planned order; returns their keys. So a run writing its table never drops a row another wrote meanwhile
    (a lent GPU's rows merged while a CPU run goes on, or a second run), and skips a row finished elsewhere."""
    if not path.is_file():
        return []
    other = load_report(path, benchmark, settings, planned, set(), fix)
    added = [key for key in other["rows"] if key not in report["rows"] and key not in leave_out]
    if added:
        rows = {**report["rows"], **{key: other["rows"][key] for key in added}}
        order = planned + [key for key in rows if key not in planned]
        report["rows"] = {key: rows[key] for key in order if key in rows}
    return added


def recorded_settings(settings: dict) -> dict:
    """A table file's settings, read: a transfer table written before `blank_lines` was a setting skipped CR's
    and MPQA's blank lines (the only reading there was then)."""
    return {"blank_lines": "skip", **settings} if settings.get("benchmark") == "transfer" else settings


def table_blank_lines(path: Path) -> str:
    """How a transfer table reads CR's and MPQA's blank lines: as its file records (its rows are paired item by
    item, so every row reads them alike), or for a new table as SentEval does."""
    if not path.is_file():
        return "read"
    return recorded_settings(read_table(path).get("settings") or {}).get("blank_lines", "read")


def without_device(settings: dict) -> dict:
    return {name: value for name, value in settings.items() if name != "device"}


def rows_devices(report: dict) -> str:
    """The file's "device" setting (claims_table prints it): every device its rows ran on (each row's stamp,
    where reproduce_retrieval.py's rows keep theirs too)."""
    return " and ".join(sorted({row["stamp"]["device"] for row in report["rows"].values()}))


def write(path: Path, report: dict, markdown: str) -> None:
    """PATH.json compact (a row's per-item predictions and gold, tens of thousands of numbers, would take a line
    each when indented: a 7-row transfer file over 5 MB; as digit strings, `packed_items`) and PATH.md, the
    table a reader opens."""
    compact = json.dumps(_json_safe(packed_items(report)), separators=(",", ":")) + "\n"
    for target, text in ((path, compact), (path.with_suffix(".md"), markdown)):
        write_whole(target, text.encode(), overwrite=True)


def packed_items(report: dict) -> dict:
    """The report with each transfer task's per-item predictions and gold labels as one digit string ("0110..."):
    a byte an item where a compact JSON list takes two (SentEval's labels are 0 to 5). `item_labels` reads both."""
    def pack(task: dict) -> dict:
        return {**task, **{name: "".join(map(str, task[name])) for name in ("predictions", "gold")
                           if isinstance(task.get(name), list) and all(0 <= label <= 9 for label in task[name])}}

    def pack_tasks(holder: dict) -> dict:  # a row, or its CR and MPQA re-read with their blank lines
        if not isinstance(holder.get("tasks"), dict):
            return holder
        return {**holder, "tasks": {name: pack(task) for name, task in holder["tasks"].items()}}

    rows = {}
    for key, row in report.get("rows", {}).items():
        row = pack_tasks(row)
        if isinstance(row.get("blank_lines_reread"), dict):
            row = {**row, "blank_lines_reread": pack_tasks(row["blank_lines_reread"])}
        rows[key] = row
    return {**report, "rows": rows}


def item_labels(values: str | list[int]) -> np.ndarray:
    """A task's per-item labels as `packed_items` wrote them (a digit string), or as a list (files before it)."""
    return np.fromiter(map(int, values), dtype=np.int64) if isinstance(values, str) else np.asarray(values)


def encoder(model, method, work: Path, batch_size: int | None):
    """encode(texts) as a resumable embedding job in WORK/job-<texts' sha256>: a job per set of texts, since
    a transfer row embeds task by task and a job folder refuses other texts than the ones it started with.
    The job's own bar counts the texts as its chunks finish (the caller hands it every text at once)."""
    from minidecoder.running.jobs import embed_resumably

    def encode(texts: list[str]):
        digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
        return embed_resumably(model, method, texts, work / f"job-{digest}", batch_size=batch_size,
                               progress=True)[0]
    return encode


# ---- transfer ---------------------------------------------------------------------------------------
def transfer_end_range(num_layers: int) -> list[int]:
    """TP's candidate ends for transfer: TP section 5.8's layers 14..21 of 32 scaled to the model's depth
    (rounded half up; never below 2, so at least one copy follows TP's start 1)."""
    low, high, depth = TRANSFER_END_RANGE
    scaled = [int(np.floor(value * num_layers / depth + 0.5)) for value in (low, high)]
    return list(range(max(2, scaled[0]), max(2, scaled[1]) + 1))


ENDS_PER_PIECE = 2  # ends embedded together (see `choose_transfer_end`); --ends-per-piece


def choose_transfer_end(model, spec: dict, sst2, work: Path, batch_size: int | None,
                        ends_per_piece: int = ENDS_PER_PIECE) -> dict:
    """TP's end for transfer, chosen on data that is not a test split: for each end of `transfer_end_range`, the
    STS row's TP (`spec`) with that end, scored by SentEval's probe trained on SST2 train with its L2 chosen on
    SST2 dev; the end whose dev accuracy is highest (ties: the shallower). SST2's test split is never embedded.

    The ends are embedded `ends_per_piece` at a time, each piece one grid (`embed_grid`, as `minidecoder sweep
    --tp-end` runs them): a grid's forwards share every block before the first end they differ at, so it
    computes fewer blocks than one run per end (the blocks over every piece are recorded, and their ratio as
    `grid_blocks_ratio`). A grid of every end shares the most; a piece of two is small enough for one sitting
    of a 2-core CPU, and a piece's accuracies are kept in WORK/end-choice.json as it is scored: that file is
    committed, and the next sitting, on any machine, embeds only the ends it lacks. Within a piece, its batches are kept in WORK/grid-FIRST-LAST until its ends
    are scored, so a stop in the grid or in the probes resumes there."""
    from minidecoder.evaluation.sweep import BATCH_SIZE, embed_grid, kept_manifest
    from minidecoder.evaluation.transfer import probe_task
    from minidecoder.running.jobs import KeptChunks

    ends = transfer_end_range(model.num_layers)
    dev_only = dataclasses.replace(sst2, splits={"train": sst2.splits["train"], "dev": sst2.splits["dev"],
                                                 "test": sst2.splits["dev"]})  # the test split left out
    texts = sorted({*dev_only.splits["train"].texts, *dev_only.splits["dev"].texts})
    identity = end_choice_identity(model, spec, dev_only)
    path = work / "end-choice.json"
    kept = read_end_choice(path, identity)
    size = batch_size or BATCH_SIZE
    row_of = {text: row for row, text in enumerate(texts)}
    for piece in (ends[k:k + ends_per_piece] for k in range(0, len(ends), ends_per_piece)):
        todo = [end for end in piece if str(end) not in kept["sst2_dev_accuracy"]]
        if not todo:
            continue
        work.mkdir(parents=True, exist_ok=True)
        # the whole piece in its grid, scored or not: its kept batches then serve a resumed choice
        method, points = tp_with_end(spec, piece[0]), [{"end": end} for end in piece]
        manifest = kept_manifest(model, method, {"end": piece}, points, texts, size, {"task": "SST2 train and dev"})
        grid = KeptChunks(work / f"grid-{piece[0]}-{piece[-1]}", manifest, -(-len(texts) // size))
        vectors, cost = embed_grid(model, method, points, texts, size, progress=True, kept=grid)
        probing = time.perf_counter()
        for end, matrix in zip(piece, vectors):
            if end not in todo:
                continue
            table = matrix.numpy()
            probe = probe_task(dev_only, lambda batch, table=table: table[[row_of[text] for text in batch]],
                               workers=default_workers())
            kept["sst2_dev_accuracy"][str(end)] = probe.dev_accuracy
            kept["device"][str(end)] = model.device.type
            if end == todo[-1]:  # the piece's blocks and seconds count once, with the last end it scores
                kept["blocks"]["computed"] += cost["blocks_computed"]
                kept["blocks"]["one_run_per_end"] += cost["blocks_naive"]
                # what the piece cost: the grid's seconds include batches an earlier, stopped sitting embedded;
                # the probes' cover the ends probed in this sitting
                kept.setdefault("pieces", {})[f"{piece[0]}-{piece[-1]}"] = {
                    "device": model.device.type, "encode_seconds": cost["seconds"],
                    "probe_seconds": time.perf_counter() - probing}
            write_whole(path, json.dumps(kept, indent=1).encode(), overwrite=True)
        grid.remove()
    accuracy, blocks = kept["sst2_dev_accuracy"], kept["blocks"]
    end = max(ends, key=lambda candidate: (accuracy[str(candidate)], -candidate))
    ratio = blocks["computed"] / blocks["one_run_per_end"] if blocks["one_run_per_end"] else None
    return {"end": end, "range": [ends[0], ends[-1]], "sst2_dev_accuracy": accuracy, "grid_blocks_ratio": ratio,
            "on": "SST2 dev: SentEval's probe trained on SST2 train, its L2 chosen on dev (the test split unused)",
            **({"pieces": kept["pieces"]} if "pieces" in kept else {})}


def end_choice_identity(model, spec: dict, sst2) -> str:
    """What an end's SST2 dev accuracy depends on, kept in end-choice.json: the weights, dtype, the STS row's TP
    (its end aside) and SST2's train and dev rows. Not the code, the device or the checkout's folder: a committed
    piece serves the next sitting whatever changed since (each end names the device that scored it)."""
    rows = [[split.texts, split.labels.tolist()] for name, split in sst2.splits.items() if name != "test"]
    return hashlib.sha256(json.dumps([files_identity(model), str(model.dtype), {**spec, "end": None}, rows],
                                     sort_keys=True, default=str).encode()).hexdigest()


def read_end_choice(path: Path, identity: str) -> dict:
    """The ends scored so far (a fresh record where there is none); one kept for another model, TP or data is
    refused, never mixed into this choice."""
    fresh = {"identity": identity, "sst2_dev_accuracy": {}, "device": {},
             "blocks": {"computed": 0, "one_run_per_end": 0}}
    if not path.exists():
        return fresh
    kept, problem = read_json(path)
    if problem:
        raise SystemExit(f"reproduce_tasks: {path} (the SST2 dev accuracies of this row's end) {problem}; move it "
                         "away to choose the end afresh")
    if not isinstance(kept, dict) or kept.get("identity") != identity:
        raise SystemExit(f"{path} holds the SST2 dev accuracies of another model, TP configuration or SST2 data "
                         "(or of an older format); move it away to choose this row's end afresh")
    return kept


def tp_with_end(spec: dict, end: int):
    """The method of `spec` (a row's {"method": name, **options}) with TP's end set to `end`."""
    options = {**spec, "end": end}
    return build_method(options.pop("method"), **options)


def transfer_tp_spec(key: str, chosen: dict[str, dict]) -> dict:
    """The STS row's TP configuration a transfer-end row starts from (its end replaced by the choice)."""
    spec = dict(chosen[key.removesuffix(TRANSFER_TP) + "+tp"])
    spec.pop("pst_init_detail", None)  # a description the method writes, not an option
    return spec


DEVICES = ("cpu", "cuda", "mps", "xpu")  # where another sitting may have begun a row


def row_identity(settings: dict, weights: dict | None, method) -> str:
    """What a transfer row's kept work is kept under: the settings (the device among them), the weights'
    checksums and the method with its options (work kept before an option was added serves while the option
    keeps its default: KeptWork compares them with running.jobs.serves)."""
    return json.dumps([settings, weights, method.describe()], sort_keys=True, default=str)


def row_command(args: argparse.Namespace, family: str, *words: str) -> list[str]:
    """The command that (re)makes a row, recorded with it: `words`, and the flags that chose its data."""
    return (["python", "tools/reproduce_tasks.py", "--model", args.model, "--family", family, *words]
            + [word for flag in ("limit", "tasks", "data") if getattr(args, flag) is not None
               for word in (f"--{flag}", str(getattr(args, flag)))])


def remove_if_empty(work_root: Path) -> None:
    if work_root.is_dir() and not any(work_root.iterdir()):
        work_root.rmdir()  # every row finished: nothing left to resume


# Options a method had when committed rows were made, retired since: the values under which the rest were
# inert, and the rest. CP's TP extension (now the method cp+tp) off and its steering on (unsteered CP is now the
# audit view's baseline) leave TP's start, end, <PST> row and seed unread.
RETIRED_OPTIONS = {"cp": ({"tp": False, "steer": True}, ("tp_aux", "start", "end", "pst_init", "seed"))}


def method_of_row(row: dict):
    """The method a finished row ran, rebuilt from its record (`describe()`: its options and what it wrote
    beside them), checked to describe itself the same (retired options aside, where they were inert; options added
    since, at their defaults, as jobs.serves takes them)."""
    from minidecoder.methods import METHODS
    from minidecoder.running.jobs import serves

    recorded = dict(row["method"])
    inert, unread = RETIRED_OPTIONS.get(recorded["method"], ({}, ()))
    if any(name in recorded and recorded[name] != value for name, value in inert.items()):
        raise SystemExit(f"reproduce_tasks: the row's method {row['method']} used an option retired since "
                         f"({', '.join(f'{name} != {value}' for name, value in inert.items())}); re-run the row "
                         "(--rows KEY --redo)")
    recorded = {name: value for name, value in recorded.items() if name not in inert and name not in unread}
    spec = dict(recorded)
    cls = METHODS[spec.pop("method")]
    method = cls(**{name: value for name, value in spec.items() if name in cls.__dataclass_fields__})
    if not serves(recorded, method.describe()):  # an option added since, at its default, agrees
        raise SystemExit(f"reproduce_tasks: the row's method {row['method']} does not rebuild as itself "
                         f"({method.describe()}); re-run the row (--rows KEY --redo)")
    return method


BLANK_TASKS = ("CR", "MPQA")  # the tasks with blank lines (transfer.py)


def reread_blank_lines(model, report: dict, loaded: list, work_root: Path, settings: dict, weights: dict | None,
                       wanted: set[str] | None, batch_size: int | None, command: list[str], write_table) -> bool:
    """Move a table that skipped CR's and MPQA's blank lines to SentEval's reading, row by row: each row's CR and
    MPQA are embedded and probed again with them read (`loaded`: those two tasks, read so), kept in the row as
    `blank_lines_reread` (its other tasks hold no blank line: unchanged) and the table written, so a sitting
    keeps every row it finished. The rows are paired item by item, so the table swaps to the new cells only
    once every row holds them. Returns whether it swapped."""
    for key, row in report["rows"].items():
        if "blank_lines_reread" in row or (wanted is not None and key not in wanted):
            continue
        method = method_of_row(row)
        print(f"transfer: {row['label']}: CR and MPQA with their blank lines read ...", file=sys.stderr)
        work = work_root / f"{key}-blank-lines"
        work.mkdir(parents=True, exist_ok=True)
        results = evaluate_transfer(encoder(model, method, work, batch_size), loaded, chunk_size=1 << 62, kept=work,
                                    kept_identity=row_identity(settings, weights, method), progress=True,
                                    probe_workers=default_workers(), grain="task")
        row["blank_lines_reread"] = {
            name: results[name] for name in ("tasks", "blank_lines_read", "encode_seconds", "encode_seconds_unknown")}
        row["blank_lines_reread"].update(stamp=build_stamp({"method": method.describe(), "device": settings["device"]},
                                                           results),
                                         command=shlex.join(command + ["--rows", key]))
        write_table()
        shutil.rmtree(work, ignore_errors=True)
    if not report["rows"] or any("blank_lines_reread" not in row for row in report["rows"].values()):
        return False
    reads_empty = "" in {text for task in loaded for text in task.texts()}  # "": no other task holds it
    for row in report["rows"].values():
        reread = row.pop("blank_lines_reread")
        row["tasks"].update(reread.pop("tasks"))
        complete = sorted(row["tasks"]) == sorted(TRANSFER_TASKS)
        row["avg"] = float(np.mean([row["tasks"][name]["score"] for name in TRANSFER_TASKS])) if complete else None
        row["texts"] += reads_empty
        row["skipped_blank"], row["blank_lines_read"] = {}, reread.pop("blank_lines_read")
        row["blank_lines_reread"] = reread  # where and when CR and MPQA were re-read
    report["settings"]["blank_lines"] = "read"
    return True


def began_elsewhere(work: Path, settings: dict, weights: dict | None, method,
                    keys: dict[str, str]) -> tuple[str, list[str]] | None:
    """(device, tasks) when a sitting on another device kept some of this row's tasks. A row's kept tasks
    resume only on the device that began it (its identity names the device: one row, one device), so running
    it here would start it over, write over that work as its tasks finish and spend this sitting on it.
    `keys`: each task's `task_key`, computed once for every row of the family."""
    for device in DEVICES:
        if device != settings["device"]:
            identity = row_identity({**settings, "device": device}, weights, method)
            kept_work = KeptWork(work, identity)
            kept = [name for name, key in keys.items() if kept_work.kept_task(name, key) is not None]
            if kept:
                return device, kept
    return None


def transfer_differences(rows: dict):
    """(method, base) -> (point, intervals) of accuracy(method) - accuracy(base) x100 per task and for "avg",
    on the same resamples of the same test items (out-of-fold predictions for the k-fold tasks)."""
    def differences(method: str, base: str):
        point, reps = {}, {}
        for k, task in enumerate(TRANSFER_TASKS):
            a, b = rows[method]["tasks"].get(task), rows[base]["tasks"].get(task)
            if a is None or b is None:
                continue
            correct_a = item_labels(a["predictions"]) == item_labels(a["gold"])
            correct_b = item_labels(b["predictions"]) == item_labels(b["gold"])
            point[task] = a["score"] - b["score"]
            reps[task] = accuracy_replicates(correct_a, k) - accuracy_replicates(correct_b, k)  # same resamples
        return with_avg(point, reps) if point else None
    return differences


def transfer_claims(rows: dict, settings: dict | None = None) -> list[dict]:
    """claims.judge's record of every transfer claim whose two rows are done."""
    return claims_report("transfer", settings or {}, [key for key, _ in TRANSFER_ROWS], list(rows),
                         transfer_differences(rows))["claims"]


def sts_long_differences(rows: dict, sets) -> object:
    """(method, base) -> (point, intervals) of Spearman(method) - Spearman(base) x100 per length and for "avg",
    on the same resampled long pairs (bootstrap.Bootstrap over each length's pairs)."""
    boot = Bootstrap([TaskLayout(str(p.k), "test", p.gold, (0, len(p))) for p in sets])

    def differences(method: str, base: str):
        cosines = {row: {k: np.asarray(v["cosines"]) for k, v in rows[row]["lengths"].items()} for row in (method, base)}
        reps = boot.replicates(cosines)
        point = {k: rows[method]["lengths"][k]["score"] - rows[base]["lengths"][k]["score"] for k in boot.names[:-1]}
        point["avg"] = float(np.mean(list(point.values())))
        return point, boot.interval(reps[method] - reps[base])
    return differences


def table_markdown(report: dict, title: str, banner: str, caption: str, rows: list[tuple[str, str]],
                   columns: list[str], cell, comparisons: str, extra: tuple[str, ...] = ()) -> str:
    """A family's table file: its title, the limited-run banner, one line per row (`cell(row, column)`; a row
    not run yet says so), the paper's comparisons and the command of every row."""
    lines = [f"# {title}", ""]
    if report["settings"]["limit"] is not None:
        lines += [f"**Limited run: {banner}; a quick look, never a claim.**", ""]
    lines += [caption + " Device: where the row ran (scores agree across devices to float rounding).", "",
              "| row | " + " | ".join(columns) + " | Device |", "|---|" + "---:|" * len(columns) + "---|"]
    for key, label in rows:
        row = report["rows"].get(key)
        cells = [cell(row, column) if row is not None else "not run" for column in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {row['stamp']['device'] if row is not None else ''} |")
    lines += extra
    lines += ["", f"## {comparisons} (paired 95% intervals of the difference)", "",
              "| claim | diff | interval | verdict |", "|---|---:|---|---|", *claim_lines(report)]
    settings = report["settings"]
    lines += provenance_lines(settings["benchmark"], rows,
                              BLANK_LINES[settings["blank_lines"]] if "blank_lines" in settings else "")
    lines += ["", "Commands: " + "; ".join(f"`{row['command']}`" for row in report["rows"].values()), ""]
    return "\n".join(lines)


def scored(result: dict) -> str:
    """A cell: the score and its 95% interval."""
    return f"{result['score']:.2f} [{result['ci95'][0]:.1f}, {result['ci95'][1]:.1f}]"


def transfer_markdown(report: dict, model: str) -> str:
    def cell(row: dict, column: str) -> str:
        if column == "Avg.":
            return f"{row['avg']:.2f}" if row.get("avg") is not None else "-"
        return scored(row["tasks"][column]) if column in row["tasks"] else "-"
    return table_markdown(report, f"SentEval transfer on {model} (TP Table 5, CP Table 6)",
                          f"the first {report['settings']['limit']} rows of each file only",
                          "Accuracy x100 of SentEval's probe, 95% bootstrap interval over test items; rows configured "
                          "as chosen on STS-B dev (results/<model>.json).",
                          TRANSFER_ROWS, [*TRANSFER_TASKS, "Avg."], cell, "The papers' comparisons",
                          tuple(cross_validation_lines(report, TRANSFER_ROWS, list(TRANSFER_TASKS))) +
                          tuple(end_choice_lines(report)))


def end_choice_lines(report: dict) -> list[str]:
    """Where each transfer-end TP row's end came from: the candidates and their SST2 dev accuracy."""
    lines = []
    for key, label in TRANSFER_ROWS:
        choice = report["rows"].get(key, {}).get("tp_end_choice")
        if choice:
            tried = ", ".join(f"{end}: {accuracy:.2f}" for end, accuracy in choice["sst2_dev_accuracy"].items())
            lines.append(f"- **{label}**: TP end {choice['end']}, of {choice['range'][0]}..{choice['range'][1]} (TP "
                         f"section 5.8's layers 14-21 of 32 scaled to depth), chosen on {choice['on']}; dev accuracy "
                         f"by end: {tried}.{piece_costs(choice.get('pieces', {}))}")
    return ["", "## TP's end for transfer", "", *lines] if lines else []


def piece_costs(pieces: dict) -> str:
    """What each piece of an end choice cost, as end-choice.json recorded it (choices made before it kept seconds
    record none)."""
    def duration(seconds: float) -> str:
        return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"

    costs = "; ".join(f"ends {ends}: {duration(cost['encode_seconds'])} embedding, {duration(cost['probe_seconds'])}"
                      f" probes ({cost['device']})" for ends, cost in pieces.items())
    return f" Cost by piece: {costs}." if costs else ""


def claim_lines(report: dict) -> list[str]:
    """One table line per judged claim, on its decisive score (Avg., or a length / task the paper names)."""
    lines = []
    for claim in report.get("claims", []):
        decisive = claim["scores"][claim["score"]]
        lines.append(f"| {claim['claim']} ({claim['score']}) | {decisive['diff']:+.2f} | "
                     f"[{decisive['lo']:+.2f}, {decisive['hi']:+.2f}] | {shown(claim)} |")
    return lines


# ---- long STS -----------------------------------------------------------------------------------------
def averaged_sub_pairs(row: dict, sets) -> dict[str, dict]:
    """The per-length control of one row: {k: {"score", "ci95", "diff", "diff_ci95"}}, where "score" is the
    Spearman x100 of the mean of each long pair's k sub-pair cosines (each sub-pair embedded alone: the row's
    k = 1 cosines, in the same gold order) against the long pair's gold, and "diff" the long pair's Spearman
    minus it with a paired interval (the same resamples). A control rising with k is what averaging k similar
    measurements gives; a long-pair score below it is what length costs the readout."""
    alone = np.asarray(row["lengths"]["1"]["cosines"], dtype=np.float64)
    boot = Bootstrap([TaskLayout(str(p.k), "test", p.gold, (0, len(p))) for p in sets])
    averaged = {str(p.k): alone[:len(p) * p.k].reshape(len(p), p.k).mean(axis=1) for p in sets}
    joined = {str(p.k): np.asarray(row["lengths"][str(p.k)]["cosines"]) for p in sets}
    reps = boot.replicates({"control": averaged, "long": joined})
    control, difference = boot.interval(reps["control"]), boot.interval(reps["long"] - reps["control"])
    out = {}
    for p in sets:
        k = str(p.k)
        score = 100.0 * spearman(averaged[k], p.gold)
        out[k] = {"score": score, "ci95": list(control[k]), "diff": row["lengths"][k]["score"] - score,
                  "diff_ci95": list(difference[k])}
    return out


def length_effect(lo: float, hi: float) -> str:
    """What a (long - control) interval says about the readout at that length."""
    return "length hurts the readout" if hi < 0 else "length helps the readout" if lo > 0 else "no length effect at 95%"


def control_lines(report: dict, sets) -> list[str]:
    """The per-length control under the table, each row's long-pair score against it, and, read from the
    numbers, whether Figure 1's degradation (last-token readout falling with length, mean pooling holding)
    appears."""
    rows = [(key, label) for key, label in STS_LONG_ROWS if key in report["rows"]]
    if not rows or "1" not in report["rows"][rows[0][0]]["lengths"]:
        return []
    lengths = [str(p.k) for p in sets]
    controls = {key: averaged_sub_pairs(report["rows"][key], sets) for key, _ in rows}
    lines = ["", "## Per-length control: averaging k measurements", "",
             "Each long pair's gold is the mean of k sub-pairs of near-equal gold, so a score can rise with k "
             "because k measurements are averaged, not because the readout handles length. The control: the "
             "Spearman x100 of the mean of the k sub-pairs' cosines, each sub-pair embedded alone (the row's k=1 "
             "cosines), 95% interval; then the long pair's Spearman minus the control, paired 95% interval. Below "
             "zero, length hurts the readout; above, the joined text reads better than its parts apart.", "",
             "| row | " + " | ".join(f"control k={k}" for k in lengths) + " | " +
             " | ".join(f"long - control k={k}" for k in lengths[1:]) + " |",
             "|---|" + "---:|" * (2 * len(lengths) - 1)]
    for key, label in rows:
        got = controls[key]
        lines.append(f"| {label} | " + " | ".join(scored(got[k]) for k in lengths) + " | " +
                     " | ".join(f"{got[k]['diff']:+.2f} [{got[k]['diff_ci95'][0]:+.1f}, {got[k]['diff_ci95'][1]:+.1f}]"
                                for k in lengths[1:]) + " |")
    if LONGEST in lengths:
        lines += ["", f"At k={LONGEST}: " + "; ".join(
            f"{label}: {length_effect(*controls[key][LONGEST]['diff_ci95'])}" for key, label in rows) + "."]
        if "last" in controls and "mean-final" in controls:
            last, mean = (length_effect(*controls[key][LONGEST]["diff_ci95"]) for key in ("last", "mean-final"))
            appears = last == "length hurts the readout" and mean != "length hurts the readout"
            lines.append(f"Figure 1's degradation (the last token's readout hurt by length while the final-layer mean "
                         f"holds) {'appears' if appears else 'does not appear'} here at k={LONGEST}: last token, "
                         f"{last}; final-layer mean, {mean}.")
    return lines


def sts_long_markdown(report: dict, model: str, sets=()) -> str:
    lengths = [str(k) for k in report["settings"]["lengths"]]
    return table_markdown(report, f"Long-context STS on {model} (HTP Figure 1)",
                          f"built from the first {report['settings']['limit']} STS-B test pairs",
                          "Spearman x100 per length k (k STS-B test pairs joined per long pair), 95% bootstrap "
                          "interval over long pairs.", STS_LONG_ROWS, [f"k={k}" for k in lengths],
                          lambda row, column: scored(row["lengths"][column.removeprefix("k=")]), "HTP's comparisons",
                          tuple(control_lines(report, sets)) if sets else ())


def render(path: Path, data: str | None) -> int:
    """Re-judge the claims of a table file from the rows it holds and rewrite its Markdown: no model loaded,
    no row recomputed (after a change to the claims, their judging or the table's layout)."""
    report = read_table(path)
    if "benchmark" not in report.get("settings", {}) or not isinstance(report.get("rows"), dict):
        raise SystemExit(f"reproduce_tasks: {path} is not a transfer or sts-long table file (no settings.benchmark "
                         "or rows); name a <model>-transfer.json or <model>-sts-long.json this tool wrote")
    report["settings"] = recorded_settings(report["settings"])
    family, settings = report["settings"]["benchmark"], report["settings"]
    for row in report["rows"].values():  # a file written before rows named their device: its settings' (load_report)
        row["stamp"].setdefault("device", settings.get("device", "cpu"))
    sets = ()
    if family == "transfer":
        judged = transfer_differences(report["rows"])
    else:
        from minidecoder.evaluation.sts_long import load_long_sts
        sets = load_long_sts(data, settings["limit"], settings["lengths"])[1]
        judged = sts_long_differences(report["rows"], sets)
    kept = {name: value for name, value in settings.items() if name not in ("benchmark", "bootstrap")}
    report.update(claims_report(family, kept, report["rows_planned"], list(report["rows"]), judged))
    name = settings["model"]
    write(path, report, transfer_markdown(report, name) if family == "transfer" else sts_long_markdown(report, name, sets))
    print(f"wrote {path} and {path.with_suffix('.md')}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--family", choices=["transfer", "sts-long", "both"], default="both")
    parser.add_argument("--rows", default=None, help="comma-separated row keys (default: every row of the family)")
    parser.add_argument("--redo", action="store_true", help="recompute the rows named by --rows")
    parser.add_argument("--limit", type=int, default=None, help="first N rows per file / STS-B pairs (stamped; never a claim)")
    parser.add_argument("--tasks", default=None, help="transfer: comma-separated tasks (default: the seven)")
    parser.add_argument("--data", default=None, help="the family's data folder (with --family transfer or sts-long; "
                                                     "default: ../shared/data/senteval and ../shared/data/sts)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--ends-per-piece", type=int, default=ENDS_PER_PIECE,
                        help="a +tp-transfer row's candidate ends embedded together (default %(default)s: a piece "
                             "one CPU sitting finishes; a GPU does every end at once)")
    parser.add_argument("--reread-blank-lines", action="store_true",
                        help="a transfer table that skipped CR's and MPQA's blank lines: re-run those two tasks of "
                             "every row (or --rows) reading them as SentEval does, a row at a time; the table "
                             "takes the new cells once every row has them")
    parser.add_argument("--out", default=str(REPO / "results"), help="folder of the result files (default: results/)")
    parser.add_argument("--merge", action="append", default=[], metavar="FILE",
                        help="add the rows of another sitting's table file (same model and settings; a GPU "
                             "sitting's res.tgz, unpacked elsewhere) to OUT's, keeping OUT's own")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="only re-judge the claims and rewrite the Markdown of a table file from its rows "
                             "(no model, no row recomputed); --data names the STS folder for a sts-long file")
    args = parser.parse_args(argv)
    for named in [args.render] * bool(args.render) + args.merge:  # a typo merged nothing and said nothing
        if not Path(named).is_file():
            flag = "--render" if named == args.render else "--merge"
            parser.error(f"{flag} {named} {'is not a file' if Path(named).exists() else 'does not exist'}; name a "
                         "table file this tool wrote (<model>-transfer.json or <model>-sts-long.json)")
    if args.render:
        return render(Path(args.render), args.data)
    if args.ends_per_piece < 1:
        parser.error(f"--ends-per-piece {args.ends_per_piece} must be at least 1 (e.g. 2 on a CPU, 8 on a GPU)")
    if args.data and args.family == "both":
        parser.error("--data names one family's folder: add --family transfer or --family sts-long")
    if args.reread_blank_lines and args.family != "transfer":
        parser.error("--reread-blank-lines re-runs a transfer table's CR and MPQA: add --family transfer")
    if args.merge and args.family == "both":
        parser.error("--merge names one family's table file: add --family transfer or --family sts-long")
    known = [key for family, rows in (("transfer", TRANSFER_ROWS), ("sts-long", STS_LONG_ROWS))
             if args.family in (family, "both") for key, _ in rows]
    unknown = [key for key in (args.rows or "").split(",") if key and key not in known]
    if unknown:
        parser.error(f"--rows {','.join(unknown)}: not a row of {args.family} "
                     f"(its rows: {', '.join(dict.fromkeys(known))})")
    if args.redo and not args.rows:
        parser.error("--redo recomputes the rows --rows names: name them (every row at once is --out to a new folder)")

    chosen = chosen_methods(args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables = [out / f"{table_name(args.model)}-{family}.json" for family in ("transfer", "sts-long")
              if args.family in (family, "both")]
    for table in [*map(Path, args.merge), *tables]:  # a file cut short is named before the model loads, not after
        if table.is_file():
            read_table(table)
    model = minidecoder.load(args.model, dtype=args.dtype, device=args.device)
    # the rows to run: those named, else every row still to do; with --merge and no --rows, none (it merges)
    wanted = set(args.rows.split(",")) if args.rows else (set() if args.merge else None)
    redo = set(wanted) if args.redo and wanted else set()
    name = table_name(args.model)
    settings = {"model": name, "dtype": args.dtype, "device": args.device, "limit": args.limit,
                "tokenizer_sha256": model.tokenizer.checksum}
    # the weights' checksums (hashed once): a transfer task kept from an earlier sitting (committed, see
    # .gitignore) is reused only for the very same model files, wherever the checkout converted them
    weights = files_identity(model) if args.family != "sts-long" else None
    families = ["transfer", "sts-long"] if args.family == "both" else [args.family]
    for family in families:
        path = out / f"{name}-{family}.json"
        rows = TRANSFER_ROWS if family == "transfer" else STS_LONG_ROWS
        planned = [key for key, _ in rows]
        if family == "sts-long":
            from minidecoder.evaluation.sts_long import LENGTHS, evaluate_sts_long, load_long_sts
            loaded = load_long_sts(args.data, args.limit)
            # the limit where it cut the data (`data_files.limit_that_cut`): one that kept every pair is a full table
            family_settings = {**settings, "limit": loaded[0].limit, "lengths": list(LENGTHS)}
            differences = sts_long_differences
        else:
            tasks = args.tasks.split(",") if args.tasks else list(TRANSFER_TASKS)
            blank_lines = table_blank_lines(path)
            loaded = load_transfer_tasks(tasks, args.data, args.limit, blank_lines)
            family_settings = {**settings, "limit": run_limit(task.limit for task in loaded),
                               **({"tasks": tasks} if args.tasks else {}), "blank_lines": blank_lines}
            differences = None
            keys = {task.name: task_key(task, ClassifierConfig()) for task in loaded}  # evaluate_transfer's probe
        report = load_report(path, family, family_settings, planned, redo)
        merged = [key for other in args.merge
                  for key in add_rows(report, Path(other), family, family_settings, planned, redo,
                                      "another run's table cannot join this one: leave it out of --merge, or run "
                                      "this with the settings it names")]
        if merged:
            print(f"{family}: merged {', '.join(merged)} from {', '.join(args.merge)}", file=sys.stderr)

        def write_table(merge: bool = True) -> None:
            # under the table's lock: two sittings sharing one table (two CPU rows at once, or a merge while a
            # row runs) would otherwise each read it, add their row and write, the later dropping the earlier's
            with output_lock(path, wait=True):
                if merge:  # rows another run wrote meanwhile
                    add_rows(report, path, family, family_settings, planned, redo)
                judged = (transfer_differences(report["rows"]) if differences is None
                          else differences(report["rows"], loaded[1]))
                report.update(claims_report(family, {**without_device(family_settings),
                                                     "device": rows_devices(report)},
                                            planned, list(report["rows"]), judged))
                text = (transfer_markdown(report, name) if family == "transfer"
                        else sts_long_markdown(report, name, loaded[1]))
                write(path, report, text)

        if family == "transfer" and args.reread_blank_lines:  # only that: no row is run
            if family_settings["blank_lines"] == "read":
                print(f"transfer: {path} reads CR's and MPQA's blank lines already", file=sys.stderr)
                continue
            reread = load_transfer_tasks([task for task in BLANK_TASKS if task in tasks], args.data, args.limit, "read")
            if reread_blank_lines(model, report, reread, out / f"{name}-transfer-work", settings, weights, wanted,
                                  args.batch_size, row_command(args, family, "--reread-blank-lines"), write_table):
                family_settings["blank_lines"] = "read"
                write_table(merge=False)  # the file on disk still says "skip": this write is the swap
                print("transfer: every row reads CR's and MPQA's blank lines now", file=sys.stderr)
            remove_if_empty(out / f"{name}-transfer-work")
            print(f"wrote {path} and {path.with_suffix('.md')}", file=sys.stderr)
            continue
        ran = False
        for key, label in rows:
            if (wanted is not None and key not in wanted) or key in report["rows"]:
                continue
            if key not in redo and key in add_rows(report, path, family, family_settings, planned, redo):
                continue  # finished by another run since this one began
            work = out / f"{name}-{family}-work" / key
            work.mkdir(parents=True, exist_ok=True)
            choice = None
            if key.endswith(TRANSFER_TP):
                spec = transfer_tp_spec(key, chosen)
                print(f"{family}: {label}: choosing TP's end on SST2 dev ...", file=sys.stderr)
                sst2 = load_transfer_tasks(["SST2"], args.data, args.limit)[0]
                choice = choose_transfer_end(model, spec, sst2, work / "end-choice", args.batch_size,
                                             args.ends_per_piece)
                method = tp_with_end(spec, choice["end"])
            else:
                method = row_method(key, chosen)
            elsewhere = began_elsewhere(work, settings, weights, method, keys) if family == "transfer" else None
            if elsewhere and key not in redo:
                device, kept = elsewhere
                print(f"{family}: {label} skipped: a sitting on {device} began it ({', '.join(kept)} kept in "
                      f"{work}), and a row resumes on the device that began it; go on there (--device {device}), "
                      f"or start it over on {args.device} with --rows {key} --redo", file=sys.stderr)
                continue
            encode = encoder(model, method, work, args.batch_size)
            print(f"{family}: {label} ...", file=sys.stderr)
            if family == "transfer":
                identity = row_identity(settings, weights, method)
                # task by task: a sitting that stops keeps every task it finished (committed), and the next
                # sitting, on any machine, embeds only the tasks still to score
                results = evaluate_transfer(encode, loaded, chunk_size=1 << 62, kept=work, kept_identity=identity,
                                            progress=True, probe_workers=default_workers(), grain="task")
            else:
                results = evaluate_sts_long(encode, loaded=loaded, chunk_size=1 << 62, progress=False)
            command = row_command(args, family, "--rows", key, "--redo")
            report["rows"][key] = {"label": label, "method": method.describe(), **results,
                                   **({"tp_end_choice": choice} if choice else {}),
                                   "stamp": build_stamp({"method": method.describe(), "device": args.device}, results),
                                   "command": shlex.join(command)}
            write_table()
            ran = True
            shutil.rmtree(work, ignore_errors=True)  # the row is in the file: its kept work is no longer needed
        if merged or not ran:  # the merged rows are in, with their claims, even where no row ran here; with every
            write_table()  # row kept, the table is written again from them: the provenance and claims as today's code says
            for key in merged:  # a row finished elsewhere: what a sitting here kept of it is no longer needed
                shutil.rmtree(out / f"{name}-{family}-work" / key, ignore_errors=True)
        remove_if_empty(out / f"{name}-{family}-work")
        if family == "sts-long" and report["rows"]:
            try:
                from minidecoder.evaluation.sts_long import plot_sts_long
                plot_sts_long({report["rows"][k]["label"]: report["rows"][k]["lengths"] for k, _ in rows
                               if k in report["rows"]}, path.with_suffix(".png"), name, overwrite=True)
            except MinidecoderError as error:  # matplotlib missing: the tables stand alone
                print(f"reproduce_tasks: no figure ({error.problem})", file=sys.stderr)
        print(f"wrote {path} and {path.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_tool(main, "reproduce_tasks")
