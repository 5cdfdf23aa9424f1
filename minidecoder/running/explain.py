"""The audit view (issue 16): one text through one method, block by block, on the shared block loop.

    record = minidecoder.explain(model, "A cat sat.", "tp", end=7)
    print(record.format())          # prompt, tokens, positions acted on, what each block did, net effect
    record.to_dict()                # stable keys, rounded floats: diff it between versions or models

Nothing here computes a method differently: the method's own `embed_batch` runs, and a `Recorder`
set on the model (`methods.loop.watching`) sees every forward it builds. Each forward becomes a `Pass`
(its prompt, tokens, output layer) and its step is wrapped in an observer of the step's kind
(`ObservedCopies`, `ObservedSteering`, `ObservedFold`, `Observed`) that delegates every call to it and
writes down what it did:

    before(i, h)        which blocks ran (early exit); TP / HTP: each row written, its norm and its
                        cosine with the row it replaced
    sites(i)            CP: a, the steered a' (the steering term) at the last token, per head of z
    fold_pattern(i, P)  ReBA: how much block i raised the running maximum A

The embedding is therefore `embed`'s own (a test asserts they are equal for the same options).
"Net effect" is the cosine with a baseline that differs from the method only by its intervention: the
method with an empty block range (TP, HTP), the same run with CP's edit left out, or uniform weights
over ReBA's rows (each record names its baseline).

Layer numbers follow `minidecoder.methods.layers`: an output index k is hidden_states[k]; the blocks
an intervention acts before or at are 0-based, and ranges are half-open.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from minidecoder.core.model import Sites
from minidecoder.errors import InputError
from minidecoder.methods.base import Method, build_method
from minidecoder.methods.cp import SITE_NAMES, ReadLastToken, SteerLastToken
from minidecoder.methods.loop import Forward, Step, Steps, watching
from minidecoder.methods.placeholders import CopyStep
from minidecoder.methods.prompts import prepare_texts
from minidecoder.methods.reba import FoldAttention, _rows_mask, encode_repeated, weight_vector

CONVENTION = ("output layers are hidden_states indices (0 = the embeddings, k = the raw output of block k counted "
              "from 1, L = the last block's output after the final norm); intervention blocks are 0-based and "
              "ranges half-open: [1, 7) is blocks 1..6")
DIGITS = 4  # floats in `to_dict`: enough to see a change, few enough that rounding noise does not show


# ---- the record ----------------------------------------------------------------------------------------
@dataclass
class Pass:
    """One forward of the method on the text: its prompt, tokens, the positions the step acts on, the
    blocks that ran and what the step did in each (`interventions`, one dict per event)."""

    role: str
    prompt: str
    tokens: list[tuple[int, int, str]]  # (position, id, decoded token)
    output_index: int | None  # the hidden_states index read (None: the pass stops at a site)
    reads: str  # what is read from it, in words
    acts_on: list[dict] = field(default_factory=list)
    blocks_run: list[int] = field(default_factory=list)
    interventions: list[dict] = field(default_factory=list)

    def ran(self, i: int) -> None:
        if i not in self.blocks_run:  # two observed steps in one forward (CP + TP) both see block i
            self.blocks_run.append(i)


@dataclass
class Explanation:
    """What `explain` found. `embedding` (E,) equals `minidecoder.embed(model, [text], method, ...)[0]`."""

    model: dict
    method: dict
    text: str
    passes: list[Pass]
    embedding: torch.Tensor
    baseline: str | None = None  # what the net effect is measured against, in words
    net_cosine: float | None = None
    steering: list[dict] = field(default_factory=list)  # CP: one entry per steered block, per head
    fused: torch.Tensor | None = None  # ReBA: A (T, T) fp32, the method's fused attention
    weights: torch.Tensor | None = None  # ReBA: w (T,), embedding = sum_k w_k h_k
    notes: list[str] = field(default_factory=list)

    def to_dict(self, digits: int = DIGITS) -> dict:
        """The record with stable keys and floats rounded to `digits` decimals (JSON-ready)."""
        out = {
            "model": self.model,
            "method": self.method,
            "text": self.text,
            "layer_convention": CONVENTION,
            "passes": [dataclasses.asdict(p) for p in self.passes],
            "embedding": {"dim": int(self.embedding.numel()), "norm": float(self.embedding.norm()),
                          "first": self.embedding[:8].tolist()},
            "net_effect": {"baseline": self.baseline, "cosine": self.net_cosine},
            "notes": self.notes,
        }
        for p in out["passes"]:
            p["tokens"] = [{"position": q, "id": i, "token": t} for q, i, t in p["tokens"]]
        if self.steering:
            out["steering"] = self.steering
        if self.fused is not None:
            out["reba"] = {"fused_attention": self.fused.tolist(), "weights": self.weights.tolist()}
        return _rounded(out, digits)

    def format(self) -> str:
        """The record as text, for a terminal."""
        return format_explanation(self)


def _rounded(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return round(value, digits) + 0.0  # + 0.0: -0.0 prints as 0.0, so signs of zero never show in a diff
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return value


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(x.float().flatten(), y.float().flatten(), dim=0))


def _norm(x: torch.Tensor) -> float:
    return float(x.float().norm())


# ---- observers: the method's step, delegated to and written down ---------------------------------------
class Observed(Step):
    """Delegates every call to `step` and records the blocks that ran. `offset`: the columns the loop cut
    off as a shared prefix (`shifted`), added back so that recorded positions are the prompt's."""

    def __init__(self, step: Step, log: Pass, offset: int = 0) -> None:
        self.step, self.log, self.offset = step, log, offset
        self.folds_patterns = step.folds_patterns

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        self.log.ran(i)
        return self.step.before(i, h)

    def sites(self, i: int) -> Sites | None:
        return self.step.sites(i)

    def fold_pattern(self, i: int, pattern: torch.Tensor) -> None:
        self.step.fold_pattern(i, pattern)

    def hides_first_block_keys(self) -> torch.Tensor | None:
        return self.step.hides_first_block_keys()

    def first_touched(self, batch_size: int) -> torch.Tensor | None:
        return self.step.first_touched(batch_size)

    def shifted(self, columns: int) -> "Observed":
        shifted = copy_of(self)
        shifted.step, shifted.offset = self.step.shifted(columns), self.offset + columns
        return shifted


