"""The audit view (issue 16): one text through one method, block by block, on the shared block loop.

    record = minidecoder.explain(model, "A cat sat.", "tp", end=7)
    print(record.format())          # prompt, tokens, positions acted on, what each block did, net effect
    record.to_dict()                # stable keys, rounded floats: diff it between versions or models

Nothing here computes a method differently. Each method's own pieces build its inputs and its step
(`TP.step`, `HTP.step`, `CP.step` + `auxiliary_activation`, `FoldAttention`); the step is wrapped in
an observer (`ObservedCopies`, `ObservedSteering`, `ObservedFold`, `Observed`) that delegates every call
to it and writes down what it did:

    before(i, h)        which blocks ran (early exit); TP / HTP: each row written, its norm and its
                        cosine with the row it replaced
    sites(i)            CP: a, the steered a' (the steering term) at the last token, per head of z
    fold_pattern(i, P)  ReBA: how much block i raised the running maximum A

The embedding is then pooled exactly as the method's `embed_batch` pools it, and a test asserts it
equals `minidecoder.embed`'s for the same options. "Net effect" is the cosine with a baseline that
differs from the method only by its intervention (each method's baseline is named in the record).

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
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import Forward, Step, Steps, hidden_at, last_token

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
            self.seen.append({**event, "pass": self.log.role, "a": a, "steered": steered})
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


# ---- helpers shared by the methods' explanations -------------------------------------------------------
def _pass(model, batch: PromptBatch, role: str, output_index: int | None, reads: str) -> Pass:
    tokenizer = model.tokenizer
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    first = int(batch.first_positions()[0])
    tokens = [(first + k, i, tokenizer.decode([i])) for k, i in enumerate(ids)]
    return Pass(role, tokenizer.decode(ids), tokens, output_index, reads)


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


# ---- one function per method: its embed_batch, with its step observed -----------------------------------
def _explain_tp(model, method, texts: list[str]) -> Explanation:
    from minidecoder.methods.prompts import prepare_texts
    from minidecoder.methods.tp import tp_embedding
    from minidecoder.methods.tp_inputs import tp_templates

    texts = prepare_texts(texts, method.senteval_text)
    layer = method.output_layer(model)
    index = resolve_output_layer(layer, model.num_layers)
    empty = dataclasses.replace(method, end=method.start, resume_at=None)  # the same tokens, no copies
    passes, vectors, baselines = [], [], []
    templates = tp_templates(method.prompt, method.num_pst)
    for k, template in enumerate(templates):
        inputs = method.encode(model, template, texts)
        last = int(inputs.batch.last_positions()[0])
        log = _pass(model, inputs.batch, _role("prompt", k, len(templates)), index, f"the last token (position {last})")
        blocks = sorted(method.copy_blocks(model))
        for p in inputs.positions[0]:
            log.acts_on.append({"position": p, "what": "<PST>", "source": last,
                                "blocks": blocks, "note": "h[position] <- h[source] before each of these blocks"})
        vectors.append(tp_embedding(model, inputs, ObservedCopies(method.step(model, inputs), log), layer))
        baselines.append(tp_embedding(model, inputs, empty.step(model, inputs), layer))
        passes.append(log)
    embedding = torch.stack(vectors).mean(dim=0).float()[0]
    baseline = torch.stack(baselines).mean(dim=0).float()[0]
    return Explanation(_model_info(model), method.describe(), texts[0], passes, embedding,
                       "PromptEOL with the placeholder: the same tokens (the <PST> keeps its input row), the same "
                       f"output layer {layer}, no copies (empty block range)", _cos(embedding, baseline))


def _explain_htp(model, method, texts: list[str]) -> Explanation:
    from minidecoder.methods.htp import htp_embedding
    from minidecoder.methods.htp_inputs import BPST, PST
    from minidecoder.methods.prompts import require_text

    require_text(texts)
    inputs = method.encode(model, texts)
    index = resolve_output_layer(method.layer, model.num_layers)
    pooled = inputs.pool[0].nonzero().flatten().tolist()
    log = _pass(model, inputs.batch, "the text", index,
                f"the mean over the text tokens, placeholders excluded (positions {_ranges(pooled)})")
    ids = inputs.batch.input_ids[0].tolist()
    blocks = list(range(method.start, method.end))
    for b, t, s in zip(inputs.plan.batch.tolist(), inputs.plan.target.tolist(), inputs.plan.source.tolist()):
        what = "<PST>" if ids[t] == model.tokenizer.token_to_id(PST) else BPST
        log.acts_on.append({"position": t, "what": what, "source": s, "blocks": blocks,
                            "note": "h[position] <- h[source] (the end of its sentence block) before each of these blocks"})
    embedding = htp_embedding(model, inputs, ObservedCopies(method.step(inputs), log), method.layer).float()[0]
    empty = dataclasses.replace(method, end=method.start)
    baseline = htp_embedding(model, inputs, empty.step(inputs), method.layer).float()[0]
    return Explanation(_model_info(model), method.describe(), texts[0], [log], embedding,
                       "the same tokens with the placeholders in place, the same mean pooling at output layer "
                       f"{method.layer}, no copies (empty block range)", _cos(embedding, baseline))


def _explain_cp(model, method, texts: list[str]) -> Explanation:
    from minidecoder.methods.cp import SITE_NAMES, auxiliary_activation
    from minidecoder.methods.cp_prompts import resolve_aux_prompt, resolve_prompts
    from minidecoder.methods.prompts import prepare_texts
    from minidecoder.methods.tp import tp_embedding
    from minidecoder.methods.tp_inputs import PST, with_placeholders

    sentences = prepare_texts(texts, method.senteval_text)
    layer, l, site = method.output_layer(model), method.steer_layer, method.site
    index = resolve_output_layer(layer, model.num_layers)
    tp = method.tp_method(model) if method.tp else None
    place = lambda template: template if PST in template else with_placeholders(template, 1)  # as CP.embed_with_tp
    passes = []

    def tp_acts_on(log: Pass, inputs) -> None:
        last = int(inputs.batch.last_positions()[0])
        for p in inputs.positions[0]:
            log.acts_on.append({"position": p, "what": "<PST>", "source": last, "blocks": sorted(tp.copy_blocks(model)),
                                "note": "TP: h[position] <- h[source] before each of these blocks"})

    # The auxiliary pass: blocks 0..l, b read at the last token (the method's `auxiliary_activation`).
    aux_template = resolve_aux_prompt(method.aux_prompt)
    if tp is not None and method.tp_aux:
        aux = tp.encode(model, place(aux_template), sentences)
        aux_batch, extra = aux.batch, {aux.placeholder_id: aux.row}
        aux_log = _pass(model, aux_batch, "auxiliary prompt", None, "")
        tp_acts_on(aux_log, aux)
        aux_step = ObservedCopies(tp.step(model, aux), aux_log)
    else:
        aux_batch, extra = encode_prompts(model.tokenizer, aux_template, sentences), None
        aux_log = _pass(model, aux_batch, "auxiliary prompt", None, "")
        aux_step = Observed(Step(), aux_log)
    aux_last = int(aux_batch.last_positions()[0])
    aux_log.reads = f"b = {SITE_NAMES[site]} of block {l} at the last token (position {aux_last}); blocks after {l} never run"
    aux_log.acts_on.append({"position": aux_last, "what": f"b: {SITE_NAMES[site]} read", "blocks": [l]})
    b = auxiliary_activation(model, aux_batch, l, site, aux_step, extra)  # (1, H, D) or (1, E)
    passes.append(aux_log)

    vectors, baselines, seen = [], [], []
    templates = resolve_prompts(method.prompt)
    for k, template in enumerate(templates):
        if tp is not None:
            inputs = tp.encode(model, place(template), sentences)
            batch = inputs.batch
        else:
            batch = encode_prompts(model.tokenizer, template, sentences)
        last = int(batch.last_positions()[0])
        log = _pass(model, batch, _role("prompt", k, len(templates)), index, f"the last token (position {last})")
        log.acts_on.append({"position": last, "what": f"a: {SITE_NAMES[site]} steered to steer(a, b)", "blocks": [l],
                            "note": f"mode {method.mode}, alpha {method.alpha}"})
        steer = ObservedSteering(method.step(batch, b), log, seen)
        if tp is not None:
            tp_acts_on(log, inputs)
            both = Steps(ObservedCopies(tp.step(model, inputs), log), steer)  # TP's copies, then CP's edit
            vectors.append(tp_embedding(model, inputs, both, layer).float())
            baselines.append(tp_embedding(model, inputs, tp.step(model, inputs), layer).float())
        else:
            vectors.append(last_token(hidden_at(model, batch, layer, steer), batch).float())
            baselines.append(last_token(hidden_at(model, batch, layer), batch).float())
        passes.append(log)
    embedding = torch.stack(vectors).mean(dim=0)[0]
    baseline = torch.stack(baselines).mean(dim=0)[0]
    steering = [_steering_record(event, b[0].float().cpu()) for event in seen]
    what = "the same prompt(s) with TP's copies" if tp is not None else "the same prompt(s)"
    return Explanation(_model_info(model), method.describe(), sentences[0], passes, embedding,
                       f"{what}, unsteered: the same tokens, the last token at the same output layer {layer}, "
                       f"no edit at block {l}",
                       _cos(embedding, baseline), steering=steering)


def _steering_record(event: dict, b: torch.Tensor) -> dict:
    """Norms of a, b, a - b and the steering term a' (what the site holds after the edit), per head for z."""
    a, steered = event["a"], event["steered"]

    def numbers(a_: torch.Tensor, b_: torch.Tensor, s_: torch.Tensor) -> dict:
        return {"a_norm": _norm(a_), "b_norm": _norm(b_), "a_minus_b_norm": _norm(a_ - b_), "steering_norm": _norm(s_),
                "cos_a_b": _cos(a_, b_), "cos_steering_a": _cos(s_, a_) if _norm(s_) > 0 else 0.0}
    out = {"pass": event["pass"], "block": event["block"], "site": event["site"], "position": event["position"],
           "total": numbers(a, b, steered)}
    if a.dim() == 2:  # z: (H, D), one row per head
        out["heads"] = [{"head": h, **numbers(a[h], b[h], steered[h])} for h in range(a.shape[0])]
    return out


