"""Reproduce the papers' Table 1 rows on a small real model, with bootstrap intervals; resumable by row.

    python tools/reproduce.py --model smollm2-135m-instruct                 # the full table (hours on a CPU)
    python tools/reproduce.py --model smollm2-135m-instruct --rows prompteol,prompteol+tp   # some rows now
    python tools/reproduce.py --model smollm2-135m-instruct --limit 3 --dev-limit 40   # a quick, stamped look

For each row (mean pooling, PromptEOL, Pretended CoT, Knowledge, MetaEOL, Echo; the four prompts with
TP and with CP; HTP; ReBA-2) the hyper-parameters are chosen on STS-B **dev** by the shared sweep
(`minidecoder.evaluation.sweep`), then the chosen configuration is scored once on the seven test sets
(STS12-16 "all", STS-B test, SICK-R test; Avg. = their mean) and timed; "Time" is the row's test
encoding time over PromptEOL's (the papers' Time column). Rows of one table may be timed in different
sittings on different machines, so each sitting first times a yardstick (PromptEOL on every
YARDSTICK_STRIDE-th test sentence) and every test time is divided by its own sitting's yardstick
before the ratio is taken.

Resumable: results/<model>.json is rewritten atomically after every row and says which rows are done;
a finished row is never recomputed (`--redo` with `--rows` recomputes the rows named), so a table can
be built over several sittings with the same command, or a few rows at a time with `--rows`. A file
made with other settings (model checksum, dtype, limits, grids, data checksums, ...) is refused, never
mixed. Each row records the command that recomputes it alone.

Within a row, too: a row's sweep and each of its test pieces (at most 1,000 pairs of one task:
`reproduce.pieces`) are kept as they finish, the sweep in the JSON's "in_progress" and the
pieces' pair cosines in results/<model>-pairs/<row>.partial.txt, so a row longer than a sitting (MetaEOL
on a slow CPU) is finished by the next sitting, on any machine, with the same command. Each sitting's
share of a row's test time is divided by that sitting's own yardstick.

Statistics: every cell has a 95% percentile bootstrap interval over pairs (pairs resampled within each
subset, 1,000 resamples, seed 0: `minidecoder.evaluation.bootstrap`), and every comparison the papers
make (TP or CP vs its prompt, HTP, ReBA and Echo vs mean pooling, MetaEOL vs PromptEOL) a paired
interval of the difference, in Avg. and per dataset, with a verdict generated from the interval
(`reproduce.claims`). The paired intervals need both rows' per-pair similarities, which
are kept beside the JSON in results/<model>-pairs/<row>.txt as integer order codes (the cosines'
ranks within each task, one line per task: lossless for every Spearman, about 87 KB per row on the full sets). Sentence
embeddings are never written.

Grids (dev only): output layer 1..L for the layer-reading methods; TP start 1, end in --tp-ends,
layer in L//2..L; CP (NS) steer layer in --cp-steers, alpha in --cp-alphas, layer in L//2..L; HTP and
ReBA-2 layer in {L-1, L} (run point by point: no sharing rule). MetaEOL+TP and MetaEOL+CP reuse the
end/steer/alpha chosen for PromptEOL+TP / +CP (the eight MetaEOL prompts end like PromptEOL's; a
sweep of eight prompts costs eight times as much) and choose only their output layer on dev.
`--limit N` keeps the first N pairs of every test subset and `--dev-limit N` the first N dev pairs;
the results file says so in its first lines.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import minidecoder  # noqa: E402
from minidecoder.evaluation.bootstrap import LEVEL, RESAMPLES, SEED, Bootstrap  # noqa: E402
from reproduce.claims import (CLAIMS, PAPER_AVG, PAPER_TIME, SOURCE, judge, leave_one_out,  # noqa: E402
                              sentence)
from minidecoder.evaluation.sts import StsScorer, unique_sentences  # noqa: E402
from reproduce.pieces import PiecePlan, PieceEncoder, cosines_text, layout_of, order_codes, parse_cosines  # noqa: E402
from reproduce import read_json, run_tool  # noqa: E402
from minidecoder.evaluation.report import _json_safe, build_stamp, code_version  # noqa: E402
from minidecoder.errors import OutputError  # noqa: E402
from minidecoder.output_files import check_writable_folder, output_lock, write_whole  # noqa: E402
from minidecoder.evaluation.sts import ALL_SEVEN, load_tasks  # noqa: E402
from minidecoder.evaluation.sweep import method_at, sweep_sts  # noqa: E402
from minidecoder.methods import build_method  # noqa: E402
from minidecoder.sources.checksums import file_sha256 as sha256_file  # noqa: E402

FORMAT = "minidecoder-reproduce/2"
SHORT = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
         "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
PROMPTS = [("prompteol", "PromptEOL"), ("pretended_cot", "Pretended CoT"), ("knowledge", "Knowledge"),
           ("metaeol", "MetaEOL")]
# What a row keeps that depends on the sitting (when, on which code, how fast) rather than on the
# settings: rows' "run" and the file's "sittings". Everything else is a function of the settings.
SITTING_KEYS = ("run",)
YARDSTICK_STRIDE = 25  # 1,044 of the 26,083 full-set sentences: 4% of PromptEOL's test time


def rows_spec(L: int, tp_ends: list[int], cp_steers: list[int], cp_alphas: list[float]) -> list[dict]:
    """Each row: key, label, method, fixed options, sweep axes, and `reuse` (a row whose choice of
    the non-layer axes it takes)."""
    every = list(range(1, L + 1))
    upper = list(range(L // 2, L + 1))
    rows = [dict(key="mean", label="Mean pooling", method="mean", options={}, axes={"layer": every})]
    for prompt, label in PROMPTS:
        rows.append(dict(key=prompt, label=label, method=prompt, options={}, axes={"layer": every}))
        tp = dict(key=f"{prompt}+tp", label=f"{label} + TP", method="tp", options={"prompt": prompt, "start": 1},
                  axes={"layer": upper, "end": [e for e in tp_ends if e <= L]})
        cp = dict(key=f"{prompt}+cp", label=f"{label} + CP (NS)", method="cp",
                  options={"prompt": prompt, "mode": "ns"},
                  axes={"layer": upper, "steer_layer": [s for s in cp_steers if s < L], "alpha": cp_alphas})
        if prompt == "metaeol":
            tp["reuse"], cp["reuse"] = "prompteol+tp", "prompteol+cp"
        rows += [tp, cp]
    rows.append(dict(key="echo", label="Echo", method="echo", options={}, axes={"layer": every}))
    rows.append(dict(key="htp", label="HTP", method="htp", options={}, axes={"layer": [L - 1, L]}))
    rows.append(dict(key="reba-2", label="ReBA-2", method="reba", options={"repetitions": 2}, axes={"layer": [L - 1, L]}))
    return rows


# ---- one row --------------------------------------------------------------------------------------

def machine(model) -> dict:
    """What the timings ran on: the processor (or GPU), the kernel set that runs the model on it
    (torch's CPU capability, or the GPU's compute capability and CUDA version), and the CPU threads."""
    if model.device.type == "cuda":
        name = torch.cuda.get_device_name(model.device)
        major, minor = torch.cuda.get_device_capability(model.device)
        kernels = f"sm_{major}{minor}, CUDA {torch.version.cuda}"
    else:
        cpuinfo = Path("/proc/cpuinfo")
        lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        name = names[0] if names else platform.processor() or platform.machine()
        kernels = torch.backends.cpu.get_cpu_capability()
    return {"name": name, "device": model.device.type, "kernels": kernels, "threads": torch.get_num_threads()}


def machine_text(stamp: dict) -> str:
    return f"{stamp['name']} ({stamp['device']}, {stamp['kernels']}, {stamp['threads']} threads)"


def time_yardstick(model, test_sentences: list[str], batch_size: int) -> dict:
    """PromptEOL's encoding time on every YARDSTICK_STRIDE-th test sentence, taken once per sitting after
    the warm-up: a row's test time over its sitting's yardstick compares across sittings and machines
    (the two CPUs SmolLM2's table met differ by 4.8x on PromptEOL's test set; the ratio of two methods'
    times does not)."""
    sample = test_sentences[::YARDSTICK_STRIDE]
    start = time.perf_counter()
    minidecoder.embed(model, sample, "prompteol", batch_size=batch_size)
    return {"sentences": len(sample), "seconds": time.perf_counter() - start, "machine": machine(model)}


def run_row(model, row: dict, donor: dict | None, dev, plan: PiecePlan, scorer, args, code: str,
            yardstick: dict, progress: dict, cosines: list[np.ndarray], save) -> tuple[dict, np.ndarray]:
    """Sweep on dev, score the chosen point on test, piece by piece. Returns the row's record (without
    intervals) and its per-pair order codes, tasks concatenated in `plan.tasks` order.

    donor: the finished row whose non-layer choices a `reuse` row takes. code: the version this process
    loaded (`git describe` at its start), not the tree's version when the row ends, which later commits
    may have moved. yardstick: this sitting's `time_yardstick`. progress and cosines: what earlier
    sittings finished of this row ({} and [] for a fresh row): "sweep" once the sweep is done, "test"
    (one timing entry per sitting) and the cosines of the first finished test pieces. `save(progress,
    cosines)` is called after the sweep and after every piece, so a kill loses only the step under way."""
    method = build_method(row["method"], **row["options"])
    axes = dict(row["axes"])
    fixed = {}
    if row.get("reuse"):  # take the donor's non-layer choices, sweep the layer only
        fixed = {k: v for k, v in donor["chosen"].items() if k != "layer"}
        method = method_at(method, fixed)
        axes = {"layer": axes["layer"]}
    if "sweep" not in progress:
        print(f"\n== {row['label']}: sweep {axes and {k: (v if len(v) < 6 else f'{v[0]}..{v[-1]} ({len(v)})') for k, v in axes.items()}}",
              file=sys.stderr)
        sweep = sweep_sts(model, method, axes, batch_size=args.batch_size,  # dev: read with --dev-limit
                          progress=not args.no_progress, dev=dev)
        progress["sweep"] = {
            "options": sweep.best["options"], "dev": sweep.best["score"], "axes": sweep.axes, "rule": sweep.rule,
            "cost": {k: v for k, v in sweep.cost.items() if k != "seconds"}, "seconds": sweep.cost["seconds"],
            "points": [{"options": p["options"], "score": p["score"]} for p in sweep.points if p["score"] is not None]}
        save(progress, cosines)
    swept = progress["sweep"]
    best = method_at(method, swept["options"])
    encode = lambda texts: minidecoder.embed(model, texts, best, batch_size=args.batch_size)  # noqa: E731
    encoder = PieceEncoder(plan, encode, chunk_size=args.batch_size * 8, progress=not args.no_progress)
    if len(cosines) < len(plan.pieces):
        print(f"== {row['label']}: test pieces {len(cosines) + 1}..{len(plan.pieces)} of {len(plan.pieces)}", file=sys.stderr)
        timing = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "code": code,
                  "yardstick": yardstick, "pieces": 0, "seconds": 0.0, "sentences": 0, "catch_up": 0}
        progress.setdefault("test", []).append(timing)
    for index in range(len(cosines), len(plan.pieces)):
        piece_cosines, spent = encoder.run(index)
        cosines.append(piece_cosines)
        timing["pieces"] += 1
        for name in ("seconds", "sentences", "catch_up"):
            timing[name] += spent[name]
        save(progress, cosines)
    per_task = plan.by_task(cosines)
    results = scorer.score(per_task)
    codes = np.concatenate([order_codes(c) for c in per_task])
    record = {
        "key": row["key"], "label": row["label"], "method": best.describe(),
        "chosen": {**fixed, **swept["options"]},
        "reused_from": row.get("reuse"),
        "dev": swept["dev"],
        "scores": {name: results["tasks"][name]["score"] for name in ALL_SEVEN if name in results["tasks"]},
        "avg": results["avg"],
        "sweep": {"axes": swept["axes"], "rule": swept["rule"], "cost": swept["cost"], "points": swept["points"]},
        "run": {"test_seconds": sum(t["seconds"] for t in progress["test"]), "sweep_seconds": swept["seconds"],
                "yardstick": progress["test"][-1]["yardstick"], "test_sittings": progress["test"],
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "code": code, "torch_threads": torch.get_num_threads()},
    }
    return record, codes


# ---- the file: settings, pairs, intervals (written by output_files.write_whole) -------------------------------------------

def publish(path: Path, data: bytes) -> None:
    """`path` replaced whole or not at all (the library's one writer: a temporary file published under the
    file's lock), so a kill at any moment leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, data, overwrite=True, wait=True)


def codes_text(codes: np.ndarray, layout) -> bytes:
    """A row's order codes as text, one line per task: its name, then its pairs' codes in file order."""
    bounds = np.cumsum([0] + [t.pairs for t in layout])
    return "".join(f"{t.name} {' '.join(map(str, codes[a:b].tolist()))}\n"
                   for t, a, b in zip(layout, bounds[:-1], bounds[1:])).encode()


def parse_codes(text: str, layout) -> dict[str, np.ndarray]:
    """`codes_text` read back: task name -> its pairs' codes, in `layout` order (each task checked)."""
    lines = text.splitlines()
    if [line.split(" ", 1)[0] for line in lines] != [t.name for t in layout]:
        raise ValueError(f"tasks {[line.split(' ', 1)[0] for line in lines]} are not {[t.name for t in layout]}")
    parts = [np.array(line.split()[1:], dtype=np.int64) for line in lines]
    for t, part in zip(layout, parts):
        if part.size != t.pairs:
            raise ValueError(f"{t.name} has {part.size} codes for {t.pairs} pairs")
    return {t.name: part for t, part in zip(layout, parts)}


def model_sha256(folder: Path) -> str:
    """One digest over the model folder's config and weight files (sha256sum-style lines, sorted)."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix == ".safetensors" or p.name == "config.json")
    return hashlib.sha256("".join(f"{sha256_file(p)}  {p.name}\n" for p in files).encode()).hexdigest()


def canonical_args(args) -> list[str]:
    """The options that define the table (what --output-dir, --data, --rows leave unchanged)."""
    defaults = {"tp_ends": "2,4,6,8", "cp_steers": "3,5,7", "cp_alphas": "0.5,1", "batch_size": 32,
                "device": "cpu", "dtype": "float32"}
    out = ["--model", args.model]
    for name in ("limit", "dev_limit"):
        if getattr(args, name) is not None:
            out += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    for name, default in defaults.items():
        if getattr(args, name) != default:
            out += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    out += ["--compile"] * bool(args.compile) + ["--pack-weights"] * bool(args.pack_weights)
    return out


def table_command(args) -> str:
    return shlex.join(["python", "tools/reproduce.py", *canonical_args(args)])


def row_command(args, key: str) -> str:
    return shlex.join(["python", "tools/reproduce.py", *canonical_args(args), "--rows", key, "--redo"])


def load_codes(out_dir: Path, row: dict, layout) -> dict[str, np.ndarray]:
    path = out_dir / row["pairs"]["file"]
    if not path.is_file() or sha256_file(path) != row["pairs"]["sha256"]:
        raise SystemExit(f"reproduce: error: {path} is missing or does not match the sha256 in the results JSON; "
                         f"recompute the row with: {row['command']}")
    return parse_codes(path.read_text(), layout)


def kept_cosines(out_dir: Path, progress: dict, plan: PiecePlan, key: str) -> list[np.ndarray]:
    """The cosines of a row's finished test pieces, from the file its in-progress record names."""
    kept = progress.get("cosines")
    if kept is None:
        return []
    path = out_dir / kept["file"]
    if not path.is_file() or sha256_file(path) != kept["sha256"]:
        raise SystemExit(f"reproduce: error: {path} (the finished test pieces of row {key}) is missing or does not "
                         f"match the sha256 in the results JSON; restore it (git checkout), or start the row afresh "
                         f"with --rows {key} --redo")
    try:
        return parse_cosines(path.read_text(), plan)
    except ValueError as error:
        raise SystemExit(f"reproduce: error: {path} does not fit this sitting's test pieces ({error}); start the row "
                         f"afresh with --rows {key} --redo") from None


class Statistics:
    """Bootstrap replicates of finished rows, computed once per row and sitting."""

    def __init__(self, test_tasks) -> None:
        self.boot = Bootstrap(layout_of(test_tasks), resamples=RESAMPLES, seed=SEED, level=LEVEL)
        self._replicates: dict[tuple[str, str], np.ndarray] = {}

    def replicates(self, out_dir: Path, row: dict) -> np.ndarray:
        cache = (row["key"], row["pairs"]["sha256"])
        if cache not in self._replicates:
            codes = load_codes(out_dir, row, self.boot.layout)  # task name -> codes
            self._replicates[cache] = self.boot.replicates({row["key"]: codes})[row["key"]]
        return self._replicates[cache]

    def derive(self, report: dict, out_dir: Path) -> None:
        """Every finished row's intervals and every claim whose two rows are finished, in place."""
        rows = {r["key"]: r for r in report["rows"]}
        reps = {key: self.replicates(out_dir, row) for key, row in rows.items()}
        for key, row in rows.items():
            row["interval"] = {name: list(lohi) for name, lohi in self.boot.interval(reps[key]).items()}
        claims = []
        for claim in CLAIMS:
            if claim.method in rows and claim.base in rows:
                m, b = rows[claim.method], rows[claim.base]
                point = {n: m["scores"][n] - b["scores"][n] for n in m["scores"]} | {"avg": m["avg"] - b["avg"]}
                difference = reps[claim.method] - reps[claim.base]  # (T + 1, B): each set, then Avg.
                sets = self.boot.names[:-1]  # and Avg. without each set in turn, for a fragile verdict
                left_point, left_interval = leave_one_out({n: point[n] for n in sets}, dict(zip(sets, difference)),
                                                          self.boot.level)
                claims.append(judge(claim, point | left_point, self.boot.interval(difference) | left_interval))
        report["claims"] = claims


def settings_of(args, model, dev, test_tasks, test_sentences) -> dict:
    files = [name for task in [dev, *test_tasks] for name in task.files]
    stamp = build_stamp({}, {"data_dir": str(dev.data_dir), "data_files": files})
    return {
        "model": args.model, "model_sha256": model_sha256(Path(model.source)),
        "tokenizer_sha256": model.tokenizer.checksum, "num_layers": model.num_layers,
        "dtype": args.dtype, "compiled": args.compile, "packed_weights": args.pack_weights, "device": args.device,
        "batch_size": args.batch_size, "limit": args.limit, "dev_limit": args.dev_limit,
        "grids": {"tp_ends": args.tp_ends, "cp_steers": args.cp_steers, "cp_alphas": args.cp_alphas},
        "test_sentences": len(test_sentences), "dev_sentences": len(unique_sentences([dev])),
        "test_pairs": {t.name: t.pairs for t in test_tasks}, "dev_pairs": dev.pairs,
        "data_sha256_combined": stamp["data_sha256_combined"], "data_sha256": stamp["data_sha256"],
        "bootstrap": {"resamples": RESAMPLES, "seed": SEED, "level": LEVEL, "interval": "percentile",
                      "unit": "pairs, resampled within each subset; task scores recomputed as the harness forms them"},
        "pairs_encoding": "per row, <model>-pairs/<row>.txt: one line per task in test_pairs order, the task's name "
                          "then its pairs' order codes (min rank - 1 of each pair's cosine within its task) in file order",
    }


def pairs_dir(model: str) -> str:
    return f"{Path(model).name}-pairs"


def status(report: dict) -> None:
    done = {r["key"] for r in report["rows"]}
    report["rows_done"] = [k for k in report["rows_planned"] if k in done]
    report["rows_pending"] = [k for k in report["rows_planned"] if k not in done]
    report["complete"] = not report["rows_pending"]


def write_report(report: dict, json_path: Path) -> None:
    """JSON first, then the Markdown beside it (each whole or not at all). The pairs files are written before the
    JSON that names them, so a JSON never names a pairs file that is not there."""
    publish(json_path, (json.dumps(_json_safe(report), indent=1, allow_nan=False, default=str) + "\n").encode())
    publish(json_path.with_suffix(".md"), markdown(report).encode())


# ---- Markdown -------------------------------------------------------------------------------------

def ranking_lines(rows: dict[str, dict]) -> list[str]:
    """The ranking by Avg. against the papers' and the Time column against theirs (point estimates)."""
    lines = []
    common = [k for k in PAPER_AVG if k in rows and rows[k]["avg"] is not None]
    if len(common) >= 3:
        ours = sorted(common, key=lambda k: -rows[k]["avg"])
        paper = sorted(common, key=lambda k: -PAPER_AVG[k])
        rank_ours = {k: i for i, k in enumerate(ours)}
        rank_paper = {k: i for i, k in enumerate(paper)}
        d = np.array([rank_ours[k] - rank_paper[k] for k in common], dtype=float)
        n = len(common)
        rho = 1 - 6 * float((d ** 2).sum()) / (n * (n * n - 1))
        lines.append(f"- Ranking by Avg. here: {' > '.join(rows[k]['label'] for k in ours)}.")
        lines.append(f"- Ranking in the papers (Llama-2-7B): {' > '.join(rows[k]['label'] for k in paper)}; "
                     f"Spearman rank correlation of the two rankings over these {n} rows: {rho:.2f}.")
        lines.append(f"- Best row here: {rows[ours[0]]['label']} ({rows[ours[0]]['avg']:.2f}); in the papers: "
                     f"{rows[paper[0]]['label']} ({PAPER_AVG[paper[0]]:.2f}).")
    times = [f"{rows[k]['label']} {rows[k]['time']:.2f}x (paper {v:.2f}x)" for k, v in PAPER_TIME.items()
             if k in rows and rows[k].get("time")]
    if times:
        lines.append(f"- Time relative to PromptEOL: {'; '.join(times)}.")
    return lines


def yardstick_units(row: dict) -> float | None:
    """A row's test time in units of its sitting's yardstick: comparable across sittings and machines. A row
    whose test pieces ran in several sittings sums each sitting's seconds over that sitting's yardstick."""
    run = row["run"]
    if "test_sittings" in run:
        return sum(t["seconds"] / t["yardstick"]["seconds"] for t in run["test_sittings"])
    yardstick = run.get("yardstick")
    return run["test_seconds"] / yardstick["seconds"] if yardstick else None


def with_time(rows: list[dict]) -> dict[str, dict]:
    """Rows by key, each with "time" = (test s / its yardstick s) / (PromptEOL's test s / its yardstick s);
    None without PromptEOL, or for a row timed before sittings measured a yardstick."""
    by_key = {r["key"]: dict(r) for r in rows}
    reference = yardstick_units(by_key["prompteol"]) if "prompteol" in by_key else None
    for row in by_key.values():
        units = yardstick_units(row)
        row["time"] = units / reference if units and reference else None
    return by_key


def same_layer_note(method: dict, base: dict) -> str:
    """When a method and its base were read at different layers, the base's dev score at the method's
    layer, from the base's own sweep: it tells the method's mechanism apart from its layer (HTP reads
    layer L-1 or L as its reference does, where mean pooling may have collapsed)."""
    layer = method["chosen"].get("layer")
    if layer is None or layer == base["chosen"].get("layer"):
        return ""
    same = [p["score"] for p in base["sweep"]["points"] if p["options"] == {"layer": layer}]
    if not same:
        return ""
    return (f" Same-layer check (STS-B dev only): {method['label']} {method['dev']:.2f} at layer {layer}, where "
            f"{base['label']} scores {same[0]:.2f} (its chosen layer {base['chosen']['layer']}: {base['dev']:.2f}).")


def _cell(record: dict) -> str:
    word = {"holds": "holds", "reversed": "**reversed**"}.get(record["verdict"], "n.s.")
    return f"{record['diff']:+.2f} [{record['lo']:+.2f}, {record['hi']:+.2f}] {word}"


def markdown(report: dict) -> str:
    settings, rows = report["settings"], report["rows"]
    by_key = with_time(rows)
    full = settings["limit"] is None and settings["dev_limit"] is None
    model = settings["model"]
    if full:
        head = [f"# Table 1 on {model}: full test sets (generated by tools/reproduce.py; no number typed by hand)", "",
                f"Full test sets: every pair of STS12-16, STS-B test and SICK-R ({settings['test_sentences']:,} distinct "
                f"sentences); hyper-parameters chosen on the full STS-B dev ({settings['dev_pairs']:,} pairs).", ""]
    else:
        head = [f"# Table 1 on {model}: limited run (generated by tools/reproduce.py; no number typed by hand)", "",
                f"**Limited run:** test sets cut to the first {settings['limit'] or 'all'} pairs of every subset "
                f"({settings['test_sentences']:,} distinct sentences), STS-B dev to the first "
                f"{settings['dev_limit'] or 'all'} pairs ({settings['dev_sentences']:,} sentences): a small-sample look, "
                "not comparable to published results; the full command is the same without the limits.", ""]
    if report["complete"]:
        head += [f"**Every row done** ({len(report['rows_done'])} of {len(report['rows_planned'])}).", ""]
    else:
        pending = ", ".join(f"`{k}`" for k in report["rows_pending"])
        head += [f"**Rows done: {len(report['rows_done'])} of {len(report['rows_planned'])}.** Not yet run: {pending}. "
                 "The command below computes them; finished rows are kept.", ""]
    if report.get("in_progress"):
        head += ["**In progress** (kept; the next sitting carries on from there): " + "; ".join(
            f"`{key}`: {'sweep done, ' if 'sweep' in p else ''}{p.get('cosines', {}).get('pieces', 0)} of "
            f"{p.get('cosines', {}).get('of', '?')} test pieces" for key, p in report["in_progress"].items()) + ".", ""]
    head += [f"Command (the whole table, resumable by row): `{report['command']}`. Each row's own command "
             "(it recomputes that row alone) is in the table \"How each row was made\".", "",
             "Spearman x100 of cosine vs gold; STS12-16 \"all\", STS-B and SICK-R test; Avg. of the seven. "
             "Hyper-parameters chosen on STS-B dev (`chosen`: `layer` is a hidden_states index, "
             f"L = {settings['num_layers']} = the final normed output). Time: test encoding time relative to "
             "PromptEOL's, each first divided by the yardstick its sitting timed (PromptEOL on every "
             f"{YARDSTICK_STRIDE}th test sentence), so rows timed in different sittings or on different machines "
             "compare; n/a: a row timed before sittings had a yardstick (`--rows <key> --redo` retimes it).", ""]
    names = [SHORT[n] for n in ALL_SEVEN]
    table = ["| Method | " + " | ".join(names) + " | Avg. | Time | dev | chosen |",
             "|---|" + "---:|" * (len(names) + 3) + "---|"]
    intervals = ["| Method | " + " | ".join(names) + " | Avg. |", "|---|" + "---:|" * (len(names) + 1)]
    for row in rows:
        cells = [f"{row['scores'].get(n, float('nan')):.2f}" for n in ALL_SEVEN]
        chosen = ", ".join(f"{k}={v}" for k, v in row["chosen"].items())
        if row.get("reused_from"):
            chosen += f" (non-layer from {row['reused_from']})"
        t = by_key[row["key"]]["time"]
        table.append(f"| {row['label']} | " + " | ".join(cells) + f" | **{row['avg']:.2f}** | "
                     f"{f'{t:.2f}x' if t else 'n/a'} | {row['dev']:.2f} | {chosen} |")
        ci = row.get("interval", {})
        intervals.append(f"| {row['label']} | " + " | ".join(
            f"[{ci[n][0]:.1f}, {ci[n][1]:.1f}]" if n in ci else "" for n in [*ALL_SEVEN, "avg"]) + " |")
    boot = settings["bootstrap"]
    claims = ["Each claim is the papers' (" + SOURCE + "; a far larger model, so agreement is not expected); "
              f"the interval is a paired bootstrap of (method - base) over the same resamples of pairs "
              f"({boot['resamples']:,} resamples within each subset, seed {boot['seed']}, {boot['level']:.0%} percentile). "
              "The verdict is generated from the interval: **holds** when it lies above 0, **reversed** when below, "
              "**not distinguishable from zero at 95%** when it contains 0.", ""]
    labels = {r["key"]: r["label"] for r in rows}
    for record in report.get("claims", []):
        claims.append(sentence(record, labels[record["method"]], labels[record["base"]])
                      + same_layer_note(by_key[record["method"]], by_key[record["base"]]))
    missing = [c.text for c in CLAIMS if c.method not in labels or c.base not in labels]
    if missing:
        claims += ["", f"Not judged yet (a row is not done): {'; '.join(missing)}."]
    per_dataset = []
    if report.get("claims"):
        per_dataset = ["", "Per dataset (difference [95% interval], verdict; n.s. = not distinguishable from zero):", "",
                       "| Claim | " + " | ".join(names) + " | Avg. |", "|---|" + "---|" * (len(names) + 1)]
        for record in report["claims"]:
            per_dataset.append(f"| {labels[record['method']]} vs {labels[record['base']]} | " + " | ".join(
                _cell(record["scores"][n]) if n in record["scores"] else "" for n in [*ALL_SEVEN, "avg"]) + " |")
    how = ["| Row | sharing rule | rows x blocks computed | separate runs | ratio | dev sweep s | test s | "
           "yardstick s | test in yardsticks | machine | date | command |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for row in rows:
        c, run = row["sweep"]["cost"], row["run"]
        sittings = run.get("test_sittings") or ([{"yardstick": run["yardstick"]}] if run.get("yardstick") else [])
        units = yardstick_units(row)  # the cost that compares across CPUs (results/README quotes it)
        timed_on = (" + ".join(f"{t['yardstick']['seconds']:.1f}" for t in sittings) + f" | {units:.0f} | "
                    + "; ".join(dict.fromkeys(machine_text(t["yardstick"]["machine"]) for t in sittings))
                    if sittings else "n/a | n/a | not recorded")
        test_s = (" + ".join(f"{t['seconds']:.0f}" for t in sittings) if len(sittings) > 1  # one per sitting
                  else f"{run['test_seconds']:.0f}")
        how.append(f"| {row['label']} | {row['sweep']['rule']} | {c['blocks_computed']:,} | {c['blocks_naive']:,} | "
                   f"{c['ratio']:.3f} | {run['sweep_seconds']:.0f} | {test_s} | {timed_on} | "
                   f"{run['date'][:10]} | `{row['command']}` |")
    figures = [f"![{name}]({name})" for name in report.get("figures", [])]
    run_rows = ["| key | value |", "|---|---|"]
    for key, value in settings.items():
        if key == "data_sha256":
            run_rows.append(f"| {key} | {len(value)} files, see the JSON |")
            continue
        shown = json.dumps(_json_safe(value), default=str) if isinstance(value, (dict, list)) else str(value)
        run_rows.append(f"| {key} | `{shown.replace('|', '/')}` |")
    sittings = ["| date | code | rows run | wall s | machine | command |", "|---|---|---|---:|---|---|"]
    for s in report.get("sittings", []):
        timed_on = machine_text(s["yardstick"]["machine"]) if "yardstick" in s else "not recorded"
        worked = s["rows_run"] + [f"part of {k}" for k in s.get("rows_part_run", []) if k not in s["rows_run"]]
        sittings.append(f"| {s['date']} | `{s['code']}` | {', '.join(worked) or '-'} | {s['wall_seconds']:.0f} | "
                        f"{timed_on} | `{s['argv']}` |")
    return "\n".join(
        head + ["## Scores", ""] + table + ["", "## 95% bootstrap intervals of each score", ""] + intervals
        + ["", "## The papers' claims, with paired 95% intervals", ""] + claims + per_dataset
        + ["", "## Ranking and time (point estimates)", ""] + (ranking_lines(by_key) or ["(fewer than three rows)"])
        + ["", "## How each row was made (sweep on STS-B dev, then test)", ""] + how
        + (["", "## Figures (STS-B dev; the ringed point is the one chosen)", ""] + figures if figures else [])
        + ["", "## Settings", ""] + run_rows + ["", "## Sittings", ""] + sittings) + "\n"


def figures(report: dict, out: Path) -> list[str]:
    """The sweep figures, each chosen point ringed; returns the PNG names (beside the JSON). They are redrawn
    every sitting, so they replace the last sitting's (overwrite=True)."""
    try:
        from minidecoder.evaluation.report import plot_curves
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: no figures (pip install 'minidecoder[plots]')", file=sys.stderr)
        return []
    model = report["settings"]["model"]
    rows = {r["key"]: r for r in report["rows"]}
    written = []
    curves, marks = {}, {}
    for key in ("mean", "prompteol", "pretended_cot", "knowledge", "metaeol", "echo"):
        if key in rows:
            pts = sorted((p["options"]["layer"], p["score"]) for p in rows[key]["sweep"]["points"])
            curves[rows[key]["label"]] = ([x for x, _ in pts], [y for _, y in pts])
            marks[rows[key]["label"]] = (rows[key]["chosen"]["layer"], rows[key]["dev"])
    if curves:
        written.append(plot_curves(curves, out.with_name(out.name + "-layers.png"), "output layer (hidden_states index)",
                                   f"{model}: STS-B dev against output layer", marks=marks, overwrite=True))
    curves, marks = {}, {}
    for key in ("prompteol+tp", "pretended_cot+tp", "knowledge+tp"):
        if key in rows:
            layer = rows[key]["chosen"]["layer"]
            pts = sorted((p["options"]["end"], p["score"]) for p in rows[key]["sweep"]["points"]
                         if p["options"]["layer"] == layer)
            label = f"{rows[key]['label']} (layer {layer})"
            curves[label] = ([x for x, _ in pts], [y for _, y in pts])
            marks[label] = (rows[key]["chosen"]["end"], rows[key]["dev"])
    if curves:
        written.append(plot_curves(curves, out.with_name(out.name + "-tp-end.png"),
                                   "TP end layer (start 1; copies before blocks 1..end-1)",
                                   f"{model}: STS-B dev against TP end layer", marks=marks, overwrite=True))
    return [Path(p).name for p in written]


# ---- main -----------------------------------------------------------------------------------------

def rows_code_from_sittings(report: dict) -> None:
    """Each row's `run.code` is the code of the last sitting that ran it (files written before the code
    was taken at the sitting's start recorded the tree's version when the row ended)."""
    rows = {r["key"]: r for r in report["rows"]}
    for sitting in report["sittings"]:
        for key in sitting["rows_run"]:
            if key in rows:
                rows[key]["run"]["code"] = sitting["code"]


def grid(parser, flag: str, text: str, kind: type) -> list:
    """A comma-separated grid flag's values, or a parser error naming the flag."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        parser.error(f"{flag} {text!r} is not a comma-separated list of {'whole ' * (kind is int)}numbers "
                     f"(e.g. {flag} {'2,4,6,8' if kind is int else '0.5,1'})")
    return values


TABLE_KEYS = ("settings", "command", "rows_planned", "rows", "sittings")  # what every sitting reads of a table


def read_table(path: Path) -> tuple[dict | None, str | None]:
    """The results JSON at `path` and None, or (None, None) where there is none, or (None, why it is not a
    table this script can go on with): cut short (a full disk), hand-edited, or not a file at all. A table
    of an earlier format is returned as it is (the callers say what to do with it)."""
    if not path.exists():
        return None, None
    report, problem = read_json(path)
    if problem:
        return None, problem
    if not isinstance(report, dict):
        return None, "is not a results table (a JSON object)"
    missing = [key for key in TABLE_KEYS if key not in report]
    if report.get("format") == FORMAT and (missing or not isinstance(report["settings"], dict)):
        return None, f"lacks {', '.join(missing) or 'its settings'} (hand-edited?)"
    return report, None


@contextlib.contextmanager
def table_lock(json_path: Path, parser):
    """Hold the table's lock for the block: a second sitting on the same table would read it, run its rows and
    write it back without the rows the first finished meanwhile, so it is refused, naming the first."""
    with contextlib.ExitStack() as stack:
        try:
            check_writable_folder(json_path.parent, "the results folder")  # before any model loads
        except OutputError as error:
            parser.error(f"{error.problem}; choose another --output-dir")
        try:
            stack.enter_context(output_lock(json_path))
        except OutputError as error:
            parser.error(f"{error.problem}: wait for it to finish (its rows are kept; then the same command runs "
                         "the rest), or pass --output-dir elsewhere for a table of its own")
        yield


def render(args, parser, path: Path) -> int:
    """--render: the Markdown and figures again from the table's JSON (and its claims, with --rejudge)."""
    report, problem = read_table(path)
    if report is None:
        parser.error(f"--render {path} {problem}; name a results JSON this script wrote (e.g. results/<model>.json)")
    if report.get("format") != FORMAT:
        parser.error(f"{path} is not a {FORMAT} file; rerun the table to regenerate it")
    rows_code_from_sittings(report)
    if args.rejudge:  # the claims again from the rows' kept pairs (after a change to how claims are judged)
        Statistics(load_tasks(list(ALL_SEVEN), args.data, report["settings"]["limit"])).derive(report, path.parent)
    report["figures"] = figures(report, path.with_suffix(""))
    write_report(report, path)
    print(f"wrote {path.with_suffix('.md')}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    code = code_version()["git"]  # what this process runs: taken before anything else, as it was loaded
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="registry name or checkpoint folder")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of every test subset")
    parser.add_argument("--dev-limit", type=int, default=None, help="first N STS-B dev pairs for the sweeps")
    parser.add_argument("--rows", default=None, help="comma-separated row keys to run now (default: every row not "
                                                     "done yet); finished rows are skipped unless --redo")
    parser.add_argument("--redo", action="store_true", help="recompute the rows named by --rows even if done")
    parser.add_argument("--retest", action="store_true", help="for rows named by --rows that are in progress: "
                        "keep the finished sweep, discard the kept test pieces and their timings, and encode the "
                        "test set again (when a sitting's timing was disturbed, e.g. by other work beside it)")
    parser.add_argument("--replace", action="store_true", help="discard an existing results file made with other "
                        "settings (or by an earlier version of this script) instead of refusing")
    parser.add_argument("--tp-ends", default="2,4,6,8", help="TP end layers to sweep (start is 1)")
    parser.add_argument("--cp-steers", default="3,5,7", help="CP steer layers to sweep")
    parser.add_argument("--cp-alphas", default="0.5,1", help="CP alphas to sweep")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="activation and weight dtype (the stamp records it; tools/bench.py prints the "
                             "STS-B change bfloat16 makes)")
    parser.add_argument("--compile", action="store_true", help="fuse each block's elementwise work with "
                        "torch.compile (minidecoder.fast.compiled); compiled in the untimed warm-up")
    parser.add_argument("--pack-weights", action="store_true", help="CPU: reorder the block weights once into "
                        "oneDNN's layout (minidecoder.fast.packed); combines with --compile")
    parser.add_argument("--data", default=None, help="STS data folder (default: ../shared/data/sts)")
    parser.add_argument("--output-dir", default=str(REPO / "results"))
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="only rewrite the Markdown and figures beside a results JSON (no model, no numbers changed)")
    parser.add_argument("--rejudge", action="store_true",
                        help="with --render: judge the claims again from the rows' kept pairs (no model loaded)")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        if not path.is_file():
            parser.error(f"--render {path} {'is not a file' if path.exists() else 'does not exist'}; name a results "
                         "JSON this script wrote (e.g. results/<model>.json)")
        with table_lock(path, parser):  # a sitting writing the table meanwhile would lose this or its own rows
            return render(args, parser, path)
    for flag, value in (("--limit", args.limit), ("--dev-limit", args.dev_limit)):
        if value is not None and value < 2:  # named here: the loader's message names --limit for either
            parser.error(f"{flag} {value} is too small: a correlation needs at least 2 pairs; use {flag} 2 or more, "
                         "or leave it out to score every pair")
    if args.batch_size < 1:
        parser.error(f"--batch-size {args.batch_size} must be at least 1 (e.g. the default, 32)")
    grids = {flag: grid(parser, flag, getattr(args, name), kind)
             for flag, name, kind in (("--tp-ends", "tp_ends", int), ("--cp-steers", "cp_steers", int),
                                      ("--cp-alphas", "cp_alphas", float))}
    if args.rows is not None and not [k for k in args.rows.split(",") if k.strip()]:
        parser.error(f"--rows {args.rows!r} names no row; name some (e.g. --rows prompteol), or leave --rows out "
                     "for every row not done yet")
    if args.redo and not args.rows:
        parser.error("--redo recomputes the rows named by --rows; name them (e.g. --rows prompteol+tp --redo)")
    if args.retest and (not args.rows or args.redo):
        parser.error("--retest re-encodes the test set of the rows named by --rows, keeping their sweeps; name them "
                     "(e.g. --rows metaeol --retest), and leave out --redo, which discards the sweep too")

    out = Path(args.output_dir) / Path(args.model).name
    json_path = out.with_name(out.name + ".json")
    with table_lock(json_path, parser):
        return run_sitting(args, parser, argv, code, out, json_path, grids)


