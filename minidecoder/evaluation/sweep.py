"""Hyper-parameter sweeps on STS-B dev, sharing every block that two grid points have in common.

A grid is the product of a few option axes of one method (`layer`, TP's `end`, CP's `steer_layer` and
`alpha`, or any other option); each point is scored by Spearman x100 on **STS-B dev only** (spec
`methods.md` section 9: tune on dev, never on a test split). What is shared, per batch:

    output layer   one forward keeps every hidden_states index asked for (early exit at the deepest);
                   each is pooled by the method's own `pool`                  (`sweep_layers`)
    TP end layer   one trunk runs TP's step; at each candidate end it forks (`loop.Forward.fork`) and
                   the branch continues with TP's step at that end              (`sweep_tp`)
    CP steer/alpha one auxiliary pass reads b at every candidate block, one unsteered trunk forks before
                   each steer block, and the branch continues with CP's step     (`sweep_cp`)

No rule restates a method: the steps, poolings and templates are the methods' own (`TP.step`,
`CP.step`, `ReadsOneLayer.pool`), so a change to a method reaches its sweep (tests/evaluation/test_sweep.py).

Any other axis (e.g. a template) splits the grid into groups that are run one after another; a method
without a sharing rule (HTP, ReBA, ... for now) runs each point separately (`embed_batch`), which is
always correct, only not shared.

Every branch performs exactly the operations of a separate run of that point on the same batch (same
length-sorted batches as `minidecoder.embed`), so the sweep's embeddings equal separate runs' to float
tolerance (tests/evaluation/test_sweep.py compares scores to 1e-6). The cost is measured, not claimed: a
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

import torch
from tqdm import tqdm

from minidecoder.errors import InputError, MinidecoderError
from minidecoder.evaluation.harness import StsScorer, unique_sentences
from minidecoder.evaluation.sts_data import StsTask, load_tasks
from minidecoder.methods.base import Method
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import Forward, Steps, hidden_states, last_token
from minidecoder.methods.reading import ReadsOneLayer

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
    """The hidden_states index a method reads (`layer=None`: TP's depth-scaled, CP's prompt's reference)."""
    return resolve_output_layer(method.output_layer(model), model.num_layers)


# ---- sharing rules: each forks the shared block loop at a method's own hook ------------------------
def sweep_layers(method: ReadsOneLayer, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """Methods that read one layer: one forward per template keeps every requested layer, each pooled by
    the method's own `pool` (reading.ReadsOneLayer)."""
    indices = [_index(method_at(method, p), model) for p in points]
    texts = method.prepare(texts)
    per_template = []  # per template: {index: (B, E)}
    for template in method.templates():
        batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
        states = hidden_states(model, batch, set(indices))
        per_template.append({i: method.pool(h, batch) for i, h in states.items()})
    return [torch.stack([pooled[i] for pooled in per_template]).mean(dim=0).float() for i in indices]


def sweep_tp(method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """TP over output layers x end layers. The trunk runs TP's step with copies before every block from
    `start` up to the last candidate end; at each candidate end e it forks, and the branch continues
    with the step of TP at end=e (`TP.step`), which copies no more (except `resume_at`'s):

        embed ─ 0 ─ [copy] 1 ─ [copy] 2 ─ [copy] 3 ─ ...      trunk: TP at the largest end
                               └ e=2 branch: 2 ─ 3 ─ ... L      TP at end=2, from the trunk's state
                                         └ e=3 branch: 3 ─ ... L
    """
    from minidecoder.methods.prompts import prepare_texts
    from minidecoder.methods.tp_inputs import tp_templates

    keys = [(method_at(method, p).end, _index(method_at(method, p), model)) for p in points]
    ends = sorted({e for e, _ in keys})
    wanted = {e: sorted({i for e2, i in keys if e2 == e}) for e in ends}
    texts = prepare_texts(texts, method.senteval_text)
    per_template = []
    for template in tp_templates(method.prompt, method.num_pst):
        inputs = method.encode(model, template, texts)
        trunk_step = dataclasses.replace(method, end=ends[-1]).step(model, inputs)
        trunk = Forward(model, inputs.batch.input_ids, inputs.batch.attention_mask, trunk_step,
                        keep=set(ends) | {i for v in wanted.values() for i in v},
                        extra_rows={inputs.placeholder_id: inputs.row})
        states: dict[tuple[int, int], torch.Tensor] = {}
        for e in ends:
            trunk.run_to(e)
            branch = trunk.fork(dataclasses.replace(method, end=e).step(model, inputs))
            for index in wanted[e]:
                states[(e, index)] = last_token(branch.hidden(index), inputs.batch)
        per_template.append(states)
    return [torch.stack([states[key] for states in per_template]).mean(dim=0).float() for key in keys]


def sweep_cp(method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """CP over output layers x steer layers x alphas: one auxiliary pass reads b at every candidate
    block l (CP's `ReadLastToken`), one unsteered trunk of each normal prompt forks before each l, and
    the branch continues with CP's own step at (l, alpha) (`CP.step`)."""
    from minidecoder.methods.cp import ReadLastToken
    from minidecoder.methods.cp_prompts import resolve_aux_prompt, resolve_prompts
    from minidecoder.methods.prompts import prepare_texts

    uses_alpha = method.mode in ("ns", "nr_scaled")  # nr / nr_head ignore alpha: one branch serves all
    keys = []
    for p in points:
        m = method_at(method, p)
        keys.append((m.steer_layer, float(m.alpha) if uses_alpha else None, _index(m, model)))
    steers = sorted({l for l, _, _ in keys})
    branches = sorted({(l, a) for l, a, _ in keys}, key=lambda x: (x[0], x[1] if x[1] is not None else 0.0))
    wanted = {br: sorted({i for l, a, i in keys if (l, a) == br}) for br in branches}
    sentences = prepare_texts(texts, method.senteval_text)

    aux = encode_prompts(model.tokenizer, resolve_aux_prompt(method.aux_prompt), sentences)
    reads = {l: ReadLastToken(l, method.site, aux.last_positions()) for l in steers}
    Forward(model, aux.input_ids, aux.attention_mask, Steps(*reads.values()), keep={steers[-1] + 1}).run_to(steers[-1] + 1)
    b = {l: read.value() for l, read in reads.items()}
    per_template = []
    for template in resolve_prompts(method.prompt):
        batch = encode_prompts(model.tokenizer, template, sentences)
        trunk = Forward(model, batch.input_ids, batch.attention_mask,
                        keep=set(steers) | {i for v in wanted.values() for i in v})
        states = {}
        for l, alpha in branches:
            trunk.run_to(l)
            point = method_at(method, {"steer_layer": l, **({"alpha": alpha} if alpha is not None else {})})
            branch = trunk.fork(point.step(batch, b[l]))
            for index in wanted[(l, alpha)]:
                states[(l, alpha, index)] = last_token(branch.hidden(index), batch).float()
        per_template.append(states)
    return [torch.stack([states[key] for states in per_template]).mean(dim=0) for key in keys]


def sweep_separately(method: Method, model, texts: list[str], points: list[Point]) -> list[torch.Tensor]:
    """No sharing: each point's own `embed_batch` (correct for any method)."""
    return [method_at(method, p).embed_batch(model, texts).float() for p in points]


def sharing_rule(method: Method) -> tuple[str, frozenset[str], Sweeper]:
    """(rule name, the axes it shares, the sweeper) for a method."""
    from minidecoder.methods.cp import CP
    from minidecoder.methods.tp import TP

    if isinstance(method, ReadsOneLayer):
        return "one forward, every output layer", frozenset({"layer"}), sweep_layers
    if type(method) is TP:
        return "TP: one trunk, forks at each end layer", frozenset({"layer", "end"}), sweep_tp
    if type(method) is CP and not method.tp:
        return "CP: one auxiliary pass, one trunk, a branch per (steer, alpha)", \
            frozenset({"layer", "steer_layer", "alpha"}), sweep_cp
    return "separate runs (no sharing rule for this method)", frozenset(), sweep_separately


def naive_blocks(method: Method, model) -> int:
    """Blocks (per text) that a separate run of `method` computes: what the sweep is compared with.
    Layer-reading and TP: the output index per template; CP adds its auxiliary pass (l + 1 blocks);
    ReBA runs every block. Other methods: their output index (per template where they have several)."""
    from minidecoder.methods.cp import CP
    from minidecoder.methods.cp_prompts import resolve_prompts
    from minidecoder.methods.reba import ReBA
    from minidecoder.methods.tp import TP
    from minidecoder.methods.tp_inputs import tp_templates

    if isinstance(method, ReadsOneLayer):
        return _index(method, model) * len(method.templates())
    if type(method) is TP:
        return _index(method, model) * len(tp_templates(method.prompt, method.num_pst))
    if type(method) is CP:
        return method.steer_layer + 1 + _index(method, model) * len(resolve_prompts(method.prompt))
    if type(method) is ReBA:
        return model.num_layers
    return _index(method, model) if hasattr(method, "layer") else model.num_layers


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
