"""Hyper-parameter sweeps on STS-B dev, sharing every block that two grid points have in common.

A grid is the product of a few option axes of one method (`layer`, TP's `end`, CP's `steer_layer` and
`alpha`, or any other option); each point is scored by Spearman x100 on **STS-B dev only** (spec
`methods.md` section 9: tune on dev, never on a test split). What is shared, per batch:

    output layer   one forward yields every hidden_states index at once (early exit at the deepest);
                   each is pooled as the method pools it               (`runner.hidden_at_layers`)
    TP end layer   the copying forward runs once; before each candidate end block e it forks: the
                   branch continues from that state without copying, the trunk keeps copying
                       embed ─ 0 ─ [copy] 1 ─ [copy] 2 ─ [copy] 3 ─ ...      (trunk: copies before every block >= start)
                                             └ e=2 branch: 2 ─ 3 ─ ... L      (no copies from block 2 on)
                                                       └ e=3 branch: 3 ─ ... L
    CP steer/alpha the auxiliary prompt runs once through blocks 0..max(l) and its site is read at every
                   candidate l; the normal prompt runs unsteered once through blocks 0..max(l)-1, and
                   each (l, alpha) continues from the unsteered state before block l

Any other axis (e.g. a template) splits the grid into groups that are run one after another; a method
without a sharing rule (HTP, ReBA, ... for now) runs each point separately (`embed_batch`), which is
always correct, only not shared.

Every branch performs exactly the operations of a separate run of that point on the same batch (same
length-sorted batches as `minidecoder.embed`), so the sweep's embeddings equal separate runs' to float
tolerance (tests/test_sweep.py compares scores to 1e-6). The cost is measured, not claimed: a
forward pre-hook on every block counts rows x blocks actually computed; the naive cost is what
separate runs of every valid point compute (`naive_blocks`, checked against measured separate runs
in the tests).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from minidecoder.errors import InputError, MinidecoderError
from minidecoder.evaluation.harness import StsScorer, unique_sentences
from minidecoder.evaluation.sts_data import StsTask, load_tasks
from minidecoder.methods.base import Method
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.runner import hidden_at_layers, last_token, mean_over_spans
from minidecoder.core.model import Sites

DEV_TASK = "STSBenchmark-dev"
Point = dict[str, Any]  # option name -> value of one grid point
Sweeper = Callable[[Method, Any, list[str], list[Point]], list[torch.Tensor]]  # -> one (B, E) per point


# ---- the grid ------------------------------------------------------------------------------------
def parse_values(text: str) -> list[Any]:
    """'2,3,4' -> [2, 3, 4]; '0.5,1' -> [0.5, 1]; values are read as JSON when they parse."""
    import json

    out = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError:
            out.append(raw)
    if not out:
        raise InputError(f"{text!r} lists no values", "give comma-separated values, e.g. 2,3,4")
    return out


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


def _index(method: Method, model) -> int:
    """The hidden_states index a method reads (CP's `layer=None` means its prompt's reference layer)."""
    layer = method.output_layer() if hasattr(method, "output_layer") else method.layer
    return resolve_output_layer(layer, model.num_layers)


# ---- sharing rules ---------------------------------------------------------------------------------
@dataclass
class Reading:
    """How a method that only reads one output layer turns hidden states into its embedding."""

    templates: list[str]  # one forward per template, embeddings averaged over templates
    prepare: Callable[[list[str]], list[str]]
    pool: Callable[[torch.Tensor, PromptBatch], torch.Tensor]  # (B, T, E) -> (B, E)
    average: bool  # stack-and-mean over templates (MetaEOL) rather than a single template


def reading_of(method: Method) -> Reading | None:
    """The `Reading` of the layer-reading methods (pooling, prompts, MetaEOL, Echo), else None.

    Each mirrors that method's `embed_batch` line for line; tests/test_sweep.py checks every one
    against `embed_batch` itself, so a change in a method that is not mirrored here fails there."""
    from minidecoder.methods import echo, metaeol, pooling, prompts

    prepare = lambda texts: prompts.prepare_texts(texts, method.senteval_text)  # noqa: E731
    if type(method) is pooling.MeanPooling:
        if method.over == "all":
            return Reading([method.template], prepare, pooling.mean_over_mask, False)
        return Reading([method.template], prepare,
                       lambda h, batch: mean_over_spans(h, batch.text_spans, method.occurrence), False)
    if type(method) is pooling.LastTokenPooling:
        return Reading([method.template], prepare, last_token, False)
    if isinstance(method, prompts._LastTokenPrompt) and type(method).embed_batch is prompts._LastTokenPrompt.embed_batch:
        return Reading([method.prompt_template()], prepare, last_token, False)
    if type(method) is metaeol.MetaEOL:
        return Reading([metaeol.METAEOL_TEMPLATES[t] for t in method.tasks], prepare, last_token, True)
    if type(method) is echo.Echo:
        if method.pooling == "mean":
            return Reading([method.template], prepare, lambda h, batch: mean_over_spans(h, batch.text_spans, -1), False)

        def last_of_copy(h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
            ends = torch.tensor([spans[-1][1] - 1 for spans in batch.text_spans], device=h.device)
            return h[torch.arange(h.shape[0], device=h.device), ends]
        return Reading([method.template], prepare, last_of_copy, False)
    return None


def sweep_layers(method: Method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """Layer-reading methods: one forward per template gives every requested layer."""
    reading = reading_of(method)
    indices = [_index(method_at(method, p), model) for p in points]
    texts = reading.prepare(texts)
    per_template = []  # per template: {index: (B, E)}
    for template in reading.templates:
        batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
        states = hidden_at_layers(model, batch, sorted(set(indices)))
        per_template.append({i: reading.pool(h, batch) for i, h in states.items()})
    if reading.average:
        return [torch.stack([pooled[i] for pooled in per_template]).mean(dim=0).float() for i in indices]
    return [per_template[0][i].float() for i in indices]


def _run_branch(model, h: torch.Tensor, first: int, wanted: Sequence[int], ctx_for: Callable[[int], Any],
                before: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                sites_for: Callable[[int], Sites | None] | None = None) -> dict[int, torch.Tensor]:
    """From `h` = the input of block `first`, run blocks first..max(wanted)-1; returns hidden_states[k]
    for every k in `wanted` (all >= first). `before(i, h)` rewires the stream before block i."""
    out: dict[int, torch.Tensor] = {}
    L = model.num_layers
    deepest = max(wanted)
    if first in wanted:
        out[first] = model.norm(h) if first == L else h
    for i in range(first, deepest):
        if before is not None:
            h = before(i, h)
        h = model.layers[i](h, ctx_for(i), sites_for(i) if sites_for is not None else None)
        if i + 1 in wanted:
            out[i + 1] = model.norm(h) if i + 1 == L else h  # only hidden_states[L] is normed
    return out


def sweep_tp(method: Method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """TP over output layers x end layers: the trunk copies before every block >= start; at each
    candidate end e a branch leaves it (before block e) and continues without copies (except the
    `resume_at` ones), which is exactly the forward of TP with that end (`tp.forward_with_copies`)."""
    from minidecoder.methods import tp
    from minidecoder.methods.prompts import prepare_texts

    L = model.num_layers
    keys = [(method_at(method, p).end, _index(method_at(method, p), model)) for p in points]
    ends = sorted({e for e, _ in keys})
    wanted = {e: sorted({i for e2, i in keys if e2 == e}) for e in ends}
    resume = set(range(method.resume_at, L)) if method.resume_at is not None else set()
    texts = prepare_texts(texts, method.senteval_text)
    per_template = []
    for template in tp.tp_templates(method.prompt, method.num_pst):
        inputs = method.encode(model, template, texts)
        batch = inputs.batch
        ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
        B, T = ids.shape
        plan = tp.tp_copy_plan(batch, inputs.positions).to(model.device)
        h = model.embed(ids, {inputs.placeholder_id: inputs.row})  # (B, T, E)
        ctx = model.context(mask, T, B)
        first_ctx = ctx
        if method.mask_pst_first_layer:  # as TP.hidden / forward_with_copies
            visible = mask & ~(ids == inputs.placeholder_id)
            first_ctx = model.context(visible, T, B, position_ids=ctx.positions)
        ctx_for = lambda i: first_ctx if i == 0 else ctx  # noqa: E731
        after_end = lambda i, state: plan.apply(state) if i in resume else state  # noqa: E731
        states: dict[tuple[int, int], torch.Tensor] = {}
        for i in range(0, ends[-1] + 1):
            if i in wanted:  # fork: the branch with end = i starts from the trunk's state before block i
                for index, state in _run_branch(model, h, i, wanted[i], ctx_for, after_end).items():
                    states[(i, index)] = last_token(state, batch)
            if i == ends[-1]:
                break
            if i >= method.start:
                h = plan.apply(h)  # spec 4.2 on the trunk: copy before every block from `start` on
            h = model.layers[i](h, ctx_for(i))
        per_template.append(states)
    return [torch.stack([states[key] for states in per_template]).mean(dim=0).float() for key in keys]


def sweep_cp(method: Method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """CP over output layers x steer layers x alphas: one auxiliary pass for every steer layer, one
    unsteered trunk of the normal prompt, one branch per (steer layer, alpha) from the trunk's state
    before the steered block (`cp.steered_hidden` from there on)."""
    from minidecoder.methods import cp
    from minidecoder.methods.text import senteval_sentence

    H = model.config.num_heads
    site = cp.SITE_NAMES[method.site]
    uses_alpha = method.mode in ("ns", "nr_scaled")  # nr / nr_head ignore alpha: one branch serves all
    keys = []
    for p in points:
        m = method_at(method, p)
        keys.append((m.steer_layer, float(m.alpha) if uses_alpha else None, _index(m, model)))
    steers = sorted({l for l, _, _ in keys})
    branches = sorted({(l, a) for l, a, _ in keys}, key=lambda x: (x[0], x[1] if x[1] is not None else 0.0))
    wanted = {br: sorted({i for l, a, i in keys if (l, a) == br}) for br in branches}
    prepare = getattr(method, "senteval_text", getattr(method, "senteval_prep", True))  # renamed in cp.py
    sentences = [senteval_sentence(t) for t in texts] if prepare else list(texts)

    def start(batch: PromptBatch):
        ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
        h = model.embed(ids)  # (B, T, E)
        ctx = model.context(mask, ids.shape[1], ids.shape[0])
        last = batch.last_positions(h.device)
        return h, ctx, last, torch.arange(h.shape[0], device=h.device)

    # auxiliary prompt: blocks 0..max(l), the site read at every candidate l (cp.auxiliary_activation)
    aux = encode_prompts(model.tokenizer, cp.resolve_aux_prompt(method.aux_prompt), sentences)
    h, ctx, last, rows = start(aux)
    b: dict[int, torch.Tensor] = {}
    for i in range(steers[-1] + 1):
        sites = Sites(record={site}) if i in steers else None
        h = model.layers[i](h, ctx, sites)
        if sites is not None:
            b[i] = sites.store[site][rows, last]  # (B, D)
    per_template = []
    for template in cp.resolve_prompts(method.prompt):
        batch = encode_prompts(model.tokenizer, template, sentences)
        h, ctx, last, rows = start(batch)
        before_steer: dict[int, torch.Tensor] = {}
        for i in range(steers[-1] + 1):  # the unsteered trunk
            if i in steers:
                before_steer[i] = h
            if i == steers[-1]:
                break
            h = model.layers[i](h, ctx)
        states = {}
        for l, alpha in branches:
            b_l = b[l]
            replace = lambda a, b_l=b_l, alpha=alpha: cp.steer(a, b_l, method.mode, alpha if alpha is not None  # noqa: E731
                                                               else method.alpha, H)

            def edit(value: torch.Tensor, replace=replace) -> torch.Tensor:  # as cp.steered_hidden's edit
                value = value.clone()
                value[rows, last] = replace(value[rows, last]).to(value.dtype)
                return value
            out = _run_branch(model, before_steer[l], l, wanted[(l, alpha)], lambda i: ctx,
                              sites_for=lambda i, edit=edit, l=l: Sites(edit={site: edit}) if i == l else None)
            for index, state in out.items():
                states[(l, alpha, index)] = last_token(state, batch).float()
        per_template.append(states)
    return [torch.stack([states[key] for states in per_template]).mean(dim=0) for key in keys]


def sweep_separately(method: Method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """No sharing: each point's own `embed_batch` (correct for any method)."""
    return [method_at(method, p).embed_batch(model, texts).float() for p in points]


