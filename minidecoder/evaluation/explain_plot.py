"""`minidecoder explain --plot FILE.png`: the audit record as a picture.

One panel of per-block intervention sizes (TP / HTP: the norm of each row written; ReBA: how much each
block raised the running maximum A; CP: the steering term's norm per head at the steered block), and
for ReBA a heatmap of the fused matrix A over the repeated text with token labels. matplotlib is the
`plots` extra, imported only here, when a figure is drawn.
"""
from __future__ import annotations

from pathlib import Path

from minidecoder.evaluation.plots import _pyplot, save_figure  # the one place that imports matplotlib (Agg)
from minidecoder.running.explain import Explanation


def plot_explanation(record: Explanation, path: str | Path, overwrite: bool = False) -> Path:
    """The figure of `record` at `path` (its suffix names the format); an existing file is replaced only
    with `overwrite` (minidecoder.output_files)."""
    plt = _pyplot()
    panels = 2 if record.fused is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.6), dpi=110, squeeze=False)
    ax = axes[0][0]
    events = [e for p in record.passes for e in p.interventions]
    copies = [e for e in events if "target" in e]
    folds = [e for e in events if "raised" in e]
    name = record.method["method"]
    if record.steering:
        s = record.steering[-1]
        heads = s.get("heads") or [{"head": "all", **s["total"]}]
        x = list(range(len(heads)))
        ax.bar([i - 0.2 for i in x], [h["a_norm"] for h in heads], 0.4, label="|a| (prompt)")
        ax.bar([i + 0.2 for i in x], [h["steering_norm"] for h in heads], 0.4, label="|a'| (steering term written)")
        ax.set_xticks(x, [str(h["head"]) for h in heads])
        ax.set_xlabel(f"head of {s['site']} at block {s['block']} (0-based), last token")
        ax.set_ylabel("norm")
        ax.legend()
    elif copies:
        blocks = sorted({e["block"] for e in copies})
        for k, target in enumerate(sorted({e["target"] for e in copies})):
            rows = [e for e in copies if e["target"] == target]
            ax.plot([e["block"] for e in rows], [e["written_norm"] for e in rows], "o-", label=f"h[{target}] written")
            if k == 7:
                break
        ax.set_xticks(blocks)
        ax.set_xlabel("0-based block the copy precedes")
        ax.set_ylabel("norm of the row written")
        ax.legend(fontsize=7)
    elif folds:
        ax.bar([e["block"] for e in folds], [e["total_increase"] for e in folds])
        ax.set_xlabel("0-based block")
        ax.set_ylabel("sum of increases of the running max A")
    else:
        ran = record.passes[-1].blocks_run if record.passes else []
        ax.bar(ran, [1] * len(ran))
        ax.set_xlabel("0-based block (ran)")
        ax.set_yticks([])
    ax.set_title(f"{name}: per-block intervention on {record.text[:40]!r}", fontsize=9)
    if record.fused is not None:
        ax = axes[0][1]
        labels = [f"{q}:{t.strip() or repr(t)}" for q, _, t in record.passes[0].tokens]
        image = ax.imshow(record.fused.numpy(), cmap="viridis")
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_title("ReBA fused attention A = max over blocks, heads of (P + P^T)/2", fontsize=9)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    try:
        return save_figure(fig, path, overwrite)
    finally:
        plt.close(fig)
