"""The rows of retrieval (HTP Table 1), classification (HTP Table 12) and C-MTEB (ReBA Table 3);
resumable by row and, within a row, by the eval command's own kept chunks.

    python tools/reproduce_retrieval.py --family retrieval --out results/beir-smollm2        # every row (hours)
    python tools/reproduce_retrieval.py --family classification --rows htp,prompteol --out DIR
    python tools/reproduce_retrieval.py --family classification --redo echo,prompteol --out DIR   # recompute kept rows
    python tools/reproduce_retrieval.py --family cmteb --model qwen2.5-coder-0.5b-instruct --out DIR
    python tools/reproduce_retrieval.py --family retrieval --limit 5 --corpus-limit 20 --out /tmp/look  # stamped look

Each row is one `minidecoder eval <family>` run in its own process, writing DIR/<row>.json and .md (the
stamped report); a row whose report exists is kept, never recomputed, so the same command finishes a
table over several sittings; a row interrupted midway resumes from the chunks its command kept. The
process's peak resident memory is the row's Memory column, and the embedding job's own seconds its Time
column (with the ratio to Vanilla Mean's, HTP Table 1's form; a resumed row has no time, since a rate
over two sittings would be wrong). DIR/table.md is rewritten after every row: each cell with its 95%
bootstrap interval (over queries, test items or pairs, from the report), and each paper's comparison as
a paired interval of the difference (the same resamples for both rows) with a verdict (holds /
reversed / not distinguishable from zero at 95%).

Hyper-parameters are the papers' fixed ones (TP start 1, end 7; HTP's end and every TP and HTP exit layer by HTP
Table 9's rule for the model's family, `table_9`); nothing is chosen on a test split. `--limit` runs are
stamped as such by the reports and in the table's heading: they never belong in results/claims.md.

Row keys are claims.py's (BENCHMARK_CLAIMS). Retrieval and classification (HTP Tables 1 and 12) run each row as
HTP's code does (docs/spec.md section 13: its per-side templates, `--query-opt` for the queries, the task
instruction as unpooled context, `{eos}` for its read `</s>`); the rows minidecoder ran first stay beside them
as ablations, `<key>-ours`, whose comparisons print a number and no verdict (reproduce/provenance.py). A kept
report stands for a row only if it ran that row's method and options (`refuse_another_row`). C-MTEB: ReBA
Table 3 under last pooling (last, repeat-2-last, repeat-3-last, reba-2-last, reba-3-last; judged by cosine
Pearson as Table 3 prints it, the Spearman beside) and Table 2's mean-pooled ablation (mean, repeat-2, echo-3,
reba-2, reba-3; Spearman). "Repetition only (r)" is the text repeated r + 1 times by plain concatenation, no
fused attention: under last pooling its last token, under mean pooling Echo-k's mean over every copy after the
first (`over=after-first`; for two copies, the second). repeat-3, the mean over the last of three copies, is
the earlier reading, kept as an ablation (provenance.py flags it).

Besides DIR/table.md, RESULTS/<model>-<family>.json (and .md, the table) is the claims file
tools/claims_table.py reads (tools/family_claims.py): every claim of the family whose rows are done, judged by
claims.judge on paired intervals (per set or task and "avg", the mean over them; cmteb's "avg" over its STS
sets). A run with --limit, --corpus-limit or --tasks is stamped as limited there, so claims_table leaves it out.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # family_claims, when loaded from elsewhere
sys.path.insert(0, str(REPO))  # first: the reproduce/ package, not tools/reproduce.py

from family_claims import TP_WITH_MEAN, claims_report, paired_means, with_avg, write_claims  # noqa: E402
from reproduce import read_json  # noqa: E402
from reproduce.claims import WITHOUT, shown  # noqa: E402
from reproduce.provenance import HTP_CODE_BOS_ROWS, HTP_CODE_PIECES_ROWS, TABLE_9_RULE, provenance_lines  # noqa: E402
from minidecoder.evaluation.family import instruction_for  # noqa: E402
from minidecoder.methods.text import BOS_FIELD as BOS, PIECE_FIELD  # noqa: E402
from minidecoder.output_files import output_lock, write_whole  # noqa: E402

class Row(NamedTuple):
    key: str
    label: str
    method: str
    options: dict
    query_options: dict = {}  # retrieval: the queries' own (HTP's code's query templates), over `options`
    flags: tuple[str, ...] = ()  # more flags of the eval command


RULE = "table-9"  # an option HTP Table 9's rule sets for the model's family (provenance.TABLE_9_RULE)
TP_EOS = 'The sentence <PST> "{text}" means in one word: {eos}'  # HTP's code's tp-prompteol-last-pool
TP_RULE = {"start": 1, "end": 7, "layer": RULE}  # HTP's code's mistral-instruct-tp: 1 / 7; the layer by Table 9
AS_GIVEN = {"senteval_text": False}  # HTP's code fills its templates with the text as given
PIECES = {"pieces": True}  # ... and tokenizes each piece on its own (provenance.HTP_CODE_PIECES_ROWS)
HTP_RULE = {"start": 1, "end": RULE, "layer": RULE}
POOLED = ("--instruction-placement", "pooled")
# HTP Tables 1 and 12 as HTP's code runs them (reproduce/provenance.py names each setting's source), then the
# rows minidecoder first ran (its own templates and readouts, the instruction pooled), kept as ablations
ROWS = {
    "retrieval": [Row("mean", "Vanilla Mean", "mean", {}, {"template": "Text:{text}"}),
                  Row("last", "Vanilla Last", "last", {"template": "{text} {eos}", **PIECES}),
                  Row("echo", "Echo Mean", "echo", {"template": "{text}{text}", **PIECES},
                      {"template": "Query: {text} Query again: {text}"}),
                  Row("prompteol+tp", "TP w. PromptEOL", "tp", {"prompt": TP_EOS, **TP_RULE, **AS_GIVEN, **PIECES}),
                  Row("mean+tp", "TP w. Mean", "tp", {"prompt": '<PST> "{text}"', "pooling": "mean", **TP_RULE,
                                                      **AS_GIVEN, **PIECES}, {"prompt": '<PST> "{text} "'}),
                  Row("htp", "HTP", "htp", HTP_RULE, {"template": "Text: {text}"}),
                  Row("mean-ours", "Vanilla Mean (instruction pooled)", "mean", {}, flags=POOLED),
                  Row("last-ours", "Vanilla Last (instruction pooled)", "last", {}, flags=POOLED),
                  Row("echo-ours", "Echo Mean (Echo's template)", "echo", {}, flags=POOLED),
                  Row("prompteol+tp-ours", "TP w. PromptEOL (TP's template)", "tp", {"prompt": "prompteol"}),
                  Row("mean+tp-ours", "TP w. Mean (no instruction)", "tp", TP_WITH_MEAN,
                      flags=("--instruction", "none")),
                  Row("htp-ours", "HTP (instruction pooled)", "htp", {"start": 1, "end": 7}, flags=POOLED)],
    "classification": [Row("echo", "Echo Mean", "echo", {"template": "Query: {text} Query again: {text}", **PIECES}),
                       Row("prompteol", "PromptEOL", "prompt", {"template": 'The sentence "{text}" means in one word: {|}"',
                                                                **AS_GIVEN, **PIECES}),
                       Row("prompteol+tp", "TP w. PromptEOL", "tp", {"prompt": TP_EOS, **TP_RULE, **AS_GIVEN, **PIECES}),
                       Row("htp", "HTP", "htp", {**HTP_RULE, "template": "Text: {text}"}),
                       Row("echo-ours", "Echo Mean (Echo's template)", "echo", {}, flags=POOLED),
                       Row("prompteol-ours", "PromptEOL (its own template)", "prompteol", {}),
                       Row("prompteol+tp-ours", "TP w. PromptEOL (TP's template)", "tp", {"prompt": "prompteol"}),
                       Row("htp-ours", "HTP (instruction pooled)", "htp", {"start": 1, "end": 7}, flags=POOLED)],
    "cmteb": [  # ReBA Table 3, every row under last pooling (ReBA's headline) ...
              Row("last", "Classical (last)", "last", {}),
              Row("repeat-2-last", "Repetition only (1) (last)", "last", {"template": "{text}{text}"}),
              Row("repeat-3-last", "Repetition only (2) (last)", "last", {"template": "{text}{text}{text}"}),
              Row("reba-2-last", "ReBA (last)", "reba", {"repetitions": 2, "pooling": "last"}),
              Row("reba-3-last", "ReBA-3 (last)", "reba", {"repetitions": 3, "pooling": "last"}),
              # ... and Table 2's mean-pooled ablation: Echo-k's mean over every copy after the first
              Row("mean", "Classical (mean)", "mean", {}),
              Row("repeat-2", "Repetition only (1) (mean)", "mean", {"template": "{text}{text}"}),
              Row("echo-3", "Repetition only (2) (mean)", "mean", {"template": "{text}{text}{text}", "over": "after-first"}),
              Row("reba-2", "ReBA (mean)", "reba", {"repetitions": 2}), Row("reba-3", "ReBA-3 (mean)", "reba", {"repetitions": 3}),
              # the earlier reading of Repetition only (2), kept as an ablation: the last copy alone
              Row("repeat-3", "Repetition only (2) (mean over the last copy)", "mean", {"template": "{text}{text}{text}"})],
}
# ReBA Table 3 prints cosine Pearson: a comparison of two of its rows is judged on Pearson (Spearman beside, in
# the table); every other C-MTEB comparison (Table 2's ablation) on the main score, Spearman
PEARSON_ROWS = frozenset({"last", "repeat-2-last", "repeat-3-last", "reba-2-last", "reba-3-last"})
DEFAULT_MODEL = {"retrieval": "smollm2-135m-instruct", "classification": "smollm2-135m-instruct",
                 "cmteb": "qwen2.5-coder-0.5b-instruct"}

# runs one eval command in this process and records its peak memory beside the report
CHILD = """
import json, resource, sys
from minidecoder.cli import main
code = main(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
if code == 0:  # a finished row's Memory column; a stopped row has none
    json.dump({"peak_rss_mib": peak, "status": code}, open(sys.argv[1], "w"))
sys.exit(code)
"""


def table_9(model: str) -> dict[str, int]:
    """{"end": HTP's end, "layer": the exit layer} of HTP Table 9's rule for `model`'s family (its config.json
    model_type; provenance.TABLE_9_RULE)."""
    from minidecoder.sources.registry import is_known, model_dir

    config = (model_dir(model) if is_known(model) else Path(model)) / "config.json"
    settings, problem = read_json(config)
    if problem and config.exists():
        raise SystemExit(f"{config} {problem}; fetch or convert the model again (minidecoder fetch {model})")
    model_type = settings.get("model_type") if isinstance(settings, dict) else None
    if model_type not in TABLE_9_RULE:
        raise SystemExit(f"HTP Table 9 gives no exit layer for model_type {model_type!r} ({config}); the rule covers "
                         f"{', '.join(TABLE_9_RULE)}: fetch the model first, or run the rows with their layer set")
    end, layer = TABLE_9_RULE[model_type]
    return {"end": end, "layer": layer}


@functools.cache  # asked for every row's command and each table: the tokenizer is read once
def tokenizer_adds_bos(model: str) -> bool | None:
    """Whether `model`'s tokenizer puts a BOS first by its own policy (reproduce.provenance.provenance: HTP's code
    writes `<s>` into its baselines' templates); None where no model folder holds a tokenizer."""
    from minidecoder.core.tokenizer import Tokenizer
    from minidecoder.sources.registry import is_known, model_dir

    folder = model_dir(model) if is_known(model) else Path(model)
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer.model")):
        return None
    return Tokenizer(folder).add_bos


def bos_first(options: dict, default: str | None = None) -> dict:
    """The options with the row's template (or TP's prompt) opened by `{bos}`; `default`: the template to open
    where the options name none (a document side that takes the method's own, "{text}")."""
    key = next((name for name in ("template", "prompt") if name in options), None)
    if key is None:
        return options if default is None else {**options, "template": BOS + default}
    return {**options, key: BOS + options[key]}


PIECES_FLAG = "pieces=true"


def as_first_ran(flags: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """An eval command's method flags as they were before `bos_first` and `PIECES` (and a template's `{|}`): a row
    kept from a run without the BOS, or with its template tokenized as one string, is the same row (provenance flags it,
    `rows_without_bos`, `rows_as_one_string`) until `--redo` recomputes it."""
    plain = {(flag, value.replace("=" + BOS, "=", 1).replace(PIECE_FIELD, "")) for flag, value in flags}
    return plain - {("--opt", "template={text}"), ("--opt", PIECES_FLAG), ("--query-opt", PIECES_FLAG)}


def row_options(options: dict, model: str) -> dict:
    """The options with every `RULE` value set by HTP Table 9's rule for the model's family."""
    return {key: table_9(model)[key] if value == RULE else value for key, value in options.items()}


def option_flags(flag: str, options: dict) -> list[str]:
    return [part for key, value in options.items()
            for part in (flag, f"{key}={json.dumps(value) if not isinstance(value, str) else value}")]


TASKS_FLAG = {"retrieval": "--sets", "classification": "--tasks", "cmteb": "--tasks"}  # the eval command's


def command(family: str, row: Row, args: argparse.Namespace, prefix: Path) -> list[str]:
    argv = ["eval", family, "--model", args.model, "--method", row.method, "--output", str(prefix), "--no-progress",
            "--dtype", args.dtype, "--device", args.device, *row.flags]
    options, query_options = row_options(row.options, args.model), row_options(row.query_options, args.model)
    if (family, row.key) in HTP_CODE_BOS_ROWS and tokenizer_adds_bos(args.model) is False:  # HTP's code's <s>
        options, query_options = bos_first(options, "{text}"), bos_first(query_options)
    argv += option_flags("--opt", options)
    argv += option_flags("--query-opt", query_options)
    for flag, value in (("--limit", args.limit), ("--corpus-limit", args.corpus_limit), ("--data", args.data),
                        (TASKS_FLAG[family], args.tasks)):
        if value is not None and not (flag == "--corpus-limit" and family != "retrieval"):
            argv += [flag, str(value)]
    return argv


def child_environment() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, so the row imports this checkout's
    minidecoder; the caller's own PYTHONPATH entries follow it (replacing them hid packages installed with
    `pip install --target`, as on a lent GPU machine: the rows failed there on `import pytrec_eval`)."""
    given = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *given])}


def refuse_other_settings(key: str, stamp: dict, args: argparse.Namespace, argv: list[str]) -> None:
    """A kept row joins the table only if it scored the same model, dtype, data limits and tasks as this run
    asks for (its eval command `argv`: rows of other tasks would be compared, and a table of all tasks claimed,
    on sets some rows never scored); the device may differ (a row run on a GPU scores what the CPU does, to
    float rounding)."""
    asked = {"model": Path(args.model).name, "dtype": args.dtype, "limit": args.limit,
             "corpus_limit": args.corpus_limit if "corpus_limit" in stamp else None, "tasks": tasks_of(argv)}
    kept = {"model": Path(str(stamp.get("model"))).name, "dtype": stamp.get("dtype"),
            "limit": limit_asked(stamp, "limit"), "corpus_limit": limit_asked(stamp, "corpus_limit"),
            "tasks": tasks_of(shlex.split(stamp.get("command") or "")[1:])}
    differ = [f"{name} {kept[name]!r} (this run: {asked[name]!r})" for name in asked if kept[name] != asked[name]]
    if differ:
        raise SystemExit(f"{key}: the kept row {args.out / key}.json was made with {', '.join(differ)}; a table "
                         "mixes no settings: pass another --out, or move that row away to recompute it")


def tasks_of(argv: list[str]) -> str | None:
    """The sets (retrieval) or tasks an eval command scores, its family's default where it names none, in name
    order; None for a command that does not parse (a row kept by an older version: its other checks decide)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage lines belong to no command run here
            asked = eval_parser().parse_args(argv)
    except SystemExit:
        return None
    names = getattr(asked, "sets", None) or getattr(asked, "tasks", None)
    return ",".join(sorted(names.split(","))) if names else None


def limit_asked(stamp: dict, name: str) -> int | None:
    """The limit a kept row was made with: its stamp's, or, where the stamp says the data was whole (a limit that
    cut nothing is stamped None), the one its command gave."""
    given = shlex.split(stamp.get("command") or "")
    flag = "--" + name.replace("_", "-")
    if stamp.get(name) is not None or flag not in given:
        return stamp.get(name)
    return int(given[given.index(flag) + 1])


def method_flags(argv: list[str]) -> set[tuple[str, str]]:
    """The (flag, value) pairs of an eval command that choose the method and its options."""
    return {(flag, value) for flag, value in zip(argv, argv[1:]) if flag in ("--method", "--opt", "--query-opt")}


def flag_value(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


def reads_instruction(argv: list[str]) -> bool:
    """Whether an eval command gives its method the task's instruction: the command parsed by minidecoder's own
    parser, so each family's default holds (C-MTEB takes none: it has no --instruction), then the eval
    commands' own rule."""
    asked = eval_parser().parse_args(argv)
    return hasattr(asked, "instruction") and instruction_for(asked, "the task's instruction") is not None


@functools.cache
def eval_parser() -> argparse.ArgumentParser:
    """minidecoder's command-line parser, built once for every kept row it reads."""
    from minidecoder.cli import build_parser

    return build_parser()


def refuse_another_row(key: str, stamp: dict, argv: list[str]) -> None:
    """A kept report joins the table as row `key` only if it ran that row's method, options and instruction
    placement: a row redefined (the faithful rows took the keys of the earlier ones, now `<key>-ours`) is never
    stood in for by what it replaced."""
    ran, asked = method_flags(shlex.split(stamp.get("command") or "")), method_flags(argv)
    if "instruction" in stamp and reads_instruction(argv):  # a stamp older than the placement pooled it
        ran.add(("--instruction-placement", stamp.get("instruction_placement", "pooled")))
        asked.add(("--instruction-placement", flag_value(argv, "--instruction-placement", "context")))
    if ran != asked and as_first_ran(ran) != as_first_ran(asked):
        raise SystemExit(f"{key}: the kept report {key}.json ran {sorted(ran - asked)}, where the row is "
                         f"{sorted(asked - ran)}; move that report away (or to the row it ran) to compute this one")


def run_row(family: str, row: Row, args: argparse.Namespace) -> bool:
    """Compute one row unless its report is kept; True when it computed one."""
    key = row.key
    prefix = args.out / key
    argv = command(family, row, args, prefix)
    kept = kept_row(key, args.out, digests_in(claims_path(family, args)))
    if kept is not None and key not in args.redo:
        refuse_other_settings(key, kept["stamp"], args, argv)
        refuse_another_row(key, kept["stamp"], argv)
        where = f"{prefix}.json" if prefix.with_suffix(".json").exists() else "its digest in the claims file"
        print(f"{key}: kept ({where})")
        return False
    if key in args.redo:  # asked for by name: the row's earlier report in --out is replaced
        argv.append("--overwrite")
    memory = args.out / f"{key}.memory.json"
    print(f"{key}: minidecoder {' '.join(argv)}", flush=True)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(memory), *argv], cwd=REPO, env=child_environment())
    try:
        status = child.wait()
    finally:  # stopped (SIGTERM, see main; Ctrl-C): the row's process stops too, keeping its chunks, never orphaned
        if child.poll() is None:
            child.terminate()
            child.wait()
    if status == 2:  # minidecoder's status for an input it refuses (its message above): a rerun is refused again
        raise SystemExit(f"{key}: the eval command refused its input (status 2, its message above); fix what it "
                         "names (a flag, the data, the model), then run the same command again")
    if status != 0:
        raise SystemExit(f"{key} stopped (status {status}); run the same command again to resume it")
    return True


