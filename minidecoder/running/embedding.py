"""`minidecoder.embed`: run a method over a list of texts in length-sorted batches.

Sorting by token length before batching keeps padding small (the references padded each batch of
SentEval's order); results are put back in input order. Everything runs under inference_mode.

Batches are sized by tokens, as embedding servers size them: rows are added while rows x the longest
row's forward length stays within a budget per device (`running.memory.token_budget`: about the CPU
figures' 32 sentences on a CPU; as much as memory comfortably allows on a GPU, where a small batch leaves
the device waiting on the host's launches). `batch_size=N` cuts N sentences a batch instead. On a GPU
each batch's embeddings come back to the host without blocking, two batches late (`_Results`), so the
device never waits for the host between batches.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minidecoder.errors import (ArgumentTypeError, ContextLengthError, InputError, MinidecoderError, NumericsError,
                                TruncationWarning, is_whole_number)
from minidecoder.fast import prefix_cache
from minidecoder.fast.device import to_host_later
from minidecoder.fast.forward import executor
from minidecoder.fast.options import fast_paths_of
from minidecoder.methods import Method, method_of
from minidecoder.methods.text import require_text
from minidecoder.running.load_model import require_loaded
from minidecoder.running import memory
from minidecoder.running.texts import check_text, split_contexts


def embed(model, texts: list[str], method: str | Method = "prompteol", batch_size: int | None = None,
          progress: bool = False, truncate: int | None = None, report: dict | None = None,
          context: str | list[str] | None = None, **options) -> torch.Tensor:
    """(N, E) float32 embeddings of `texts`, in input order.

    Context: a text given as a (context, text) pair, or `context=` (one string for every text, or one per
    text), is read by the model before the text and never pooled (running.texts.split_contexts).

    batch_size: sentences per batch; None (the default) fills each batch up to the device's token budget.

    Length policy: an input longer than the model's context (tokenizer_config.json `model_max_length`)
    is an error naming the text. `truncate=N` keeps the first N tokens of each TEXT (never of the
    template) instead; it is never silent: a warning says how many rows were cut, and `report` (a dict
    you pass) receives `truncate` and `truncated_rows` ({row: tokens before cutting}) for your metadata;
    without `truncate` it receives truncate None and no rows: the record of a run that cut nothing.
    """
    if truncate is None and isinstance(report, dict):  # left empty, it would hold no record of the run at all
        report.update(truncate=None, truncated_rows={})
    return embed_rows(model, texts, method, batch_size, progress, truncate, report, context, text_row, **options)


def text_row(row: int) -> str:
    """How `embed`'s errors and warnings name a row: by its index in the caller's list."""
    return f"text {row}"


def embed_rows(model, texts, method: str | Method, batch_size: int | None, progress: bool, truncate: int | None,
               report: dict | None, context, name_row: Callable[[int], str], **options) -> torch.Tensor:
    """`embed`, every row named by `name_row(row)` in its errors and warnings: a job that embeds a file chunk
    by chunk names each row by its line in the file, not by its place in the chunk."""
    require_loaded(model, "embed", "texts")
    method = method_of(method, options)
    texts, contexts = _as_text_list(texts, context)
    if contexts is not None and not method.takes_context:
        raise InputError(f"method {method.name!r} takes no context: it cannot read a text's context unpooled",
                         "embed the texts without one, or join the context to each text yourself")
    require_text(texts, method.reads_empty_text())  # checked here, before sorting, so the row number is the caller's
    if batch_size is not None and not is_whole_number(batch_size, 1):
        raise ArgumentTypeError(f"batch_size={batch_size!r} must be a positive integer or None",
                                "e.g. batch_size=32, or leave it out to fill batches by tokens")
    batch_size = None if batch_size is None else int(batch_size)  # a NumPy integer is one too
    if report is not None and not isinstance(report, dict):
        raise ArgumentTypeError(f"report is a {type(report).__name__}; it is a dict that receives the rows cut",
                                "pass report={} (or leave it out)")
    if model.tokenizer is None:
        raise InputError("the model has no tokenizer", "load it with minidecoder.load(), which attaches one")
    method.check(model)
    if truncate is not None:
        texts = truncate_texts(model.tokenizer, texts, truncate, report, name_row)
    # Sort by token count (characters mislead: digits, rare words and non-Latin text take more tokens
    # per character), stable, so that a batch's rows need little padding; `out[index]` below puts
    # every vector back in input order.
    lengths = [len(ids) for ids in model.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    length = forward_length(model, method)
    check_fits(model, method, texts, contexts, name_row, lengths, length)
    planned = lengths  # batches are planned on context + text (a repeating method over-counts a context: safe)
    if contexts is not None:
        planned = [n + len(ids) + 1 for n, ids in zip(lengths, model.tokenizer.encode_batch(contexts, add_special_tokens=False))]
    order = sorted(range(len(texts)), key=lambda i: planned[i])
    free = memory.available_bytes(model.device)  # read once, not per batch
    # None: the CPU's rule. A row whose prefix cannot run once (dynamic RoPE; a batch past a sliding window) is
    # planned as the plain loop plans it: counting a prefix that runs in every row as run once packs more rows
    # than the budget holds, and under dynamic RoPE a row's vector depends on its batch (the call's longest
    # position sets the frequencies), so the switch would change it.
    prefix_once = model.device.type == "cpu" and fast_paths_of(model).prefix_cache is not False
    batches = plan_batches(order, planned, batch_size, memory.token_budget(model, free),
                           lambda n: length.per_row(n, prefix_once and prefix_cache.may_cache(model.config,
                                                                                             math.ceil(length(n)))))

    def refuse_nonfinite(row: int) -> None:
        raise NumericsError(
            f"method {method.name} produced NaN or inf for {name_row(row)} ({texts[row][:40]!r}) in dtype "
            f"{str(model.dtype).replace('torch.', '')}: {_locate_nonfinite(model, method, texts[row])}",
            nonfinite_hint(model))

    results = _Results(len(texts), model.config.hidden_size, refuse_nonfinite)
    bar = _progress_bar(len(texts)) if progress else None
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            longest = math.ceil(length(max(planned[i] for i in batch)))
            for index in memory.split_for_memory(model, batch, [planned[i] for i in batch], longest, free):
                results.add(index, _run_batch(model, method, texts, index, lengths, contexts, name_row))
                if bar is not None:
                    bar.update(len(index))
                    bar.set_postfix_str(f"{bar.n / (time.perf_counter() - start):.1f} sentences/s")
        out = results.finish()
    if bar is not None:
        bar.close()
    return out


def plan_batches(order: list[int], lengths: list[int], batch_size: int | None, budget: int,
                 length_of: Callable[[int], float]) -> list[list[int]]:
    """The rows of each batch, in `order` (ascending length): `batch_size` rows each, or with None as many
    as keep rows x the longest row's forward length (`length_of(text tokens)`) within `budget` tokens."""
    if batch_size is not None:
        return [order[first:first + batch_size] for first in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    current: list[int] = []
    for row in order:  # ascending: the newest row is the longest of its batch
        if current and (len(current) + 1) * length_of(lengths[row]) > budget:
            batches.append(current)
            current = []
        current.append(row)
    return batches + ([current] if current else [])


@dataclass(frozen=True)
class ForwardLength:
    """The tokens of the longest forward a method runs on a text of n tokens: k * n + c (a prompt adds c;
    ReBA's and Echo's repetitions make k 2); `shared` of them are a prompt prefix every row has, which the
    CPU's prefix cache runs once a batch."""

    k: float
    c: float
    shared: int

    def __call__(self, n: int) -> float:
        return self.k * n + self.c

    def per_row(self, n: int, prefix_once: bool) -> float:
        """What a row adds to a batch's tokens (the shared prefix not counted where it runs once)."""
        return self(n) - (self.shared if prefix_once else 0)


def forward_length(model, method: Method) -> ForwardLength:
    """`ForwardLength` measured on the method's own passes for two probe texts; the pass with the most
    tokens beyond its shared prefix sets it."""
    sizes = []
    try:
        for probe in ("x", " ".join(["word"] * 9)):  # different first tokens: only the template is shared
            n = len(model.tokenizer.encode(probe, add_special_tokens=False))
            sizes.append((n, [p.batch for p in method.passes(model, [probe])]))
    except (MinidecoderError, NotImplementedError):  # a method that refuses the probe, or runs its own
        # embed_batch without passes: assume a prompt of 64 tokens around the text
        return ForwardLength(1.0, 64.0, 0)
    (n1, short), (n2, long) = sizes
    best = ForwardLength(1.0, 0.0, 0)
    for a, b in zip(short, long):
        t1, t2 = a.input_ids.shape[1], b.input_ids.shape[1]
        k = (t2 - t1) / (n2 - n1) if n2 != n1 else 1.0
        shared = len(os.path.commonprefix([a.input_ids[0].tolist(), b.input_ids[0].tolist()]))
        candidate = ForwardLength(k, t1 - k * n1, shared)
        if candidate.per_row(n1, True) >= best.per_row(n1, True):
            best = candidate
    return best


class _Results:
    """The (N, E) float32 embeddings, filled batch by batch and checked finite. From a GPU each batch is
    copied into pinned host memory without blocking and read LAG batches later, so the device is never
    idle while the host reads a batch back (a plain `.cpu()` would wait for it)."""

    LAG = 2

    def __init__(self, rows: int, dim: int, refuse_nonfinite: Callable[[int], None]) -> None:
        self.out = torch.empty(rows, dim, dtype=torch.float32)
        self.refuse_nonfinite = refuse_nonfinite
        self.pending: deque = deque()  # (rows, host tensor, CUDA event)

    def add(self, index: list[int], vectors: torch.Tensor) -> None:
        if vectors.device.type != "cuda":
            self._store(index, vectors.float().cpu())
            return
        host, event = to_host_later(vectors)  # on the model's device, whichever is current
        self.pending.append((index, host, event))
        while len(self.pending) > self.LAG:
            self._take()

    def _take(self) -> None:
        index, host, event = self.pending.popleft()
        event.synchronize()
        self._store(index, host)

    def _store(self, index: list[int], vectors: torch.Tensor) -> None:
        finite = torch.isfinite(vectors).all(dim=-1)  # (B,), on the host
        if not finite.all():
            self.refuse_nonfinite(index[int((~finite).nonzero()[0, 0])])
        self.out[index] = vectors

    def finish(self) -> torch.Tensor:
        while self.pending:
            self._take()
        return self.out


def _as_text_list(texts, context=None) -> tuple[list[str], list[str] | None]:
    """`texts` as a list of strings: a list, tuple or any iterable of str (a generator is read whole, since
    the result is one tensor; minidecoder.running.jobs streams files). Anything else names the problem.
    With each row's context (`split_contexts`: pairs or `context`), None where no row has one."""
    if texts is None or isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
        raise ArgumentTypeError(f"texts must be a list of strings, not {type(texts).__name__}"
                                + (f" ({texts[:40]!r})" if isinstance(texts, (str, bytes)) else ""),
                                "pass e.g. ['first sentence', 'second sentence'] (one string goes in a list too)")
    texts, contexts = split_contexts(list(texts), context)
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise ArgumentTypeError(f"texts must be a list of strings; text {row} is a {type(text).__name__} "
                                    f"({text!r:.40})",
                                    "convert every item to str first")
        check_text(text, f"text {row}")
    return texts, contexts


def check_fits(model, method: Method, texts: list[str], contexts: list[str] | None = None,
               name_row: Callable[[int], str] = text_row, lengths: list[int] | None = None,
               length: ForwardLength | None = None, truncate_flag: str | None = "--truncate") -> None:
    """Refuse, before any forward, a text longer than the model's context alone or as the method runs it (its
    prompt, a context, ReBA's and Echo's second copy): the first such row, named, its length, and the
    `truncate` that fits it. `lengths` (the texts' token counts) and `length` (`forward_length`): when the
    caller has them. `truncate_flag`: the caller's option that truncates, None for a command that has none."""
    limit = getattr(model, "max_context", None)
    if limit is None:
        return
    if lengths is None:
        lengths = [len(ids) for ids in model.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    too_long = [row for row, n in enumerate(lengths) if n > limit]
    if too_long:
        row = too_long[0]
        names = [name_row(r) for r in too_long[:3]]
        listed = f": {', '.join(names)}{', ...' if len(too_long) > 3 else ''}" if len(set(names)) > 1 else ""
        more = f" ({len(too_long)} texts in all{listed})" if len(too_long) > 1 else ""
        raise ContextLengthError(
            f"{name_row(row)} is {lengths[row]} tokens, longer than the model's context of {limit} tokens: "
            f"{_start_of(texts[row])}{more}", _truncate_fix(model, method, texts[row], "each text", truncate_flag),
            length=lengths[row], limit=limit)
    length = length or forward_length(model, method)
    extra = [0] * len(texts) if contexts is None else \
        [len(ids) + 1 for ids in model.tokenizer.encode_batch(list(contexts), add_special_tokens=False)]
    for row, n in enumerate(lengths):
        # The estimate k n + c is measured on two short probes; a forward's length may differ from it by a few
        # tokens, or by one placeholder a sentence (HTP): only a row near the limit is measured exactly.
        if FITS_MARGIN * (length(n) + extra[row]) <= limit:
            continue
        try:
            passes = method.passes(model, [texts[row]], None if contexts is None else [contexts[row]])
            longest = max(p.batch.input_ids.shape[1] for p in passes)
        except ContextLengthError as error:  # refused while templating (tokenizer_config.json's model_max_length)
            longest = error.length or limit + 1
        except (MinidecoderError, NotImplementedError):  # no passes to measure: its forward will say
            continue
        if longest > limit:
            context = "its context, " if contexts is not None and contexts[row] else ""
            raise ContextLengthError(
                f"{name_row(row)} is {n} tokens; with {context}{why_longer(model, method)} ({longest - n} more) that "
                f"is {longest}, longer than the model's context of {limit} tokens: {_start_of(texts[row])}",
                _truncate_fix(model, method, texts[row], "each text", truncate_flag), length=longest, limit=limit)


FITS_MARGIN = 1.5  # a forward estimated within a third of the limit is measured exactly


def check_texts_fit(model, method: Method, items: list, name_row: Callable[[int], str] = text_row,
                    truncate: int | None = None, context: str | None = None, truncate_flag: str | None = "--truncate",
                    length: ForwardLength | None = None) -> None:
    """`check_fits` on `embed`'s input as a caller holds it: texts or (context, text) pairs (or one `context` for
    every text), cut by `truncate` first as `embed` cuts them. A job checks its whole input with it before its
    first chunk, an eval command its texts before its job."""
    texts, contexts = split_contexts(list(items), context)
    if truncate is not None:
        texts = truncate_texts(model.tokenizer, texts, truncate, None, name_row=None)
    check_fits(model, method, texts, contexts, name_row, length=length, truncate_flag=truncate_flag)


def _start_of(text: str, size: int = 30) -> str:
    """The text's first characters, to find it by."""
    return repr(text[:size] + ("..." if len(text) > size else ""))


def _run_batch(model, method: Method, texts: list[str], index: list[int], lengths: list[int],
               contexts: list[str] | None = None, name_row: Callable[[int], str] = text_row) -> torch.Tensor:
    """method.embed_batch on rows `index`, through the executor the model's fast paths ask for (the plain loop
    when all are off); a context error (prompt + text too long) names the row."""
    forward = executor(getattr(model, "fast_paths", None))
    try:
        if contexts is None:
            return method.embed_batch(model, [texts[i] for i in index], forward=forward)
        return method.embed_batch(model, [texts[i] for i in index], [contexts[i] for i in index], forward=forward)
    except ContextLengthError as error:
        row = max(index, key=lambda i: lengths[i])  # the batch's longest text made the longest sequence
        raise ContextLengthError(
            f"{name_row(row)} is {lengths[row]} tokens; with "
            f"{'its context, ' if contexts and contexts[row] else ''}"
            f"{why_longer(model, method)} ({error.length - lengths[row]} "
            f"more) that is {error.length}, longer than the model's context of {error.limit} tokens",
            _truncate_fix(model, method, texts[row], "each text"), length=error.length, limit=error.limit) from None


def _truncate_fix(model, method: Method, text: str, what: str, cli: str | None = "--truncate") -> str:
    """'pass truncate=N ...' with the largest N that fits `text` as the method holds it, or the other ways out
    (`cli` None: a command that keeps every text whole)."""
    if cli is None:
        return ("this command keeps every text whole, as the papers scored them (it has no --truncate): use a model "
                "with a longer context, or shorten that text in the data")
    fits = truncate_that_fits(model, text, method)
    if fits < 1:
        return f"shorten the text or use a method with a shorter prompt ({why_longer(model, method)} fill the context)"
    return (f"pass truncate={fits} (CLI {cli} {fits}) to keep the first {fits} tokens of {what}, the most that "
            f"fit with {why_longer(model, method)}; or shorten the text; truncated rows are listed in the output's "
            "metadata")


def nonfinite_hint(model) -> str:
    """The way out of a NaN: corrupt weights, float16 overflow, or (float32/bfloat16) the inputs or method."""
    from minidecoder.running.diagnostics import nonfinite_parameters

    broken = nonfinite_parameters(model)
    if broken:
        return (f"the weights themselves hold NaN or inf ({', '.join(broken[:3])}"
                f"{', ...' if len(broken) > 3 else ''}): the checkpoint is corrupt; re-download or re-convert it")
    if model.dtype == torch.float16:
        return "float16 overflows on many models (this model runs in float16): use float32 or bfloat16"
    return (f"the weights are finite and the dtype is {str(model.dtype).replace('torch.', '')}, so this is not a "
            "float16 overflow: check the text and the method's options (a scale such as alpha), and report it "
            "if they look sane")


def truncate_texts(tokenizer, texts: list[str], max_tokens: int, report: dict | None,
                   name_row: Callable[[int], str] | None = text_row) -> list[str]:
    """Each text cut to its first `max_tokens` tokens (by the tokenizer's character offsets), at most that many
    as the cut text tokenizes. A warning names the rows cut (`name_row`; None: no warning, the caller says it)."""
    if not is_whole_number(max_tokens, 1):
        raise InputError(f"truncate={max_tokens!r} must be a positive number of tokens",
                         "e.g. truncate=512 keeps the first 512 tokens of each text")
    max_tokens = int(max_tokens)  # a NumPy integer is one too; the report holds a plain int
    out, cut = [], {}
    for row, text in enumerate(texts):
        ids, offsets = tokenizer.encode_with_offsets(text)
        if len(ids) > max_tokens:
            end = offsets[max_tokens - 1][1]
            # A character split over byte tokens, or a word cut where BPE merges its start otherwise, can
            # tokenize to more than max_tokens once cut: drop characters until it does not.
            while end > 0 and len(tokenizer.encode(text[:end], add_special_tokens=False)) > max_tokens:
                end -= 1
            text = text[:end]
            cut[row] = len(ids)
        out.append(text)
    if report is not None:
        report["truncate"] = max_tokens
        report["truncated_rows"] = cut
    if cut and name_row is not None:
        warn_truncated(max_tokens, [name_row(row) for row in sorted(cut)], len(texts))
    return out


def warn_truncated(max_tokens: int, rows: list[str], total: int) -> None:
    """The one warning that says which rows `truncate` cut (never silent)."""
    warnings.warn(f"truncate={max_tokens}: {len(rows)} of {total} texts were cut to their first {max_tokens} "
                  f"tokens ({', '.join(rows[:10])}{', ...' if len(rows) > 10 else ''})", TruncationWarning,
                  stacklevel=4)


def truncate_that_fits(model, text: str, method: Method) -> int:
    """The largest `truncate` N whose cut of `text` the method runs within the model's context, measured on
    the method's own forwards (its template, special tokens, a SentEval-style period, ReBA's and Echo's
    second copy of the text), or 0 when even one token does not fit. So the N an error names fits, and
    is the largest that does."""
    ids, offsets = model.tokenizer.encode_with_offsets(text)
    low, high = 0, len(ids)  # the answer lies in [low, high]; a method's forward grows with N
    while low < high:
        middle = (low + high + 1) // 2
        if _runs_within_context(model, method, text[:offsets[middle - 1][1]]):
            low = middle
        else:
            high = middle - 1
    return low


def _runs_within_context(model, method: Method, text: str) -> bool:
    limit = getattr(model, "max_context", None)
    try:
        longest = max(p.batch.input_ids.shape[1] for p in method.passes(model, [text]))
    except ContextLengthError:  # refused while templating (tokenizer_config.json's model_max_length)
        return False
    except (MinidecoderError, NotImplementedError):  # no passes to measure: the text and 64 tokens of prompt
        longest = len(model.tokenizer.encode(text, add_special_tokens=False)) + 64
    return limit is None or longest <= limit


def why_longer(model, method: Method) -> str:
    """What makes the method's forward longer than its text: its prompt, and a repetition of the text (ReBA,
    Echo) named as such."""
    copies = round(forward_length(model, method).k)
    if copies >= 2:
        return (f"method {method.name}'s repetition of the text (it holds the text "
                f"{'twice' if copies == 2 else f'{copies} times'}), prompt and special tokens")
    return f"method {method.name}'s prompt and special tokens"


def _locate_nonfinite(model, method: Method, text: str) -> str:
    """Rerun the plain forward of the method's first pass on `text` block by block (diagnostics)."""
    from minidecoder.running.diagnostics import first_nonfinite_layer

    try:
        first = method.passes(model, [text])[0]  # its tokens and placeholder rows, without its step
        found = first_nonfinite_layer(model, first.batch, extra_rows=first.extra_rows)
    except Exception as error:  # a diagnosis must never hide the original problem
        return f"(could not locate it: {type(error).__name__}: {error})"
    if found is None:
        return ("the plain forward of its prompt stays finite, so the method's own steps (steering, "
                "placeholders, pooling) produce it")
    return found.describe()


def _progress_bar(total: int):
    from tqdm.auto import tqdm
    return tqdm(total=total, unit="sent", desc="embedding", dynamic_ncols=True)
