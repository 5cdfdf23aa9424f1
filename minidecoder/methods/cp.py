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

import torch

from minidecoder.errors import InputError
from minidecoder.methods.audit import SteeringAudited
from minidecoder.methods.base import Method, check_bool, check_choice, check_int, check_seed, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_index, check_block_range, resolve_output_layer
from minidecoder.methods.composite import Steps
from minidecoder.methods.loop import Forward, Pass, Step, column_field, last_token
from minidecoder.methods.placeholders import check_placeholder_init, placeholder_row
from minidecoder.methods.prompts import REFERENCE_LAYERS, resolve_aux_prompt, resolve_prompts
from minidecoder.methods.text import SENTEVAL_HELP, prepare_texts
from minidecoder.methods.tp import PST, TPStep, encode_tp, with_placeholders

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
    senteval_text: bool = option(True, SENTEVAL_HELP)
    tp: bool = option(False, "minidecoder extension (in no paper): Token Prepending in the same forward -- a <PST> "
                      "before the quote takes the last token's row before blocks [start, end), as method tp")
    start: int = option(1, "tp only: first 0-based block before which <PST> takes the last token's row (TP's start)")
    end: int = option(7, "tp only: copies before blocks start..end-1 (half-open; TP's end, reference 7 on Llama-2)")
    pst_init: str = option("gaussian", "tp only: <PST> input row (TP's pst_init: zeros, ones, uniform, gaussian, mean, "
                           "token:<text>)")
    seed: int = option(0, "tp only: seed of the <PST> row for gaussian/uniform (TP's seed)")
    tp_aux: bool = option(True, "tp only: the auxiliary prompt gets the same <PST> and copies (a and b come from "
                          "matched forwards); false runs it plain")

    steer: bool = option(True, "false: the normal prompts run unsteered and no auxiliary pass runs (the baseline the "
                         "audit view compares with: PromptEOL, or TP with tp=true)")

    takes_context = True  # before every prompt, normal and auxiliary (`inputs.encode_prompts`)

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """The auxiliary pass (blocks 0..l, recording the site at block l), then one forward per normal prompt
        with a <- steer(a, b) at block l, the last token read at `layer`; the prompts' vectors are averaged.
        A normal prompt's step is made once the auxiliary pass has finished (`Pass.made`): b is what that
        pass recorded at block l, read at each row's last token."""
        sentences = prepare_texts(texts, self.senteval_text)
        site, l = SITE_NAMES[self.site], self.steer_layer
        index = resolve_output_layer(self.output_layer(model), model.num_layers)
        passes = []
        if self.steer:
            aux, aux_step, aux_rows = self.encode(model, resolve_aux_prompt(self.aux_prompt), sentences, self.tp_aux,
                                                  contexts)
            passes.append(Pass(aux, aux_step, depth=l + 1, record={l: {site}}, extra_rows=aux_rows, role="auxiliary prompt",
                               reads=f"b = {site} of block {l} at the last token; blocks after {l} never run"))
        for template in resolve_prompts(self.prompt):  # ck, metaeol: several prompts, averaged as the reference
            batch, step, rows = self.encode(model, template, sentences, True, contexts)

            def steered(finished: list[Forward], batch=batch, step=step) -> Step:  # once the auxiliary pass ran
                b = last_token(finished[0].recorded(l, site), aux)  # (B, H, D) at z, (B, E) at the others
                steering = SteerLastToken(blocks=frozenset({l}), site=site, last=batch.last, b=b, mode=self.mode,
                                          alpha=self.alpha)
                return Steps(parts=(step, steering)) if self.tp else steering  # TP's copies, then CP's edit

            passes.append(Pass(batch, step, layer=index, extra_rows=rows, reads="the last token",
                               made=steered if self.steer else None,
                               pool=lambda run, batch=batch: last_token(run.hidden(index), batch)))
        return passes

    def encode(self, model, template: str, sentences: list[str], with_tp: bool,
               contexts: list[str] | None = None) -> tuple[PromptBatch, Step, dict]:
        """A prompt's batch, and with `tp` (a minidecoder extension, in no paper) TP's <PST> before the quote
        and TP's copies before blocks [start, end) as its step, with the <PST> input row."""
        if not (self.tp and with_tp):
            return encode_prompts(model.tokenizer, template, sentences, contexts=contexts), Step(), {}
        template = template if PST in template else with_placeholders(template, 1)
        batch, pst_id, pst = encode_tp(model.tokenizer, template, sentences, contexts)
        step = TPStep.of(batch, pst, set(range(self.start, self.end)), hide_pst_in_block_0=False)
        return batch, step, {pst_id: placeholder_row(model, self.pst_init, self.seed)}

    def baseline(self, model) -> tuple[Method, str]:
        what = "the same prompt(s) with TP's copies" if self.tp else "the same prompt(s)"
        return (dataclasses.replace(self, steer=False),
                f"{what}, unsteered: the same tokens, the last token at the same output layer "
                f"{self.output_layer(model)}, no edit at block {self.steer_layer}")

    def output_layer(self, model) -> int:
        """`layer`, or with `layer=None` the prompt's reference layer (the same on every model)."""
        return REFERENCE_LAYERS.get(self.prompt, -1) if self.layer is None else self.layer

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not math.isfinite(self.alpha):
            raise InputError(f"CP alpha {self.alpha!r} is not a finite number", "pass e.g. alpha=0.5")
        check_choice(self.mode, "CP mode", MODES)
        check_choice(self.site, "CP site", SITE_NAMES)
        for name in ("senteval_text", "tp", "tp_aux", "steer"):
            check_bool(getattr(self, name), f"CP {name}")
        for name in ("start", "end"):
            check_int(getattr(self, name), name)
        check_seed(self.seed)
        check_int(self.layer, "layer", allow_none=True, example="-1")
        check_placeholder_init(self.pst_init)
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
            check_block_range(self.start, self.end, L, "CP + TP")
            if self.end > index:
                raise InputError(f"CP + TP range [{self.start}, {self.end}) reaches past the output layer "
                                 f"{self.output_layer(model)} (blocks 0..{index - 1} run)", "lower `end` or raise `layer`")
