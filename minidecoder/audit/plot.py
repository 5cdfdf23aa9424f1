"""`minidecoder explain --plot FILE.png`: the audit record as a picture.

One panel of what the steps reported, block by block (TP / HTP: the norm of each row written; ReBA:
how much each block raised the running maximum; CP: per head, |a| and the steering term written), and
a heatmap with token labels for each matrix a pass added (ReBA's fused attention A). Drawn from the
events' own keys, like the text (`audit.text`), so no method is named here.
"""
from __future__ import annotations

from pathlib import Path

from minidecoder.audit.explain import Explanation
from minidecoder.running.figures import pyplot, save_figure

POSITIONS = ("block", "target", "source", "position", "head")  # keys that say where, not how much


def plot_explanation(record: Explanation, path: str | Path, overwrite: bool = False) -> Path:
    """The figure of `record` at `path` (its suffix names the format); an existing file is replaced only
    with `overwrite` (minidecoder.output_files)."""
    plt = pyplot()
    matrices = {name: value for name, value in record.details.items() if value.dim() == 2}
    panels = 1 + len(matrices)
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.6), dpi=110, squeeze=False)
    _events_panel(axes[0][0], record)
    tokens = record.passes[0].tokens if record.passes else []
    for ax, (name, value) in zip(axes[0][1:], matrices.items()):
        labels = [f"{q}:{t.strip() or repr(t)}" for q, _, t in tokens]
        image = ax.imshow(value.numpy(), cmap="viridis")
        if len(labels) == value.shape[0]:
            ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    try:
        return save_figure(fig, path, overwrite)
    finally:
        plt.close(fig)


def _events_panel(ax, record: Explanation) -> None:
    events = [e for p in record.passes for e in p.interventions]
    nested = [(e, key) for e in events for key, value in e.items()
              if isinstance(value, list) and value and isinstance(value[0], dict)]
    if nested:  # per-head numbers of the last such event (CP: |a| and |a'| per head)
        event, key = nested[-1]
        rows = event[key]
        numeric = [k for k, v in rows[0].items() if isinstance(v, float) and k.endswith("norm")][:3]
        width = 0.8 / max(len(numeric), 1)
        for j, name in enumerate(numeric):
            ax.bar([i + (j - (len(numeric) - 1) / 2) * width for i in range(len(rows))], [r[name] for r in rows],
                   width, label=name)
        ax.set_xticks(range(len(rows)), [str(r.get(key.rstrip("s"), i)) for i, r in enumerate(rows)])
        ax.set_xlabel(f"{key} at block {event.get('block')}")
        ax.legend(fontsize=7)
    elif events:  # each numeric key against the block, one line per position it concerns
        lines: dict[str, list[tuple[int, float]]] = {}
        for e in events:
            where = "".join(f" {k}={e[k]}" for k in ("target", "position") if k in e)
            for k, v in e.items():
                if isinstance(v, (int, float)) and k not in POSITIONS and not isinstance(v, bool):
                    lines.setdefault(f"{k}{where}", []).append((e["block"], float(v)))
        for label, points in list(lines.items())[:8]:
            ax.plot([b for b, _ in points], [v for _, v in points], "o-", label=label)
        ax.set_xlabel("0-based block")
        ax.legend(fontsize=7)
    else:
        ran = record.passes[-1].blocks_run if record.passes else []
        ax.bar(ran, [1] * len(ran))
        ax.set_xlabel("0-based block (ran)")
        ax.set_yticks([])
    ax.set_title(f"{record.method['method']}: per-block intervention on {record.text[:40]!r}", fontsize=9)
