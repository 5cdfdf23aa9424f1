"""Contrastive Prompting (CP): Cheng et al., "Contrastive Prompting Enhances Sentence Embeddings in
LLMs through Inference-Time Steering", arXiv 2505.12831 (docs/spec.md section 6).

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

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from minidecoder.errors import InputError
from minidecoder.methods.audit import SteeringAudited
from minidecoder.methods.base import Method, check_bool, check_choice, check_int, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_index, resolve_output_layer
from minidecoder.methods.loop import Forward, Pass, Step, column_field, last_token
from minidecoder.methods.prompts import REFERENCE_LAYERS, resolve_aux_prompt, resolve_prompts
from minidecoder.methods.text import SENTEVAL_HELP, prepare_texts

SITE_NAMES = {"head": "z", "ffn": "mlp_out", "hidden": "resid_post"}  # CP site -> model.Sites name
MODES = ("ns", "nr", "nr_head", "nr_scaled")
NR_EPS = 1e-7  # the reference adds it to ||a - b|| (`original_norm / (new_norm + 1e-7)`)


# ---- the paper's loop -----------------------------------------------------------------------------
def steer(a: torch.Tensor, b: torch.Tensor, mode: str, alpha: float) -> torch.Tensor:
    """a' for the normal prompt's activation a given the auxiliary prompt's b: (B, H, D) at the head
    site (per head, TransformerLens' z), (B, E) at the others."""
    diff = a - b  # docs/spec.md section 6.3: the contrast, what the normal prompt has and the auxiliary one lacks
    if mode == "ns":
        return alpha * diff  # Norm Scaling, the paper's v-hat = alpha * dv (reference `scaled`)
    if mode == "nr_head":  # reference `sub_head_norm`: NR within each head
        return diff * a.norm(dim=-1, keepdim=True) / (diff.norm(dim=-1, keepdim=True) + NR_EPS)
    ratio = a.flatten(1).norm(dim=-1) / (diff.flatten(1).norm(dim=-1) + NR_EPS)  # ||a|| / ||a - b||, all heads
    nr = diff * ratio.view(-1, *[1] * (a.dim() - 1))  # Norm Recovering (reference `norm`): a - b at a's norm
    return alpha * nr if mode == "nr_scaled" else nr  # reference `scaled_norm`: alpha * NR


@dataclass(frozen=True, eq=False, kw_only=True)
class SteerLastToken(SteeringAudited, Step):
    """At block l, each row's last-token value a of `site` becomes steer(a, b) (docs/spec.md section 6.3)."""

    blocks: frozenset[int]  # {l}
    site: str  # a model.Sites name: z, mlp_out or resid_post
    last: torch.Tensor = column_field()  # (B,) each row's last real token
    b: torch.Tensor  # (B, ...) the auxiliary prompt's value there (recorded by its pass, `CP.passes`)
    mode: str = "ns"
    alpha: float = 0.5

    def edits(self, i: int) -> dict:
        return {self.site: self.steered} if i in self.blocks else {}

    def steered(self, value: torch.Tensor) -> torch.Tensor:  # (B, T, ...) -> the same, last token replaced
        value, rows = value.clone(), torch.arange(value.shape[0], device=value.device)
        value[rows, self.last] = steer(value[rows, self.last], self.b, self.mode, self.alpha).to(value.dtype)  # a <- f(a, b)
        return value


# ---- the method: options, validation --------------------------------------------------------------
@register
@dataclass
class CP(Method):
    """Contrastive Prompting (arXiv 2505.12831): replace the last token's activation at block
    `steer_layer` by its contrast with an auxiliary prompt's, then read the last token at `layer`."""

    name = "cp"
    summary = "Contrastive Prompting: steer the prompt's last token away from an auxiliary prompt (arXiv 2505.12831)"
    extensions: ClassVar[dict[str, str]] = {"tp": "cp+tp"}  # `cp tp=true` builds method cp+tp (methods.composite)
    steers: ClassVar[bool] = True  # False only in `unsteered(method)`, the audit view's baseline
    baseline_prompts: ClassVar[str] = "the same prompt(s)"  # the baseline's forwards, in words

    prompt: str = option("prompteol", "normal prompt: prompteol, pretended_cot, knowledge, ck (Knowledge + CoT "
                         "averaged), metaeol (8 prompts averaged), or a custom template with {text}")
    aux_prompt: str = option("irrelevant", "auxiliary prompt: irrelevant (reference default), redundant, background, "
                             "descriptive (paper Table 4), or a custom template with {text}")
    layer: int | None = option(None, "output layer (hidden_states index); None = the prompt's reference layer "
                               "(-1 PromptEOL/MetaEOL, -2 Pretended CoT/Knowledge/ck); Llama-2-7B PromptEOL used 27")
    steer_layer: int = option(4, "0-based block l whose site is steered; the auxiliary pass runs blocks 0..l only")
    alpha: float = option(0.5, "NS coefficient (ns: alpha*(a-b); nr_scaled: alpha*NR); nr and nr_head take none")
    mode: str = option("ns", "ns = alpha*(a-b) (paper and reference default); nr = (a-b)*||a||/||a-b|| over the "
                       "concatenated vector; nr_head = NR per head (site=head); nr_scaled = alpha*NR (reference only)")
    site: str = option("head", "head = z, every head's output before o_proj (default), ffn = the block's MLP output, "
                       "hidden = the block's output residual (paper Table 5)")
    senteval_text: bool = option(True, SENTEVAL_HELP)

    takes_context = True  # before every prompt, normal and auxiliary (`inputs.encode_prompts`)

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """The auxiliary pass (blocks 0..l, recording the site at block l), then one forward per normal prompt
        with a <- steer(a, b) at block l, the last token read at `layer`; the prompts' vectors are averaged.
        A normal prompt's step is made once the auxiliary pass has finished (`Pass.made`): b is what that
        pass recorded at block l, read at each row's last token."""
        sentences = prepare_texts(texts, self.senteval_text, self.reads_empty_text())
        site, l = SITE_NAMES[self.site], self.steer_layer
        index = resolve_output_layer(self.output_layer(model), model.num_layers)
        passes = []
        if self.steers:
            aux, aux_step, aux_rows = self.encode(model, resolve_aux_prompt(self.aux_prompt), sentences, contexts,
                                                  auxiliary=True)
            passes.append(Pass(aux, aux_step, depth=l + 1, record={l: {site}}, extra_rows=aux_rows, role="auxiliary prompt",
                               reads=f"b = {site} of block {l} at the last token; blocks after {l} never run"))
        for template in resolve_prompts(self.prompt):  # ck, metaeol: several prompts, averaged as the reference
            batch, step, rows = self.encode(model, template, sentences, contexts)

            def steered(finished: list[Forward], batch=batch, step=step) -> Step:  # once the auxiliary pass ran
                b = last_token(finished[0].recorded(l, site), aux)  # (B, H, D) at z, (B, E) at the others
                return self.with_steering(step, SteerLastToken(blocks=frozenset({l}), site=site, last=batch.last, b=b,
                                                               mode=self.mode, alpha=self.alpha))

            passes.append(Pass(batch, step, layer=index, extra_rows=rows, reads="the last token",
                               made=steered if self.steers else None,
                               pool=lambda run, batch=batch: last_token(run.hidden(index), batch)))
        return passes

    def encode(self, model, template: str, sentences: list[str], contexts: list[str] | None = None,
               auxiliary: bool = False) -> tuple[PromptBatch, Step, dict]:
        """A prompt's batch, the step its forward takes before CP's edit (none here) and its placeholder
        rows (none here); cp+tp gives TP's <PST> and copies (methods.composite)."""
        return encode_prompts(model.tokenizer, template, sentences, contexts=contexts), Step(), {}

    def with_steering(self, step: Step, steering: "SteerLastToken") -> Step:
        """The normal prompt's step with CP's edit: the edit alone here (`step` does nothing)."""
        return steering

    def baseline(self, model) -> tuple[Method, str]:
        return (unsteered(self),
                f"{self.baseline_prompts}, unsteered: the same tokens, the last token at the same output layer "
                f"{self.output_layer(model)}, no edit at block {self.steer_layer}")

    def reads_empty_text(self) -> bool:
        return True  # the prompts' last token exists around an empty text

    def output_layer(self, model) -> int:
        """`layer`, or with `layer=None` the prompt's reference layer (the same on every model)."""
        return REFERENCE_LAYERS.get(self.prompt, -1) if self.layer is None else self.layer

    def describe(self) -> dict:
        return super().describe() if self.steers else {**super().describe(), "steered": False}

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not math.isfinite(self.alpha):
            raise InputError(f"CP alpha {self.alpha!r} is not a finite number", "pass e.g. alpha=0.5")
        check_choice(self.mode, "CP mode", MODES)
        if self.mode in ("nr", "nr_head") and self.alpha != CP.alpha:  # NR rescales by norms alone
            raise InputError(f"CP alpha={self.alpha} scales modes ns and nr_scaled, and mode={self.mode!r} takes no "
                             "coefficient: it would change nothing", "leave alpha out, or pass mode=ns or nr_scaled")
        check_choice(self.site, "CP site", SITE_NAMES)
        check_bool(self.senteval_text, "CP senteval_text")
        check_int(self.layer, "layer", allow_none=True, example="-1")
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


# ---- for the audit view and the tools, below the paper's method ----------------------------------------
def unsteered(method: CP) -> CP:
    """`method` with CP's edit left out: its normal prompts (and cp+tp's copies) read at the same layer, no
    auxiliary pass. The audit view's baseline (`CP.baseline`); not an option, as it is not CP."""
    copy = dataclasses.replace(method)
    copy.steers = False
    return copy
