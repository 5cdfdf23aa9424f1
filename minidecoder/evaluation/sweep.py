"""Hyper-parameter sweeps on STS-B dev, sharing every block that two grid points compute alike.

A grid is the product of a few option axes of one method (`layer`, TP's `end`, CP's `steer_layer` and
`alpha`, or any other option); each point is scored by Spearman x100 on **STS-B dev only** (docs/spec.md
section 9: tune on dev, never on a test split).

No rule here knows a method. Each point is the method with the point's options, and its forwards are
its own `passes` (minidecoder.methods.loop.Pass). Per batch, the sweep advances every point's passes
together; passes of the same tokens share one forward, which forks where their steps stop agreeing
(minidecoder.fast.forking: `same_before`, `fork`), so each block is computed once per distinct
history:

    output layers     one forward, read at every layer               (any method)
    TP's end layer    copies agree until the smaller end: one trunk, a branch at each end
    CP's steer block  one auxiliary pass recording every candidate block; the prompt's forward is the
                      same until the first steered block, then a branch per (block, alpha)
    ReBA's layer      one forward folds every block; each layer read from it

Every branch performs exactly the operations of a separate run of that point on the same batch (same
length-sorted batches as `minidecoder.embed`), so the sweep's embeddings equal separate runs' to float
tolerance (tests/evaluation/test_sweep.py compares scores to 1e-6). The cost is measured, not claimed:
a forward pre-hook on every block counts rows x blocks actually computed; the naive cost is what the
points' passes would compute run separately (the blocks each pass runs, times its rows).

Given a work folder (`minidecoder sweep` gives `.PREFIX.json.partial/`), every finished batch is kept
there as a chunk of running.jobs' work folder (`KeptChunks`: the same manifest check and chunk files as
a resumable embedding job): its (points, rows, E) float32 vectors and its counts. Ctrl-C keeps them, the
same call resumes from them, and the scores equal an uninterrupted run's exactly (the batches are the
same, and a kept batch is read back bit for bit).

The report: the Markdown and JSON of a sweep (`minidecoder sweep`): a pivot of dev scores with the best
point in bold, what sharing saved, and the run's stamp (as `eval sts` reports, `report.build_stamp`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from minidecoder.errors import InputError, MinidecoderError
from minidecoder.fast.forking import embed_points
from minidecoder.evaluation.family import checked_count, refuse_reading_options
from minidecoder.evaluation.report import _fmt
from minidecoder.evaluation.sts import StsScorer, StsTask, load_tasks, unique_sentences
from minidecoder.fast.options import fast_paths_of
from minidecoder.methods import Method
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.running.jobs import KeptChunks
from minidecoder.sources.checksums import file_sha256, model_identity, sources_sha256


DEV_TASK = "STSBenchmark-dev"
Point = dict[str, Any]  # option name -> value of one grid point


# ---- the grid ------------------------------------------------------------------------------------
def parse_values(text: str) -> list[Any]:
    """'2,3,4' -> [2, 3, 4]; '0.5,1' -> [0.5, 1]; '[0,1],[2,3]' -> [[0, 1], [2, 3]]: split at the commas
    outside brackets, braces and quotes, each value read as JSON when it parses. A plain text keeps its
    spaces ('token: ' stays 'token: '), except those right after a separating comma ('a, b' is 'a', 'b');
    a JSON string keeps any ('" x"')."""

    out = []
    for piece in _top_level_pieces(text):
        if not piece.strip():
            continue
        try:
            out.append(json.loads(piece))
        except json.JSONDecodeError:
            out.append(piece)
    if not out:
        raise InputError(f"{text!r} lists no values", "give comma-separated values, e.g. 2,3,4")
    return out


def _top_level_pieces(text: str) -> list[str]:
    """`text` split at its commas outside [], {} and "...", the spaces after each comma dropped."""
    pieces, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(text):
        if quoted:
            quoted = not (char == '"' and text[i - 1] != "\\")
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    return [pieces[0]] + [piece.lstrip() for piece in pieces[1:]]


def layer_axis(text: str, num_layers: int) -> list[int]:
    """'all' -> 1..L (every block output; L is the final normed output); 'a,b,c' -> those layers as
    non-negative hidden_states indices (-1 -> L). Layer 0 (the embeddings) is never in 'all': it sees
    no context, so a last-token embedding there is the same vector for every sentence."""
    if text.strip() == "all":
        return list(range(1, num_layers + 1))
    values = parse_values(text)
    return sorted({resolve_output_layer(v, num_layers) for v in values})


def grid_points(axes: dict[str, list[Any]]) -> list[Point]:
    """The product of the axes, in axis order (the last axis varies fastest)."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def method_at(method: Method, point: Point) -> Method:
    """The method with the point's options set (its own validation runs)."""
    known = {f.name for f in dataclasses.fields(method)}
    unknown = sorted(set(point) - known)
    if unknown:
        raise InputError(f"method {method.name!r} has no option(s) {unknown} to sweep",
                         f"its options are: {', '.join(sorted(known))}")
    return dataclasses.replace(method, **point)


