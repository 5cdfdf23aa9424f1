"""Token Prepending (TP): Fu et al., "Token Prepending: A Training-Free Approach for Eliciting Better
Sentence Embeddings from LLMs" (ACL 2025, arXiv 2412.11556). Spec: docs/spec.md section 4.

    ids:   <s> This sentence : <PST> " a cat sat . " means in one word : "
    block i in [start, end):   h[<PST>] <- h[last]      (the whole residual row, before the block's norm)
    output: hidden_states[layer][last]                   (early exit: later blocks never run)

A causal model's early tokens cannot see the end of the sentence; the placeholder `<PST>` before the
quote carries the last token's state (a summary of the whole sentence built by blocks < i) to where
every sentence token can attend to it in block i.

Reference code (fuyuchenIfyw/token_prepending, commit ab3081d6), read for every convention here:
- `senllm/modeling_llama.py`, `LlamaModel.forward`, plan "tp": for `index` in
  [tp_starting_index, tp_exiting_index): `hidden_states[arange(B), pst_token_indices] =
  hidden_states[:, -1].clone()` before calling decoder layer `index`; the same loop in
  `senllm/modeling_qwen2.py` and `senllm/modeling_gemma2.py`. `find_token_indices` takes the *first*
  `<PST>` of each row only; with `num_pst > 1` (paper Table 14) minidecoder overwrites every `<PST>`.
- `evaluate.py`: `tokenizer.add_tokens(["<PST>"])`, `resize_token_embeddings`, and the new row set
  to `torch.randn(hidden)` (unscaled N(0, I), on the GPU RNG seeded 3407 -- not reproducible on CPU;
  minidecoder draws its N(0, I) row from a CPU generator with `seed`, stated in `describe()`). Gemma2
  multiplies it by sqrt(hidden) like every embedding row (`modeling_gemma2.py`, `normalizer`).
  Left padding with `pad_token_id = 0`; the prompt strings are PromptEOL's / Pretended CoT's /
  Knowledge's / MetaEOL's with `<PST> ` inserted before the opening quote; MetaEOL+TP averages the
  last tokens of the 8 prompts (`outputs.view(-1, 8, E).mean(1)`).
- `config.yaml`: the reference (prompt, output layer, start, end) per model, listed in
  docs/methods.md (the TP row).
- The ablations `mask_pst_first_layer` (paper Table 15) and `resume_at` (Table 16) are not in the
  released code; they follow the paper's text (see the option help).

Layer numbers follow `minidecoder.methods.layers`: `layer` indexes hidden_states (0 = embeddings,
-1 = final normed output), `start`/`end` are 0-based block indices of a half-open range, so the
reference's `tp_starting_index=1, tp_exiting_index=7` is `start=1, end=7`: copies before blocks 1..6.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, check_bool, check_int, check_seed, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.loop import CopyRows, Pass, last_token, masked_mean
from minidecoder.methods.placeholders import check_placeholder_init, placeholder_row, refuse_placeholders_in
from minidecoder.methods.prompts import METAEOL_TEMPLATES, TEMPLATES
from minidecoder.methods.text import PIECES_HELP, SENTEVAL_HELP, check_template, prepare_texts

PST = "<PST>"


# ---- the paper's loop -----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class TPStep(CopyRows):
    """TP's intervention in the block loop (docs/spec.md section 4.2; reference `senllm/modeling_llama.py`,
    `LlamaModel.forward`, plan "tp"), a `CopyRows` (methods.loop) from each row's last token to its <PST>:

        for i in blocks:                    # [start, end), plus [resume_at, L) for paper Table 16
            h_i[b, <PST>] = h_i[b, last_b]  # before block i: hidden_states[arange(B), pst] = hidden_states[:, -1]
    """

    hidden_keys: torch.Tensor | None = None  # (B, T): paper Table 15, no query attends to <PST> in block 0

    @classmethod
    def of(cls, batch: PromptBatch, pst: list[list[int]], blocks: set[int], hide_pst_in_block_0: bool) -> "TPStep":
        last = batch.last.tolist()
        hidden = None
        if hide_pst_in_block_0:
            hidden = torch.zeros_like(batch.attention_mask)
            for b, row in enumerate(pst):
                hidden[b, row] = True
        return cls.of_pairs(blocks, [(b, p, last[b]) for b, row in enumerate(pst) for p in row], hidden_keys=hidden)


@register
@dataclasses.dataclass
class TP(Method):
    name = "tp"
    summary = ("Token Prepending (Fu et al. 2025): a <PST> before the quoted sentence takes the last token's "
               "residual row before blocks [start, end); last token at an early-exit layer")

    prompt: str = option("prompteol", "prompteol, pretended_cot, knowledge, metaeol (8 prompts averaged), or a "
                                      "custom template holding <PST> and {text}")
    layer: int | None = option(None, "output layer (hidden_states index; -1 final normed, -2 raw output of the "
                                     "second-to-last block). None = the reference's 27 of 32 blocks (Llama-2-7B "
                                     "PromptEOL) at the same depth: round(27 * L / 32). CoT/Knowledge used -2")
    start: int = option(1, "first 0-based block before which <PST> takes the last token's row")
    end: int = option(7, "copies happen before blocks start..end-1 (half-open); reference 7 (Llama), 6 (Qwen2, Gemma2), "
                         "3 (Llama-3-8B)")
    num_pst: int = option(1, "how many <PST> tokens precede the quote (paper Table 14); every one is overwritten")
    pst_init: str = option("gaussian", "input row of <PST>: zeros, ones, uniform (U[0,1)), gaussian (N(0, I), seeded), "
                                       "mean (embedding-table mean), token:<text> (copy a token's row; the paper "
                                       "uses a space) -- paper Table 4")
    seed: int = option(0, "seed of the CPU generator for pst_init gaussian/uniform")
    mask_pst_first_layer: bool = option(False, "paper Table 15: <PST> is hidden as a key in block 0 (no query attends "
                                               "to it there); its own query row is computed as usual and is "
                                               "overwritten before block `start` anyway")
    resume_at: int | None = option(None, "paper Table 16: copy again before every block from this 0-based block up to "
                                         "the output layer (None = off); must be >= end")
    senteval_text: bool = option(True, SENTEVAL_HELP)
    pieces: bool = option(False, PIECES_HELP)
    pooling: str = option("last", "what is read at `layer`: last (the last token, TP's own) or mean (the mean over "
                                  "the text's tokens, <PST> and the template excluded, as HTP's mean: HTP Table 1's "
                                  "'TP w. Mean')")

    takes_context = True  # before the template (`inputs.encode_prompts`); pooling=mean never reads it

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """One forward per template (MetaEOL's eight are averaged): TP's step, the last token at `layer`."""
        texts = prepare_texts(texts, self.senteval_text, self.reads_empty_text())
        index = resolve_output_layer(self.output_layer(model), model.num_layers)
        blocks = self.copy_blocks(model)
        row = placeholder_row(model, self.pst_init, self.seed)  # <PST>'s input row
        passes = []
        for template in tp_templates(self.prompt, self.num_pst):
            batch, pst_id, pst = encode_tp(model.tokenizer, template, texts, contexts, self.pieces)
            step = TPStep.of(batch, pst, blocks, self.mask_pst_first_layer)
            if self.pooling == "mean":  # HTP Table 1's "TP w. Mean"
                reads, pool = MEAN_READS, lambda run, b=batch, p=pst_id: mean_over_text(run.hidden(index), b, p)
            else:  # e = h_layer[last]
                reads, pool = "the last token", lambda run, b=batch: last_token(run.hidden(index), b)
            passes.append(Pass(batch, step, layer=index, extra_rows={pst_id: row}, reads=reads, pool=pool))
        return passes

    def copy_blocks(self, model) -> set[int]:
        """The 0-based blocks before which the copy happens: [start, end), plus [resume_at, L)."""
        blocks = set(range(self.start, self.end))
        if self.resume_at is not None:
            blocks |= set(range(self.resume_at, model.num_layers))
        return blocks

    def reads_empty_text(self) -> bool:
        return self.pooling == "last"  # the prompt's last token exists around an empty text; a mean over it does not

    def output_layer(self, model) -> int:
        return depth_scaled_layer(model.num_layers) if self.layer is None else self.layer

    def baseline(self, model) -> tuple[Method, str]:
        return (dataclasses.replace(self, end=self.start, resume_at=None),
                "PromptEOL with the placeholder: the same tokens (the <PST> keeps its input row), the same output "
                f"layer {self.output_layer(model)}, no copies (empty block range)")

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            check_int(getattr(self, name), name)
        check_seed(self.seed)
        check_int(self.num_pst, "num_pst", minimum=1)
        check_int(self.layer, "layer", allow_none=True, example="-1")
        check_int(self.resume_at, "resume_at", allow_none=True, example="20")
        check_bool(self.mask_pst_first_layer, "mask_pst_first_layer")
        check_bool(self.senteval_text, "senteval_text")
        check_bool(self.pieces, "pieces")
        check_placeholder_init(self.pst_init, self.seed)
        if self.pooling not in ("last", "mean"):
            raise InputError(f"pooling={self.pooling!r} is not 'last' or 'mean'", "pass pooling=last or pooling=mean")
        if self.prompt != "metaeol":
            tp_templates(self.prompt, self.num_pst)  # validates custom templates early

    def describe(self) -> dict:
        out = super().describe()
        if self.pst_init in ("gaussian", "uniform"):
            out["pst_init_detail"] = (f"{'N(0, I)' if self.pst_init == 'gaussian' else 'U[0, 1)'} row drawn in float32 "
                                      f"from torch.Generator('cpu').manual_seed({self.seed}); Gemma scales it by "
                                      "sqrt(hidden) like every embedding row")
        return out

    def check(self, model) -> None:
        L = model.num_layers
        output_index = resolve_output_layer(self.output_layer(model), L)
        check_block_range(self.start, self.end, L, "TP")
        if self.resume_at is not None and not self.end <= self.resume_at < L:
            raise InputError(f"resume_at {self.resume_at} must be a block in [end, L) = [{self.end}, {L})",
                             "TP restarts after the first range ends (paper Table 16)")
        if self.end > output_index:
            raise InputError(f"TP range [{self.start}, {self.end}) reaches past the output layer "
                             f"{self.output_layer(model)} (blocks 0..{output_index - 1} run)",
                             "lower `end` or raise `layer`")
        if self.resume_at is not None and self.resume_at >= output_index:  # it would copy before no block that runs
            raise InputError(f"resume_at {self.resume_at} is past the last block that runs: the output layer is "
                             f"{self.output_layer(model)} (blocks 0..{output_index - 1} run), so it changes nothing",
                             f"give resume_at below {output_index}, or raise `layer`")


# ---- pooling=mean: an experiment of another paper (HTP Table 1's "TP w. Mean") -----------------------------
MEAN_READS = "the mean over the text tokens, <PST> and the template excluded"


def mean_over_text(h: torch.Tensor, batch: PromptBatch, pst_id: int) -> torch.Tensor:
    """(B, T, E) -> (B, E): mean of hidden_states[layer] over each row's {text} tokens, <PST> excluded
    (pooling=mean; HTP's pool, docs/spec.md section 5.4, on TP's tokens), summed in float32 as HTP does."""
    pool = torch.zeros(batch.input_ids.shape, dtype=torch.bool)  # (B, T), built on the host
    for b, spans in enumerate(batch.text_spans):
        for start, end in spans:
            pool[b, start:end] = True
    return masked_mean(h.float(), pool & (batch.input_ids.cpu() != pst_id))


# ---- TP's inputs: the templates with <PST>, tokenized with the placeholder as an added token -----------
LLAMA2_LAYERS, LLAMA2_OUTPUT = 32, 27  # the reference's PromptEOL output layer on 32-block Llama-2-7B


def depth_scaled_layer(num_layers: int) -> int:
    """TP's default output layer on a model of `num_layers` blocks: the reference's 27 of 32 blocks, at the same
    relative depth, round(27 * L / 32) (SmolLM2's 30 blocks: 25; Qwen2.5-0.5B's 24: 20; Gemma-3-270M's 18: 15)."""
    return round(LLAMA2_OUTPUT * num_layers / LLAMA2_LAYERS)


def with_placeholders(template: str, num_pst: int) -> str:
    """A prompt template with `num_pst` `<PST>` put right before its opening quote: the reference's TP
    strings (`This sentence : <PST> "*sent 0*" means in one word:"`, evaluate.py)."""
    if template.count('"{text}"') != 1:
        raise InputError(f"template {template!r} has no single '\"{{text}}\"' to put <PST> before",
                         "pass a custom template with <PST> where you want it")
    return template.replace('"{text}"', PST * num_pst + ' "{text}"')


def tp_templates(prompt: str, num_pst: int) -> list[str]:
    """The TP template(s) of a named prompt, or a custom template that already holds `<PST>`."""
    if prompt in TEMPLATES:
        return [with_placeholders(TEMPLATES[prompt], num_pst)]
    if prompt == "metaeol":
        return [with_placeholders(t, num_pst) for t in METAEOL_TEMPLATES]
    if not isinstance(prompt, str) or PST not in prompt or "{text}" not in prompt:
        raise InputError(f"prompt {prompt!r} is neither a known prompt nor a template with {PST} and {{text}}",
                         f"use one of {', '.join([*TEMPLATES, 'metaeol'])}, or e.g. "
                         "'This sentence : <PST> \"{text}\" means in one word:\"'")
    check_template(prompt)
    if prompt.count(PST) != num_pst:
        raise InputError(f"the template holds {prompt.count(PST)} {PST} but num_pst is {num_pst}",
                         f"set num_pst={prompt.count(PST)} (a custom template places its own placeholders)")
    return [prompt]


def encode_tp(tokenizer, template: str, texts: list[str], contexts: list[str] | None = None, pieces: bool = False
              ) -> tuple[PromptBatch, int, list[list[int]]]:
    """One TP template filled with prepared texts (left padding, `<PST>` as an added token of a copy of
    the tokenizer), each row's context before it, the id of `<PST>`, and per row the padded positions of its
    `<PST>` tokens."""
    refuse_placeholders_in(contexts, PST)
    tokenizer = tokenizer.with_placeholders(PST)
    pst_id = tokenizer.token_to_id(PST)
    batch = encode_prompts(tokenizer, template, texts, padding_side="left", placeholders={pst_id: PST},
                           contexts=contexts, pieces=pieces)
    positions = batch.positions_of(pst_id)
    expected = template.count(PST)
    for index, found in enumerate(positions):
        if len(found) != expected:
            raise InputError(f"text {index} ({texts[index]!r}) gives {len(found)} {PST} tokens; the template has "
                             f"{expected}", f"the text must not contain the placeholder string {PST}")
    return batch, pst_id, positions


__all__ = ["PST", "TP", "TPStep", "depth_scaled_layer", "encode_tp", "tp_templates", "with_placeholders"]
