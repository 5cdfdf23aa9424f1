"""Hierarchical Token Prepending (HTP): Ding et al. 2025, code snap-research/HTP. Spec: docs/spec.md section 5.

TP (minidecoder.methods.tp) gives one sentence one summary slot. HTP splits a text into blocks of
sentences, gives each block m a local placeholder `<PST>_m` at its start, and puts M global
`<B-PST>_1..M` placeholders before the whole text. Before each block i in [start, end):

    <PST>_m   <- h[last token of text-block m]        (docs/spec.md section 5.3)
    <B-PST>_m <- <PST>_m  (= the same row)

so every token of block m+1.. can read a summary of the blocks before it through its local PST, and
every token of the text can read all block summaries through the B-PSTs. The embedding is the mean
over the text tokens, placeholders excluded, at an output layer (docs/spec.md section 5.4).

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
  text (option `last_block_source="after_text"`; default: the text's last token, per docs/spec.md section 5.3).
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
  tokenizer's BOS token always first (`literal_bos=True`, whatever the tokenizer's own policy: the
  reference's `<s>` is literal text) and `append_eos=True`; each template piece is tokenized on its own, as the
  reference does, so `template=" {text} "` gives the reference's pieces `"<s> "`, text, `" </s>"`.
  Which tokens those spaces become is tokenizer-specific (on SentencePiece tokenizers a lone " " may
  be a "▁" token; the end of a non-final block is then also a space token, since the space before the
  next `<PST>` stays with the block) -- unverified offline for Mistral-7B.
A text's context (an instruction; `minidecoder.embed(..., context=)`) is what the reference writes as a
template piece with `embed_mask = 0` (`<s> {instruct} Text: <B-PST>... <PST> sentence 1 ...`, HTP Appendix
C): here a piece of its own after the BOS, before the template and the `<B-PST>`s, never split into a block,
never pooled (`encode_htp`).

Paper vs code: the README says PSTs sit at the end of each sentence, the code puts them before; the
released code has no Gemma2 model file (its Gemma file is Gemma v1), so HTP on Gemma2/3 is new here.

Why the BOS is literal: models attend heavily to position 0 (the attention sink). With the BOS in
front, `<B-PST>_1` sits at position 1 and its copies leave the sink alone. A tokenizer whose policy
adds no BOS (SmolLM2, Qwen2.5) would put `<B-PST>_1` at position 0, and the copies would overwrite
the sink, which collapses the embedding. `literal_bos=False` keeps the tokenizer's policy, to show it
(`minidecoder sweep --method htp --opt literal_bos=false` against the default).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, check_bool, check_choice, check_int, check_seed, option, register
from minidecoder.methods.inputs import PromptBatch, pad
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.loop import CopyRows, Pass, masked_mean
from minidecoder.methods.placeholders import check_placeholder_init, placeholder_row, refuse_placeholders_in
from minidecoder.methods.text import SPLITTER, check_template, require_text, split_sentences

SOURCES = ("last_text_token", "after_text")
PST, BPST = "<PST>", "<B-PST>"


# ---- the paper's loop -----------------------------------------------------------------------------
def htp_step(inputs: "HTPInputs", blocks: set[int]) -> CopyRows:
    """HTP's intervention in the block loop (docs/spec.md section 5.3; reference `MistralModel.forward`, plan
    `tp_sentence_begin`), a `CopyRows`:

        for i in blocks:                              # [start, end)
            h_i[<PST>_m]   = h_i[end of text-block m]  # local summary, before block m + 1
            h_i[<B-PST>_m] = h_i[end of text-block m]  # the same row, global block at the front
    (the pairs are built in `encode_htp`)."""
    return CopyRows.of_pairs(blocks, inputs.pairs)


def htp_embedding(h: torch.Tensor, inputs: "HTPInputs") -> torch.Tensor:
    """(B, E): mean of hidden_states[layer] (B, T, E) over the text tokens, placeholders excluded (docs/spec.md section 5.4)."""
    return masked_mean(h.float(), inputs.pool)  # summed in float32, the reference's Pooling 'mean'


# ---- the method: options, validation --------------------------------------------------------------
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
                                     "as literal_bos says (the reference's literal <s>)")
    literal_bos: bool = option(True, "put the tokenizer's BOS first even where its policy adds none (the reference's "
                                     "literal <s>), so no placeholder takes position 0, the attention sink; False: "
                                     "the tokenizer's policy")
    append_eos: bool = option(True, "append the tokenizer's EOS after the template (the reference's literal </s>); "
                                     "no pooled token reads it (causal), but with a template ending at {text} it is "
                                     "last_block_source=after_text's source")
    sentences_per_block: int = option(1, "K consecutive sentences per block (reference 1; paper Figure 6)")
    every_n_tokens: int | None = option(None, "instead of sentences, a block every N text tokens (paper Figure 8; "
                                               "sentences_per_block is then unused)")
    local_only: bool = option(False, "ablation: no global <B-PST> (reference plan tp_sentence)")
    global_only: bool = option(False, "ablation: no local <PST>, only the <B-PST>s (reference tp_sentence_omit_pst)")
    last_block_source: str = option("last_text_token", "source of the last block's copy: last_text_token (docs/spec.md section 5.3) or "
                                                       "after_text (reference quirk: the first token after the text)")
    pst_init: str = option("mean", "input rows of <PST> and <B-PST>: mean (embedding-table mean, the reference's "
                                   "resize_token_embeddings), zeros, ones, uniform, gaussian (seeded), token:<text>")
    seed: int = option(0, "seed for pst_init gaussian/uniform (<PST> takes the first draw, <B-PST> the second)")
    padding_side: str = option("right", "right (the reference) or left; an embedding does not depend on it")

    def __post_init__(self) -> None:
        for name in ("layer", "start", "end"):
            check_int(getattr(self, name), name)
        check_seed(self.seed)
        check_int(self.sentences_per_block, "sentences_per_block", minimum=1)
        check_int(self.every_n_tokens, "every_n_tokens", minimum=1, allow_none=True, example="32")
        for name in ("literal_bos", "append_eos", "local_only", "global_only"):
            check_bool(getattr(self, name), name)
        if self.local_only and self.global_only:
            raise InputError("local_only and global_only are both set: no placeholder would remain",
                             "set at most one of them")
        check_choice(self.last_block_source, "last_block_source", SOURCES)
        check_placeholder_init(self.pst_init, self.seed)
        check_choice(self.padding_side, "padding_side", ("left", "right"))
        check_template(self.template)
        if self.template.count("{text}") != 1:
            raise InputError(f"template {self.template!r} must hold {{text}} exactly once", "e.g. '{text}'")
        if "{eos}" in self.template:  # HTP tokenizes its pieces itself; its EOS is an option
            raise InputError(f"template {self.template!r} holds {{eos}}, which HTP does not read",
                             "drop {eos}: append_eos=True (the default) appends the EOS after the template")
        if "{|}" in self.template:  # and cuts its pieces itself
            raise InputError(f"template {self.template!r} holds {{|}}, which HTP does not read",
                             "drop {|}: HTP tokenizes the template's text around {text} and each sentence apart")
        if "{bos}" in self.template:  # and its BOS too
            raise InputError(f"template {self.template!r} holds {{bos}}, which HTP does not read",
                             "drop {bos}: literal_bos=True (the default) puts the BOS first")

    def describe(self) -> dict:
        return {**super().describe(), "sentence_splitter": SPLITTER}

    def check(self, model) -> None:
        L = model.num_layers
        output_index = resolve_output_layer(self.layer, L)
        check_block_range(self.start, self.end, L, "HTP")
        if self.literal_bos and model.tokenizer.bos_id is None:
            raise InputError("this tokenizer defines no BOS token for HTP's literal <s> (literal_bos=True)",
                             "pass literal_bos=False (the placeholders then start the sequence, where the copies "
                             "overwrite the attention sink, unless the template has text before {text})")
        if self.end > output_index:
            raise InputError(f"HTP range [{self.start}, {self.end}) reaches past the output layer {self.layer} "
                             f"(blocks 0..{output_index - 1} run)", "lower `end` or raise `layer`")

    takes_context = True  # its own piece before the template: read, never a block, never pooled

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """One forward: HTP's copies, then the mean over the text tokens at `layer`."""
        require_text(texts)
        inputs = encode_htp(self, model, texts, contexts)
        index = resolve_output_layer(self.layer, model.num_layers)
        return [Pass(inputs.batch, htp_step(inputs, set(range(self.start, self.end))), layer=index,
                     extra_rows=inputs.rows, role="the text", reads="the mean over the text tokens, placeholders excluded",
                     pool=lambda run: htp_embedding(run.hidden(index), inputs))]

    def baseline(self, model) -> tuple[Method, str]:
        return (dataclasses.replace(self, end=self.start),
                "the same tokens with the placeholders in place, the same mean pooling at output layer "
                f"{self.layer}, no copies (empty block range)")


