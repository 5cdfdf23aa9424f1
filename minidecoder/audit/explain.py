"""The audit view: one text through one method, block by block, on the shared block loop.

    record = minidecoder.explain(model, "A cat sat.", "tp", end=7)
    print(record.format())          # prompt, tokens, positions acted on, what each block did, net effect
    record.to_dict()                # stable keys, rounded floats: diff it between versions or models

Nothing here knows a method. The method's own passes (`Method.passes`) run through the loop's own
runner (`methods.loop.run_passes`, the same executor `embed` takes, with buckets and graphs off) with
every step wrapped in a watcher (`Watched`, a step itself): it writes down, for each pass, its prompt
and tokens, the positions its step acts on (`Step.acts_on`), the blocks that ran and what the step did
in each (`Step.report`: TP / HTP each row written, CP a, b and the steering term per head, ReBA how
much a block raised the running maximum). The loop never learns it is watched, and the embedding is
`embed`'s own (a test asserts they are equal). "Net effect" is the cosine with the method's declared `baseline`, a configuration that
differs only by its intervention; a pass's `details` adds tensors of its own (ReBA's fused attention
and weights).

Layer numbers follow `minidecoder.methods.layers`: an output index k is hidden_states[k]; the blocks
an intervention acts before or at are 0-based, and ranges are half-open.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from minidecoder.errors import ContextLengthError, InputError
from minidecoder.methods import Method, method_of
from minidecoder.fast.forward import FastForward, executor
from minidecoder.fast.options import fast_paths_of
from minidecoder.methods.loop import Forward, Pass, Step, run_passes
from minidecoder.methods.text import senteval_sentence
from minidecoder.running.embedding import truncate_texts, truncate_that_fits, why_longer
from minidecoder.running.load_model import require_loaded
from minidecoder.audit.text import CONVENTION, format_explanation
from minidecoder.running.texts import check_text

DIGITS = 4  # floats in `to_dict`: enough to see a change, few enough that rounding noise does not show


@dataclass
class PassRecord:
    """One forward of the method on the text: its prompt, tokens, the positions its step acts on, the
    blocks that ran and what the step did in each (`interventions`, one dict per event)."""

    role: str
    prompt: str
    tokens: list[tuple[int, int, str]]  # (position, id, decoded token)
    output_index: int | None  # the hidden_states index read (None: the pass only records)
    reads: str  # what is read from it, in words
    acts_on: list[dict] = field(default_factory=list)
    records: list[str] = field(default_factory=list)  # the sites the pass keeps for later ones ("z of block 4")
    blocks_run: list[int] = field(default_factory=list)
    interventions: list[dict] = field(default_factory=list)


@dataclass
class Explanation:
    """What `explain` found. `embedding` (E,) equals `minidecoder.embed(model, [text], method, ...)[0]`."""

    model: dict
    method: dict
    text: str
    passes: list[PassRecord]
    embedding: torch.Tensor
    baseline: str | None = None  # what the net effect is measured against, in words
    net_cosine: float | None = None
    details: dict[str, torch.Tensor] = field(default_factory=dict)  # a pass's own tensors (ReBA: A, w)
    notes: list[str] = field(default_factory=list)

    def to_dict(self, digits: int = DIGITS) -> dict:
        """The record with stable keys and floats rounded to `digits` decimals (JSON-ready)."""
        out = {"model": self.model, "method": self.method, "text": self.text, "layer_convention": CONVENTION,
               "passes": [dataclasses.asdict(p) for p in self.passes],
               "embedding": {"dim": int(self.embedding.numel()), "norm": float(self.embedding.norm()),
                             "first": self.embedding[:8].tolist()},
               "net_effect": {"baseline": self.baseline, "cosine": self.net_cosine}, "notes": self.notes}
        for p in out["passes"]:
            p["tokens"] = [{"position": q, "id": i, "token": t} for q, i, t in p["tokens"]]
        if self.details:
            out["details"] = {name: value.tolist() for name, value in self.details.items()}
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


# ---- the watcher: a step around each pass's step; the steps describe themselves ------------------------------
class WatchLog:
    """What one watched forward did: the blocks it ran and the events its step reported."""

    def __init__(self, step: Step) -> None:
        self.step = step  # the pass's own step, in batch columns (what `acts_on` describes)
        self.blocks: list[int] = []
        self.events: list[dict] = []
        self.shift = 0  # batch column of the stream's column 0 (a shared prefix ran once before it)
        self.folding: tuple[int, Any, int] | None = None  # (block, A before it, index of its first fold event)


@dataclass(frozen=True, eq=False, kw_only=True)
class Watched(Step):
    """`inner` as it is, writing down every block it is asked about and every change it makes (`report`)."""

    inner: Step
    log: WatchLog

    @property
    def blocks(self) -> frozenset[int]:
        return self.inner.blocks

    @property
    def hidden_keys(self):
        return self.inner.hidden_keys

    @property
    def folds(self) -> bool:
        return self.inner.folds

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        self.log.blocks.append(i)  # the loop asks before every block it runs
        out = self.inner.before(i, h)
        if out is not h:
            self.log.events += self.inner.report(i, "stream", h, out, self.log.shift)
        return out

    def edits(self, i: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        return {name: self._watched(i, name, edit) for name, edit in self.inner.edits(i).items()}

    def _watched(self, i: int, name: str, edit: Callable) -> Callable:
        def watched(value: torch.Tensor) -> torch.Tensor:
            out = edit(value)
            self.log.events += self.inner.report(i, name, value, out, self.log.shift)
            return out
        return watched

    def fold(self, A, pattern: torch.Tensor) -> torch.Tensor:
        """One event per block, from A before its first group of heads to A after its last."""
        new, block = self.inner.fold(A, pattern), self.log.blocks[-1]
        if self.log.folding is None or self.log.folding[0] != block:
            self.log.folding = (block, A, len(self.log.events))
        _, before, first = self.log.folding
        del self.log.events[first:]
        self.log.events += self.inner.report(block, "fold", before, new, self.log.shift)
        return new

    def to(self, device) -> "Watched":
        return dataclasses.replace(self, inner=self.inner.to(device))


class Watcher:
    """Builds each pass's forward with its step watched (`forward`, what `run_passes` calls), then turns
    what each did into a `PassRecord` (`finish`)."""

    def __init__(self, model) -> None:
        self.model = model
        self.paths = dataclasses.replace(fast_paths_of(model), buckets=False, graphs=False)  # the text's own shape
        self.runs: list[tuple[Forward, WatchLog]] = []
        self.records: list[PassRecord] = []
        self.details: dict[str, torch.Tensor] = {}

    def forward(self, model, input_ids, attention_mask, step: Step, keep, extra_rows, record) -> Forward:
        """The pass's forward with its step watched: the plain loop where every fast path is off, else the
        executor `embed` takes (for one text: the attention kernel it picks), so the embedding is `embed`'s."""
        log = WatchLog(step)
        run = executor(self.paths)
        options = {"paths": self.paths} if run is FastForward else {}
        forward = run(model, input_ids, attention_mask, Watched(inner=step, log=log), keep, extra_rows, record,
                      **options)
        log.shift = forward.prefix_length
        self.runs.append((forward, log))
        return forward

    def finish(self, passes: list[Pass]) -> None:
        for p, (forward, log) in zip(passes, self.runs):
            tokens = _tokens(self.model.tokenizer, p.batch)
            token = {q: t for q, _, t in tokens}
            acts = [{**act, "what": act.get("what", token.get(act["position"], "?"))} for act in log.step.acts_on(0)]
            prompt = _decoded(self.model.tokenizer, [i for _, i, _ in tokens], p.batch.placeholders)
            kept = [f"{site} of block {block}" for block, sites in sorted(p.record.items()) for site in sorted(sites)]
            self.records.append(PassRecord(p.role, prompt, tokens, p.layer, p.reads, acts, kept, log.blocks, log.events))
            if p.details is not None:
                self.details.update({name: value.detach().float().cpu() for name, value in p.details(forward).items()})


