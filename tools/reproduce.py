"""Reproduce the papers' Table 1 rows on a small real model: one command per model.

    python tools/reproduce.py --model smollm2-135m-instruct                 # the full table (hours on a CPU)
    python tools/reproduce.py --model smollm2-135m-instruct --limit 3 --dev-limit 40   # a quick, stamped look

For each row (mean pooling, PromptEOL, Pretended CoT, Knowledge, MetaEOL, Echo; the four prompts with
TP and with CP; HTP; ReBA-2) the hyper-parameters are chosen on STS-B **dev** by the shared sweep
(`minidecoder.evaluation.sweep`), then the chosen configuration is scored once on the seven test sets
(STS12-16 "all", STS-B test, SICK-R test; Avg. = their mean) and timed; "Time" is the row's test
encoding time over PromptEOL's, measured in the same run (the papers' Time column). Writes
results/<model>.json and results/<model>.md (plus PNG figures when matplotlib is installed); every
number in them comes from this run.

Grids (dev only): output layer 1..L for the layer-reading methods; TP start 1, end in --tp-ends,
layer in L//2..L; CP (NS) steer layer in --cp-steers, alpha in --cp-alphas, layer in L//2..L; HTP and
ReBA-2 layer in {L-1, L} (run point by point: no sharing rule). MetaEOL+TP and MetaEOL+CP reuse the
end/steer/alpha chosen for PromptEOL+TP / +CP (the eight MetaEOL prompts end like PromptEOL's; a
sweep of eight prompts costs eight times as much) and choose only their output layer on dev.
`--limit N` keeps the first N pairs of every test subset and `--dev-limit N` the first N dev pairs;
the results file says so in its header.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import minidecoder  # noqa: E402
from minidecoder.evaluation.harness import StsScorer, encode_sentences, unique_sentences  # noqa: E402
from minidecoder.evaluation.report import _json_safe, build_stamp  # noqa: E402
from minidecoder.evaluation.sts_data import ALL_SEVEN, load_tasks  # noqa: E402
from minidecoder.evaluation.sweep import method_at, sweep_sts  # noqa: E402
from minidecoder.methods import build_method  # noqa: E402

SHORT = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
         "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}

# Llama-2-7B, fp32, STS Avg. of seven (spec methods.md section 10), for the comparison only.
PAPER_AVG = {"mean": 47.06, "prompteol": 70.03, "prompteol+tp": 77.19, "prompteol+cp": 75.27,
             "pretended_cot": 76.86, "pretended_cot+tp": 77.54, "pretended_cot+cp": 77.45,
             "knowledge": 77.14, "knowledge+tp": 77.54, "knowledge+cp": 77.56,
             "metaeol": 75.96, "metaeol+tp": 77.91, "echo": 66.05}
PAPER_TIME = {"prompteol+tp": 1.04, "pretended_cot": 1.18, "metaeol": 8.17, "echo": 1.67}
PROMPTS = [("prompteol", "PromptEOL"), ("pretended_cot", "Pretended CoT"), ("knowledge", "Knowledge"),
           ("metaeol", "MetaEOL")]


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


def run_row(model, row: dict, chosen: dict, dev, test_tasks, test_sentences, scorer, args) -> dict:
    method = build_method(row["method"], **row["options"])
    axes = dict(row["axes"])
    if row.get("reuse"):  # take the donor's non-layer choices, sweep the layer only
        donor = chosen[row["reuse"]]["options"]
        fixed = {k: v for k, v in donor.items() if k != "layer"}
        method = method_at(method, fixed)
        axes = {"layer": axes["layer"]}
    print(f"\n== {row['label']}: sweep {axes and {k: (v if len(v) < 6 else f'{v[0]}..{v[-1]} ({len(v)})') for k, v in axes.items()}}",
          file=sys.stderr)
    sweep = sweep_sts(model, method, axes, limit=args.dev_limit, batch_size=args.batch_size,
                      progress=not args.no_progress, dev=dev)
    best = method_at(method, sweep.best["options"])
    chosen[row["key"]] = {"options": sweep.best["options"]}
    encode = lambda texts: minidecoder.embed(model, texts, best, batch_size=args.batch_size)  # noqa: E731
    start = time.perf_counter()
    vectors = encode_sentences(encode, test_sentences, chunk_size=args.batch_size * 8, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    results = scorer(vectors)
    return {
        "key": row["key"], "label": row["label"], "method": best.describe(),
        "chosen": {**({k: v for k, v in chosen[row["reuse"]]["options"].items() if k != "layer"} if row.get("reuse") else {}),
                   **sweep.best["options"]},
        "reused_from": row.get("reuse"),
        "dev": sweep.best["score"],
        "scores": {name: results["tasks"][name]["score"] for name in ALL_SEVEN if name in results["tasks"]},
        "avg": results["avg"], "test_seconds": seconds,
        "sweep": {"axes": sweep.axes, "rule": sweep.rule, "cost": sweep.cost,
                  "points": [{"options": p["options"], "score": p["score"]} for p in sweep.points if p["score"] is not None]},
    }


def comparison(rows: dict[str, dict]) -> list[str]:
    """What the numbers show about the papers' claims (spec section 10), stated from this run."""
    lines = []

    def avg(key: str) -> float | None:
        return rows[key]["avg"] if key in rows else None

    for plug, name in (("tp", "TP"), ("cp", "CP")):
        for prompt, label in PROMPTS:
            base, plus = avg(prompt), avg(f"{prompt}+{plug}")
            if base is None or plus is None:
                continue
            paper_base, paper_plus = PAPER_AVG.get(prompt), PAPER_AVG.get(f"{prompt}+{plug}")
            paper = (f"paper (Llama-2-7B): {paper_plus - paper_base:+.2f}" if paper_base and paper_plus
                     else "no paper number")
            verdict = "improves" if plus > base else "does not improve"
            lines.append(f"- {name} {verdict} {label} here: Avg. {base:.2f} -> {plus:.2f} ({plus - base:+.2f}); {paper}.")
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