def sharing_rule(method: Method) -> tuple[str, frozenset[str], Sweeper]:
    """(rule name, the axes it shares, the sweeper) for a method."""
    from minidecoder.methods.base import METHODS

    if reading_of(method) is not None:
        return "one forward, every output layer", frozenset({"layer"}), sweep_layers
    if "tp" in METHODS and type(method) is METHODS["tp"]:
        return "TP: one trunk, forks at each end layer", frozenset({"layer", "end"}), sweep_tp
    if "cp" in METHODS and type(method) is METHODS["cp"] and not getattr(method, "tp", False):
        return "CP: one auxiliary pass, one trunk, a branch per (steer, alpha)", \
            frozenset({"layer", "steer_layer", "alpha"}), sweep_cp
    return "separate runs (no sharing rule for this method)", frozenset(), sweep_separately


def naive_blocks(method: Method, model) -> int:
    """Blocks (per text) that a separate run of `method` computes: what the sweep is compared with.
    Layer-reading and TP: the output index per template; CP adds its auxiliary pass (l + 1 blocks);
    ReBA runs every block. Other methods: their output index (per template where they have several)."""
    from minidecoder.methods.base import METHODS

    L = model.num_layers
    if reading_of(method) is not None:
        return _index(method, model) * len(reading_of(method).templates)
    if "tp" in METHODS and type(method) is METHODS["tp"]:
        from minidecoder.methods.tp import tp_templates
        return _index(method, model) * len(tp_templates(method.prompt, method.num_pst))
    if "cp" in METHODS and type(method) is METHODS["cp"]:
        from minidecoder.methods.cp import resolve_prompts
        return method.steer_layer + 1 + _index(method, model) * len(resolve_prompts(method.prompt))
    if method.name == "reba":
        return L
    return _index(method, model) if hasattr(method, "layer") else L