def copy_of(observer: Observed) -> Observed:
    out = object.__new__(type(observer))
    out.__dict__.update(observer.__dict__)
    return out


class ObservedCopies(Observed):
    """TP / HTP (a `CopyStep`): every row written before a block, its norm, its cosine with the row it replaced."""

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        out = super().before(i, h)
        if out is h:
            return out
        plan = self.step.plan
        for b, t, s in zip(plan.batch.tolist(), plan.target.tolist(), plan.source.tolist()):
            written, replaced = out[b, t], h[b, t]
            self.log.interventions.append({
                "block": i, "target": t + self.offset, "source": s + self.offset,
                "written_norm": _norm(written), "replaced_norm": _norm(replaced), "cosine": _cos(written, replaced)})
        return out


class ObservedSteering(Observed):
    """CP (a `SteerLastToken`): a and a' = steer(a, b) at the last token of the steered block, seen by
    wrapping the site edit the step hands the block."""

    def __init__(self, step: Step, log: Pass, seen: list[dict], offset: int = 0) -> None:
        super().__init__(step, log, offset)
        self.seen = seen  # (a, a') of every edit, as tensors; the log gets the steering term's norm

    def sites(self, i: int) -> Sites | None:
        sites = self.step.sites(i)
        if sites is None:
            return None
        last = self.step.last
        for name, edit in list(sites.edit.items()):
            sites.edit[name] = self._watch(i, name, edit, last)
        return sites

    def _watch(self, i: int, name: str, edit: Callable, last: torch.Tensor) -> Callable:
        def watched(value: torch.Tensor) -> torch.Tensor:
            out = edit(value)
            row = int(last[0])
            a, steered = value[0, row].detach().float().cpu(), out[0, row].detach().float().cpu()
            event = {"block": i, "site": name, "position": row + self.offset}
            self.seen.append({**event, "log": self.log, "a": a, "steered": steered})  # role named after the run
            self.log.interventions.append({**event, "a_norm": _norm(a), "steering_norm": _norm(steered)})
            return out
        return watched


