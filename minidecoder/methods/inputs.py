"""Prompts to tensors: fill a template, tokenize it as one string, pad, and remember where things are.

Every prompt method goes through `encode_prompts`: the template (with `{text}` and optional
placeholder tokens such as `<PST>`) is filled and tokenized as one string, so the text on each side
tokenizes exactly as in the reference code; each `{text}` occurrence's tokens are located through
the tokenizer's character offsets (a token overlapping the sentence counts as the sentence's).
Padding is on the left, as the references padded for last-token pooling.

`pieces=True` tokenizes as HTP's code does instead (`parser.py`, `Parser._tokenize_from_pieces`): the
template's text around each `{text}`, and each text, on its own, their ids joined. Where a piece ends in a
space or a quote that one string would merge with the text (`Query: ` + `A` gives `:`,`Ġ`,`A`, not `:`,`ĠA`),
the ids differ from the one string's; a space before `{eos}` becomes a token of its own.

A row may carry a context (an instruction): read by the model, never pooled. It goes first, after the
BOS and before the template, joined by one space (`"{context} {filled template}"`, tokenized as one
string, so with the bare `{text}` template the tokens are those of `"{context} {text}"`; with `pieces`, the
context and one space open the first piece);
`PromptBatch.context_spans` says where it lies, and `text_spans` never covers it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from minidecoder.errors import ContextLengthError, InputError
from minidecoder.methods.text import PIECE_FIELD, fill_template, without_bos, without_eos


@dataclass(frozen=True, eq=False)
class PromptBatch:
    """A padded batch of prompts, on the host; the loop moves what it needs to the model's device."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T) bool, True = real token; padding on the left (or right)
    text_spans: list[list[tuple[int, int]]]  # per row, per {text} occurrence: token [start, end) in the padded row
    lengths: list[int]  # real tokens per row
    placeholders: dict[int, str] = field(default_factory=dict)  # id -> text of the added tokens it holds (<PST>)
    context_spans: list[tuple[int, int]] | None = None  # per row: token [start, end) of its context; None: no row has one

    def context_mask(self) -> torch.Tensor | None:
        """(B, T) bool: the context tokens, which no pooling reads; None when no row has a context."""
        if self.context_spans is None:
            return None
        mask = torch.zeros_like(self.attention_mask)
        for row, (start, end) in enumerate(self.context_spans):
            mask[row, start:end] = True
        return mask

    @property
    def last(self) -> torch.Tensor:
        """(B,) index of each row's last real token (left or right padding)."""
        return self.attention_mask.shape[1] - 1 - torch.argmax(self.attention_mask.flip(-1).long(), dim=-1)

    def positions_of(self, token_id: int) -> list[list[int]]:
        """Per row, the (padded) positions holding `token_id`, in order."""
        return [torch.nonzero(row == token_id).flatten().tolist() for row in self.input_ids]

    def same_tokens(self, other: "PromptBatch") -> bool:
        """The same ids and padding (two configurations that encode a batch alike can share its forward)."""
        return (self.input_ids.shape == other.input_ids.shape and torch.equal(self.input_ids, other.input_ids)
                and torch.equal(self.attention_mask, other.attention_mask))


def encode_prompts(tokenizer, template: str, texts: list[str], max_length: int | None = None,
                   padding_side: str = "left", placeholders: dict[int, str] | None = None, contexts: list[str] | None = None,
                   pieces: bool = False) -> PromptBatch:
    """The filled template of every text, tokenized as one string (or by `pieces`) and padded. placeholders:
    id -> text of the added tokens the tokenizer holds (for reading the batch back); contexts: each row's
    context ("" for none), put before the template (see the module docstring)."""
    declared = getattr(tokenizer, "model_max_length", None)  # tokenizer_config.json's context, if any
    limit = max_length if max_length is not None else declared
    rows, spans, context_spans = [], [], []
    for row, text in enumerate(texts):
        if contexts is None:
            ids, text_spans = encode_one(tokenizer, template, text, pieces=pieces)
        else:
            ids, text_spans, context_span = encode_one(tokenizer, template, text, contexts[row], pieces)
            context_spans.append(context_span)
        if limit is not None and len(ids) > limit:
            text_tokens = sum(end - start for start, end in text_spans)
            where = "the model's context (tokenizer_config.json model_max_length)" if max_length is None else "max_length"
            raise ContextLengthError(
                f"the text {_snippet(text)} is {len(ids)} tokens after templating ({text_tokens} of them "
                f"the text, {len(ids) - text_tokens} the {'context, ' if contexts and contexts[row] else ''}template and "
                f"special tokens), more than {where} = {limit}",
                "shorten the text, or embed with truncate=N to keep the first N tokens of each text (the template "
                f"is kept whole; e.g. truncate={max((limit - len(ids) + text_tokens) // max(len(text_spans), 1), 1)} "
                "here); truncated rows are listed in the output metadata", length=len(ids), limit=limit,
            )
        rows.append(ids)
        spans.append(text_spans)
    return pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, padding_side, placeholders,
               context_spans if contexts is not None else None)


