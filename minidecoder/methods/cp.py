"""Contrastive Prompting (CP): steer a prompt's last token away from an auxiliary prompt's.

Paper: Cheng et al., "Contrastive Prompting Enhances Sentence Embeddings in LLMs through
Inference-Time Steering", arXiv 2505.12831 (spec `methods.md` section 6). Reference code:
zifengcheng/CP, `evaluate_intervention.py` (batcher, prompts, defaults), `activation_intervention/
__init__.py` (`get_o_proj_input`, `get_activation_modification_hook`), `senllm/modeling_llama.py`
(`exit_layer`: the auxiliary pass breaks after block `act_layer`), `run_intervention_eval.sh`
(Llama-2-7B: PromptEOL, output 27, `scaled`, coeff 0.5, act_layer 4; Llama-3-8B: -2, 6, 0.25).

    auxiliary prompt ─ blocks 0..l ─ site of block l, last position ──────────────── b   (then stop)
    normal prompt    ─ blocks 0..l-1 ─ block l: site a ─> a' = f(a, b) ─ blocks l+1.. ─ last token

    NS (paper Eq. "v-hat = alpha * dv"; reference `scaled`):   a' = alpha * (a - b)
    NR (reference `norm`):                                      a' = (a - b) * ||a|| / (||a - b|| + 1e-7)
    NR per head (reference `sub_head_norm`):                    the same, per head of z
    NR scaled (reference `scaled_norm`):                        a' = alpha * NR

Sites (paper Table 5): `head` (default) = z, all heads' softmax(QK^T)V concatenated before o_proj,
(B, T, H*D) — exactly the input of the reference's forward pre-hook on `o_proj`; `ffn` = the MLP
branch's output added to the residual (Gemma: after post_feedforward_layernorm); `hidden` = the
block's output residual. Only the last position is replaced (the reference edits `[:, -1:, :]`
under left padding, i.e. the last real token); the rest of the row is untouched.

One auxiliary pass serves every normal prompt of a multi-prompt method (`ck` = Knowledge and
Pretended CoT averaged, as the reference's `ck`; `metaeol` = the eight MetaEOL prompts).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_index, resolve_output_layer
from minidecoder.methods.runner import last_token
from minidecoder.core.model import Sites
from minidecoder.methods.text import template_fields

# The paper's Table 4 auxiliary prompts, by name; the default is the reference's `negative_prompt`.
AUX_PROMPTS: dict[str, str] = {
    name: f'The {phrase} of this sentence : "{{text}}" means in one word:"'
    for name, phrase in [("irrelevant", "irrelevant information"), ("redundant", "redundant information"),
                         ("background", "background"), ("descriptive", "descriptive term")]
}

SITE_NAMES = {"head": "z", "ffn": "mlp_out", "hidden": "resid_post"}  # CP site -> model.Sites name
MODES = ("ns", "nr", "nr_head", "nr_scaled")
NR_EPS = 1e-7  # the reference adds it to ||a - b|| (`original_norm / (new_norm + 1e-7)`)

# Output layer used when `layer` is None: the reference configuration of each prompt (spec 1, 3).
_DEFAULT_LAYER = {"prompteol": -1, "pretended_cot": -2, "knowledge": -2, "ck": -2, "metaeol": -1}


def resolve_prompts(prompt: str) -> list[str]:
    """A prompt name (prompteol, pretended_cot, knowledge, ck, metaeol) or a template with {text}."""
    if "text" in template_fields(prompt):
        return [prompt]
    if prompt == "metaeol":
        from minidecoder.methods.metaeol import METAEOL_TEMPLATES
        return list(METAEOL_TEMPLATES)
    from minidecoder.methods.prompts import TEMPLATES
    if prompt == "ck":  # reference `ck`: Knowledge first, then Pretended CoT, embeddings averaged
        return [TEMPLATES["knowledge"], TEMPLATES["pretended_cot"]]
    if prompt in TEMPLATES:
        return [TEMPLATES[prompt]]
    raise InputError(f"unknown CP prompt {prompt!r}",
                     f"use one of {', '.join(sorted([*TEMPLATES, 'ck', 'metaeol']))}, or a template containing {{text}}")


def resolve_aux_prompt(aux_prompt: str) -> str:
    if "text" in template_fields(aux_prompt):
        return aux_prompt
    if aux_prompt in AUX_PROMPTS:
        return AUX_PROMPTS[aux_prompt]
    raise InputError(f"unknown CP auxiliary prompt {aux_prompt!r}",
                     f"use one of {', '.join(AUX_PROMPTS)} (paper Table 4), or a template containing {{text}}")


def steer(a: torch.Tensor, b: torch.Tensor, mode: str, alpha: float, num_heads: int) -> torch.Tensor:
    """The replacement a' for the normal prompt's activation a (B, D) given the auxiliary b (B, D)."""
    diff = a - b
    if mode == "ns":
        return alpha * diff
    if mode in ("nr", "nr_scaled"):  # norms over the whole concatenated vector
        scaled = diff * (a.norm(dim=-1, keepdim=True) / (diff.norm(dim=-1, keepdim=True) + NR_EPS))
        return alpha * scaled if mode == "nr_scaled" else scaled
    if mode == "nr_head":
        B, D = a.shape
        a_h, diff_h = a.view(B, num_heads, D // num_heads), diff.view(B, num_heads, D // num_heads)
        scale = a_h.norm(dim=-1, keepdim=True) / (diff_h.norm(dim=-1, keepdim=True) + NR_EPS)
        return (diff_h * scale).reshape(B, D)
    raise AssertionError(mode)


def auxiliary_activation(model, batch: PromptBatch, steer_layer: int, site: str) -> torch.Tensor:
    """b: the site of block `steer_layer` at each row's last token, (B, D). Runs blocks 0..steer_layer
    only (the reference's `exit_layer` break), so the blocks after it never execute.
    The shared prompt prefix runs once when it can (minidecoder.fast.prefix_cache): the record is of each
    row's last token, which the cache always leaves outside the prefix."""
    from minidecoder.fast.prefix_cache import hidden_with_prefix, prefix_cache_applies
    p = prefix_cache_applies(model, batch)
    if p:
        sites = Sites(record={SITE_NAMES[site]})
        hidden_with_prefix(model, batch, {steer_layer + 1: steer_layer + 1}, p,
                           sites_for=lambda i: sites if i == steer_layer else None)
        value = sites.store[SITE_NAMES[site]]  # (B, T - p, D): the rest of each row
        rows = torch.arange(value.shape[0], device=value.device)
        return value[rows, batch.last_positions(value.device) - p]  # (B, D)
    ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
    h = model.embed(ids)  # (B, T, E)
    ctx = model.context(mask, ids.shape[1], ids.shape[0])
    for block in model.layers[:steer_layer]:
        h = block(h, ctx)
    sites = Sites(record={SITE_NAMES[site]})
    model.layers[steer_layer](h, ctx, sites)
    value = sites.store[SITE_NAMES[site]]  # (B, T, D)
    rows = torch.arange(value.shape[0], device=value.device)
    return value[rows, batch.last_positions(value.device)]  # (B, D)


def steer_sites(batch: PromptBatch, steer_layer: int, site: str, replace: Callable[[torch.Tensor], torch.Tensor],
                device: torch.device, shift: int = 0) -> Callable[[int], Sites | None]:
    """i -> the Sites for block i: at `steer_layer`, an edit replacing each row's last-token value of
    `site` by `replace(a)` (a: (B, D)); None elsewhere. Shared by the plain and the TP forward.
    shift: the stream's column j is the batch's column j + shift (the prefix cache's rest pass)."""
    last = batch.last_positions(device) - shift
    rows = torch.arange(last.shape[0], device=device)

    def edit(value: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> same, last position replaced
        value = value.clone()
        value[rows, last] = replace(value[rows, last]).to(value.dtype)
        return value

    return lambda i: Sites(edit={SITE_NAMES[site]: edit}) if i == steer_layer else None


def steered_hidden(model, batch: PromptBatch, steer_layer: int, site: str, output_index: int,
                   replace: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """hidden_states[output_index] (B, T, E) of `batch` with the last token's site at block
    `steer_layer` replaced by `replace(a)`; blocks after the output layer do not run. The shared
    prompt prefix runs once when it can: the edit is of each row's last token, never in the prefix."""
    from minidecoder.fast.prefix_cache import hidden_with_prefix, prefix_cache_applies
    p = prefix_cache_applies(model, batch)
    if p:
        sites_for = steer_sites(batch, steer_layer, site, replace, model.device, shift=p)
        return hidden_with_prefix(model, batch, {output_index: output_index}, p, sites_for=sites_for)[output_index]
    ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
    h = model.embed(ids)  # (B, T, E)
    ctx = model.context(mask, ids.shape[1], ids.shape[0])
    sites_for = steer_sites(batch, steer_layer, site, replace, h.device)
    for i, block in enumerate(model.layers[:output_index]):
        h = block(h, ctx, sites_for(i))
    if output_index == model.num_layers:
        h = model.norm(h)  # only the last hidden state is normed (transformers' convention)
    return h


@register
@dataclass
class cp(Method):
    """Contrastive Prompting (arXiv 2505.12831): replace the last token's activation at block
    `steer_layer` by its contrast with an auxiliary prompt's, then read the last token at `layer`.

    Layers (minidecoder.methods.layers): `layer` indexes hidden_states (L+1 entries; -1 = final normed
    output), `steer_layer` is a 0-based block. Llama-2-7B reference: layer=27 (raw output of the 27th
    block; blocks 27..31 never run), steer_layer=4 (the fifth block), mode=ns, alpha=0.5.
    """

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
    site: str = option("head", "head = z before o_proj (default), ffn = the block's MLP output, hidden = the "
                       "block's output residual (paper Table 5)")
    senteval_text: bool = option(True, "prepare each text as the SentEval batchers did (append '.', '\"' -> \"'\", "
                                 "final '?' -> '.') before templating, as the reference; false embeds it verbatim")
    tp: bool = option(False, "minidecoder extension (in no paper): Token Prepending in the same forward -- a <PST> "
                      "before the quote takes the last token's row before blocks [tp_start, tp_end)")
    tp_start: int = option(1, "tp only: first 0-based block before which <PST> takes the last token's row")
    tp_end: int = option(7, "tp only: copies before blocks tp_start..tp_end-1 (half-open; TP reference 7 on Llama-2)")
    tp_pst_init: str = option("gaussian", "tp only: <PST> input row (zeros, ones, uniform, gaussian, mean, token:<text>)")
    tp_seed: int = option(0, "tp only: seed of the <PST> row for gaussian/uniform")
    tp_aux: bool = option(True, "tp only: the auxiliary prompt gets the same <PST> and copies (a and b come from "
                          "matched forwards); false runs it plain")

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

    def output_layer(self) -> int:
        if self.layer is not None:
            return self.layer
        return _DEFAULT_LAYER.get(self.prompt, -1)

    def check(self, model) -> None:
        L = model.num_layers
        check_block_index(self.steer_layer, L, "CP steer_layer")
        index = resolve_output_layer(self.output_layer(), L)
        if index <= self.steer_layer:
            raise InputError(
                f"CP output layer {self.output_layer()} (hidden_states[{index}], the output of block {index - 1}) "
                f"comes before the steered block {self.steer_layer}, so the steering would change nothing",
                f"pick an output layer above {self.steer_layer} (e.g. -1), or a steer_layer below {index}")
        resolve_prompts(self.prompt)
        resolve_aux_prompt(self.aux_prompt)
        if self.tp:
            self._tp().check(model)

    def _tp(self):
        from minidecoder.methods.tp import TP
        return TP(prompt="prompteol", layer=self.output_layer(), start=self.tp_start, end=self.tp_end,
                  pst_init=self.tp_pst_init, seed=self.tp_seed, senteval_text=False)

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        from minidecoder.methods.prompts import prepare_texts
        self.check(model)
        index = resolve_output_layer(self.output_layer(), model.num_layers)
        sentences = prepare_texts(texts, self.senteval_text)
        num_heads = model.config.num_heads
        aux_template = resolve_aux_prompt(self.aux_prompt)
        if not self.tp:
            b = auxiliary_activation(model, encode_prompts(model.tokenizer, aux_template, sentences),
                                     self.steer_layer, self.site)  # (B, D): one pass for every prompt
            replace = lambda a: steer(a, b, self.mode, self.alpha, num_heads)  # noqa: E731
            outputs = []
            for template in resolve_prompts(self.prompt):
                batch = encode_prompts(model.tokenizer, template, sentences)
                h = steered_hidden(model, batch, self.steer_layer, self.site, index, replace)
                outputs.append(last_token(h, batch).float())  # (B, E)
            return torch.stack(outputs).mean(dim=0)  # average over prompts (ck, metaeol), as the reference
        return self._embed_with_tp(model, sentences, aux_template, num_heads)

    def _embed_with_tp(self, model, sentences: list[str], aux_template: str, num_heads: int) -> torch.Tensor:
        """CP + TP in one forward per prompt: TP's copies (`TP.hidden`, `forward_with_copies`) run the
        blocks, CP's edit rides on the steer block's Sites."""
        from minidecoder.methods.tp import PST, forward_with_copies, tp_copy_plan, with_placeholders
        tp = self._tp()
        tp.check(model)
        place = lambda t: t if PST in t else with_placeholders(t, 1)  # noqa: E731
        if self.tp_aux:
            aux = tp.encode(model, place(aux_template), sentences)
            record = Sites(record={SITE_NAMES[self.site]})
            forward_with_copies(model, aux.batch, tp_copy_plan(aux.batch, aux.positions), tp.copy_blocks(model),
                                self.steer_layer + 1, {aux.placeholder_id: aux.row},
                                sites_for=lambda i: record if i == self.steer_layer else None)  # blocks 0..l only
            value = record.store[SITE_NAMES[self.site]]  # (B, T, D)
            b = value[torch.arange(value.shape[0], device=value.device), aux.batch.last_positions(value.device)]
        else:
            b = auxiliary_activation(model, encode_prompts(model.tokenizer, aux_template, sentences),
                                     self.steer_layer, self.site)
        replace = lambda a: steer(a, b, self.mode, self.alpha, num_heads)  # noqa: E731
        outputs = []
        for template in resolve_prompts(self.prompt):
            inputs = tp.encode(model, place(template), sentences)
            sites_for = steer_sites(inputs.batch, self.steer_layer, self.site, replace, model.device)
            outputs.append(last_token(tp.hidden(model, inputs, sites_for), inputs.batch).float())  # (B, E)
        return torch.stack(outputs).mean(dim=0)
