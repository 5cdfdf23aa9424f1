"""Token Prepending (TP): Fu et al., "Token Prepending: A Training-Free Approach for Eliciting Better
Sentence Embeddings from LLMs" (ACL 2025, arXiv 2412.11556). Spec `methods.md` section 4.

    ids:   <s> This sentence : <PST> " a cat sat . " means in one word : "
    block i in [start, end):   h[<PST>] <- h[last]      (the whole residual row, before the block's norm)
    output: hidden_states[layer][last]                   (early exit: later blocks never run)

A causal model's early tokens cannot see the end of the sentence; the placeholder `<PST>` before the
quote carries the last token's state (a summary of the whole sentence built by blocks < i) to where
every sentence token can attend to it in block i.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.loop import Step, hidden_at, last_token
from minidecoder.methods.placeholders import CopyPlan, CopyStep, check_placeholder_init, placeholder_row
from minidecoder.methods.prompts import check_bool, prepare_texts
from minidecoder.methods.tp_inputs import PST, TPInputs, encode_tp, tp_templates


# ---- the paper's loop -----------------------------------------------------------------------------
class TPStep(CopyStep):
    """TP's intervention in the block loop (spec 4.2; reference `senllm/modeling_llama.py`,
    `LlamaModel.forward`, plan "tp"):

        for i in blocks:                    # [start, end), plus [resume_at, L) for paper Table 16
            h_i[b, <PST>] = h_i[b, last_b]  # before block i: hidden_states[arange(B), pst] = hidden_states[:, -1]
    """

    def __init__(self, batch: PromptBatch, pst_positions: list[list[int]], blocks: set[int],
                 hide_pst_in_block_0: bool = False) -> None:
        last = batch.last_positions().tolist()
        super().__init__(CopyPlan.from_pairs([(b, p, last[b]) for b, row in enumerate(pst_positions) for p in row]),
                         blocks)
        self.hidden_keys = None
        if hide_pst_in_block_0:  # paper Table 15: no query attends to <PST> in block 0
            hidden = torch.zeros_like(batch.attention_mask)
            for b, row in enumerate(pst_positions):
                hidden[b, row] = True
            self.hidden_keys = hidden

    def hides_first_block_keys(self) -> torch.Tensor | None:
        return self.hidden_keys


def tp_embedding(model, inputs: TPInputs, step: Step, layer: int) -> torch.Tensor:
    """(B, E): the last token of hidden_states[layer] of the forward with `step` (TP's, or TP's with
    CP's steering on top)."""
    h = hidden_at(model, inputs.batch, layer, step, extra_rows={inputs.placeholder_id: inputs.row})  # (B, T, E)
    return last_token(h, inputs.batch)  # e = h_layer[last]


# ---- the method: options, validation, inputs ------------------------------------------------------
LLAMA2_LAYERS, LLAMA2_OUTPUT = 32, 27  # the reference's PromptEOL output layer on 32-block Llama-2-7B


def depth_scaled_layer(num_layers: int) -> int:
    """TP's default output layer on a model of `num_layers` blocks: the reference's 27 of 32, at the same
    relative depth, round(27 * L / 32) (SmolLM2's 30 blocks: 25; Qwen2.5-0.5B's 24: 20; Gemma-3-270M's 18: 15)."""
    return round(LLAMA2_OUTPUT * num_layers / LLAMA2_LAYERS)


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
    senteval_text: bool = option(True, "prepare each text as the SentEval batchers did (append '.', '\"' -> \"'\", "
                                       "final '?' -> '.'); false embeds the text verbatim")

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        self.check(model)
        texts = prepare_texts(texts, self.senteval_text)
        vectors = []
        for template in tp_templates(self.prompt, self.num_pst):  # MetaEOL: 8 templates, averaged
            inputs = self.encode(model, template, texts)
            vectors.append(tp_embedding(model, inputs, self.step(model, inputs), self.output_layer(model)))  # (B, E)
        return torch.stack(vectors).mean(dim=0).float()

    def step(self, model, inputs: TPInputs) -> TPStep:
        """The step of this configuration on one encoded template (what `embed_batch` and the sweep run)."""
        return TPStep(inputs.batch, inputs.positions, self.copy_blocks(model), self.mask_pst_first_layer)

    def copy_blocks(self, model) -> set[int]:
        """The 0-based blocks before which the copy happens: [start, end), plus [resume_at, L)."""
        blocks = set(range(self.start, self.end))
        if self.resume_at is not None:
            blocks |= set(range(self.resume_at, model.num_layers))
        return blocks

    def output_layer(self, model) -> int:
        return depth_scaled_layer(model.num_layers) if self.layer is None else self.layer

    def encode(self, model, template: str, texts: list[str]) -> TPInputs:
        return encode_tp(model, template, texts, placeholder_row(model, self.pst_init, self.seed))

    def __post_init__(self) -> None:
        for name in ("start", "end", "num_pst", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{name} {value!r} is not an integer", f"pass an integer {name}")
        if self.layer is not None and (isinstance(self.layer, bool) or not isinstance(self.layer, int)):
            raise InputError(f"layer {self.layer!r} is not an integer or None", "pass e.g. layer=-1, or leave it unset")
        if self.num_pst < 1:
            raise InputError(f"num_pst {self.num_pst} must be at least 1", "the paper's Table 14 uses 1 to 4")
        if self.resume_at is not None and (isinstance(self.resume_at, bool) or not isinstance(self.resume_at, int)):
            raise InputError(f"resume_at {self.resume_at!r} is not an integer or None", "e.g. resume_at=20")
        check_bool(self.mask_pst_first_layer, "mask_pst_first_layer")
        check_bool(self.senteval_text, "senteval_text")
        check_placeholder_init(self.pst_init)
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


__all__ = ["PST", "TP", "TPStep", "tp_embedding", "depth_scaled_layer"]