def _explain_reba(model, method, texts: list[str]) -> Explanation:
    from minidecoder.methods.reba import FoldAttention, _rows_mask, aggregate, encode_repeated, weight_vector

    index = resolve_output_layer(method.layer, model.num_layers)
    batch = encode_repeated(model.tokenizer, list(texts), method.repetitions, method.separator)
    rows = _rows_mask(batch, method.pooling, method.first_half_split)
    pooled = rows[0].nonzero().flatten().tolist()
    log = _pass(model, batch, "the repeated text", index,
                f"sum_k w_k h_k over every position, w from the fused attention's rows {_ranges(pooled)}")
    for c, (start, end) in enumerate(batch.text_spans[0]):
        log.acts_on.append({"position": start, "end": end, "what": f"copy {c + 1}",
                            "note": f"positions [{start}, {end})" + (": the rows R pooled" if c == 0 and method.pooling
                                                                      == "mean" and not method.first_half_split else "")})
    # reba.fused_attention, with its FoldAttention observed (a test checks A equals the function's).
    B, T = batch.input_ids.shape
    fold = ObservedFold(FoldAttention(B, T, model.device), log)
    forward = Forward(model, batch.input_ids, batch.attention_mask, fold, keep={index, model.num_layers})
    h = forward.hidden(index)
    forward.run_to(model.num_layers)
    mask = batch.attention_mask.to(fold.step.A.device)
    valid = mask[:, :, None] & mask[:, None, :]  # (B, T, T)
    fold.finish(valid)
    A = fold.step.A.masked_fill(~valid, 0.0)
    rows = rows.to(A.device)
    backward = method.pooling == "mean" or method.last_row == "backward"
    embedding = aggregate(A, h, rows, method.weights, backward)[0]
    w = weight_vector(A, rows, method.weights, backward)[0]
    baseline = h[0].float()[rows[0]].mean(dim=0)  # uniform weights over the same rows, same forward
    return Explanation(_model_info(model), method.describe(), texts[0], [log], embedding,
                       f"uniform weights over the same rows R of the same repeated input at output layer {method.layer} "
                       "(plain mean pooling, no fused attention)", _cos(embedding, baseline),
                       fused=A[0].cpu(), weights=w.cpu())


