"""The papers' claims on their own benchmarks beyond STS, for one model: SentEval transfer (TP Table 5, CP
Table 6) and HTP's long-context STS (Figure 1); resumable by row and, within a row, by task / chunk.

    python tools/reproduce_tasks.py --model smollm2-135m-instruct                       # both tables (hours)
    python tools/reproduce_tasks.py --model smollm2-135m-instruct --family transfer --rows prompteol,prompteol+tp
    python tools/reproduce_tasks.py --model smollm2-135m-instruct --limit 40 --out /tmp/look   # a stamped quick look

Rows. Transfer: PromptEOL, + TP, + CP (NS), Pretended CoT +/- TP, Knowledge +/- TP. Long STS: last-token,
mean pooling, PromptEOL, HTP. Each row's configuration (output layer, TP end, CP steer layer and alpha)
is the one tools/reproduce.py chose **on STS-B dev** for that row (read from results/<model>.json; HTP's
start 1 / end 7 are the paper's); none is chosen on a test split, and none on these benchmarks (the
transfer tasks' own validation, SentEval's inner folds, chooses only the probe's L2). "last" reads the
final layer. HTP's "TP w. Mean" curve is not run: minidecoder's TP pools the last token only, and no
method here is TP with mean pooling (a row to add once that reading is decided).

Files: OUT/<model>-transfer.json / .md and OUT/<model>-sts-long.json / .md (OUT = results/ by default),
rewritten after every row; a finished row is never recomputed (`--redo` with `--rows` recomputes those).
A file made with other settings (model, dtype, limit) is refused, never mixed. Within a row, the work
kept in OUT/<model>-<family>-work/<row>/ (the embeddings, each finished task's probe, the embedding job's
chunks) lets the next sitting go on from where this one stopped.

Statistics: every cell a 95% bootstrap interval (transfer: over test items / out-of-fold predictions;
long STS: over long pairs); every paper comparison (TP or CP vs its prompt) a paired interval of the
difference on the same resamples, per task and for Avg. (mean over tasks of the per-resample
differences), with the verdict of `minidecoder.evaluation.claims.verdict`.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import minidecoder  # noqa: E402
from minidecoder.errors import MinidecoderError  # noqa: E402
from minidecoder.evaluation.claims import verdict  # noqa: E402
from minidecoder.evaluation.report import _json_safe, build_stamp  # noqa: E402
from minidecoder.evaluation.transfer import (accuracy_replicates, evaluate_transfer,  # noqa: E402
                                             percentile_interval)
from minidecoder.evaluation.transfer_data import TRANSFER_TASKS, load_transfer_tasks  # noqa: E402
from minidecoder.methods import build_method  # noqa: E402

FORMAT = "minidecoder-reproduce-tasks/1"
TRANSFER_ROWS = [("prompteol", "PromptEOL"), ("prompteol+tp", "PromptEOL + TP"), ("prompteol+cp", "PromptEOL + CP (NS)"),
                 ("pretended_cot", "Pretended CoT"), ("pretended_cot+tp", "Pretended CoT + TP"),
                 ("knowledge", "Knowledge"), ("knowledge+tp", "Knowledge + TP")]
STS_LONG_ROWS = [("last", "Last token"), ("mean", "Mean pooling"), ("prompteol", "PromptEOL"), ("htp", "HTP")]
# (method row, base row, the paper's claim)
TRANSFER_CLAIMS = [("prompteol+tp", "prompteol", "TP improves PromptEOL (TP Table 5)"),
                   ("pretended_cot+tp", "pretended_cot", "TP improves Pretended CoT (TP Table 5)"),
                   ("knowledge+tp", "knowledge", "TP improves Knowledge (TP Table 5)"),
                   ("prompteol+cp", "prompteol", "CP (NS) improves PromptEOL, +0.79 Avg. (CP Table 6)")]


def chosen_methods(model: str) -> dict[str, dict]:
    """Each STS row's dev-chosen method (results/<model>.json, written by tools/reproduce.py)."""
    path = REPO / "results" / f"{model}.json"
    if not path.is_file():
        raise SystemExit(f"reproduce_tasks: {path} is missing; its rows' dev-chosen configurations are what this "
                         f"tool scores. Run `python tools/reproduce.py --model {model}` first.")
    rows = json.loads(path.read_text())["rows"]
    return {row["key"]: row["method"] for row in rows}


def row_method(key: str, chosen: dict[str, dict]):
    if key == "last":
        return build_method("last")
    spec = dict(chosen[key])
    name = spec.pop("method")
    spec.pop("pst_init_detail", None)  # a description the method writes, not an option
    spec.pop("sentence_splitter", None)
    return build_method(name, **spec)