def encode_one(tokenizer, template: str, text: str, context: str | None = None, pieces: bool = False):
    """(ids, [(start, end) token span of each {text} occurrence]) for one filled template; given `context`
    (a string, "" for none), the ids of `"{context} {filled}"` and, as a third item, the context's token span
    (the tokens overlapping its characters; (0, 0) for none). A leading `{bos}` puts the BOS id first (once, where
    the tokenizer's policy puts it there too); a final `{eos}` appends the EOS id. `pieces`: HTP's code's
    tokenization (`encode_pieces`)."""
    filled = fill_template(template, text)  # validates the template; strips
    template, bos = without_bos(template)
    template, eos = without_eos(template)
    if PIECE_FIELD in template and not pieces:
        raise InputError(f"the template {template!r} cuts pieces with {PIECE_FIELD}, which only pieces=true reads",
                         f"pass pieces=true, or drop {PIECE_FIELD} from the template")
    if pieces:
        ids, token_spans, covered = encode_pieces(tokenizer, template.split("{text}"), text, context)
    else:
        ids, token_spans, covered = encode_string(tokenizer, template.split("{text}"), text, filled, context)
    if bos and tokenizer.bos_id is None:
        raise InputError(f"the template {'{bos}' + template!r} puts a BOS token first, and this tokenizer has none",
                         "drop {bos} from the template, or use a checkpoint whose tokenizer_config.json names one")
    head = [tokenizer.bos_id] if tokenizer.add_bos or bos else []
    tail = [tokenizer.eos_id] if tokenizer.add_eos else []
    if eos:  # HTP's code's `{</s>}`: the token a last-token readout then reads
        if tokenizer.eos_id is None:
            raise InputError(f"the template {template + '{eos}'!r} appends an EOS token, and this tokenizer has none",
                             "drop {eos} from the template, or use a checkpoint whose tokenizer_config.json names one")
        ids = ids + [tokenizer.eos_id]
    token_spans = [(s + len(head), e + len(head)) if e > s else (0, 0) for s, e in token_spans]
    if context is None:
        return head + ids + tail, token_spans
    return head + ids + tail, token_spans, (len(head), len(head) + covered) if covered else (0, 0)


def encode_string(tokenizer, parts: list[str], text: str, filled: str, context: str | None):
    """(ids, text spans, context tokens) of `"{context} {filled}"` tokenized as one string: each `{text}`
    occurrence's tokens are those overlapping its characters; the context's a prefix of the ids."""
    assembled, char_spans = parts[0], []
    for part in parts[1:]:
        char_spans.append((len(assembled), len(assembled) + len(text)))
        assembled += text + part
    shift = len(assembled) - len(assembled.lstrip())
    assert assembled.strip() == filled
    char_spans = [(max(s - shift, 0), min(e - shift, len(filled))) for s, e in char_spans]
    before = len(context) + 1 if context else 0  # the context and its space come first
    ids, offsets = tokenizer.encode_with_offsets(f"{context} {filled}" if context else filled)
    token_spans = []
    for start_char, end_char in char_spans:
        start_char, end_char = start_char + before, end_char + before
        inside = [i for i, (s, e) in enumerate(offsets) if s < end_char and e > start_char]
        token_spans.append((inside[0], inside[-1] + 1) if inside else (0, 0))
    covered = sum(1 for s, e in offsets if e > s and s < len(context)) if context else 0
    return ids, token_spans, covered


def encode_pieces(tokenizer, parts: list[str], text: str, context: str | None):
    """(ids, text spans, context tokens) as HTP's code tokenizes a template (`Parser._tokenize_from_pieces`):
    the pieces around each `{text}` (cut again at each `{|}`; the first opened by the context and one space) and
    each text tokenized on their own, ids joined. Nothing is stripped: a piece's spaces are its own tokens, as in
    the reference."""
    ids, token_spans, covered = [], [], 0
    text_ids = tokenizer.encode(text, add_special_tokens=False)  # the same ids for every copy
    for k, part in enumerate(parts):
        if k:  # the text before this part
            token_spans.append((len(ids), len(ids) + len(text_ids)) if text_ids else (0, 0))
            ids += text_ids
        for j, piece in enumerate(part.split(PIECE_FIELD)):
            opens = k == 0 and j == 0 and bool(context)
            piece = f"{context} {piece}" if opens else piece
            piece_ids, offsets = tokenizer.encode_with_offsets(piece) if piece else ([], [])
            if opens:
                covered = sum(1 for s, e in offsets if e > s and s < len(context))
            ids += piece_ids
    return ids, token_spans, covered


def pad(rows: list[list[int]], spans: list[list[tuple[int, int]]], pad_id: int,
        padding_side: str = "left", placeholders: dict[int, str] | None = None,
        context_spans: list[tuple[int, int]] | None = None) -> PromptBatch:
    if padding_side not in ("left", "right"):
        raise InputError(f"padding_side {padding_side!r}", "use 'left' or 'right'")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    shifted = []
    for i, row in enumerate(rows):
        offset = width - len(row) if padding_side == "left" else 0
        ids[i, offset:offset + len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, offset:offset + len(row)] = True
        shifted.append([(s + offset, e + offset) if e > s else (offset, offset) for s, e in spans[i]])
    if context_spans is not None:  # the context's span, in the padded row
        context_spans = [(s + offset, e + offset) for (s, e), offset in
                         zip(context_spans, [width - len(r) if padding_side == "left" else 0 for r in rows])]
    return PromptBatch(ids, mask, shifted, [len(r) for r in rows], dict(placeholders or {}), context_spans)


def _snippet(text: str, width: int = 40) -> str:
    return repr(text) if len(text) <= width else repr(text[:width]) + "..."