def load_rows(family: str, out: Path, claims: Path | None = None) -> dict[str, dict]:
    """Every row kept so far: its report in `out`, else (retrieval, classification) the digest of it the claims
    file keeps (`digest`), which is committed where the reports are not, so a later sitting on another
    machine adds rows to the table without recomputing the ones before."""
    digests = digests_in(claims)  # the claims file read once for every row
    rows = {key: kept_row(key, out, digests) for key, *_ in ROWS[family]}
    return {key: row for key, row in rows.items() if row is not None}


def digests_in(claims: Path | None) -> dict[str, dict]:
    """{row key: its digest} kept in a claims file; {} where there is none."""
    return read_object(claims, "the claims file").get("rows", {}) if claims is not None and claims.exists() else {}


def kept_row(key: str, out: Path, digests: dict[str, dict]) -> dict | None:
    """Row `key`'s report in `out` (with its memory), else its digest (`digests_in`), else None."""
    path = out / f"{key}.json"
    if path.exists():
        memory = out / f"{key}.memory.json"
        return {**read_object(path, f"row {key}'s report"),
                "memory": read_object(memory, f"row {key}'s memory") if memory.exists() else {}}
    return digests.get(key)


def read_object(path: Path, what: str) -> dict:
    """The JSON object at `path`, or a SystemExit naming the file when it is not one (cut short by a full disk or
    a copy interrupted, hand-edited)."""
    data, problem = read_json(path)
    if not problem and not isinstance(data, dict):
        problem = "is not a JSON object"
    if problem:
        raise SystemExit(f"{path} ({what}) {problem}; restore it (git checkout -- {path}), or move it away to "
                         "compute the row again")
    return data