# ---- running many configurations' passes together -------------------------------------------------
RULE = "shared forwards: one per distinct history of the points' steps, forked where they differ"


def sweep_points(method: Method, model, texts: list[str], points: list[Point]) -> tuple[list[torch.Tensor], int]:
    """Every point's (B, E) embeddings of one batch, and the naive cost (rows x blocks)."""
    return embed_points(model, [method_at(method, p) for p in points], texts)


# ---- the driver ------------------------------------------------------------------------------------
class BlockCounter:
    """Counts rows x blocks run while active (a forward pre-hook on every block, removed on exit), by the thread
    that entered it: another thread's work on the same model is not this sweep's."""

    def __init__(self, model) -> None:
        self.model, self.count, self._handles, self._thread = model, 0, [], threading.get_ident()

    def _hook(self, module, args) -> None:
        if threading.get_ident() == self._thread:
            self.count += int(args[0].shape[0])

    def __enter__(self) -> "BlockCounter":
        self._thread = threading.get_ident()
        self._handles = [block.register_forward_pre_hook(self._hook) for block in self.model.layers]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


@dataclass
class SweepResult:
    method: dict  # the base method's describe()
    axes: dict[str, list[Any]]
    points: list[dict]  # {"options", "score" (dev Spearman x100) or None, "skipped" reason or None}
    best: dict | None
    rule: str
    cost: dict
    sentences: int
    encode_seconds: float
    limit: int | None
    data_dir: str | None
    data_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["sentences_per_second"] = self.sentences / self.encode_seconds if self.encode_seconds > 0 else None
        return out


BATCH_SIZE = 32  # sentences a batch of the grid, unless the caller says


