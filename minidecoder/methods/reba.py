"""ReBA: repeat the text, fuse every attention map into one matrix, aggregate hidden states backward.

Paper: arXiv 2502.20726 (docs/spec.md section 7). Reference code: cqdyf099/ReBA,
`Code/models.py` (`LLM.get_attention_matrix`, `get_sentence_embedding`, `merge_token_embedding_by_attention`,
`get_word_embedding`) and `2 Evaluation_MTEB.py` (`LLM_ours_mean_pool`, the C-MTEB sentence encoder).

    text ─> text + sep + text (r copies, one string, BOS as the tokenizer adds it)
    for every block, every head:  S = (P + P^T) / 2          P: post-softmax attention (T x T)
                                  A = max(A, S)  elementwise  (A starts at 0; one (B, T, T) fp32 tensor)
    e_i = sum_{k >= i} A[i, k] h_k                            h: hidden_states[layer] (default -1)

Only one (B, T, T) running maximum is kept (A is B*T*T*4 bytes, 64 MiB per row at T = 4096): the
loop hands each block's patterns to the step's `fold`, which folds them into A and drops them
(from 256 tokens on, the executor beneath the loop hands them over a head at a time,
minidecoder.fast.blocked_fusion; a max does not depend on the grouping). Padded keys and queries are zeroed in A, so a
padded row equals its unpadded self up to float rounding.

Pooling (see `weight_vector`), rows R and weights w_k, embedding = sum_k w_k h_k:
    pooled     (reference code) w = sum_{i in R} M[i] / sum_{i in R, k} M[i, k]
    normalized (per row)        w = mean_{i in R} M[i] / sum_k M[i, k]
    raw        (paper formula)  w = mean_{i in R} M[i]
    uniform    (no fusion)      w = 1/|R| on R: plain mean pooling of the same forward (the baseline)
with M = A restricted to k >= i (`backward`) or the full row (`full`). For one row (last token)
pooled and normalized coincide. The reference's mean pooling (`LLM_ours_mean_pool`) is `pooled`
over backward rows and further multiplies by 1/(T//2), a per-vector scale that cosine similarity
ignores and minidecoder omits.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.audit import FoldAudited
from minidecoder.methods.base import Method, check_bool, check_choice, check_int, option, register
from minidecoder.methods.inputs import PromptBatch, pad
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import Forward, Pass, Step

WEIGHTS = ("pooled", "normalized", "raw", "uniform")
ROWS = ("backward", "full")


# ---- the paper's loop -----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class FoldAttention(FoldAudited, Step):
    """ReBA's fusion (docs/spec.md section 7.2): for every block and every head, S = (P + P^T) / 2 and
    A = max(A, S), elementwise; A starts at 0 and is one (B, T, T) float32 matrix."""

    blocks: frozenset[int]  # every block: the reference fuses all of the model's attention maps
    folds = True

    def fold(self, A: torch.Tensor | None, pattern: torch.Tensor) -> torch.Tensor:  # pattern P: (B, heads, T, T)
        P = pattern.float()
        S = (P + P.transpose(-1, -2)).div_(2)  # symmetrize each head (in place: one (B, heads, T, T) alive, not two)
        heads = S.amax(dim=1)  # max over heads ...
        del S
        return heads.clamp_min_(0) if A is None else torch.maximum(A, heads)  # ... then over blocks (A starts at 0)


def fused(forward: Forward, batch: PromptBatch) -> torch.Tensor:
    """A (B, T, T) fp32 of a finished forward with `FoldAttention`, padded rows and columns zeroed: queries
    on padding see a uniform pattern (core/model.py), which P^T would carry into real rows. A context's
    columns are zeroed too: its hidden states are keys no weight may pool."""
    mask = batch.attention_mask.to(forward.folded.device, non_blocking=True)
    keys = mask if batch.context_spans is None else mask & ~batch.context_mask().to(mask.device, non_blocking=True)
    valid = mask[:, :, None] & keys[:, None, :]  # (B, T, T)
    return forward.folded.masked_fill(~valid, 0.0)


# ---- ReBA's inputs and pooling: the repeated texts, the weights w, the rows R ------------------------------
def encode_repeated(tokenizer, texts: list[str], repetitions: int, separator: str = "",
                    contexts: list[str] | None = None) -> PromptBatch:
    """Each text repeated as one string (`separator.join([text] * r)`, the reference's `sentence * r`
    when the separator is empty), tokenized as a whole, left padded; `text_spans[b][c]` is copy c's
    token span (a token that straddles two copies counts in both). A row's context comes first, joined by a
    space (`"{context} {text}{text}"`), as every method's (`inputs.encode_prompts`)."""
    rows, spans, context_spans = [], [], []
    for index, text in enumerate(texts):
        if not text:
            raise InputError(f"text {index} is empty", "ReBA needs at least one character to repeat")
        context = contexts[index] if contexts else ""
        before = len(context) + 1 if context else 0  # the context and its space
        ids, offsets = tokenizer.encode_with_offsets((f"{context} " if context else "") + separator.join([text] * repetitions))
        head = [tokenizer.bos_id] if tokenizer.add_bos else []
        tail = [tokenizer.eos_id] if tokenizer.add_eos else []
        copies = []
        for c in range(repetitions):
            start = before + c * (len(text) + len(separator))
            inside = [i for i, (s, e) in enumerate(offsets) if s < start + len(text) and e > start]
            copies.append((inside[0] + len(head), inside[-1] + 1 + len(head)))
        covered = sum(1 for s, e in offsets if e > s and s < len(context)) if context else 0
        rows.append(head + ids + tail)
        spans.append(copies)
        context_spans.append((len(head), len(head) + covered))
    return pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, "left",
               context_spans=context_spans if contexts is not None else None)