def run_sitting(args, parser, argv, code: str, out: Path, json_path: Path, grids: dict[str, list]) -> int:
    """One sitting on the table at `json_path`, whose lock the caller holds: the rows still to do, each
    written as it finishes."""
    previous, problem = read_table(json_path)
    if problem is not None and not json_path.is_file():
        parser.error(f"{json_path} {problem}; move it away, or pass --output-dir elsewhere")
    if problem is not None and not args.replace:
        parser.error(f"{json_path} {problem}; restore it (git checkout -- {json_path}), or pass --replace to start "
                     "this table afresh in its place")
    if previous is not None and previous.get("format") != FORMAT and not args.replace:
        parser.error(f"{json_path} was written by an earlier version of reproduce.py (no per-row resume data); "
                     "move it away, or pass --replace to start this table afresh in its place")

    sitting_start = time.perf_counter()
    model = minidecoder.load(args.model, device=args.device, dtype=args.dtype, compile=args.compile,
                             pack_weights=args.pack_weights)
    L = model.num_layers
    spec = rows_spec(L, grids["--tp-ends"], grids["--cp-steers"], grids["--cp-alphas"])
    (dev,) = load_tasks(["STSBenchmark-dev"], args.data, args.dev_limit)
    test_tasks = load_tasks(list(ALL_SEVEN), args.data, args.limit)
    test_sentences = unique_sentences(test_tasks)
    settings = settings_of(args, model, dev, test_tasks, test_sentences)

    if previous is not None and previous.get("format") == FORMAT and previous["settings"] != settings and not args.replace:
        differ = sorted(k for k in set(settings) | set(previous["settings"])
                        if settings.get(k) != previous["settings"].get(k))
        shown = "; ".join(f"{k}: file {json.dumps(previous['settings'].get(k))[:80]}, now {json.dumps(settings.get(k))[:80]}"
                          for k in differ)
        parser.error(f"{json_path} holds rows made with other settings ({shown}); a table never mixes settings: "
                     "rerun with the file's settings, or pass --output-dir elsewhere, or --replace to start afresh")
    report = previous if previous is not None and previous.get("format") == FORMAT and not args.replace else {
        "format": FORMAT, "settings": settings, "command": table_command(args),
        "rows_planned": [r["key"] for r in spec], "rows": [], "claims": [], "figures": [], "sittings": []}
    rows_code_from_sittings(report)
    status(report)

    keys = [r["key"] for r in spec]
    wanted = keys if not args.rows else [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = sorted(set(wanted) - set(keys))
    if unknown:
        parser.error(f"unknown row(s) {unknown}; rows are {', '.join(keys)}")
    done = {r["key"]: r for r in report["rows"]}
    if args.retest:
        not_started = [k for k in wanted if "sweep" not in report.get("in_progress", {}).get(k, {})]
        if not_started:
            parser.error(f"--retest applies to rows in progress with a finished sweep; {', '.join(not_started)} "
                         f"{'is' if len(not_started) == 1 else 'are'} not (a finished row is redone with --redo, "
                         "a row not begun needs neither)")
    todo = [k for k in keys if k in wanted and (k not in done or args.redo)]
    for row in spec:  # a reuse row needs its donor: run it first when it is neither done nor asked for
        if row["key"] in todo and row.get("reuse") and row["reuse"] not in done and row["reuse"] not in todo:
            todo.insert(todo.index(row["key"]), row["reuse"])
    flags = {"end": ("--tp-ends", args.tp_ends), "steer_layer": ("--cp-steers", args.cp_steers)}
    for row in spec:  # e.g. --tp-ends 40 on a 30-block model: no end to sweep, and no row to make of none
        empty = [axis for axis, values in row["axes"].items() if not values]
        if row["key"] in todo and empty:
            flag, given = flags.get(empty[0], (empty[0], ""))
            parser.error(f"row {row['key']}: {flag} {given} leaves no {empty[0]} to sweep on this model's {L} blocks; "
                         f"give values from 1 to {L}")
    skipped = [k for k in keys if k in wanted and k not in todo]
    print(f"{args.model}: {L} blocks; {len(test_sentences)} test sentences, {settings['dev_sentences']} dev sentences; "
          f"rows to run: {', '.join(todo) or 'none'}" + (f"; already done (kept): {', '.join(skipped)}" if skipped else ""),
          file=sys.stderr)

    stats = Statistics(test_tasks)
    sitting = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "code": code,
               "argv": shlex.join(["python", "tools/reproduce.py", *(argv if argv is not None else sys.argv[1:])]),
               "rows_run": [], "wall_seconds": 0.0, "data_dir": str(dev.data_dir), "model_source": str(model.source)}
    scorer = StsScorer(test_tasks, test_sentences)
    plan = PiecePlan(test_tasks)
    if todo:
        report["sittings"].append(sitting)
        # warm-up (untimed): the first forward pays one-off costs that would inflate PromptEOL, the time reference
        minidecoder.embed(model, test_sentences[:8], "prompteol", batch_size=args.batch_size)
        minidecoder.embed(model, test_sentences[8:8 + args.batch_size], "prompteol", batch_size=args.batch_size)
        sitting["yardstick"] = time_yardstick(model, test_sentences, args.batch_size)
    order = {k: i for i, k in enumerate(keys)}
    spec_by_key = {r["key"]: r for r in spec}
    in_progress = report.setdefault("in_progress", {})
    for key in todo:
        row = spec_by_key[key]
        row_start = time.perf_counter()
        donor = {r["key"]: r for r in report["rows"]}.get(row.get("reuse"))
        partial_path = json_path.parent / f"{pairs_dir(args.model)}/{key}.partial.txt"
        if args.redo:
            in_progress.pop(key, None)
        progress = in_progress.get(key, {})
        if args.retest and key in wanted:  # the sweep's choice does not depend on timing; the pieces' seconds do
            progress = {"sweep": progress["sweep"]}
        cosines = kept_cosines(json_path.parent, progress, plan, key) if progress else []
        if progress:
            print(f"== {row['label']}: resuming ({'sweep done, ' if 'sweep' in progress else ''}"
                  f"{len(cosines)} of {len(plan.pieces)} test pieces kept)", file=sys.stderr)

        def save(progress: dict, cosines: list[np.ndarray], key: str = key, partial_path: Path = partial_path) -> None:
            data = cosines_text(plan, cosines)  # the cosines first: a JSON never names a file that is not there
            publish(partial_path, data)
            progress["cosines"] = {"file": str(partial_path.relative_to(json_path.parent)), "pieces": len(cosines),
                                   "of": len(plan.pieces), "sha256": hashlib.sha256(data).hexdigest()}
            in_progress[key] = progress
            sitting["rows_part_run"] = list(dict.fromkeys([*sitting.get("rows_part_run", []), key]))
            sitting["wall_seconds"] = round(time.perf_counter() - sitting_start, 1)
            write_report(report, json_path)

        record, codes = run_row(model, row, donor, dev, plan, scorer, args, code, sitting["yardstick"],
                                progress, cosines, save)
        relative = f"{pairs_dir(args.model)}/{key}.txt"
        data = codes_text(codes, test_tasks)
        publish(json_path.parent / relative, data)
        record["pairs"] = {"file": relative, "sha256": hashlib.sha256(data).hexdigest()}
        record["command"] = row_command(args, key)
        report["rows"] = sorted([r for r in report["rows"] if r["key"] != key] + [record], key=lambda r: order[r["key"]])
        in_progress.pop(key, None)
        stats.derive(report, json_path.parent)
        status(report)
        sitting["rows_run"].append(key)
        sitting["wall_seconds"] = round(time.perf_counter() - sitting_start, 1)
        report["figures"] = figures(report, out)
        write_report(report, json_path)
        partial_path.unlink(missing_ok=True)  # after the JSON that no longer names it
        print(f"   {row['label']}: Avg. {record['avg']:.2f} (dev {record['dev']:.2f}, {record['chosen']}) "
              f"in {time.perf_counter() - row_start:.0f} s; {len(report['rows_done'])} of {len(keys)} rows done; "
              f"to recompute this row alone: {record['command']}", file=sys.stderr)
    if report["rows"]:
        stats.derive(report, json_path.parent)  # e.g. after a change of the claims' list: cheap, cached
    status(report)
    sitting["wall_seconds"] = round(time.perf_counter() - sitting_start, 1)
    report["figures"] = figures(report, out)
    write_report(report, json_path)
    print(markdown(report))
    print(f"wrote {json_path} and {json_path.with_suffix('.md')}; {len(report['rows_done'])} of {len(keys)} rows done",
          file=sys.stderr)
    print(f"the claims across every table beside it: python tools/claims_table.py --results {json_path.parent}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_tool(main, "reproduce")