DIGEST_STAMP = ("model", "dtype", "device", "limit", "corpus_limit", "command", "date", "code")


def digest(family: str, report: dict) -> dict | None:
    """What the table reads of a retrieval or classification row (its stamp's settings, each set's headline
    score and interval, the per-item values paired intervals are drawn from, its time and memory): a
    few kilobytes where the report holds every pytrec_eval measure. None for C-MTEB, whose rows' per-pair
    cosines are the report."""
    if family == "retrieval":
        results = {"sets": {name: {"metrics": {"nDCG@10": got["metrics"]["nDCG@10"]},
                                   "per_query": {q: {"ndcg_cut_10": m["ndcg_cut_10"]} for q, m in got["per_query"].items()}}
                            for name, got in report["results"]["sets"].items()}}
    elif family == "classification":  # per item: the share of experiments that got it right, a whole percent
        results = {"tasks": {name: {"accuracy": got["accuracy"],
                                    "per_item": [int(v) if float(v).is_integer() else v for v in got["per_item"]]}
                             for name, got in report["results"]["tasks"].items()}}
    else:
        return None
    seconds = report["results"].get("embedding", {}).get("seconds")
    return {"stamp": {name: report["stamp"][name] for name in DIGEST_STAMP if name in report["stamp"]},
            "results": {**results, "embedding": {"seconds": seconds}}, "memory": report.get("memory", {})}