# ---- HTP's inputs: sentence blocks, placeholders, the copy pairs, the pooled positions -------------------
@dataclass(frozen=True, eq=False)
class HTPInputs:
    batch: PromptBatch
    pairs: list[tuple[int, int, int]]  # (row, target, source): <PST>_m and <B-PST>_m <- the end of text-block m
    pool: torch.Tensor  # (B, T) bool: the text tokens the mean runs over (placeholders excluded)
    blocks: list[int]  # M per row
    rows: dict[int, torch.Tensor]  # placeholder id -> input-embedding row (E,) float32


def text_ids_with_placeholders(options, tokenizer, text: str, pst: int) -> list[int]:
    """The text piece's ids with a local <PST> before every block (docs/spec.md sections 5.1-5.2)."""
    if options.every_n_tokens is not None:
        ids = tokenizer.encode(text, add_special_tokens=False)
        n = options.every_n_tokens
        return [t for first in range(0, len(ids), n) for t in [pst, *ids[first:first + n]]]
    sentences = split_sentences(text)  # never empty here: require_text ran first
    K = options.sentences_per_block
    blocks = [" ".join(sentences[i:i + K]) for i in range(0, len(sentences), K)]
    return tokenizer.encode(" ".join(f"{PST} {block}" for block in blocks), add_special_tokens=False)