def markdown(report: dict) -> str:
    stamp, rows = report["stamp"], report["rows"]
    limited = stamp["limit"] is not None or stamp["dev_limit"] is not None
    head = [f"# Table 1 on {stamp['model']} (generated by tools/reproduce.py; no number typed by hand)", ""]
    if limited:
        head += [f"**Limited run:** test sets cut to the first {stamp['limit'] or 'all'} pairs of every subset "
                 f"({stamp['test_sentences']} distinct sentences), STS-B dev to the first {stamp['dev_limit'] or 'all'} "
                 f"pairs ({stamp['dev_sentences']} sentences). These numbers are a small-sample look, noisy, and "
                 "not comparable to published results; the full command is the same without the limits.", ""]
        if stamp["limit"] is not None and stamp["limit"] < 10:
            head += [f"With {stamp['limit']} pairs, STS-B and SICK-R (one split each) are a Spearman over "
                     f"{stamp['limit']} pairs, which can only take a few values (+-100 for two pairs); STS12-16 "
                     f"pool {stamp['limit']} pairs from each of their 3-6 subsets. Read the Avg. accordingly.", ""]
    if stamp.get("rows_not_run"):
        head += [f"**Rows not run** (left out with --rows): {', '.join(stamp['rows_not_run'])}.", ""]
    head += [f"Command: `{stamp['command']}`", "",
             "Spearman x100 of cosine vs gold; STS12-16 \"all\", STS-B and SICK-R test; Avg. of the seven. "
             "Hyper-parameters chosen on STS-B dev (`chosen`: `layer` is a hidden_states index, "
             f"L = {stamp['num_layers']} = the final normed output). Time: test encoding time relative to "
             "PromptEOL in this run.", ""]
    names = [SHORT[n] for n in ALL_SEVEN]
    table = ["| Method | " + " | ".join(names) + " | Avg. | Time | dev | chosen |",
             "|---|" + "---:|" * (len(names) + 3) + "---|"]
    for row in rows:
        cells = [f"{row['scores'].get(n, float('nan')):.2f}" for n in ALL_SEVEN]
        chosen = ", ".join(f"{k}={v}" for k, v in row["chosen"].items())
        if row.get("reused_from"):
            chosen += f" (non-layer from {row['reused_from']})"
        table.append(f"| {row['label']} | " + " | ".join(cells) + f" | **{row['avg']:.2f}** | "
                     f"{row['time']:.2f}x | {row['dev']:.2f} | {chosen} |")
    cost = ["| Row | sharing rule | rows x blocks computed | separate runs | ratio | dev sweep s | test s |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        c = row["sweep"]["cost"]
        cost.append(f"| {row['label']} | {row['sweep']['rule']} | {c['blocks_computed']:,} | {c['blocks_naive']:,} | "
                    f"{c['ratio']:.3f} | {c['seconds']:.0f} | {row['test_seconds']:.0f} |")
    figures = [f"![{Path(p).name}]({Path(p).name})" for p in report.get("figures", [])]
    stamp_rows = ["| key | value |", "|---|---|"]
    for key, value in stamp.items():
        if key == "data_sha256":
            stamp_rows.append(f"| {key} | {len(value)} files, see the JSON |")
            continue
        shown = json.dumps(_json_safe(value), default=str) if isinstance(value, (dict, list)) else str(value)
        stamp_rows.append(f"| {key} | `{shown.replace('|', '/')}` |")
    return "\n".join(head + table + ["", "## What the numbers show against the papers' claims", "",
                                     "Generated from the table above; the papers' numbers are Llama-2-7B (spec "
                                     "section 10), a far larger model, so agreement is not expected.", ""]
                     + report["comparison"] + ["", "## Sweep cost (STS-B dev)", ""] + cost
                     + (["", "## Figures", ""] + figures if figures else []) + ["", "## Run", ""] + stamp_rows) + "\n"


def figures(report: dict, out: Path, model: str) -> list[str]:
    try:
        from minidecoder.evaluation.plots import plot_curves
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: no figures (pip install 'minidecoder[plots]')", file=sys.stderr)
        return []
    rows = {r["key"]: r for r in report["rows"]}
    written = []
    curves = {}
    for key in ("mean", "prompteol", "pretended_cot", "knowledge", "metaeol", "echo"):
        if key in rows:
            pts = sorted((p["options"]["layer"], p["score"]) for p in rows[key]["sweep"]["points"])
            curves[rows[key]["label"]] = ([x for x, _ in pts], [y for _, y in pts])
    if curves:
        written.append(plot_curves(curves, out.with_name(out.name + "-layers.png"), "output layer (hidden_states index)",
                                   f"{model}: STS-B dev against output layer"))
    curves = {}
    for key in ("prompteol+tp", "pretended_cot+tp", "knowledge+tp"):
        if key in rows:
            layer = rows[key]["chosen"]["layer"]
            pts = sorted((p["options"]["end"], p["score"]) for p in rows[key]["sweep"]["points"]
                         if p["options"]["layer"] == layer)
            curves[f"{rows[key]['label']} (layer {layer})"] = ([x for x, _ in pts], [y for _, y in pts])
    if curves:
        written.append(plot_curves(curves, out.with_name(out.name + "-tp-end.png"),
                                   "TP end layer (start 1; copies before blocks 1..end-1)",
                                   f"{model}: STS-B dev against TP end layer"))
    return [str(p) for p in written]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="registry name or checkpoint folder")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of every test subset")
    parser.add_argument("--dev-limit", type=int, default=None, help="first N STS-B dev pairs for the sweeps")
    parser.add_argument("--rows", default=None, help="comma-separated row keys to run (default: all; PromptEOL "
                                                     "always runs, it is the time reference)")
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
                        help="only rewrite the Markdown next to a results JSON of an earlier run (no model, no numbers changed)")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
        print(f"wrote {path.with_suffix('.md')}", file=sys.stderr)
        return 0

    model = minidecoder.load(args.model, device=args.device, dtype=args.dtype, compile=args.compile,
                             pack_weights=args.pack_weights)
    L = model.num_layers
    ints = lambda text: [int(v) for v in text.split(",") if v.strip()]  # noqa: E731
    spec = rows_spec(L, ints(args.tp_ends), ints(args.cp_steers), [float(v) for v in args.cp_alphas.split(",")])
    all_labels = [r["label"] for r in spec]
    if args.rows:
        wanted = set(args.rows.split(",")) | {"prompteol"}
        unknown = wanted - {r["key"] for r in spec}
        if unknown:
            parser.error(f"unknown row(s) {sorted(unknown)}; rows are {', '.join(r['key'] for r in spec)}")
        wanted |= {r["reuse"] for r in spec if r["key"] in wanted and r.get("reuse")}
        spec = [r for r in spec if r["key"] in wanted]
    (dev,) = load_tasks(["STSBenchmark-dev"], args.data, args.dev_limit)
    test_tasks = load_tasks(list(ALL_SEVEN), args.data, args.limit)
    test_sentences = unique_sentences(test_tasks)
    scorer = StsScorer(test_tasks, test_sentences)
    print(f"{args.model}: {L} blocks; {len(test_sentences)} test sentences, {len(unique_sentences([dev]))} dev sentences",
          file=sys.stderr)
    # warm-up (untimed): the first forward pays one-off costs that would inflate PromptEOL, the time reference
    minidecoder.embed(model, test_sentences[:8], "prompteol", batch_size=args.batch_size)
    minidecoder.embed(model, test_sentences[8:8 + args.batch_size], "prompteol", batch_size=args.batch_size)
    chosen: dict[str, dict] = {}
    rows = []
    started = time.perf_counter()
    for row in spec:
        row_start = time.perf_counter()
        rows.append(run_row(model, row, chosen, dev, test_tasks, test_sentences, scorer, args))
        print(f"   {row['label']}: Avg. {rows[-1]['avg']:.2f} (dev {rows[-1]['dev']:.2f}, {rows[-1]['chosen']}) "
              f"in {time.perf_counter() - row_start:.0f} s", file=sys.stderr)
    reference = next(r for r in rows if r["key"] == "prompteol")["test_seconds"]
    for row in rows:
        row["time"] = row["test_seconds"] / reference
    by_key = {r["key"]: r for r in rows}
    command = shlex.join(["python", "tools/reproduce.py", *(argv if argv is not None else sys.argv[1:])])
    metadata = {"model": args.model, "model_source": str(model.source), "num_layers": L, "dtype": args.dtype,
                "compiled": args.compile, "packed_weights": args.pack_weights,
                "device": args.device, "torch_threads": torch.get_num_threads(), "batch_size": args.batch_size,
                "dev_limit": args.dev_limit, "test_sentences": len(test_sentences),
                "dev_sentences": len(unique_sentences([dev])), "tokenizer_sha256": model.tokenizer.checksum,
                "grids": {"tp_ends": args.tp_ends, "cp_steers": args.cp_steers, "cp_alphas": args.cp_alphas},
                "wall_seconds": round(time.perf_counter() - started, 1), "command": command,
                "rows_not_run": [label for label in all_labels if label not in {r["label"] for r in rows}]}
    files = [name for task in [dev, *test_tasks] for name in task.files]
    stamp = build_stamp(metadata, {"data_dir": str(dev.data_dir), "data_files": files, "limit": args.limit})
    report = {"stamp": stamp, "rows": rows, "comparison": comparison(by_key)}
    out = Path(args.output_dir) / Path(args.model).name
    out.parent.mkdir(parents=True, exist_ok=True)
    report["figures"] = figures(report, out, args.model)
    json_path, md_path = out.with_name(out.name + ".json"), out.with_name(out.name + ".md")
    json_path.write_text(json.dumps(_json_safe(report), indent=1, allow_nan=False, default=str) + "\n")
    md_path.write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
