"""The Markdown and JSON report of a sweep (`minidecoder sweep`): a pivot of dev scores with the best
point in bold, what sharing saved, and the run's stamp (as `eval sts` reports, `report.build_stamp`)."""
from __future__ import annotations

import numpy as np

from minidecoder.evaluation.sweep import SweepResult, _key, grid_points


# ---- report ----------------------------------------------------------------------------------------
def _fmt(value: float | None) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.2f}"


def pivot_table(result: SweepResult) -> str:
    """Rows: output layer (when it is an axis); columns: every combination of the other axes."""
    axes = result.axes
    row_axis = "layer" if "layer" in axes else next(iter(axes))
    col_axes = [a for a in axes if a != row_axis]
    cols = grid_points({a: axes[a] for a in col_axes}) if col_axes else [{}]
    scores = {_key(r["options"]): r["score"] for r in result.points}
    best = result.best["options"] if result.best else None
    header = [row_axis] + [", ".join(f"{k}={v}" for k, v in c.items()) or "dev" for c in cols]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for value in axes[row_axis]:
        cells = [str(value)]
        for c in cols:
            options = {row_axis: value, **c}
            ordered = {a: options[a] for a in axes}
            s = scores.get(_key(ordered))
            cell = "-" if s is None else _fmt(s)
            cells.append(f"**{cell}**" if ordered == best else cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sweep_markdown(result: SweepResult, stamp: dict) -> str:
    from minidecoder.evaluation.report import _json_safe
    import json

    best = result.best
    best_text = (f"**{', '.join(f'{k}={v}' for k, v in best['options'].items())}**: {_fmt(best['score'])}"
                 if best else "none (no finite score)")
    cost = result.cost
    skipped = [r for r in result.points if r["skipped"]]
    limit = (f"\n\n**Limited run:** only the first {result.limit} STS-B dev pairs were scored."
             if result.limit is not None else "")
    lines = [
        f"# Sweep: {result.method.get('method')} on {stamp.get('model', '?')} (STS-B dev)",
        "",
        "Spearman x100 on STS-B **dev** (hyper-parameters are chosen here, never on a test split). "
        "`layer` is a hidden_states index (L = the final normed output).",
        "",
        f"Best: {best_text}{limit}",
        "",
        "## Scores",
        "",
        pivot_table(result),
        "",
        "## Cost",
        "",
        f"Sharing rule: {result.rule}. Rows x blocks computed: {cost['blocks_computed']:,} against "
        f"{cost['blocks_naive']:,} for separate runs of the {len(result.points) - len(skipped)} valid points "
        f"({_ratio_text(cost)}). {result.sentences} distinct dev sentences in {result.encode_seconds:.1f} s "
        f"({result.sentences / max(result.encode_seconds, 1e-9):.1f} sentences/s per pass).",
    ]
    if skipped:
        lines += ["", f"Skipped {len(skipped)} invalid point(s), e.g. {skipped[0]['options']}: {skipped[0]['skipped']}"]
    rows = ["| key | value |", "|---|---|"]
    for key, value in stamp.items():
        if key == "data_sha256":
            rows.append(f"| {key} | {len(value)} files, see the JSON |")
            continue
        shown = json.dumps(_json_safe(value), sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
        rows.append(f"| {key} | `{shown.replace('|', '/')}` |")
    return "\n".join(lines + ["", "## Run", ""] + rows) + "\n"


def _ratio_text(cost: dict) -> str:
    ratio = cost.get("ratio")
    if not ratio:
        return "n/a"
    if ratio < 1:
        return f"{ratio:.3f} of the naive grid, {1 / ratio:.1f}x fewer"
    if ratio == 1:
        return "the same as separate runs: nothing was shared"
    return f"{ratio:.3f} of the naive grid, {ratio:.2f}x more"  # sharing that did not pay (never called fewer)


def write_sweep_report(prefix, result: SweepResult, metadata: dict, overwrite: bool = False):
    """PREFIX.json and PREFIX.md, stamped like `eval sts` reports (`report.build_stamp`); an existing file is
    replaced only with `overwrite`."""
    import json

    from minidecoder.evaluation.report import _json_safe, _write_whole, build_stamp, report_paths

    json_path, md_path = report_paths(prefix)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    stamp = build_stamp(metadata, {"data_dir": result.data_dir, "data_files": result.data_files, "limit": result.limit})
    _write_whole(json_path, json.dumps(_json_safe({"stamp": stamp, "sweep": result.to_dict()}), indent=2,
                                       allow_nan=False, default=str) + "\n", overwrite)
    _write_whole(md_path, sweep_markdown(result, stamp), overwrite)
    return json_path, md_path