class ObservedFold(Observed):
    """ReBA (a `FoldAttention`): A before each block's first fold; `finish` turns the snapshots into the
    running maximum's change per block."""

    def __init__(self, step: Step, log: Pass, offset: int = 0) -> None:
        super().__init__(step, log, offset)
        self.snapshots: dict[int, torch.Tensor] = {}

    def fold_pattern(self, i: int, pattern: torch.Tensor) -> None:
        if i not in self.snapshots:  # the loop may hand a block's heads over in several groups
            self.snapshots[i] = self.step.A.clone()
        self.step.fold_pattern(i, pattern)

    def finish(self, valid: torch.Tensor) -> None:
        blocks = sorted(self.snapshots)
        for i, after_block in zip(blocks, blocks[1:] + [None]):
            after = self.step.A if after_block is None else self.snapshots[after_block]
            delta = (after - self.snapshots[i])[valid]  # >= 0: a running maximum only rises
            self.log.interventions.append({
                "block": i, "raised": int((delta > 0).sum()), "max_increase": float(delta.max()),
                "total_increase": float(delta.sum())})


# ---- the recorder: watches every forward a method's own embed_batch runs ---------------------------------
class Recorder:
    """Set on the model (`loop.watching`) while the method's own `embed_batch` runs: each forward it builds
    becomes a `Pass`, and the forward's step is wrapped in the observer of its kind; nothing is computed
    here. `unsteered`: CP's edit is left out (the steering's baseline); every other step runs as it is."""

    def __init__(self, model, unsteered: bool = False) -> None:
        self.model, self.unsteered = model, unsteered
        self.passes: list[Pass] = []
        self.forwards: list[Forward] = []
        self.reads: list[ReadLastToken] = []  # CP's auxiliary read: b, once the run is over
        self.folds: list[ObservedFold] = []  # ReBA's running maximum
        self.seen: list[dict] = []  # CP's edits: a and a' as tensors

    def run(self, method: Method, text: str) -> torch.Tensor:
        """(E,) float32: the method's own `embed_batch` of the one text, watched."""
        with watching(self.model, self):
            return method.embed_batch(self.model, [text])[0].float()

    def watch(self, forward: Forward, step: Step, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Step:
        log = _pass(self.model, input_ids, attention_mask, min(forward.keep, default=0))
        self.passes.append(log)
        self.forwards.append(forward)
        return self.observe(step, log)

    def observe(self, step: Step, log: Pass) -> Step:
        if isinstance(step, Steps):  # CP + TP: each part observed on its own
            return Steps(*(self.observe(part, log) for part in step.steps))
        if isinstance(step, CopyStep):  # TP, HTP
            token = {q: t for q, _, t in log.tokens}
            blocks = sorted(step.blocks)
            for t, s in zip(step.plan.target.tolist(), step.plan.source.tolist()):  # one text: batch row 0
                log.acts_on.append({"position": t, "what": token.get(t, "?"), "source": s, "blocks": blocks,
                                    "note": "h[position] <- h[source] before each of these blocks"})
            return ObservedCopies(step, log)
        if isinstance(step, ReadLastToken):  # CP's auxiliary pass
            last, site = int(step.last[0]), SITE_NAMES[step.site]
            self.reads.append(step)
            log.output_index = None
            log.acts_on.append({"position": last, "what": f"b: {site} read", "blocks": [step.block]})
            log.reads = (f"b = {site} of block {step.block} at the last token (position {last}); blocks after "
                         f"{step.block} never run")
            return Observed(step, log)
        if isinstance(step, SteerLastToken):  # CP's edit
            log.acts_on.append({"position": int(step.last[0]), "what": f"a: {SITE_NAMES[step.site]} steered to "
                                "steer(a, b)", "blocks": [step.block]})
            return Observed(Step(), log) if self.unsteered else ObservedSteering(step, log, self.seen)
        if isinstance(step, FoldAttention):  # ReBA
            fold = ObservedFold(step, log)
            self.folds.append(fold)
            return fold
        return Observed(step, log)


def _pass(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, output_index: int) -> Pass:
    """A pass over row 0 (explain embeds one text), its real tokens at their batch columns."""
    tokenizer = model.tokenizer
    real = torch.ones_like(input_ids[0], dtype=torch.bool) if attention_mask is None else attention_mask[0].bool()
    ids = input_ids[0][real].tolist()
    first = int(torch.argmax(real.long()))
    tokens = [(first + k, i, tokenizer.decode([i])) for k, i in enumerate(ids)]
    return Pass("", tokenizer.decode(ids), tokens, output_index, "")


def describe_output(index: int, num_layers: int) -> str:
    if index == 0:
        return "hidden_states[0] (the embeddings)"
    if index == num_layers:
        return f"hidden_states[{index}] (block {index - 1}'s output after the final norm)"
    return f"hidden_states[{index}] (the raw output of block {index - 1})"


def _model_info(model) -> dict:
    source = getattr(model, "source", None)
    return {"name": str(source).rstrip("/").rsplit("/", 1)[-1] if source else None, "blocks": model.num_layers,
            "hidden_size": model.config.hidden_size, "dtype": str(model.dtype).replace("torch.", "")}


def _name_passes(passes: list[Pass], reads: str | None = None) -> None:
    """'auxiliary prompt' for CP's read-only pass; the others 'prompt' or 'prompt k of n' (MetaEOL's
    eight), each reading `reads` or, with None, its last token."""
    prompts = [p for p in passes if p.output_index is not None]
    for k, p in enumerate(prompts):
        p.role = _role("prompt", k, len(prompts))
        p.reads = reads if reads is not None else f"the last token (position {p.tokens[-1][0]})"
    for p in passes:
        if p.output_index is None:
            p.role = "auxiliary prompt"


# ---- what each method adds to the record: its passes' names, its baseline, its own numbers ----------------
def _explain_tp(model, method, text: str, record: Explanation, recorder: Recorder) -> None:
    _name_passes(record.passes)
    empty = dataclasses.replace(method, end=method.start, resume_at=None)  # the same tokens, no copies
    record.baseline = ("PromptEOL with the placeholder: the same tokens (the <PST> keeps its input row), the same "
                       f"output layer {method.output_layer(model)}, no copies (empty block range)")
    record.net_cosine = _cos(record.embedding, empty.embed_batch(model, [text])[0])


def _explain_htp(model, method, text: str, record: Explanation, recorder: Recorder) -> None:
    (log,) = record.passes
    pooled = method.encode(model, [text]).pool[0].nonzero().flatten().tolist()  # the rows htp_embedding averages
    log.role = "the text"
    log.reads = f"the mean over the text tokens, placeholders excluded (positions {_ranges(pooled)})"
    for act in log.acts_on:
        act["note"] = "h[position] <- h[source] (the end of its sentence block) before each of these blocks"
    empty = dataclasses.replace(method, end=method.start)
    record.baseline = ("the same tokens with the placeholders in place, the same mean pooling at output layer "
                       f"{method.layer}, no copies (empty block range)")
    record.net_cosine = _cos(record.embedding, empty.embed_batch(model, [text])[0])


def _explain_cp(model, method, text: str, record: Explanation, recorder: Recorder) -> None:
    _name_passes(record.passes)
    for log in record.passes:
        for act in log.acts_on:
            if "source" in act:
                act["note"] = "TP: " + act["note"]
            elif act["what"].startswith("a: "):
                act["note"] = f"mode {method.mode}, alpha {method.alpha}"
    (read,) = recorder.reads
    b = read.value()[0].float().cpu()  # (H, D) at the head site, (E,) at the others
    record.steering = [_steering_record(event, b) for event in recorder.seen]
    unsteered = Recorder(model, unsteered=True).run(method, text)
    what = "the same prompt(s) with TP's copies" if method.tp else "the same prompt(s)"
    record.baseline = (f"{what}, unsteered: the same tokens, the last token at the same output layer "
                       f"{method.output_layer(model)}, no edit at block {method.steer_layer}")
    record.net_cosine = _cos(record.embedding, unsteered)


def _steering_record(event: dict, b: torch.Tensor) -> dict:
    """Norms of a, b, a - b and the steering term a' (what the site holds after the edit), per head for z."""
    a, steered = event["a"], event["steered"]

    def numbers(a_: torch.Tensor, b_: torch.Tensor, s_: torch.Tensor) -> dict:
        return {"a_norm": _norm(a_), "b_norm": _norm(b_), "a_minus_b_norm": _norm(a_ - b_), "steering_norm": _norm(s_),
                "cos_a_b": _cos(a_, b_), "cos_steering_a": _cos(s_, a_) if _norm(s_) > 0 else 0.0}
    out = {"pass": event["log"].role, "block": event["block"], "site": event["site"], "position": event["position"],
           "total": numbers(a, b, steered)}
    if a.dim() == 2:  # z: (H, D), one row per head
        out["heads"] = [{"head": h, **numbers(a[h], b[h], steered[h])} for h in range(a.shape[0])]
    return out


def _explain_reba(model, method, text: str, record: Explanation, recorder: Recorder) -> None:
    (log,), (fold,), (forward,) = record.passes, recorder.folds, recorder.forwards
    batch = encode_repeated(model.tokenizer, [text], method.repetitions, method.separator)  # the copies' spans
    rows = _rows_mask(batch, method.pooling, method.first_half_split)
    log.role = "the repeated text"
    log.reads = f"sum_k w_k h_k over every position, w from the fused attention's rows {_ranges(rows[0].nonzero().flatten().tolist())}"
    for c, (start, end) in enumerate(batch.text_spans[0]):
        pooled = c == 0 and method.pooling == "mean" and not method.first_half_split
        log.acts_on.append({"position": start, "end": end, "what": f"copy {c + 1}",
                            "note": f"positions [{start}, {end})" + (": the rows R pooled" if pooled else "")})
    mask = batch.attention_mask.to(fold.step.A.device)
    valid = mask[:, :, None] & mask[:, None, :]  # (B, T, T), as fused_attention masks it
    fold.finish(valid)
    A = fold.step.A.masked_fill(~valid, 0.0)
    rows = rows.to(A.device)
    backward = method.pooling == "mean" or method.last_row == "backward"
    record.fused, record.weights = A[0].cpu(), weight_vector(A, rows, method.weights, backward)[0].cpu()
    h = forward.hidden(log.output_index)  # the same forward's hidden_states, already computed
    record.baseline = (f"uniform weights over the same rows R of the same repeated input at output layer {method.layer} "
                       "(plain mean pooling, no fused attention)")
    record.net_cosine = _cos(record.embedding, h[0].float()[rows[0]].mean(dim=0))


def _explain_reading(model, method, text: str, record: Explanation, recorder: Recorder) -> None:
    _name_passes(record.passes, reads=f"{type(method).__name__}.pool")
    record.notes.append("this method only reads the plain loop: no intervention to show")


def _role(what: str, k: int, n: int) -> str:
    return what if n == 1 else f"{what} {k + 1} of {n}"


def _ranges(positions: list[int]) -> str:
    """[3, 4, 5, 9] -> '3..5, 9'."""
    parts, start = [], None
    for k, p in enumerate(positions):
        if start is None:
            start = p
        if k + 1 == len(positions) or positions[k + 1] != p + 1:
            parts.append(f"{start}" if start == p else f"{start}..{p}")
            start = None
    return ", ".join(parts) or "none"


EXPLAINERS: dict[str, Callable] = {"tp": _explain_tp, "htp": _explain_htp, "cp": _explain_cp, "reba": _explain_reba}


def explain(model, text: str, method: str | Method = "tp", **options) -> Explanation:
    """One text through one method, recorded block by block (see the module docstring).

    method: a registered name with its options (as for `minidecoder.embed`) or a method object. The
    method's own `embed_batch` runs, watched; TP, HTP, CP and ReBA also get their baseline and their own
    numbers; the prompt methods, pooling and Echo record their prompts, tokens and the blocks that ran."""
    if isinstance(method, str):
        method = build_method(method, **options)
    elif options:
        raise InputError("options were given together with a method object", "set them on the method object")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"explain needs one non-empty text, got {text!r}", 'pass e.g. "A man plays a guitar."')
    if model.tokenizer is None:
        raise InputError("the model has no tokenizer", "load it with minidecoder.load(), which attaches one")
    method.check(model)
    from minidecoder.methods.reading import ReadsOneLayer

    shown = text
    if getattr(method, "senteval_text", False):
        shown = prepare_texts([text], True)[0]  # the text as the method's prompts hold it
    with torch.inference_mode():
        recorder = Recorder(model)
        record = Explanation(_model_info(model), method.describe(), shown, recorder.passes, recorder.run(method, text))
        explainer = EXPLAINERS.get(method.name, _explain_reading if isinstance(method, ReadsOneLayer) else None)
        if explainer is not None:
            explainer(model, method, text, record, recorder)
        else:
            _name_passes(record.passes, reads="")
            record.notes.append(f"explain has no description of method {method.name!r}'s step: its forwards are "
                                "shown as they ran")
    return record