def row_device(report: dict) -> str:
    """The device a row's report was computed on, from its stamp ("cpu", "cuda", ...)."""
    return str(report["stamp"].get("device", "cpu"))


def same_sitting(report: dict, other: dict) -> bool:
    """Whether two rows' times may be compared: the same device on the same day. "cuda" on another day was
    another machine (an H100 one day, an H200 the next, or one shared with other jobs), so a ratio across
    sittings would measure the machine, not the method."""
    def day(r: dict) -> str:
        return str(r["stamp"].get("date", ""))[:10]

    return row_device(report) == row_device(other) and bool(day(report)) and day(report) == day(other)


def time_ratio(report: dict, bases: list[dict]) -> str:
    """A row's "Time / Vanilla Mean" cell: its embedding time over that of the first Vanilla Mean row in `bases`
    (the faithful one, then the ablation's) timed in the same sitting; "n/a" where none was."""
    seconds = report["results"]["embedding"].get("seconds")
    base = next((base for base in bases if same_sitting(base, report)), None)
    return f"{seconds / base['results']['embedding']['seconds']:.2f}x" if seconds and base else "n/a"


def cells(family: str, report: dict) -> dict[str, tuple[float, tuple[float, float], np.ndarray | None]]:
    """{column: (score, 95% interval, per-item values for paired intervals or None)}."""
    results = report["results"]
    if family == "retrieval":
        return {name: (r["metrics"]["nDCG@10"]["score"], tuple(r["metrics"]["nDCG@10"]["ci95"]),
                       100.0 * np.array([q["ndcg_cut_10"] for _, q in sorted(r["per_query"].items())]))
                for name, r in results["sets"].items()}
    if family == "classification":
        return {name: (r["accuracy"]["score"], tuple(r["accuracy"]["ci95"]), np.asarray(r["per_item"]))
                for name, r in results["tasks"].items()}
    return {name: (r["score"], tuple(r.get("ci95") or (np.nan, np.nan)), None) for name, r in results["sets"].items()}