def _tokens(tokenizer, batch) -> list[tuple[int, int, str]]:
    """Row 0's real tokens at their batch columns, decoded one by one (added placeholders by their text)."""
    real = batch.attention_mask[0].bool()
    first = int(torch.argmax(real.long()))
    ids = batch.input_ids[0][real].tolist()
    return [(first + k, i, batch.placeholders.get(i) or tokenizer.decode([i])) for k, i in enumerate(ids)]


def _decoded(tokenizer, ids: list[int], placeholders: dict[int, str]) -> str:
    """The ids as text: runs of ordinary ids decoded together (so multi-token characters come out whole),
    placeholders by their text."""
    pieces, run = [], []
    for i in ids + [None]:
        if i is None or i in placeholders:
            pieces.append(tokenizer.decode(run) if run else "")
            pieces.append(placeholders.get(i, "") if i is not None else "")
            run = []
        else:
            run.append(i)
    return "".join(pieces)


def _model_info(model) -> dict:
    source = getattr(model, "source", None)
    return {"name": str(source).rstrip("/").rsplit("/", 1)[-1] if source else None, "blocks": model.num_layers,
            "hidden_size": model.config.hidden_size, "dtype": str(model.dtype).replace("torch.", "")}


def _name_roles(records: list[PassRecord]) -> None:
    """Several passes of one role (MetaEOL's eight prompts) are numbered: 'prompt 3 of 8'."""
    for role in {r.role for r in records}:
        same = [r for r in records if r.role == role]
        if len(same) > 1:
            for k, r in enumerate(same):
                r.role = f"{role} {k + 1} of {len(same)}"