# ---- the record as text --------------------------------------------------------------------------------
def format_explanation(record: Explanation, width: int = 100) -> str:
    L = record.model["blocks"]
    options = " ".join(f"{k}={v}" for k, v in record.method.items() if k != "method" and not k.endswith("_detail"))
    lines = [f"minidecoder explain: method {record.method['method']} on {record.model['name']} "
             f"({L} blocks, {record.model['dtype']})",
             f"text: {record.text!r}",
             f"options: {options}",
             f"layer convention: {CONVENTION}"]
    for p in record.passes:
        lines += ["", f"== {p.role} ==", f"prompt: {p.prompt!r}", "tokens (position:token):"]
        lines += _wrapped([f"{q}:{t!r}" for q, _, t in p.tokens], width)
        token = {q: t for q, _, t in p.tokens}
        if p.acts_on:
            lines.append("acts on:")
            for act in p.acts_on:
                lines.append("  " + _act_text(act, token))
        if p.output_index is not None:
            lines.append(f"reads: {describe_output(p.output_index, L)}: {p.reads}")
        else:
            lines.append(f"reads: {p.reads}")
        ran = p.blocks_run
        skipped = f"; early exit: blocks {ran[-1] + 1}..{L - 1} never run" if ran and ran[-1] < L - 1 else ""
        lines.append(f"blocks run: {_ranges(ran)} ({len(ran)} of {L}{skipped})")
        lines += _interventions_text(p.interventions)
    for s in record.steering:
        lines += ["", f"CP steering at block {s['block']}, site {s['site']}, position {s['position']} ({s['pass']}): "
                      "a = the prompt's value, b = the auxiliary prompt's, a' = the steering term written in a's place",
                  f"  {'head':>5} {'|a|':>9} {'|b|':>9} {'|a-b|':>9} {'|a_|':>9} {'cos(a,b)':>9} {'cos(a_,a)':>9}"
                  .replace("a_", "a'")]
        for h in s.get("heads", []):
            lines.append("  " + _steer_row(str(h["head"]), h))
        lines.append("  " + _steer_row("all", s["total"]))
    if record.fused is not None:
        token = {q: t for q, _, t in record.passes[0].tokens}
        w = record.weights
        top = torch.argsort(w, descending=True)[:10].tolist()
        lines += ["", f"ReBA fused attention A: {tuple(record.fused.shape)}, max over {L} blocks and every head of "
                      "(P + P^T)/2; the embedding is sum_k w_k h_k with w from A's rows; largest w_k:"]
        lines += [f"  w[{k:>3}] {float(w[k]):.4f}  {token.get(k, '?')!r}" for k in top]
    e = record.embedding
    lines += ["", f"embedding: {e.numel()} values, norm {float(e.norm()):.4f}, first four "
                  f"[{', '.join(f'{float(x):.4f}' for x in e[:4])}]"]
    if record.baseline is not None:
        lines.append(f"net effect: cosine {record.net_cosine:.4f} with the baseline: {record.baseline}")
    lines += [f"note: {n}" for n in record.notes]
    return "\n".join(lines)