def load_report(path: Path, settings: dict, redo: set[str]) -> dict:
    if path.is_file():
        report = json.loads(path.read_text())
        if report.get("settings") != settings:
            raise SystemExit(f"reproduce_tasks: {path} was made with other settings ({report.get('settings')}); "
                             "choose another --out or remove it")
        for key in redo:
            report["rows"].pop(key, None)
        return report
    return {"format": FORMAT, "settings": settings, "rows": {}}


def write(path: Path, report: dict, markdown: str) -> None:
    for target, text in ((path, json.dumps(_json_safe(report), indent=1) + "\n"), (path.with_suffix(".md"), markdown)):
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_text(text)
        os.replace(temporary, target)


def encoder(model, method, work: Path, batch_size: int | None):
    from minidecoder.running.jobs import embed_resumably

    def encode(texts: list[str]):
        return embed_resumably(model, method, texts, work / "job", batch_size=batch_size)[0]
    return encode


# ---- transfer ---------------------------------------------------------------------------------------
def transfer_claims(rows: dict) -> list[dict]:
    out = []
    for method, base, text in TRANSFER_CLAIMS:
        if method not in rows or base not in rows:
            continue
        per, diffs = {}, []
        for k, task in enumerate(TRANSFER_TASKS):
            a, b = rows[method]["tasks"].get(task), rows[base]["tasks"].get(task)
            if a is None or b is None:
                continue
            correct_a = np.asarray(a["predictions"]) == np.asarray(a["gold"])
            correct_b = np.asarray(b["predictions"]) == np.asarray(b["gold"])
            reps = accuracy_replicates(correct_a, k) - accuracy_replicates(correct_b, k)  # same resamples
            diffs.append(reps)
            lo, hi = percentile_interval(reps)
            per[task] = {"diff": a["score"] - b["score"], "lo": lo, "hi": hi, "verdict": verdict(lo, hi)}
        if diffs:
            lo, hi = percentile_interval(np.mean(diffs, axis=0))
            point = float(np.mean([per[t]["diff"] for t in per]))
            per["avg"] = {"diff": point, "lo": lo, "hi": hi, "verdict": verdict(lo, hi)}
        out.append({"method": method, "base": base, "claim": text, "scores": per})
    return out


def transfer_markdown(report: dict, model: str) -> str:
    limit = report["settings"]["limit"]
    lines = [f"# SentEval transfer on {model} (TP Table 5, CP Table 6)", ""]
    if limit is not None:
        lines += [f"**Limited run: the first {limit} rows of each file only; a quick look, never a claim.**", ""]
    lines += ["Accuracy x100 of SentEval's probe, 95% bootstrap interval over test items; rows configured as chosen "
              "on STS-B dev (results/<model>.json).", "",
              "| row | " + " | ".join(TRANSFER_TASKS) + " | Avg. |", "|---|" + "---:|" * (len(TRANSFER_TASKS) + 1)]
    for key, label in TRANSFER_ROWS:
        row = report["rows"].get(key)
        if row is None:
            lines.append(f"| {label} | " + " | ".join("not run" for _ in TRANSFER_TASKS) + " | |")
            continue
        cells = [f"{row['tasks'][t]['score']:.2f} [{row['tasks'][t]['ci95'][0]:.1f}, {row['tasks'][t]['ci95'][1]:.1f}]"
                 if t in row["tasks"] else "-" for t in TRANSFER_TASKS]
        avg = f"{row['avg']:.2f}" if row.get("avg") is not None else "-"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {avg} |")
    lines += ["", "## The papers' comparisons (paired 95% intervals of the difference)", "",
              "| claim | Avg. diff | interval | verdict |", "|---|---:|---|---|"]
    for claim in report.get("claims", []):
        avg = claim["scores"].get("avg")
        if avg:
            lines.append(f"| {claim['claim']} | {avg['diff']:+.2f} | [{avg['lo']:+.2f}, {avg['hi']:+.2f}] | {avg['verdict']} |")
    lines += ["", "Commands: " + "; ".join(f"`{row['command']}`" for row in report["rows"].values()), ""]
    return "\n".join(lines)


