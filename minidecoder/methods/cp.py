"""Contrastive Prompting (CP): Cheng et al., "Contrastive Prompting Enhances Sentence Embeddings in
LLMs through Inference-Time Steering", arXiv 2505.12831 (spec `methods.md` section 6).

    auxiliary prompt ─ blocks 0..l ─ site of block l, last token ─────────────────── b   (then stop)
    normal prompt    ─ blocks 0..l-1 ─ block l: site a ─> a' = f(a, b) ─ blocks l+1.. ─ last token

Reference code: zifengcheng/CP, `evaluate_intervention.py` (batcher, prompts, defaults),
`activation_intervention/__init__.py` (`get_o_proj_input`, `get_activation_modification_hook`),
`senllm/modeling_llama.py` (`exit_layer`: the auxiliary pass breaks after block `act_layer`),
`run_intervention_eval.sh` (Llama-2-7B: PromptEOL, output 27, `scaled`, coeff 0.5, act_layer 4;
Llama-3-8B: -2, 6, 0.25). Sites (paper Table 5): `head` (default) = z, every head's softmax(QK^T)V,
(B, T, H, D), exactly the input of the reference's forward pre-hook on `o_proj`; `ffn` = the MLP
branch's output added to the residual (Gemma: after post_feedforward_layernorm); `hidden` = the
block's output residual. Only the last position is replaced (the reference edits `[:, -1:, :]` under
left padding, i.e. the last real token).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from minidecoder.core.model import Sites
from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.cp_prompts import REFERENCE_LAYER, resolve_aux_prompt, resolve_prompts
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_index, resolve_output_layer
from minidecoder.methods.loop import Forward, Step, Steps, hidden_at, last_token
from minidecoder.methods.prompts import prepare_texts
from minidecoder.methods.tp import TP, tp_embedding
from minidecoder.methods.tp_inputs import PST, with_placeholders

SITE_NAMES = {"head": "z", "ffn": "mlp_out", "hidden": "resid_post"}  # CP site -> model.Sites name
MODES = ("ns", "nr", "nr_head", "nr_scaled")
NR_EPS = 1e-7  # the reference adds it to ||a - b|| (`original_norm / (new_norm + 1e-7)`)


# ---- the paper's loop -----------------------------------------------------------------------------
def steer(a: torch.Tensor, b: torch.Tensor, mode: str, alpha: float) -> torch.Tensor:
    """a' for the normal prompt's activation a given the auxiliary prompt's b: (B, H, D) at the head
    site (per head, TransformerLens' z), (B, E) at the others."""
    diff = a - b  # spec 6.3: the contrast, what the normal prompt has and the auxiliary one lacks
    if mode == "ns":
        return alpha * diff  # Norm Scaling, the paper's v-hat = alpha * dv (reference `scaled`)
    if mode == "nr_head":  # reference `sub_head_norm`: NR within each head
        return diff * a.norm(dim=-1, keepdim=True) / (diff.norm(dim=-1, keepdim=True) + NR_EPS)
    ratio = a.flatten(1).norm(dim=-1) / (diff.flatten(1).norm(dim=-1) + NR_EPS)  # ||a|| / ||a - b||, all heads
    nr = diff * ratio.view(-1, *[1] * (a.dim() - 1))  # Norm Recovering (reference `norm`): a - b at a's norm
    return alpha * nr if mode == "nr_scaled" else nr  # reference `scaled_norm`: alpha * NR


class SteerLastToken(Step):
    """At block `block`, each row's last-token value a of `site` becomes replace(a) = steer(a, b)."""

    def __init__(self, block: int, site: str, last: torch.Tensor, replace: Callable[[torch.Tensor], torch.Tensor]):
        self.block, self.site, self.last, self.replace = block, site, last, replace

    def sites(self, i: int) -> Sites | None:
        if i != self.block:
            return None

        def edit(value: torch.Tensor) -> torch.Tensor:  # (B, T, ...) -> the same, last token replaced
            value, last = value.clone(), self.last.to(value.device)
            rows = torch.arange(value.shape[0], device=value.device)
            value[rows, last] = self.replace(value[rows, last]).to(value.dtype)  # a <- f(a, b)
            return value
        return Sites(edit={SITE_NAMES[self.site]: edit})

    def first_touched(self, batch_size: int) -> torch.Tensor:
        return self.last.cpu()

    def shifted(self, columns: int) -> "SteerLastToken":
        return SteerLastToken(self.block, self.site, self.last - columns, self.replace)


class ReadLastToken(Step):
    """The auxiliary pass: record `site` of block `block` and read b at each row's last token."""

    def __init__(self, block: int, site: str, last: torch.Tensor, recorded: dict | None = None) -> None:
        self.block, self.site, self.last = block, site, last
        self.recorded = {} if recorded is None else recorded  # shared with `shifted` copies

    def sites(self, i: int) -> Sites | None:
        if i != self.block:
            return None
        sites = Sites(record={SITE_NAMES[self.site]})
        self.recorded["sites"], self.recorded["last"] = sites, self.last
        return sites

    def value(self) -> torch.Tensor:
        """b: (B, H, D) at the head site, (B, E) at the others."""
        value = self.recorded["sites"].store[SITE_NAMES[self.site]]
        last = self.recorded["last"].to(value.device)
        return value[torch.arange(value.shape[0], device=value.device), last]

    def first_touched(self, batch_size: int) -> torch.Tensor:
        return self.last.cpu()

    def shifted(self, columns: int) -> "ReadLastToken":
        return ReadLastToken(self.block, self.site, self.last - columns, self.recorded)


def auxiliary_activation(model, batch: PromptBatch, steer_layer: int, site: str, step: Step | None = None,
                         extra_rows: dict | None = None) -> torch.Tensor:
    """b of every row: blocks 0..steer_layer only (the reference's `exit_layer` break). `step`: another
    step in the same pass (CP + TP: the auxiliary prompt's own copies)."""
    read = ReadLastToken(steer_layer, site, batch.last_positions())
    forward = Forward(model, batch.input_ids, batch.attention_mask, Steps(step, read) if step else read,
                      keep={steer_layer + 1}, extra_rows=extra_rows)
    forward.run_to(steer_layer + 1)
    return read.value()


# ---- the method: options, validation --------------------------------------------------------------
@register
@dataclass
class CP(Method):
    """Contrastive Prompting (arXiv 2505.12831): replace the last token's activation at block
    `steer_layer` by its contrast with an auxiliary prompt's, then read the last token at `layer`."""

    name = "cp"
    summary = "Contrastive Prompting: steer the prompt's last token away from an auxiliary prompt (arXiv 2505.12831)"

    prompt: str = option("prompteol", "normal prompt: prompteol, pretended_cot, knowledge, ck (Knowledge + CoT "
                         "averaged), metaeol (8 prompts averaged), or a custom template with {text}")
    aux_prompt: str = option("irrelevant", "auxiliary prompt: irrelevant (reference default), redundant, background, "
                             "descriptive (paper Table 4), or a custom template with {text}")
    layer: int | None = option(None, "output layer (hidden_states index); None = the prompt's reference layer "
                               "(-1 PromptEOL/MetaEOL, -2 Pretended CoT/Knowledge/ck); Llama-2-7B PromptEOL used 27")
    steer_layer: int = option(4, "0-based block l whose site is steered; the auxiliary pass runs blocks 0..l only")
    alpha: float = option(0.5, "NS coefficient (ns: alpha*(a-b); nr_scaled: alpha*NR); unused by nr/nr_head")
    mode: str = option("ns", "ns = alpha*(a-b) (paper and reference default); nr = (a-b)*||a||/||a-b|| over the "
                       "concatenated vector; nr_head = NR per head (site=head); nr_scaled = alpha*NR (reference only)")
    site: str = option("head", "head = z, every head's output before o_proj (default), ffn = the block's MLP output, "
                       "hidden = the block's output residual (paper Table 5)")
    senteval_text: bool = option(True, "prepare each text as the SentEval batchers did (append '.', '\"' -> \"'\", "
                                 "final '?' -> '.') before templating, as the reference; false embeds it verbatim")
    tp: bool = option(False, "minidecoder extension (in no paper): Token Prepending in the same forward -- a <PST> "
                      "before the quote takes the last token's row before blocks [start, end), as method tp")
    start: int = option(1, "tp only: first 0-based block before which <PST> takes the last token's row (TP's start)")
    end: int = option(7, "tp only: copies before blocks start..end-1 (half-open; TP's end, reference 7 on Llama-2)")
    pst_init: str = option("gaussian", "tp only: <PST> input row (TP's pst_init: zeros, ones, uniform, gaussian, mean, "
                           "token:<text>)")
    seed: int = option(0, "tp only: seed of the <PST> row for gaussian/uniform (TP's seed)")
    tp_aux: bool = option(True, "tp only: the auxiliary prompt gets the same <PST> and copies (a and b come from "
                          "matched forwards); false runs it plain")

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        self.check(model)
        sentences = prepare_texts(texts, self.senteval_text)
        if self.tp:
            return self.embed_with_tp(model, sentences)
        b = auxiliary_activation(model, encode_prompts(model.tokenizer, resolve_aux_prompt(self.aux_prompt), sentences),
                                 self.steer_layer, self.site)  # (B, ...): one pass serves every normal prompt
        outputs = []
        for template in resolve_prompts(self.prompt):  # ck, metaeol: several prompts, averaged as the reference
            batch = encode_prompts(model.tokenizer, template, sentences)
            h = hidden_at(model, batch, self.output_layer(model), self.step(batch, b))  # (B, T, E)
            outputs.append(last_token(h, batch).float())  # (B, E)
        return torch.stack(outputs).mean(dim=0)

    def embed_with_tp(self, model, sentences: list[str]) -> torch.Tensor:
        """CP + TP in one forward per prompt (a minidecoder extension, in no paper): TP's copies and CP's
        steering are two steps of the same loop; with `tp_aux` the auxiliary prompt gets TP's too."""
        tp = self.tp_method(model)
        place = lambda template: template if PST in template else with_placeholders(template, 1)  # noqa: E731
        aux_template = resolve_aux_prompt(self.aux_prompt)
        if self.tp_aux:
            aux = tp.encode(model, place(aux_template), sentences)
            b = auxiliary_activation(model, aux.batch, self.steer_layer, self.site, tp.step(model, aux),
                                     {aux.placeholder_id: aux.row})
        else:
            b = auxiliary_activation(model, encode_prompts(model.tokenizer, aux_template, sentences),
                                     self.steer_layer, self.site)
        outputs = []
        for template in resolve_prompts(self.prompt):
            inputs = tp.encode(model, place(template), sentences)
            both = Steps(tp.step(model, inputs), self.step(inputs.batch, b))  # TP's copies, then CP's edit
            outputs.append(tp_embedding(model, inputs, both, self.output_layer(model)).float())  # (B, E)
        return torch.stack(outputs).mean(dim=0)

    def step(self, batch: PromptBatch, b: torch.Tensor) -> SteerLastToken:
        """The step of this configuration on one encoded prompt (what `embed_batch` and the sweep run)."""
        return SteerLastToken(self.steer_layer, self.site, batch.last_positions(),
                              lambda a: steer(a, b, self.mode, self.alpha))

    def output_layer(self, model) -> int:
        """`layer`, or with `layer=None` the prompt's reference layer (the same on every model)."""
        return REFERENCE_LAYER.get(self.prompt, -1) if self.layer is None else self.layer

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not math.isfinite(self.alpha):
            raise InputError(f"CP alpha {self.alpha!r} is not a finite number", "pass e.g. alpha=0.5")
        if self.mode not in MODES:
            raise InputError(f"CP mode {self.mode!r} is unknown", f"use one of {', '.join(MODES)}")
        if self.site not in SITE_NAMES:
            raise InputError(f"CP site {self.site!r} is unknown", f"use one of {', '.join(SITE_NAMES)}")
        for name in ("senteval_text", "tp", "tp_aux"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"CP {name} {getattr(self, name)!r} is not true or false", f"pass {name}=true or false")
        if self.mode == "nr_head" and self.site != "head":
            raise InputError(f"CP mode nr_head needs site='head' (got site={self.site!r})",
                             "per-head norms exist only for the attention heads' output z")
        resolve_prompts(self.prompt)
        resolve_aux_prompt(self.aux_prompt)

    def check(self, model) -> None:
        L = model.num_layers
        check_block_index(self.steer_layer, L, "CP steer_layer")
        index = resolve_output_layer(self.output_layer(model), L)
        if index <= self.steer_layer:
            raise InputError(
                f"CP output layer {self.output_layer(model)} (hidden_states[{index}], the output of block {index - 1}) "
                f"comes before the steered block {self.steer_layer}, so the steering would change nothing",
                f"pick an output layer above {self.steer_layer} (e.g. -1), or a steer_layer below {index}")
        if self.tp:
            self.tp_method(model).check(model)

    def tp_method(self, model) -> TP:
        """Method tp with this CP's TP options (CP + TP shares TP's option names)."""
        return TP(prompt="prompteol", layer=self.output_layer(model), start=self.start, end=self.end,
                  pst_init=self.pst_init, seed=self.seed, senteval_text=False)
