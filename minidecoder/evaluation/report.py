"""Write results as JSON, as a Markdown table and as figures, each stamped with how they were made.

The stamp is the caller's metadata (model, dtype, method and every option, tokenizer checksum, ...)
plus what this module computes: the sha256 of every data file read, the code version (the installed
package's version, and `describe_checkout` when the package runs from a git checkout, else "unknown")
and the UTC date. A limited run (`limit=N`) says so in both.

The figures: PNGs of sweeps, like the papers' figures: score against output layer, score against TP's end
layer (TP arXiv 2412.11556, the layer figures; CP arXiv 2505.12831, the steer-layer figure).

matplotlib is an optional extra (`pip install minidecoder[plots]`); it is imported only when a
figure is drawn, with the Agg backend (no display needed). `running.figures.check_figure_path` is the check a command
runs before any work (matplotlib installed, a format it writes); figures are written through
minidecoder.output_files (running/figures.py), so an existing figure is replaced only with `overwrite`.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from minidecoder.errors import InputError, OutputError
from minidecoder.output_files import whole_or_absent, write_failure, write_whole
from minidecoder.running.figures import pyplot, save_figure
from minidecoder.sources.checksums import file_sha256


_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def code_version() -> dict:
    """{"version": the installed package's version or "unknown", "git": `describe_checkout` of the checkout
    this package lives in, or "unknown"}."""
    from importlib.metadata import PackageNotFoundError, version as installed_version
    try:
        version = installed_version("minidecoder")
    except PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown"
    git = "unknown"
    repo = _PACKAGE_DIR.parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=repo, capture_output=True, text=True, timeout=10)
        # only describe the checkout this package lives in, not some repository that happens to hold a venv
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == repo.resolve():
            git = describe_checkout(repo)
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": version, "git": git}


def describe_checkout(repo: Path) -> str:
    """`git describe --always`, with "-dirty" when a tracked file outside `results/` differs from HEAD,
    or "unknown". The results tables are this tool's own output: a sitting that resumes a table always
    finds the last sitting's rows uncommitted there, and they say nothing about the code that runs."""
    described = subprocess.run(["git", "describe", "--always"], cwd=repo, capture_output=True, text=True, timeout=10)
    if described.returncode != 0 or not described.stdout.strip():
        return "unknown"
    changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)results"],
                             cwd=repo, capture_output=True, timeout=10)
    return described.stdout.strip() + ("-dirty" if changed.returncode != 0 else "")


