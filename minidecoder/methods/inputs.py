"""Prompts to tensors: fill a template, tokenize it as one string, pad, and remember where things are.

Every prompt method goes through `encode_prompts`: the template (with `{text}` and optional
placeholder tokens such as `<PST>`) is filled and tokenized as one string, so the text on each side
tokenizes exactly as in the reference code; each `{text}` occurrence's tokens are located through
the tokenizer's character offsets (a token overlapping the sentence counts as the sentence's).
Padding is on the left, as the references padded for last-token pooling.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from minidecoder.errors import ContextLengthError, InputError
from minidecoder.methods.text import fill_template


@dataclass(frozen=True, eq=False)
class PromptBatch:
    """A padded batch of prompts, on the host; the loop moves what it needs to the model's device."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T) bool, True = real token; padding on the left (or right)
    text_spans: list[list[tuple[int, int]]]  # per row, per {text} occurrence: token [start, end) in the padded row
    lengths: list[int]  # real tokens per row
    placeholders: dict[int, str] = field(default_factory=dict)  # id -> text of the added tokens it holds (<PST>)

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
                   padding_side: str = "left", add_special_tokens: bool = True,
                   placeholders: dict[int, str] | None = None) -> PromptBatch:
    """The filled template of every text, tokenized as one string and padded. placeholders: id -> text of
    the added tokens the tokenizer holds (for reading the batch back)."""
    declared = getattr(tokenizer, "model_max_length", None)  # tokenizer_config.json's context, if any
    limit = max_length if max_length is not None else declared
    rows, spans = [], []
    for text in texts:
        ids, text_spans = encode_one(tokenizer, template, text, add_special_tokens)
        if limit is not None and len(ids) > limit:
            text_tokens = sum(end - start for start, end in text_spans)
            where = "the model's context (tokenizer_config.json model_max_length)" if max_length is None else "max_length"
            raise ContextLengthError(
                f"the text {_snippet(text)} is {len(ids)} tokens after templating ({text_tokens} of them "
                f"the text, {len(ids) - text_tokens} the template and special tokens), more than {where} = {limit}",
                "shorten the text, or embed with truncate=N to keep the first N tokens of each text (the template "
                f"is kept whole; e.g. truncate={max((limit - len(ids) + text_tokens) // max(len(text_spans), 1), 1)} "
                "here); truncated rows are listed in the output metadata", length=len(ids), limit=limit,
            )
        rows.append(ids)
        spans.append(text_spans)
    return pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, padding_side, placeholders)


def encode_one(tokenizer, template: str, text: str, add_special_tokens: bool = True
               ) -> tuple[list[int], list[tuple[int, int]]]:
    """(ids, [(start, end) token span of each {text} occurrence]) for one filled template."""
    filled = fill_template(template, text)  # validates the template; strips
    parts = template.split("{text}")
    assembled, char_spans = parts[0], []
    for part in parts[1:]:
        char_spans.append((len(assembled), len(assembled) + len(text)))
        assembled += text + part
    shift = len(assembled) - len(assembled.lstrip())
    assert assembled.strip() == filled
    char_spans = [(max(s - shift, 0), min(e - shift, len(filled))) for s, e in char_spans]
    ids, offsets = tokenizer.encode_with_offsets(filled)
    token_spans = []
    for start_char, end_char in char_spans:
        inside = [i for i, (s, e) in enumerate(offsets) if s < end_char and e > start_char]
        token_spans.append((inside[0], inside[-1] + 1) if inside else (0, 0))
    head = [tokenizer.bos_id] if add_special_tokens and tokenizer.add_bos else []
    tail = [tokenizer.eos_id] if add_special_tokens and tokenizer.add_eos else []
    token_spans = [(s + len(head), e + len(head)) if e > s else (0, 0) for s, e in token_spans]
    return head + ids + tail, token_spans


def pad(rows: list[list[int]], spans: list[list[tuple[int, int]]], pad_id: int,
        padding_side: str = "left", placeholders: dict[int, str] | None = None) -> PromptBatch:
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
    return PromptBatch(ids, mask, shifted, [len(r) for r in rows], dict(placeholders or {}))


def _snippet(text: str, width: int = 40) -> str:
    return repr(text) if len(text) <= width else repr(text[:width]) + "..."