def claims_path(family: str, args: argparse.Namespace) -> Path:
    """RESULTS/<model>-<family>.json: the table's claims file, which also keeps its rows' digests."""
    return args.results / f"{Path(args.model).name}-{family}.json"


def write_table(family: str, args: argparse.Namespace) -> Path:
    """ROWS/table.md and the claims file, from every row kept so far. Under the claims file's lock: two
    sittings (two rows at once, or a row beside a re-run) would otherwise each read the rows, and the later
    write would drop the row the earlier one added."""
    claims = claims_path(family, args)
    with output_lock(claims, wait=True):
        return _write_table(family, args, claims)


def _write_table(family: str, args: argparse.Namespace, claims: Path) -> Path:
    rows = load_rows(family, args.out, claims)
    labels = {key: label for key, label, *_ in ROWS[family]}
    columns = list(next(iter(cells(family, r) for r in rows.values()), {}))
    metric = {"retrieval": "nDCG@10 x100", "classification": "accuracy x100",
              "cmteb": "Spearman x100 (Ocnli: best accuracy)"}[family]
    limited = any(r["stamp"].get("limit") is not None for r in rows.values())
    lines = [f"# {family}: {args.model}" + (" (LIMITED RUN: not for claims.md)" if limited else ""), "",
             f"{metric} [95% bootstrap interval]; Memory: the row's process peak RSS; Time: its embedding job; "
             "Device: where the row ran (scores agree across devices to float rounding, times do not, so a time "
             "is compared only within one sitting, the same device on the same day: each row's Time / Vanilla Mean "
             "is against the Vanilla Mean row, faithful or ablation, of its own sitting).", "",
             "| row | " + " | ".join(columns) + f" | Device | Memory (MiB) | Time (s) | Time / {labels.get('mean', 'Vanilla Mean')} |",
             "|---|" + "---:|" * len(columns) + "---|" + "---:|" * 3]
    timed_bases = [rows[key] for key in ("mean", "mean-ours")
                   if key in rows and rows[key]["results"]["embedding"].get("seconds")]
    for key, label, *_ in ROWS[family]:
        if key not in rows:
            lines.append(f"| {label} | (not run yet) |" + " |" * (len(columns) + 3))
            continue
        got = cells(family, rows[key])
        seconds = rows[key]["results"]["embedding"].get("seconds")
        ratio = time_ratio(rows[key], timed_bases)
        memory = rows[key]["memory"].get("peak_rss_mib")
        scores = " | ".join(f"{s:.2f} [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else f"{s:.2f} [no interval]"
                            for s, (lo, hi), _ in got.values())
        memory_cell = f"{memory:.0f}" if memory else "n/a"
        time_cell = f"{seconds:.1f} | {ratio}" if seconds else "n/a (resumed) | n/a"
        lines.append(f"| {label} | {scores} | {row_device(rows[key])} | {memory_cell} | {time_cell} |")
    if any(not np.isfinite(got[1][0]) for report in rows.values() for got in cells(family, report).values()):
        lines += ["", "[no interval]: the row was made before `eval cmteb` kept Ocnli's cosines, from which its "
                  "interval is drawn (every row made since carries one)."]
    refilled: dict[str, list[str]] = {}  # device of the re-run -> rows (refill_ocnli.py, removed after 5eddfa0)
    for key, report in rows.items():
        source = report["results"].get("sets", {}).get("Ocnli", {}).get("interval_from")
        if source:
            refilled.setdefault(source["device"], []).append(labels[key])
    for device, names in refilled.items():
        lines += ["", f"Ocnli's interval of {', '.join(names)} was drawn from a later re-run of Ocnli alone on {device} "
                  "that reproduced the row's best accuracy (refill_ocnli.py, a one-off tool in the history up to commit 5eddfa0; the row's report gives its command "
                  "and date)."]
    if family == "cmteb":
        lines += pearson_table(rows, labels)
    lines += ["", "Paired intervals of each paper's comparison (method - base):", ""]
    report = family_claims(family, rows, args)
    for record in report["claims"]:  # the claims file's own numbers: table.md and claims.md never differ
        pearson = family == "cmteb" and {record["method"], record["base"]} <= PEARSON_ROWS
        for column, got in record["scores"].items():  # each set, then Avg. (Avg. without each set: in "fragile")
            if (record["score"] == "avg" and WITHOUT not in column) or column == record["score"]:
                lines.append(f"- {labels[record['method']]} vs {labels[record['base']]}, {column}"
                             f"{' (Pearson)' if pearson else ''}: {got['diff']:+.2f} "
                             f"[{got['lo']:+.2f}, {got['hi']:+.2f}]: "
                             + (shown(record) if column == record["score"] else got["verdict"]))
    lines += ablation_lines(family, rows, labels, args)
    lines += provenance_lines(family, [(key, label) for key, label in labels.items() if key in rows],
                              without_bos=report["settings"]["rows_without_bos"],
                              one_string=report["settings"]["rows_as_one_string"])
    path, text = args.out / "table.md", "\n".join(lines) + "\n"
    write_whole(path, text.encode(), overwrite=True)
    digests = {key: digest(family, row) for key, row in rows.items()}
    write_claims(claims, {**report, **({"rows": digests} if None not in digests.values() else {})}, text)
    return path