def sentence_order(model, texts: Sequence[str]) -> list[int]:
    """The order `minidecoder.embed` batches in (stable sort by token count), so batches are identical."""
    lengths = [len(ids) for ids in model.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    return sorted(range(len(texts)), key=lambda i: lengths[i])


KEPT_COUNTS = {"blocks_computed": int, "blocks_naive": int, "seconds": (int, float)}  # each kept batch's record


def embed_grid(model, method: Method, points: list[Point], texts: list[str], batch_size: int = BATCH_SIZE,
               progress: bool = True, kept: KeptChunks | None = None) -> tuple[list[torch.Tensor], dict]:
    """Every point's (N, E) embeddings of `texts`, sharing computation; and the cost dict:
    {"blocks_computed", "blocks_naive" (rows x blocks), "ratio", "rule", "groups", "seconds", "batches",
    "resumed_batches"}.

    kept: a work folder (running.jobs.KeptChunks, one chunk per batch) that keeps every finished batch:
    its (P, B, E) float32 vectors and its counts. A batch found there is read back bit for bit instead of
    computed, so Ctrl-C (JobInterrupted: what is kept) and the same call again compute only the rest. The
    counts and seconds cover every batch, those computed by an earlier run included (kept with each
    batch); "resumed_batches" says how many were."""
    try:
        return _embed_batches(model, method, points, texts, batch_size, progress, kept)
    except KeyboardInterrupt:
        if kept is None:
            raise
        raise kept.interrupted() from None
    except BaseException:
        if kept is not None:
            kept.failed()
        raise


def _embed_batches(model, method: Method, points: list[Point], texts: list[str], batch_size: int, progress: bool,
                   kept: KeptChunks | None) -> tuple[list[torch.Tensor], dict]:
    out = [torch.empty(len(texts), model.config.hidden_size, dtype=torch.float32) for _ in points]
    order = sentence_order(model, texts)
    batches = [order[first:first + batch_size] for first in range(0, len(order), batch_size)]
    earlier = {"blocks_computed": 0, "seconds": 0.0}  # what the batches read back cost their run
    naive, resumed, start = 0, 0, time.perf_counter()
    with tqdm(total=len(texts), unit="sent", desc=f"sweep {method.name}", file=sys.stderr,
              disable=not progress, dynamic_ncols=True) as bar, BlockCounter(model) as counter, torch.inference_mode():
        for b, index in enumerate(batches):
            if kept is not None and kept.done(b):
                # a point may legitimately pool NaN (its score is then skipped), so a kept NaN is kept as computed
                array, info = kept.load(b, (len(points), len(index), model.config.hidden_size), KEPT_COUNTS,
                                        finite=False)
                vectors = torch.from_numpy(array)  # (P, B, E)
                for key in earlier:
                    earlier[key] += info[key]
                naive += info["blocks_naive"]
                resumed += 1
            else:
                tick, before = time.perf_counter(), counter.count
                pooled, blocks = sweep_points(method, model, [texts[i] for i in index], points)
                vectors = torch.stack([v.float().cpu() for v in pooled])  # (P, B, E)
                naive += blocks
                if kept is not None:
                    kept.save(b, vectors.numpy(), {"rows": len(index), "blocks_computed": counter.count - before,
                                                   "blocks_naive": blocks, "seconds": time.perf_counter() - tick})
            for k in range(len(points)):
                out[k][index] = vectors[k]
            bar.update(len(index))
            bar.set_postfix_str(f"{bar.n / (time.perf_counter() - start):.1f} sentences/s")
    computed = counter.count + earlier["blocks_computed"]
    # "groups": always one pass over the sentences now; the key stays for reports that compare with older ones
    cost = {"rule": RULE, "groups": 1, "blocks_computed": computed, "blocks_naive": naive,
            "ratio": computed / naive if naive else None,
            "seconds": time.perf_counter() - start + earlier["seconds"],
            "batches": len(batches), "resumed_batches": resumed}
    return out, cost


def sweep_sts(model, method: Method, axes: dict[str, list[Any]], data_dir=None, limit: int | None = None,
              batch_size: int = BATCH_SIZE, progress: bool = True, dev: StsTask | None = None,
              work: str | Path | None = None) -> SweepResult:
    """Score every point of the grid on STS-B dev (and nothing else). Invalid points (e.g. a TP end
    past the output layer) are listed with the reason they were skipped. `dev`: the task already loaded
    (its own limit is the run's; `data_dir` and `limit` are then refused), else it is loaded from `data_dir`
    with `limit`.

    work: a folder that keeps every finished batch (see `embed_grid`), bound to everything the vectors
    depend on (`kept_manifest`): Ctrl-C raises running.jobs.JobInterrupted and the same call resumes;
    other settings are refused, naming what differs. The caller removes it once the result is safe."""
    batch_size = checked_count(batch_size, "batch_size", "sentences", BATCH_SIZE)  # -2: no batch, no score
    empty = [name for name, values in axes.items() if len(values) == 0]  # a grid of no point, not one refused
    if empty:
        raise InputError(f"the grid's axis {', '.join(empty)} has no values: there is no point to sweep",
                         f"give it one value or more, e.g. axes={{{empty[0]!r}: [...]}}, or leave it out")
    if dev is None:
        (dev,) = load_tasks([DEV_TASK], data_dir, limit)
    else:  # dev was read with its own folder and limit: these would be ignored
        refuse_reading_options("sweep_sts", f"load_tasks([{DEV_TASK!r}], data_dir, limit)", data_dir=data_dir,
                               limit=limit)
    if dev.name != DEV_TASK:
        raise InputError(f"a sweep tunes on {DEV_TASK} only, not {dev.name}", "never tune on a test split")
    records, valid, refusals = [], [], []
    for point in grid_points(axes):
        record = {"options": point, "score": None, "skipped": None}
        try:
            method_at(method, point).check(model)
            valid.append(point)
        except MinidecoderError as error:
            record["skipped"] = str(error).splitlines()[0]
            refusals.append(error)
        records.append(record)
    if not valid:  # the first point's own refusal says what is wrong and the way out (a layer, an alpha...)
        raise InputError(f"no valid point in the grid {axes}: {refusals[0].problem}",
                         refusals[0].fix or "change the swept values")
    sentences = unique_sentences([dev])
    kept = None
    if work is not None:
        kept = KeptChunks(work, kept_manifest(model, method, axes, valid, sentences, batch_size, dev_facts(dev)),
                          count=math.ceil(len(sentences) / batch_size))
    vectors, cost = embed_grid(model, method, valid, sentences, batch_size, progress, kept)
    scorer = StsScorer([dev], sentences)
    scores = {_key(point): scorer(v)["tasks"][DEV_TASK]["score"] for point, v in zip(valid, vectors)}
    for record in records:
        record["score"] = scores.get(_key(record["options"]))
    scored = [r for r in records if r["score"] is not None and math.isfinite(r["score"])]
    best = max(scored, key=lambda r: r["score"]) if scored else None  # first of equals (grid order)
    return SweepResult(method=method.describe(), axes={k: list(v) for k, v in axes.items()}, points=records,
                       best=best, rule=cost["rule"], cost=cost, sentences=len(sentences),
                       encode_seconds=cost["seconds"], limit=dev.limit, data_dir=str(dev.data_dir),
                       data_files=list(dev.files))


KEPT_VERSION = 1  # of the manifest below


def kept_manifest(model, method: Method, axes: dict[str, list[Any]], points: list[Point], sentences: list[str],
                  batch_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """What a grid's kept batches depend on; a later run reuses them only if its manifest is equal. The
    model is its files' sha256 (running.jobs binds an embedding job the same way), the data what `data` says
    of it (a sweep: STS-B dev's files' sha256 and limit) and the sentences themselves, the code a sha256 of
    minidecoder's sources (a changed method never meets batches of the old one)."""
    if not getattr(model, "source", None):
        raise InputError("keeping a sweep's batches needs a model loaded from a folder (its weight files' sha256 "
                         "bind them)", "load it with minidecoder.load(folder), or sweep without work=")
    return {
        "kind": "sweep", "version": KEPT_VERSION,
        "model": model_identity(model),
        "dtype": str(model.dtype).replace("torch.", ""),
        "device": model.device.type,
        "fast_paths": dataclasses.asdict(fast_paths_of(model)),  # a fast path may round differently
        "method": method.describe(), "axes": axes, "points": points, "batch_size": batch_size,
        "data": {**data, "sentences": len(sentences),
                 "sentences_sha256": hashlib.sha256(json.dumps(sentences).encode("utf-8")).hexdigest()},
        "code_sha256": sources_sha256(),
    }


def dev_facts(dev: StsTask) -> dict[str, Any]:
    """What a sweep's manifest says of its data: the task, its limit and its files' sha256."""
    return {"task": dev.name, "limit": dev.limit,
            "files": {name: file_sha256(Path(dev.data_dir) / name) for name in dev.files}}


def _key(point: Point) -> str:
    return repr(sorted(point.items()))


# ---- report ----------------------------------------------------------------------------------------
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
    from minidecoder.evaluation.report import stamp_table

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
    return "\n".join(lines + ["", "## Run", "", stamp_table(stamp)]) + "\n"


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
    """PREFIX.json and PREFIX.md, stamped like `eval sts` reports (`report.write_report`); an existing file is
    replaced only with `overwrite`."""
    from minidecoder.evaluation.report import write_report

    return write_report(prefix, result.to_dict(), metadata, overwrite, lambda _, stamp: sweep_markdown(result, stamp),
                        key="sweep")