def _wrapped(items: list[str], width: int) -> list[str]:
    lines, line = [], " "
    for item in items:
        if len(line) + 1 + len(item) > width and line.strip():
            lines.append(line)
            line = " "
        line += " " + item
    return lines + ([line] if line.strip() else [])


def _act_text(act: dict, token: dict) -> str:
    position = act["position"]
    text = f"position {position} {token.get(position, '?')!r}: {act['what']}"
    if "source" in act:
        text += f" <- position {act['source']} {token.get(act['source'], '?')!r}"
    if "blocks" in act:
        blocks = act["blocks"]
        text += f", before block(s) {_ranges(blocks)}" if "source" in act else f", at block {_ranges(blocks)}"
    if act.get("note"):
        text += f" ({act['note']})"
    return text


def _interventions_text(events: list[dict]) -> list[str]:
    if not events:
        return ["per block: no intervention recorded"]
    out = []
    copies = [e for e in events if "target" in e]
    if copies:
        out += ["per block: each row written before the block (h[target] <- h[source])",
                f"  {'block':>5} {'target <- source':>16} {'|written|':>10} {'|replaced|':>10} {'cos(written, replaced)':>22}"]
        out += [f"  {e['block']:>5} {e['target']:>6} <- {e['source']:<6} {e['written_norm']:>10.4f} "
                f"{e['replaced_norm']:>10.4f} {e['cosine']:>22.4f}" for e in copies]
    out += [f"per block: block {e['block']}: {e['site']} at position {e['position']}, |a| {e['a_norm']:.4f} -> "
            f"|a'| {e['steering_norm']:.4f} (per head below)" for e in events if "steering_norm" in e]
    folds = [e for e in events if "raised" in e]
    if folds:
        out += ["per block: how much the block's heads raised the running maximum A",
                f"  {'block':>5} {'entries raised':>14} {'max increase':>12} {'sum of increases':>16}"]
        out += [f"  {e['block']:>5} {e['raised']:>14} {e['max_increase']:>12.4f} {e['total_increase']:>16.4f}"
                for e in folds]
    return out


def _steer_row(label: str, n: dict) -> str:
    return (f"{label:>5} {n['a_norm']:>9.4f} {n['b_norm']:>9.4f} {n['a_minus_b_norm']:>9.4f} {n['steering_norm']:>9.4f} "
            f"{n['cos_a_b']:>9.4f} {n['cos_steering_a']:>9.4f}")