# ---- long STS -----------------------------------------------------------------------------------------
def sts_long_markdown(report: dict, model: str) -> str:
    limit = report["settings"]["limit"]
    lines = [f"# Long-context STS on {model} (HTP Figure 1)", ""]
    if limit is not None:
        lines += [f"**Limited run: built from the first {limit} STS-B test pairs; a quick look, never a claim.**", ""]
    lengths = report["settings"]["lengths"]
    lines += ["Spearman x100 per length k (k STS-B test pairs joined per long pair), 95% bootstrap interval over "
              "long pairs.", "", "| row | " + " | ".join(f"k={k}" for k in lengths) + " |",
              "|---|" + "---:|" * len(lengths)]
    for key, label in STS_LONG_ROWS:
        row = report["rows"].get(key)
        if row is None:
            lines.append(f"| {label} | " + " | ".join("not run" for _ in lengths) + " |")
            continue
        lines.append(f"| {label} | " + " | ".join(
            f"{row['lengths'][str(k)]['score']:.2f} [{row['lengths'][str(k)]['ci95'][0]:.1f}, "
            f"{row['lengths'][str(k)]['ci95'][1]:.1f}]" for k in lengths) + " |")
    lines += ["", "Commands: " + "; ".join(f"`{row['command']}`" for row in report["rows"].values()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--family", choices=["transfer", "sts-long", "both"], default="both")
    parser.add_argument("--rows", default=None, help="comma-separated row keys (default: every row of the family)")
    parser.add_argument("--redo", action="store_true", help="recompute the rows named by --rows")
    parser.add_argument("--limit", type=int, default=None, help="first N rows per file / STS-B pairs (stamped; never a claim)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--out", default=str(REPO / "results"), help="folder of the result files (default: results/)")
    args = parser.parse_args(argv)

    chosen = chosen_methods(args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = minidecoder.load(args.model, dtype=args.dtype, device=args.device)
    wanted = set(args.rows.split(",")) if args.rows else None
    redo = wanted if args.redo and wanted else set()
    settings = {"model": args.model, "dtype": args.dtype, "limit": args.limit,
                "tokenizer_sha256": model.tokenizer.checksum}
    families = ["transfer", "sts-long"] if args.family == "both" else [args.family]
    for family in families:
        path = out / f"{args.model}-{family}.json"
        rows = TRANSFER_ROWS if family == "transfer" else STS_LONG_ROWS
        if family == "sts-long":
            from minidecoder.evaluation.sts_long import LENGTHS, evaluate_sts_long, load_long_sts
            loaded = load_long_sts(None, args.limit)
            family_settings = {**settings, "lengths": list(LENGTHS)}
        else:
            loaded = load_transfer_tasks(list(TRANSFER_TASKS), None, args.limit)
            family_settings = settings
        report = load_report(path, family_settings, redo)
        for key, label in rows:
            if (wanted and key not in wanted) or key in report["rows"]:
                continue
            method = row_method(key, chosen)
            work = out / f"{args.model}-{family}-work" / key
            work.mkdir(parents=True, exist_ok=True)
            encode = encoder(model, method, work, args.batch_size)
            print(f"{family}: {label} ...", file=sys.stderr)
            if family == "transfer":
                identity = json.dumps([settings, method.describe()], sort_keys=True, default=str)
                results = evaluate_transfer(encode, loaded, chunk_size=1 << 62, kept=work, kept_identity=identity,
                                            progress=True)
            else:
                results = evaluate_sts_long(encode, loaded=loaded, chunk_size=1 << 62, progress=False)
            command = ["python", "tools/reproduce_tasks.py", "--model", args.model, "--family", family, "--rows", key,
                       "--redo"] + (["--limit", str(args.limit)] if args.limit is not None else [])
            report["rows"][key] = {"label": label, "method": method.describe(), **results,
                                   "stamp": build_stamp({"method": method.describe()}, results),
                                   "command": shlex.join(command)}
            if family == "transfer":
                report["claims"] = transfer_claims(report["rows"])
            text = transfer_markdown(report, args.model) if family == "transfer" else sts_long_markdown(report, args.model)
            write(path, report, text)
            import shutil
            shutil.rmtree(work, ignore_errors=True)  # the row is in the file: its kept work is no longer needed
        work_root = out / f"{args.model}-{family}-work"
        if work_root.is_dir() and not any(work_root.iterdir()):
            work_root.rmdir()  # every row finished: nothing left to resume
        if family == "sts-long" and report["rows"]:
            try:
                from minidecoder.evaluation.sts_long import plot_sts_long
                plot_sts_long({report["rows"][k]["label"]: report["rows"][k]["lengths"] for k, _ in rows
                               if k in report["rows"]}, path.with_suffix(".png"), args.model, overwrite=True)
            except MinidecoderError as error:  # matplotlib missing: the tables stand alone
                print(f"reproduce_tasks: no figure ({error.problem})", file=sys.stderr)
        print(f"wrote {path} and {path.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