def build_stamp(metadata: dict, results: dict) -> dict:
    """The caller's metadata plus data checksums, code version and date."""
    data_dir = Path(results["data_dir"]) if results.get("data_dir") else None
    # file_sha256 hashes a file once per process: a sweep's kept-batch manifest has already hashed these
    checksums = {name: file_sha256(data_dir / name) for name in results.get("data_files", [])} if data_dir else {}
    # one digest over all files, to compare two runs' data at a glance: the sha256 of `sha256sum`'s
    # output for the files sorted by name (`cd DATA && sha256sum FILES... | sha256sum` reproduces it)
    combined = hashlib.sha256("".join(f"{digest}  {name}\n" for name, digest in sorted(checksums.items())).encode())
    return {
        **metadata,
        "limit": results.get("limit"),
        # every limit that cut some data is stamped where the claims tools look (retrieval's corpus too)
        **({"corpus_limit": results["corpus_limit"]} if "corpus_limit" in results else {}),
        "data_dir": str(data_dir) if data_dir else None,
        "data_sha256_combined": combined.hexdigest(),
        "data_sha256": checksums,
        "code": code_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _json_safe(value):
    """NaN/inf become null (strict JSON has no NaN); everything else is kept."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.2f}"


def limited_note(results: dict) -> str | None:
    limit = results.get("limit")
    if limit is None:
        return None
    return (f"**Limited run:** only the first {limit} pairs of each subset were scored; "
            "these numbers are a quick look and are not comparable to published results.")


def summary_table(results: dict) -> str:
    """One row: each task's score and the average (Spearman x100, two decimals)."""
    names = list(results["tasks"])
    headers = list(names)
    cells = [_fmt(results["tasks"][name]["score"]) for name in names]
    if results.get("avg") is not None:
        headers.append("Avg." if results.get("avg_is_published_avg") else f"Avg. ({len(results['avg_over'])} tasks)")
        cells.append(_fmt(results["avg"]))
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|", "| " + " | ".join(cells) + " |"]
    note = limited_note(results)
    return "\n".join(lines + ([f"\n{note}"] if note else []))


def subset_table(results: dict) -> str:
    lines = ["| task | subset | pairs | Spearman x100 |", "|---|---|---:|---:|"]
    for name, task in results["tasks"].items():
        for subset, entry in task["subsets"].items():
            lines.append(f"| {name} | {subset} | {entry['pairs']} | {_fmt(entry['spearman'])} |")
        if task["setting"] == "all":
            lines.append(f"| {name} | **all** | {task['pairs']} | **{_fmt(task['score'])}** |")
    return "\n".join(lines)


def to_markdown(results: dict, stamp: dict) -> str:
    method = stamp.get("method", "?")
    method = method.get("method", method.get("name", "?")) if isinstance(method, dict) else method  # Method.describe()
    title = f"STS evaluation: {method} on {stamp.get('model', '?')}"
    stamp_rows = [stamp_table(stamp)]
    timing = ""
    if results.get("sentences") is not None and results.get("encode_seconds") is not None:
        rate = results.get("sentences_per_second")
        timing = (f"\n\nEncoded {results['sentences']} distinct sentences in {results['encode_seconds']:.1f} s"
                  + (f" ({rate:.1f} sentences/s)." if rate else "."))
    return (
        f"# {title}\n\nSpearman x100 of cosine similarity vs gold. STS12-16: all subsets of the year "
        f"concatenated (\"all\"); STSBenchmark and SICKRelatedness: test split.\n\n"
        f"{summary_table(results)}{timing}\n\n## Per subset\n\n{subset_table(results)}\n\n"
        f"## Run\n\n" + "\n".join(stamp_rows) + "\n"
    )


def stamp_table(stamp: dict) -> str:
    """The stamp as a two-column Markdown table (the per-file checksums stay in the JSON)."""
    rows = ["| key | value |", "|---|---|"]
    for key, value in stamp.items():
        if key == "data_sha256":  # one line per file is in the JSON; the combined digest is above
            rows.append(f"| {key} | {len(value)} files, see the JSON |")
            continue
        shown = json.dumps(_json_safe(value), sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
        rows.append(f"| {key} | `{shown.replace('|', '/')}` |")
    return "\n".join(rows)


def report_paths(prefix: str | Path) -> tuple[Path, Path]:
    """(PREFIX.json, PREFIX.md). A prefix already ending in .json or .md is taken as the name of that file
    (`--output r.json` writes r.json and r.md, not r.json.json)."""
    prefix = Path(prefix)
    if prefix.suffix.lower() in (".json", ".md"):
        prefix = prefix.with_suffix("")
    return prefix.with_name(prefix.name + ".json"), prefix.with_name(prefix.name + ".md")


def write_report(prefix: str | Path, results: dict, metadata: dict, overwrite: bool = False,
                 markdown: Callable[[dict, dict], str] | None = None, key: str = "results") -> tuple[Path, Path]:
    """Write PREFIX.json ({"stamp": ..., key: results}) and PREFIX.md (see `report_paths`); returns their paths.
    The stamp is built here, from `metadata` and the results' data_dir, data_files and limit. An existing file is
    replaced only with `overwrite`. `markdown(results, stamp)` renders PREFIX.md for a benchmark other than STS
    (default: `to_markdown`)."""
    json_path, md_path = report_paths(prefix)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    stamp = build_stamp(metadata, results)
    text = json.dumps(_json_safe({"stamp": stamp, key: results}), indent=2, allow_nan=False, default=str) + "\n"
    with whole_or_absent(overwrite) as written:
        written.append(write_whole(json_path, text.encode("utf-8"), overwrite))
        written.append(write_whole(md_path, (markdown or to_markdown)(results, stamp).encode("utf-8"), overwrite))
    return json_path, md_path


# ---- where reports go: checked before a run, never overwritten silently, never lost ---------------------
def check_report_prefix(prefix: str | Path, overwrite: bool) -> None:
    """Before a run: PREFIX is not a folder, PREFIX.json / .md do not exist (unless `overwrite`), and their
    folder is writable. Raises InputError / OutputError naming the problem."""
    from minidecoder.output_files import check_writable_folder

    prefix = Path(prefix)
    if not prefix.name or prefix.is_dir() or str(prefix).endswith(("/", "\\")):
        raise InputError(f"--output {prefix} is a folder; it is a PREFIX for PREFIX.json and PREFIX.md",
                         f"give a file prefix, e.g. --output {prefix / 'run1'}")
    for path in report_paths(prefix):
        if path.is_dir():
            raise InputError(f"--output {prefix}: {path} is a folder", "choose another prefix")
        if path.exists() and not overwrite:
            raise InputError(f"--output {prefix}: {path} already exists; results are never overwritten silently",
                             "pass --overwrite to replace it, or choose another prefix")
    check_writable_folder(prefix.parent, "the --output folder")


def work_folder(prefix: str | Path) -> Path:
    """Where a run on PREFIX keeps its finished work until the report is written: `.PREFIX.json.partial`
    beside the report (named after the JSON, so that `eval --output r.npy` never meets `embed --output
    r.npy`'s own `.r.npy.partial`)."""
    json_path, _ = report_paths(prefix)
    return json_path.parent / f".{json_path.name}.partial"


def unsaved_results_dir() -> Path:
    """Where a report goes when its own location failed: beside the download cache."""
    from minidecoder.sources.paths import download_cache_dir
    return download_cache_dir().parent / "unsaved-results"


def write_or_rescue(write, prefix: str | Path, table: str) -> tuple[Path, Path]:
    """`write(prefix)` -> paths; if that fails (a read-only folder, a full disk), print `table`, write the
    report under unsaved_results_dir() instead, and raise OutputError naming both places, so that
    nothing computed is lost."""
    import sys

    prefix = Path(prefix)
    try:
        return write(prefix)
    except OSError as error:
        why, way_out = write_failure(error, prefix)
    except OutputError as error:  # a file appeared at the name meanwhile
        why, way_out = error.problem, (error.fix or "move it away").removesuffix(", then run the same command again")
    print(table)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    rescue = unsaved_results_dir() / f"{prefix.name or 'report'}-{stamp}"
    try:
        rescue.parent.mkdir(parents=True, exist_ok=True)
        saved = write(rescue)
        where, keep = (f"the report was saved to {saved[0]} and {saved[1]} instead (the table is above)",
                       "keep the saved report, or ")
    except (OSError, OutputError) as error:
        where, keep = f"saving it to {rescue.parent} failed too ({error}); the table above is all that is left", ""
    print(f"minidecoder: writing {prefix}.json / .md failed", file=sys.stderr)
    raise OutputError(f"writing the report to {prefix}.json / .md failed ({why}); {where}",
                      f"{keep}{way_out}, then run the same command again to write it there") from None


Curve = tuple[Sequence[Any], Sequence[float | None]]  # (x values, scores; None = not computed)

AXIS_LABELS = {
    "layer": "output layer (hidden_states index; L = final normed output)",
    "end": "TP end layer (copies before blocks start..end-1)",
    "steer_layer": "CP steer layer (0-based block)",
    "alpha": "CP alpha",
}


def plot_curves(curves: dict[str, Curve], path: str | Path, xlabel: str, title: str,
                ylabel: str = "STS-B dev Spearman x100", marks: dict[str, tuple[Any, float]] | None = None,
                overwrite: bool = False) -> Path:
    """One line per label; points whose score is None are left out. `marks` (label -> (x, score)):
    a point to ring on that label's line in its colour, e.g. the point chosen on dev. Returns the PNG path;
    an existing file there is replaced only with `overwrite`."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for label, (xs, ys) in curves.items():
        kept = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if kept:
            (line,) = ax.plot([x for x, _ in kept], [y for _, y in kept], marker="o", markersize=3, linewidth=1.4,
                              label=label)
            if marks and label in marks:
                x, y = marks[label]
                ax.plot([x], [y], marker="o", markersize=10, markerfacecolor="none", markeredgewidth=1.8,
                        color=line.get_color(), linestyle="none")
    if all(isinstance(x, int) for xs, _ in curves.values() for x in xs):
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if marks:
        ax.plot([], [], marker="o", markersize=10, markerfacecolor="none", markeredgewidth=1.8, color="0.3",
                linestyle="none", label="chosen on dev")
    if len(curves) > 1 or marks:
        ax.legend(fontsize=7, ncol=2 if len(curves) > 6 else 1)
    fig.tight_layout()
    try:
        return save_figure(fig, path, overwrite)
    finally:
        plt.close(fig)


def sweep_curves(sweep: dict, axis: str, max_lines: int = 8) -> dict[str, Curve]:
    """Score against `axis` from a sweep dict (`SweepResult.to_dict()`): one line per combination of
    the other axes when there are at most `max_lines`, else one line with the others at the best point."""
    axes, points = sweep["axes"], sweep["points"]
    others = [a for a in axes if a != axis]
    scores = {tuple(sorted(p["options"].items())): p["score"] for p in points}
    combos: list[dict] = [{}]
    for name in others:
        combos = [{**c, name: v} for c in combos for v in axes[name]]
    if len(combos) > max_lines and sweep.get("best"):
        best = sweep["best"]["options"]
        combos = [{name: best[name] for name in others}]
    curves = {}
    for combo in combos:
        label = ", ".join(f"{k}={v}" for k, v in combo.items()) or "dev"
        ys = [scores.get(tuple(sorted({**combo, axis: x}.items()))) for x in axes[axis]]
        curves[label] = (list(axes[axis]), ys)
    return curves


def sweep_figure_paths(prefix: str | Path, axes: dict[str, int]) -> dict[str, Path]:
    """axis -> PREFIX-<axis>.png, for every axis (name -> number of values) with more than one value."""
    prefix = Path(prefix)
    return {axis: prefix.with_name(f"{prefix.name}-{axis}.png") for axis, count in axes.items() if count > 1}


def plot_sweep(sweep: dict, prefix: str | Path, model: str = "?", overwrite: bool = False) -> list[Path]:
    """PREFIX-<axis>.png for every axis with more than one value; returns the paths written. A sweep with one
    value per axis is refused: it has no curve to draw (the CLI refuses `--plot` on it before the model loads)."""
    method = sweep["method"].get("method", "?")
    paths = sweep_figure_paths(prefix, {axis: len(values) for axis, values in sweep["axes"].items()})
    if not paths:
        given = ", ".join(f"{axis}={values!r}" for axis, values in sweep["axes"].items())
        raise InputError(f"plot_sweep draws the dev score against each swept option with two or more values, but "
                         f"this sweep has one value per option ({given}), so there is no curve to draw",
                         "sweep two or more values of an option, e.g. layer=[2, 3]")
    with whole_or_absent(overwrite) as written:
        for axis, path in paths.items():
            written.append(plot_curves(sweep_curves(sweep, axis), path, AXIS_LABELS.get(axis, axis),
                                       f"{method} on {model}: STS-B dev against {axis}", overwrite=overwrite))
    return written