def _explain_reading(model, method, texts: list[str]) -> Explanation:
    texts = method.prepare(texts)
    index = resolve_output_layer(method.layer, model.num_layers)
    passes, vectors = [], []
    templates = method.templates()
    for k, template in enumerate(templates):
        batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
        log = _pass(model, batch, _role("prompt", k, len(templates)), index, f"{type(method).__name__}.pool")
        vectors.append(method.pool(hidden_at(model, batch, method.layer, Observed(Step(), log)), batch))
        passes.append(log)
    return Explanation(_model_info(model), method.describe(), texts[0], passes,
                       torch.stack(vectors).mean(dim=0).float()[0],
                       notes=["this method only reads the plain loop: no intervention to show"])


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

    method: a registered name with its options (as for `minidecoder.embed`) or a method object. TP, HTP,
    CP and ReBA record their interventions; the prompt methods, pooling and Echo record their prompt,
    tokens and the blocks that ran; any other method gives only its embedding."""
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

    explainer = EXPLAINERS.get(method.name)
    with torch.inference_mode():
        if explainer is not None:
            return explainer(model, method, [text])
        if isinstance(method, ReadsOneLayer):
            return _explain_reading(model, method, [text])
        return Explanation(_model_info(model), method.describe(), text, [], method.embed_batch(model, [text])[0].float(),
                           notes=[f"explain knows no step of method {method.name!r}: only its embedding is shown"])


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
