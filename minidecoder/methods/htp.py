"""Hierarchical Token Prepending (HTP): Ding et al. 2025, code snap-research/HTP. Spec `methods.md` section 5.

TP (minidecoder.methods.tp) gives one sentence one summary slot. HTP splits a text into blocks of
sentences, gives each block m a local placeholder `<PST>_m` at its start, and puts M global
`<B-PST>_1..M` placeholders before the whole text. Before each block i in [start, end):

    <PST>_m   <- h[last token of text-block m]        (spec 5.3)
    <B-PST>_m <- <PST>_m  (= the same row)

so every token of block m+1.. can read a summary of the blocks before it through its local PST, and
every token of the text can read all block summaries through the B-PSTs. The embedding is the mean
over the text tokens, placeholders excluded, at an output layer (spec 5.4).

    ids:  <s> <B-PST>_1 <B-PST>_2 <PST>_1 A cat sat . <PST>_2 It purred . </s>
                                          ^^^^^^^^^^^         ^^^^^^^^^^^  mean over these
    copies: <PST>_1, <B-PST>_1 <- h[" ."] (end of block 1 is the token before <PST>_2)
            <PST>_2, <B-PST>_2 <- h["."]  (last token of the text; reference: the token after it)

Reference code (snap-research/HTP, commit f018c92b), read for every convention:
- `parser/parser.py`, `add_pst_to_sentences`: spaCy sentences, each stripped, "." appended unless it
  ends in `. ! ? "`, written `"<PST> " + s`, joined with " " (K = 1 sentence per block).
  `Parser._tokenize_from_pieces`: the template pieces around `{text}` and the text are tokenized
  *separately* and concatenated; M `<B-PST>` ids are put before the text piece's ids (M = number of
  `<PST>` in it); `eos_positions` = [p - 1 for the next PST p] + [`text_end_idx`], where
  `text_end_idx` is one past the text piece: the last block's source is the first token *after* the
  text (option `last_block_source="after_text"`; default: the text's last token, per the spec).
  `embed_mask` is 1 on the text piece except the placeholders: the mean pool's rows.
  `tp_sentence` (no B-PST) is `local_only`; `tp_sentence_omit_pst` (PSTs removed after the block ends
  are found) is `global_only`; `add_pst_every_k_tokens_with_tokenizer` is `every_n_tokens` (there the
  ids are decoded to a string and re-tokenized; minidecoder inserts the ids directly).
- `model/modeling_mistral.py`, `MistralModel.forward`, plan `tp_sentence_begin`: for `index` in
  [tp_starting_index, tp_exiting_index): `replacement = h[i, end_ids]; h[i, pst_ids] = replacement;
  h[i, begin_pst_ids] = replacement` before decoder layer `index`; layers after `output_layer` are
  skipped and the final norm applies only to the last layer (minidecoder's layer convention exactly:
  reference `output_layer=-2` is `layer=-2`).
- `mteb_sts_tasks.py` / `config.yaml`: Mistral-7B-Instruct-v0.3, start 1, end 7, output -2, right
  padding, `pad_token_id = 0`, mean pooling, document template `<s> {text} </s>` tokenized with
  `add_bos_token=False`, so `<s>`/`</s>` are the literal BOS/EOS; `<PST>`, `<B-PST>` added with
  `add_special_tokens`, rows from `resize_token_embeddings` (mean of the table: `pst_init="mean"`).
  minidecoder writes the template without the special tokens: `template="{text}"` with the
  tokenizer's BOS policy and `append_eos=True`; each template piece is tokenized on its own, as the
  reference does, so `template=" {text} "` gives the reference's pieces `"<s> "`, text, `" </s>"`.
  Which tokens those spaces become is tokenizer-specific (on SentencePiece tokenizers a lone " " may
  be a "▁" token; the end of a non-final block is then also a space token, since the space before the
  next `<PST>` stays with the block) -- unverified offline for Mistral-7B.
Paper vs code: the README says PSTs sit at the end of each sentence, the code puts them before; the
released code has no Gemma2 model file (its Gemma file is Gemma v1), so HTP on Gemma2/3 is new here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.inputs import PromptBatch, pad
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.prompts import check_bool, check_template, require_text
from minidecoder.methods.sentences import SPLITTER, split_sentences
from minidecoder.methods.tp import PLACEHOLDER_INITS, CopyPlan, forward_with_copies, placeholder_row

PST, BPST = "<PST>", "<B-PST>"
SOURCES = ("last_text_token", "after_text")


@dataclass
class HTPBatch:
    batch: PromptBatch
    plan: CopyPlan
    pool: torch.Tensor  # (B, T) bool: the text tokens the mean runs over (placeholders excluded)
    blocks: list[int]  # M per row


@register
@dataclasses.dataclass
class HTP(Method):
    name = "htp"
    summary = ("Hierarchical Token Prepending (Ding et al. 2025): a local <PST> per sentence block and global <B-PST>s "
               "take block summaries before blocks [start, end); mean over the text tokens")

    layer: int = option(-2, "output layer (hidden_states index); the reference reads -2, the raw output of the "
                            "second-to-last block")
    start: int = option(1, "first 0-based block before which the placeholders take their blocks' last rows")
    end: int = option(7, "copies happen before blocks start..end-1 (half-open); reference 7 on Mistral-7B")
    template: str = option("{text}", "text around {text}, each piece tokenized on its own as the reference does; BOS "
                                     "per the tokenizer's policy (the reference's literal <s>)")
    append_eos: bool = option(True, "append the tokenizer's EOS after the template (the reference's literal </s>)")
    sentences_per_block: int = option(1, "K consecutive sentences per block (reference 1; paper Figure 6)")
    every_n_tokens: int | None = option(None, "instead of sentences, a block every N text tokens (paper Figure 8)")
    local_only: bool = option(False, "ablation: no global <B-PST> (reference plan tp_sentence)")
    global_only: bool = option(False, "ablation: no local <PST>, only the <B-PST>s (reference tp_sentence_omit_pst)")
    last_block_source: str = option("last_text_token", "source of the last block's copy: last_text_token (spec) or "
                                                       "after_text (reference quirk: the first token after the text)")
    pst_init: str = option("mean", "input rows of <PST> and <B-PST>: mean (embedding-table mean, the reference's "
                                   "resize_token_embeddings), zeros, ones, uniform, gaussian (seeded), token:<text>")
    seed: int = option(0, "seed for pst_init gaussian/uniform (<PST> takes the first draw, <B-PST> the second)")
    padding_side: str = option("right", "right (the reference) or left; an embedding does not depend on it")

    def __post_init__(self) -> None:
        for name in ("layer", "start", "end", "sentences_per_block", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{name} {value!r} is not an integer", f"pass an integer {name}")
        if self.sentences_per_block < 1:
            raise InputError(f"sentences_per_block {self.sentences_per_block} must be at least 1", "the reference uses 1")
        if self.every_n_tokens is not None and (isinstance(self.every_n_tokens, bool)
                                                or not isinstance(self.every_n_tokens, int) or self.every_n_tokens < 1):
            raise InputError(f"every_n_tokens {self.every_n_tokens!r} must be a positive integer or None",
                             "e.g. every_n_tokens=32")
        for name in ("append_eos", "local_only", "global_only"):
            check_bool(getattr(self, name), name)
        if self.local_only and self.global_only:
            raise InputError("local_only and global_only are both set: no placeholder would remain",
                             "set at most one of them")
        if self.last_block_source not in SOURCES:
            raise InputError(f"last_block_source {self.last_block_source!r}", f"use one of {', '.join(SOURCES)}")
        if not isinstance(self.pst_init, str) or not (self.pst_init in PLACEHOLDER_INITS[:-1]
                                                      or self.pst_init.startswith("token:")):
            raise InputError(f"unknown pst_init {self.pst_init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")
        if self.padding_side not in ("left", "right"):
            raise InputError(f"padding_side {self.padding_side!r}", "use 'left' or 'right'")
        check_template(self.template)
        if self.template.count("{text}") != 1:
            raise InputError(f"template {self.template!r} must hold {{text}} exactly once", "e.g. '{text}'")

    def describe(self) -> dict:
        return {**super().describe(), "sentence_splitter": SPLITTER}

    def check(self, model) -> None:
        L = model.num_layers
        output_index = resolve_output_layer(self.layer, L)
        check_block_range(self.start, self.end, L, "HTP")
        if self.end > output_index:
            raise InputError(f"HTP range [{self.start}, {self.end}) reaches past the output layer {self.layer} "
                             f"(blocks 0..{output_index - 1} run)", "lower `end` or raise `layer`")

    # ---- inputs -----------------------------------------------------------------------------------
    def _text_ids(self, tokenizer, text: str, pst: int) -> list[int]:
        """The text piece's ids with a local <PST> before every block (spec 5.1-5.2)."""
        if self.every_n_tokens is not None:
            ids = tokenizer.encode(text, add_special_tokens=False)
            n = self.every_n_tokens
            return [t for first in range(0, len(ids), n) for t in [pst, *ids[first:first + n]]]
        sentences = split_sentences(text)  # never empty here: require_text ran first
        K = self.sentences_per_block
        blocks = [" ".join(sentences[i:i + K]) for i in range(0, len(sentences), K)]
        return tokenizer.encode(" ".join(f"{PST} {block}" for block in blocks), add_special_tokens=False)

    def encode(self, model, texts: list[str]) -> HTPBatch:
        tokenizer = model.tokenizer
        pst, bpst = tokenizer.add_placeholder(PST), tokenizer.add_placeholder(BPST)
        prefix, suffix = self.template.split("{text}")
        prefix_ids = tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
        suffix_ids = tokenizer.encode(suffix, add_special_tokens=False) if suffix else []
        head = [tokenizer.bos_id] if tokenizer.add_bos else []
        tail = [tokenizer.eos_id] if self.append_eos and tokenizer.eos_id is not None else []
        rows, spans, pairs, blocks = [], [], [], []
        for row, text in enumerate(texts):
            if PST in text or BPST in text:
                raise InputError(f"text {row} contains a placeholder string ({PST} or {BPST})",
                                 "remove it from the text; HTP places the placeholders itself")
            text_ids = self._text_ids(tokenizer, text, pst)
            local = [i for i, t in enumerate(text_ids) if t == pst]
            M = len(local)
            ends = [p - 1 for p in local[1:]] + [len(text_ids) - 1]  # last token of each text-block
            if self.last_block_source == "after_text":
                ends[-1] = len(text_ids)  # reference: `eos_positions.append(text_end_idx)`, one past the text
            if self.global_only:  # drop the local PSTs after their blocks are known (tp_sentence_omit_pst)
                kept = [i for i in range(len(text_ids)) if i not in set(local)]
                new_index = {old: new for new, old in enumerate(kept)}
                ends = [new_index.get(e, len(kept)) for e in ends]
                text_ids, local = [text_ids[i] for i in kept], []
            globals_ = [] if self.local_only else [bpst] * M
            offset = len(head) + len(prefix_ids) + len(globals_)  # where the text piece starts
            ids = head + prefix_ids + globals_ + text_ids + suffix_ids + tail
            sources = [offset + e for e in ends]
            if sources[-1] >= len(ids):
                raise InputError("last_block_source='after_text' needs a token after the text, and this template "
                                 "has none", "set append_eos=True or a template with text after {text}")
            for m, source in enumerate(sources):
                if not self.global_only:
                    pairs.append((row, offset + local[m], source))  # <PST>_m <- end of block m
                if not self.local_only:
                    pairs.append((row, offset - len(globals_) + m, source))  # <B-PST>_m <- the same row
            rows.append(ids)
            spans.append([(offset - len(globals_), offset + len(text_ids))])
            blocks.append(M)
        batch = pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, self.padding_side)
        width = batch.input_ids.shape[1]
        shift = [width - len(r) if self.padding_side == "left" else 0 for r in rows]
        plan = CopyPlan.from_pairs([(b, t + shift[b], s + shift[b]) for b, t, s in pairs])
        pool = torch.zeros_like(batch.attention_mask)
        for b, ((first, last),) in enumerate(batch.text_spans):
            pool[b, first:last] = True
        pool &= (batch.input_ids != pst) & (batch.input_ids != bpst)  # spec 5.4: placeholders excluded
        return HTPBatch(batch, plan, pool, blocks)

    # ---- forward --------------------------------------------------------------------------------
    def hidden(self, model, inputs: HTPBatch) -> torch.Tensor:
        """hidden_states[layer] (B, T, E) with the HTP copies before blocks [start, end)."""
        tokenizer = model.tokenizer
        rows = {tokenizer.token_to_id(PST): placeholder_row(model, self.pst_init, self.seed, index=0),
                tokenizer.token_to_id(BPST): placeholder_row(model, self.pst_init, self.seed, index=1)}
        return forward_with_copies(model, inputs.batch, inputs.plan, set(range(self.start, self.end)), self.layer,
                                   rows, reuse_prefix=True)

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        self.check(model)
        require_text(texts)
        inputs = self.encode(model, texts)
        h = self.hidden(model, inputs).float()  # (B, T, E); summed in float32 whatever the model dtype
        pool = inputs.pool.to(h.device).unsqueeze(-1).float()  # (B, T, 1)
        return (h * pool).sum(dim=1) / pool.sum(dim=1)  # (B, E): reference Pooling 'mean'