def explain(model, text: str, method: str | Method = "tp", truncate: int | None = None, **options) -> Explanation:
    """One text through one method, recorded block by block (see the module docstring).

    method: a registered name with its options (as for `minidecoder.embed`) or a method object.
    truncate: keep the first N tokens of a text past the model's context (with a warning), as `embed`."""
    require_loaded(model, "explain", "text")
    method = method_of(method, options)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"explain needs one non-empty text, got {text!r}", 'pass e.g. "A man plays a guitar."')
    check_text(text, "the text")
    if model.tokenizer is None:
        raise InputError("the model has no tokenizer", "load it with minidecoder.load(), which attaches one")
    method.check(model)
    if truncate is not None:
        (text,) = truncate_texts(model.tokenizer, [text], truncate, None)
    try:
        return _record(model, text, method)
    except ContextLengthError as error:  # the message inside speaks of embed's truncate: say what explain takes
        fits = truncate_that_fits(model, text, method)  # measured on the method's own forwards: it fits
        fix = (f"pass truncate={fits} (CLI: explain --truncate {fits}) to keep the first {fits} tokens of the text, "
               f"the most that fit with {why_longer(model, method)}; or shorten it" if fits >= 1
               else f"shorten the text or use a method with a shorter prompt ({why_longer(model, method)})")
        raise ContextLengthError(error.problem, fix, length=error.length, limit=error.limit) from None


def _record(model, text: str, method: Method) -> Explanation:
    with torch.inference_mode():
        watcher, passes = Watcher(model), method.passes(model, [text])
        embedding = run_passes(model, passes, watcher.forward)[0].float()
        watcher.finish(passes)
        _name_roles(watcher.records)
        record = Explanation(_model_info(model), method.describe(), _text_in(text, method), watcher.records,
                             embedding, details=watcher.details)
        declared = method.baseline(model)
        if declared is None:
            record.notes.append("this method only reads the plain loop: no intervention to show")
        else:
            baseline, record.baseline = declared
            other = baseline.embed_batch(model, [text], forward=executor(getattr(model, "fast_paths", None)))[0]
            record.net_cosine = float(torch.nn.functional.cosine_similarity(embedding, other.float(), dim=0))
    return record


def _text_in(text: str, method: Method) -> str:
    """The text as the method's prompts hold it (after SentEval preparation where the method applies it)."""
    if getattr(method, "senteval_text", False):
        return senteval_sentence(text)
    return text