def encode_htp(options, model, texts: list[str], contexts: list[str] | None = None) -> HTPInputs:
    """The batch, the copy pairs (docs/spec.md section 5.3) and the pooled positions (docs/spec.md section 5.4) for `options` (an HTP);
    the placeholders are added tokens of a copy of the tokenizer. A row's context is a piece of its own
    after the BOS, before the template (the reference's `embed_mask = 0` pieces: `<s> {instruct} Text: ...`):
    the model reads it, the blocks start after it, the mean never covers it."""
    refuse_placeholders_in(contexts, PST, BPST)
    tokenizer = model.tokenizer.with_placeholders(PST, BPST)
    pst, bpst = tokenizer.token_to_id(PST), tokenizer.token_to_id(BPST)
    prefix, suffix = options.template.split("{text}")
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False) if suffix else []
    literal = options.literal_bos and tokenizer.bos_id is not None  # the reference's "<s> {text} </s>"
    head = [tokenizer.bos_id] if literal or tokenizer.add_bos else []
    tail = [tokenizer.eos_id] if options.append_eos and tokenizer.eos_id is not None else []
    rows, spans, pairs, blocks, context_spans = [], [], [], [], []
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
        context_ids = tokenizer.encode(contexts[row], add_special_tokens=False) if contexts and contexts[row] else []
        offset = len(head) + len(context_ids) + len(prefix_ids) + len(globals_)  # where the text piece starts
        ids = head + context_ids + prefix_ids + globals_ + text_ids + suffix_ids + tail
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
        context_spans.append((len(head), len(head) + len(context_ids)))
        blocks.append(M)
    batch = pad(rows, spans, tokenizer.pad_id if tokenizer.pad_id is not None else 0, options.padding_side,
                {pst: PST, bpst: BPST}, context_spans if contexts is not None else None)
    width = batch.input_ids.shape[1]
    shift = [width - len(r) if options.padding_side == "left" else 0 for r in rows]
    pairs = [(b, t + shift[b], s + shift[b]) for b, t, s in pairs]
    pool = torch.zeros_like(batch.attention_mask)
    for b, ((first, last),) in enumerate(batch.text_spans):
        pool[b, first:last] = True
    pool &= (batch.input_ids != pst) & (batch.input_ids != bpst)  # docs/spec.md section 5.4: placeholders excluded
    rows = {pst: placeholder_row(model, options.pst_init, options.seed, index=0),  # <PST>: the first draw
            bpst: placeholder_row(model, options.pst_init, options.seed, index=1)}  # <B-PST>: the second
    return HTPInputs(batch, pairs, pool, blocks, rows)