def weight_vector(A: torch.Tensor, rows: torch.Tensor, weights: str, backward: bool) -> torch.Tensor:
    """(B, T) weights w over keys k such that the embedding is sum_k w_k h_k; rows (B, T) bool = R."""
    M = torch.triu(A) if backward else A  # backward: keep k >= i only
    R = rows.to(A.dtype)  # (B, T)
    if weights == "pooled":  # reference: sum the rows' weights, normalize once
        w = torch.einsum("bi,bik->bk", R, M)
        return w / w.sum(dim=-1, keepdim=True)
    if weights == "normalized":  # each e_i normalized to weights summing to 1, then averaged
        w = torch.einsum("bi,bik->bk", R / M.sum(dim=-1).clamp_min(torch.finfo(A.dtype).tiny), M)
    elif weights == "raw":  # the paper's formula: e_i = sum_{k >= i} A[i, k] h_k, averaged
        w = torch.einsum("bi,bik->bk", R, M)
    elif weights == "uniform":  # no fused attention at all: the mean of h over the rows R
        w = R
    else:
        raise AssertionError(weights)
    return w / R.sum(dim=-1, keepdim=True)


def aggregate(A: torch.Tensor, h: torch.Tensor, rows: torch.Tensor, weights: str, backward: bool) -> torch.Tensor:
    """(B, E) fp32: sum_k w_k h_k with w from `weight_vector`."""
    return torch.einsum("bk,bke->be", weight_vector(A, rows, weights, backward), h.float())