def ablation_lines(family: str, rows: dict[str, dict], labels: dict[str, str], args: argparse.Namespace) -> list[str]:
    """Each paper's comparison between the ablation rows (`<key>-ours`, minidecoder's first configuration), on
    the average: a number beside the faithful one, never a verdict."""
    from reproduce.claims import BENCHMARK_CLAIMS

    compare, lines = differences(family, rows, args.data), []
    for claim in BENCHMARK_CLAIMS:
        method, base = f"{claim.method}-ours", f"{claim.base}-ours"
        if claim.benchmark != family or method not in rows or base not in rows:
            continue
        point, intervals = compare(method, base)
        if claim.score in intervals:
            lo, hi = intervals[claim.score]
            lines.append(f"- {labels[method]} vs {labels[base]}, {claim.score}: {point[claim.score]:+.2f} "
                         f"[{lo:+.2f}, {hi:+.2f}]")
    return ["", "The same comparisons between the ablation rows (not the paper's setup: a number, no verdict):", "",
            *lines] if lines else []


def pearson_table(rows: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """The cosine Pearson x100 of every C-MTEB row on each STS set and their mean: ReBA Table 3's metric, by
    which its rows' comparisons are judged (the table above prints the Spearman beside it)."""
    sets = [name for name, entry in next(iter(rows.values()))["results"]["sets"].items() if entry["kind"] == "sts"]
    if not sets:
        return []
    lines = ["", "Cosine Pearson x100 of each STS set (ReBA Table 3's metric; Table 3's rows are judged on it):", "",
             "| row | " + " | ".join(sets) + " | Avg. |", "|---|" + "---:|" * (len(sets) + 1)]
    for key, label in labels.items():
        if key in rows:
            values = [rows[key]["results"]["sets"][name]["pearson"] for name in sets]
            lines.append(f"| {label} | " + " | ".join(f"{value:.2f}" for value in values) + f" | {np.mean(values):.2f} |")
    return lines


def differences(family: str, rows: dict[str, dict], data: str | None = None):
    """(method, base) -> (point, intervals) of the paired difference per set / task and for "avg"; `data` is
    the C-MTEB folder to read the pairs' labels from (None: where the eval command looks)."""
    scores = {}  # (C-MTEB set, statistic) -> {row: its score x100 on each resample}, every row in one pass

    def resampled(name: str, statistic: str) -> dict[str, np.ndarray]:
        if (name, statistic) not in scores:  # the set's resamples and gold ranks are drawn once, not once per claim
            having = {key: report for key, report in rows.items() if name in report["results"]["sets"]}
            boot = _pair_bootstrap(name, list(having.values()), data)
            cosines = {key: np.asarray(report["results"]["sets"][name]["cosines"]) for key, report in having.items()}
            if statistic == "pearson":
                scores[name, statistic] = pearson_replicates(boot, cosines)
            else:
                got = boot.replicates({key: {name: values} for key, values in cosines.items()})
                scores[name, statistic] = {key: replicates[0] for key, replicates in got.items()}
        return scores[name, statistic]

    def compare(method: str, base: str):
        a, b = rows[method], rows[base]
        if family != "cmteb":
            return paired_means({name: got[2] for name, got in cells(family, a).items()},
                                {name: got[2] for name, got in cells(family, b).items()})
        statistic = "pearson" if {method, base} <= PEARSON_ROWS else "score"  # Table 3's Pearson, else Spearman
        point, reps = {}, {}
        for name, ra in a["results"]["sets"].items():
            if ra["kind"] != "sts":
                continue  # Ocnli: no correlation to resample; the STS sets make "avg" (as avg_sts)
            point[name] = ra[statistic] - b["results"]["sets"][name][statistic]
            reps[name] = resampled(name, statistic)[method] - resampled(name, statistic)[base]  # paired: same resamples
        return with_avg(point, reps) if point else None
    return compare


def pearson_replicates(boot, cosines: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{row: (B,) cosine Pearson x100 of one set on each of `boot`'s resamples}: the resamples the Spearman's
    interval draws, so a Pearson difference is paired as a Spearman one is."""
    from minidecoder.evaluation.bootstrap import pearson_rows

    index, gold = boot.indices(0), boot.layout[0].gold  # one set: task 0, (B, P) pair indices
    return {key: 100.0 * pearson_rows(values.astype(np.float64)[index], gold[index]) for key, values in cosines.items()}


def _pair_bootstrap(name: str, reports: list[dict], data: str | None):
    """The resampling of set `name`, with the labels the rows were scored against. They are read from this
    machine's C-MTEB folder (`data`, else where the eval command looks), not from the stamp's data_dir, which
    names the machine a row ran on (a lent GPU's /tmp/data); the file's sha256 must equal every row's stamp."""
    from minidecoder.evaluation.cmteb import pair_bootstrap
    from minidecoder.evaluation.cmteb import load_pair_set
    from minidecoder.sources.fetch import sha256_file

    pairs = load_pair_set(name, data, reports[0]["stamp"]["limit"])
    here = sha256_file(pairs.data_dir / pairs.file)
    for report in reports:
        scored = report["stamp"]["data_sha256"].get(pairs.file)
        if here != scored:
            raise SystemExit(f"{pairs.data_dir / pairs.file} is not the file the rows were scored on (sha256 "
                             f"{scored}): pass --data with the C-MTEB folder the rows used")
    return pair_bootstrap(pairs)


def family_claims(family: str, rows: dict[str, dict], args: argparse.Namespace) -> dict:
    """What RESULTS/<model>-<family>.json holds: the claims file tools/claims_table.py reads."""
    stamps = [report["stamp"] for report in rows.values()]  # a limit that cut nothing is stamped None: full data
    stamped = {name: next((stamp[name] for stamp in stamps if stamp.get(name) is not None), None)
               for name in ("limit", "corpus_limit")}
    chosen = {**(stamped if stamps else {"limit": args.limit, "corpus_limit": args.corpus_limit}), "tasks": args.tasks}
    limited = {flag: value for flag, value in chosen.items() if value is not None}
    devices = sorted({row_device(report) for report in rows.values()}) or [args.device]
    adds_bos = tokenizer_adds_bos(args.model)
    settings = {"model": Path(args.model).name, "dtype": args.dtype, "device": " and ".join(devices),
                "limit": limited or None,  # None: the full data, the only runs claims_table counts
                "tokenizer_adds_bos": adds_bos,  # the rows HTP's code opens with <s> that ran without a BOS first:
                "rows_without_bos": sorted(key for key, report in rows.items() if (family, key) in HTP_CODE_BOS_ROWS
                                           and adds_bos is False and BOS not in report["stamp"].get("command", "")),
                # ... and the rows HTP's code tokenizes by pieces that ran their template as one string
                "rows_as_one_string": sorted(key for key, report in rows.items() if (family, key) in HTP_CODE_PIECES_ROWS
                                             and PIECES_FLAG not in report["stamp"].get("command", ""))}
    return claims_report(family, settings, [key for key, *_ in ROWS[family]], list(rows), differences(family, rows, args.data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", required=True, choices=list(ROWS))
    parser.add_argument("--model", default=None, help="default: SmolLM2 (retrieval, classification), Qwen2.5-Coder (cmteb)")
    parser.add_argument("--out", required=True, type=Path, help="folder for the rows' reports and table.md")
    parser.add_argument("--results", type=Path, default=REPO / "results",
                        help="folder of the claims file <model>-<family>.json (default: results/)")
    parser.add_argument("--rows", default=None, help="comma-separated row keys (default: every row)")
    parser.add_argument("--redo", default="", help="comma-separated row keys to recompute though kept, replacing "
                        "their reports in --out (a row kept from an earlier definition, e.g. run without the BOS "
                        "HTP's code writes first)")
    parser.add_argument("--tasks", default=None, help="the eval command's --tasks (--sets for retrieval); default: all")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--corpus-limit", type=int, default=None)
    parser.add_argument("--data", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    args.model = args.model or DEFAULT_MODEL[args.family]
    known = {row[0]: Row(*row) for row in ROWS[args.family]}
    wanted = args.rows.split(",") if args.rows else list(known)
    args.redo = [key for key in args.redo.split(",") if key]
    for flag, keys in (("--rows", wanted), ("--redo", args.redo)):
        unknown = [key for key in keys if key not in known]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    for flag, folder in (("--out", args.out), ("--results", args.results)):
        if folder.exists() and not folder.is_dir():
            parser.error(f"{flag} {folder} is a file, not a folder; name a folder (it is made if missing)")
    args.out.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    previous = None
    if threading.current_thread() is threading.main_thread():  # SIGTERM runs run_row's finally, as Ctrl-C does
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        computed_any = False
        for key in wanted:  # the table after each new row (a stop keeps it current), once if all were kept
            if run_row(args.family, known[key], args):
                computed_any = True
                print(f"table: {write_table(args.family, args)}", flush=True)
        if not computed_any:  # all kept: one table (a table after a new row already read every kept row)
            print(f"table: {write_table(args.family, args)}", flush=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
