"""PNG figures of sweeps, like the papers' figures: score against output layer, score against TP's
end layer (TP arXiv 2412.11556, the layer figures; CP arXiv 2505.12831, the steer-layer figure).

matplotlib is an optional extra (`pip install minidecoder[plots]`); it is imported only when a
figure is drawn, with the Agg backend (no display needed). `running.figures.check_figure_path` is the check a command
runs before any work (matplotlib installed, a format it writes); figures are written through
minidecoder.output_files (running/figures.py), so an existing figure is replaced only with `overwrite`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minidecoder.running.figures import pyplot, save_figure

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
    """PREFIX-<axis>.png for every axis with more than one value; returns the paths written."""
    method = sweep["method"].get("method", "?")
    paths = sweep_figure_paths(prefix, {axis: len(values) for axis, values in sweep["axes"].items()})
    return [plot_curves(sweep_curves(sweep, axis), path, AXIS_LABELS.get(axis, axis),
                        f"{method} on {model}: STS-B dev against {axis}", overwrite=overwrite)
            for axis, path in paths.items()]