def rows_mask(batch: PromptBatch, pooling: str, first_half_split: bool) -> torch.Tensor:
    """(B, T) bool: the rows R pooled (the first copy's tokens, the first half, or the last token)."""
    B, T = batch.input_ids.shape
    rows = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        offset = T - batch.lengths[b]  # left padding
        if pooling == "last":
            rows[b, T - 1] = True
        elif first_half_split:  # reference quirk: rows 0..n//2-1 of the whole row, BOS included
            rows[b, offset:offset + batch.lengths[b] // 2] = True
        else:
            start, end = batch.text_spans[b][0]
            rows[b, start:end] = True
    return rows


# ---- the method: options, validation --------------------------------------------------------------
@register
@dataclass
class ReBA(Method):
    """ReBA (arXiv 2502.20726): repetition + fused symmetric attention + backward aggregation."""

    name = "reba"
    summary = "ReBA: repeat the text, fuse all attention maps by max, aggregate hidden states backward (arXiv 2502.20726)"

    repetitions: int = option(2, "copies of the text (ReBA-r); the reference concatenates them with no separator")
    separator: str = option("", "string between copies (an option; the reference uses none)")
    layer: int = option(-1, "hidden_states index aggregated (the reference: -1, the final normed output); "
                        "the attention of every block is fused whatever the layer")
    pooling: str = option("mean", "mean = average of e_i over the first copy's tokens (reference C-MTEB encoder); "
                          "last = e of the last token")
    last_row: str = option("full", "pooling=last only: full = the whole row of A (reference), backward = k >= i "
                           "(collapses to h_last)")
    weights: str = option("pooled", "pooled = reference code (rows' weights summed, normalized once); normalized = "
                          "each e_i normalized per row; raw = the paper's unnormalized sum; uniform = no fused "
                          "attention, the plain mean of h over the same rows (the baseline)")
    first_half_split: bool = option(False, "pooling=mean only; reference quirk: mean over rows 0..T//2-1 of the "
                                    "whole sequence (BOS included, the first copy's last token left out) instead of "
                                    "the first copy")

    def __post_init__(self) -> None:
        check_int(self.repetitions, "ReBA repetitions", minimum=1, example="2")
        check_choice(self.pooling, "ReBA pooling", ("mean", "last"))
        check_choice(self.last_row, "ReBA last_row", ROWS)
        check_choice(self.weights, "ReBA weights", WEIGHTS)
        check_bool(self.first_half_split, "first_half_split")
        if self.pooling == "mean" and self.last_row != "full":  # pooling=mean aggregates backward whatever last_row says
            raise InputError(f"ReBA last_row={self.last_row!r} chooses the row of A that pooling=last reads, and "
                             "pooling='mean' reads the first copy's rows, always backward: it would change nothing",
                             "leave last_row out, or pass pooling=last")
        if self.pooling == "last" and self.first_half_split:
            raise InputError("ReBA first_half_split=true changes the rows pooling=mean averages, and pooling='last' "
                             "reads the last token's row: it would change nothing",
                             "leave first_half_split out, or pass pooling=mean")

    def check(self, model) -> None:
        resolve_output_layer(self.layer, model.num_layers)

    takes_context = True  # before the copies; its columns of A are zeroed (`fused`), so no weight pools it

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """One forward of the repeated texts through every block, folding every pattern into A; the
        embedding sums hidden_states[layer] with weights from A's rows R."""
        if contexts is not None and self.first_half_split:
            raise InputError("first_half_split takes the first half of the whole row, which would cut into a "
                             "context", "embed without a context, or leave first_half_split off")
        L, index = model.num_layers, resolve_output_layer(self.layer, model.num_layers)
        batch = encode_repeated(model.tokenizer, list(texts), self.repetitions, self.separator, contexts)
        rows = rows_mask(batch, self.pooling, self.first_half_split)  # (B, T) R
        backward = self.pooling == "mean" or self.last_row == "backward"

        def weights(run: Forward) -> torch.Tensor:  # (B, T)
            A = fused(run, batch)
            return weight_vector(A, rows.to(A.device, non_blocking=True), self.weights, backward)

        return [Pass(batch, FoldAttention(blocks=frozenset(range(L))), layer=index, depth=L, role="the repeated text",
                     reads="sum_k w_k h_k, w from the fused attention's rows R (the first copy's tokens, or the last "
                           "token with pooling=last)",
                     pool=lambda run: aggregate(fused(run, batch), run.hidden(index), rows.to(run.folded.device, non_blocking=True),
                                                self.weights, backward),  # e = sum_k w_k h_k
                     details=lambda run: {"fused_attention": fused(run, batch)[0], "weights": weights(run)[0]})]

    def baseline(self, model) -> tuple[Method, str]:
        return (dataclasses.replace(self, weights="uniform"),
                f"uniform weights over the same rows R of the same repeated input at output layer {self.layer} "
                "(plain mean pooling, no fused attention)")


# ---- experiments beyond the sentence embedding: the reference's word embeddings; A and h for the tools -----
def fused_attention(model, batch: PromptBatch, output_index: int,
                    forward: Callable[..., Forward] = Forward) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, h): A (B, T, T) fp32 = elementwise max over every block and head of (P + P^T)/2, padded rows and
    columns zeroed; h = hidden_states[output_index] (B, T, E). Every block runs, through `forward`: the plain
    loop or the executor the caller picked (long inputs fold a head at a time there: fast.blocked_fusion)."""
    L = model.num_layers
    forward = forward(model, batch.input_ids, batch.attention_mask, FoldAttention(blocks=frozenset(range(L))),
                      keep={output_index, L})
    h = forward.hidden(output_index)
    forward.run_to(L)
    return fused(forward, batch), h


def reba_word_embedding(model, text: str, char_start: int, char_end: int, repetitions: int = 2,
                        separator: str = "", layer: int = -1, rows: str = "full",
                        weights: str = "pooled", forward: Callable[..., Forward] = Forward) -> torch.Tensor:
    """(E,) fp32: the ReBA embedding of the characters text[char_start:char_end] in the first copy.

    The span's tokens (those overlapping it) are the rows R. Defaults follow the reference's
    `merge_token_embedding_by_attention`: full rows of A, summed and normalized once (`pooled`);
    rows='backward', weights='normalized' gives docs/spec.md section 7.5's "e_i averaged over the span"."""
    if not 0 <= char_start < char_end <= len(text):
        raise InputError(f"character span [{char_start}, {char_end}) is not inside the text of {len(text)} characters",
                         "pass 0 <= char_start < char_end <= len(text)")
    if rows not in ROWS or weights not in WEIGHTS:
        raise InputError(f"rows {rows!r} / weights {weights!r} unknown", f"rows: {ROWS}; weights: {WEIGHTS}")
    index = resolve_output_layer(layer, model.num_layers)
    batch = encode_repeated(model.tokenizer, [text], repetitions, separator)
    ids, offsets = model.tokenizer.encode_with_offsets(separator.join([text] * repetitions))
    head = 1 if model.tokenizer.add_bos else 0
    tokens = [i + head for i, (s, e) in enumerate(offsets) if s < char_end and e > char_start]
    mask = torch.zeros_like(batch.attention_mask)
    mask[0, tokens] = True
    with torch.inference_mode():
        A, h = fused_attention(model, batch, index, forward)
        return aggregate(A, h, mask.to(A.device, non_blocking=True), weights, rows == "backward")[0]
