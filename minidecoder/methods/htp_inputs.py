"""HTP's inputs: texts split into sentence blocks, a local `<PST>` before each block, M global `<B-PST>`
before the text, the copy plan between them, and the positions mean pooling reads. The reference's
conventions are in the docstring of `minidecoder.methods.htp`; the step is there too.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.inputs import PromptBatch, pad
from minidecoder.methods.placeholders import CopyPlan, placeholder_row
from minidecoder.methods.sentences import split_sentences

PST, BPST = "<PST>", "<B-PST>"


@dataclass
class HTPBatch:
    batch: PromptBatch
    plan: CopyPlan  # <PST>_m and <B-PST>_m <- the last token of text-block m
    pool: torch.Tensor  # (B, T) bool: the text tokens the mean runs over (placeholders excluded)
    blocks: list[int]  # M per row
    rows: dict[int, torch.Tensor]  # placeholder id -> input-embedding row (E,) float32


def text_ids_with_placeholders(options, tokenizer, text: str, pst: int) -> list[int]:
    """The text piece's ids with a local <PST> before every block (spec 5.1-5.2)."""
    if options.every_n_tokens is not None:
        ids = tokenizer.encode(text, add_special_tokens=False)
        n = options.every_n_tokens
        return [t for first in range(0, len(ids), n) for t in [pst, *ids[first:first + n]]]
    sentences = split_sentences(text)  # never empty here: require_text ran first
    K = options.sentences_per_block
    blocks = [" ".join(sentences[i:i + K]) for i in range(0, len(sentences), K)]
    return tokenizer.encode(" ".join(f"{PST} {block}" for block in blocks), add_special_tokens=False)

def encode_htp(options, model, texts: list[str]) -> HTPBatch:
    """The batch, the copy plan (spec 5.3) and the pooled positions (spec 5.4) for `options` (an HTP)."""
    tokenizer = model.tokenizer
    pst, bpst = tokenizer.add_placeholder(PST), tokenizer.add_placeholder(BPST)
    prefix, suffix = options.template.split("{text}")
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False) if suffix else []
    literal = options.literal_bos and tokenizer.bos_id is not None  # the reference's "<s> {text} </s>"
    head = [tokenizer.bos_id] if literal or tokenizer.add_bos else []
    tail = [tokenizer.eos_id] if options.append_eos and tokenizer.eos_id is not None else []
    rows, spans, pairs, blocks = [], [], [], []
    for row, text in enumerate(texts):
        if PST in text or BPST in text:
            raise InputError(f"text {row} contains a placeholder string ({PST} or {BPST})",
                             "remove it from the text; HTP places the placeholders itself")
        text_ids = text_ids_with_placeholders(options, tokenizer, text, pst)
        local = [i for i, t in enumerate(text_ids) if t == pst]
        M = len(local)
        ends = [p - 1 for p in local[1:]] + [len(text_ids) - 1]  # last token of each text-block
        if options.last_block_source == "after_text":
            ends[-1] = len(text_ids)  # reference: `eos_positions.append(text_end_idx)`, one past the text
        if options.global_only:  # drop the local PSTs after their blocks are known (tp_sentence_omit_pst)
            kept = [i for i in range(len(text_ids)) if i not in set(local)]
            new_index = {old: new for new, old in enumerate(kept)}
            ends = [new_index.get(e, len(kept)) for e in ends]
            text_ids, local = [text_ids[i] for i in kept], []
        globals_ = [] if options.local_only else [bpst] * M
        offset = len(head) + len(prefix_ids) + len(globals_)  # where the text piece starts
        ids = head + prefix_ids + globals_ + text_ids + suffix_ids + tail
        sources = [offset + e for e in ends]
        if sources[-1] >= len(ids):
            raise InputError("last_block_source='after_text' needs a token after the text, and this template "
                             "has none", "set append_eos=True or a template with text after {text}")
        for m, source in enumerate(sources):
            if not options.global_only:
                pairs.append((row, offset + local[m], source))  # <PST>_m <- end of block m
            if not options.local_only:
                pairs.append((row, offset - len(globals_) + m, source))  # <B-PST>_m <- the same row
        rows.append(ids)
        spans.append([(offset - len(globals_), offset + len(text_ids))])
        blocks.append(M)
    batch = pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, options.padding_side)
    width = batch.input_ids.shape[1]
    shift = [width - len(r) if options.padding_side == "left" else 0 for r in rows]
    plan = CopyPlan.from_pairs([(b, t + shift[b], s + shift[b]) for b, t, s in pairs])
    pool = torch.zeros_like(batch.attention_mask)
    for b, ((first, last),) in enumerate(batch.text_spans):
        pool[b, first:last] = True
    pool &= (batch.input_ids != pst) & (batch.input_ids != bpst)  # spec 5.4: placeholders excluded
    rows = {pst: placeholder_row(model, options.pst_init, options.seed, index=0),  # <PST>: the first draw
            bpst: placeholder_row(model, options.pst_init, options.seed, index=1)}  # <B-PST>: the second
    return HTPBatch(batch, plan, pool, blocks, rows)