# ---- the driver ------------------------------------------------------------------------------------
class BlockCounter:
    """Counts rows x blocks run while active (a forward pre-hook on every block, removed on exit)."""

    def __init__(self, model) -> None:
        self.model, self.count, self._handles = model, 0, []

    def _hook(self, module, args) -> None:
        self.count += int(args[0].shape[0])

    def __enter__(self) -> "BlockCounter":
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

    def score(self, **options: Any) -> float | None:
        for point in self.points:
            if all(point["options"].get(k) == v for k, v in options.items()):
                return point["score"]
        raise KeyError(options)


def sentence_order(model, texts: Sequence[str]) -> list[int]:
    """The order `minidecoder.embed` batches in (stable sort by token count), so batches are identical."""
    lengths = [len(ids) for ids in model.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    return sorted(range(len(texts)), key=lambda i: lengths[i])


def embed_grid(model, method: Method, points: list[Point], texts: list[str], batch_size: int = 32,
               progress: bool = True) -> tuple[list[torch.Tensor], dict]:
    """Every point's (N, E) embeddings of `texts`, sharing computation; and the cost dict:
    {"blocks_computed", "blocks_naive" (rows x blocks), "ratio", "rule", "groups"}."""
    rule, shared_axes, sweeper = sharing_rule(method)
    # group points by the options the rule does not share; each group runs with those options set
    groups: dict[tuple, list[int]] = {}
    for k, point in enumerate(points):
        other = tuple(sorted((name, repr(value)) for name, value in point.items() if name not in shared_axes))
        groups.setdefault(other, []).append(k)
    out = [torch.empty(len(texts), model.config.hidden_size, dtype=torch.float32) for _ in points]
    naive = sum(naive_blocks(method_at(method, p), model) for p in points) * len(texts)
    order = sentence_order(model, texts)
    start = time.perf_counter()
    with tqdm(total=len(texts) * len(groups), unit="sent", desc=f"sweep {method.name}", file=sys.stderr,
              disable=not progress, dynamic_ncols=True) as bar, BlockCounter(model) as counter, torch.inference_mode():
        for members in groups.values():
            base = method_at(method, {n: v for n, v in points[members[0]].items() if n not in shared_axes})
            shared = [{n: v for n, v in points[k].items() if n in shared_axes} for k in members]
            for first in range(0, len(order), batch_size):
                index = order[first:first + batch_size]
                vectors = sweeper(base, model, [texts[i] for i in index], shared)
                for k, v in zip(members, vectors):
                    out[k][index] = v.float().cpu()
                bar.update(len(index))
                bar.set_postfix_str(f"{bar.n / (time.perf_counter() - start):.1f} sentences/s")
    cost = {"rule": rule, "groups": len(groups), "blocks_computed": counter.count, "blocks_naive": naive,
            "ratio": counter.count / naive if naive else None,
            "seconds": time.perf_counter() - start}
    return out, cost


def sweep_sts(model, method: Method, axes: dict[str, list[Any]], data_dir=None, limit: int | None = None,
              batch_size: int = 32, progress: bool = True, dev: StsTask | None = None) -> SweepResult:
    """Score every point of the grid on STS-B dev (and nothing else). Invalid points (e.g. a TP end
    past the output layer) are listed with the reason they were skipped."""
    if dev is None:
        (dev,) = load_tasks([DEV_TASK], data_dir, limit)
    if dev.name != DEV_TASK:
        raise InputError(f"a sweep tunes on {DEV_TASK} only, not {dev.name}", "never tune on a test split")
    records, valid = [], []
    for point in grid_points(axes):
        record = {"options": point, "score": None, "skipped": None}
        try:
            method_at(method, point).check(model)
            valid.append(point)
        except MinidecoderError as error:
            record["skipped"] = str(error).splitlines()[0]
        records.append(record)
    if not valid:
        raise InputError(f"no valid point in the grid {axes}: {records[0]['skipped']}",
                         "see the methods' layer rules (e.g. TP end <= layer)")
    sentences = unique_sentences([dev])
    vectors, cost = embed_grid(model, method, valid, sentences, batch_size, progress)
    scorer = StsScorer([dev], sentences)
    scores = {_key(point): scorer(v)["tasks"][DEV_TASK]["score"] for point, v in zip(valid, vectors)}
    for record in records:
        record["score"] = scores.get(_key(record["options"]))
    scored = [r for r in records if r["score"] is not None and math.isfinite(r["score"])]
    best = max(scored, key=lambda r: r["score"]) if scored else None  # first of equals (grid order)
    return SweepResult(method=method.describe(), axes={k: list(v) for k, v in axes.items()}, points=records,
                       best=best, rule=cost["rule"], cost=cost, sentences=len(sentences),
                       encode_seconds=cost["seconds"], limit=limit, data_dir=str(dev.data_dir),
                       data_files=list(dev.files))


def _key(point: Point) -> str:
    return repr(sorted(point.items()))


def best_method(method: Method, result: SweepResult) -> Method:
    """The method with the sweep's best options."""
    if result.best is None:
        raise InputError("the sweep has no finite score", "widen the grid")
    return method_at(method, result.best["options"])
