"""Every family quirk matters: switch it off on a loaded model and parity with transformers must
break by far more than the parity tolerance (docs/style.md, rule 8). A quirk that could be switched off
without effect would mean the tiny models do not exercise it, and the parity suite proved nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import pytest
import torch
from torch import nn

import minidecoder
from minidecoder.core.config import RopeSpec
from minidecoder.core.rope import inverse_frequencies
from test_parity import ATOL, checkpoint
from tiny_models import random_ids


def _set_config(model, **changes) -> None:
    model.config = dataclasses.replace(model.config, **changes)


def _attn(model):
    return [block.self_attn for block in model.layers]


def _no_unit_offset(model) -> None:  # Gemma RMSNorm: (1 + w) -> w
    for module in model.modules():
        if isinstance(module, minidecoder.core.model.RMSNorm):
            module.unit_offset = False


def _no_sandwich(model) -> None:  # Gemma: drop the post-attention / post-MLP norms
    for block in model.layers:
        block.sandwich_norms = False
        block.post_attention_layernorm = block.pre_feedforward_layernorm


def _no_window(model) -> None:
    _set_config(model, sliding_window=10**6)


def _default_rope(model) -> None:
    for kind, spec in model.config.rope.items():
        plain = RopeSpec(rope_type="default", theta=spec.theta)
        model._inv_freq[kind] = inverse_frequencies(plain, model.config.head_dim, model.config.max_position_embeddings)
    _set_config(model, rope={kind: RopeSpec("default", spec.theta) for kind, spec in model.config.rope.items()})


def _one_rope_base(model) -> None:  # Gemma3: local layers rotate with the global base
    model._inv_freq["sliding_attention"] = model._inv_freq["full_attention"]


def _zero_qkv_bias(model) -> None:  # Qwen2
    for attn in _attn(model):
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            proj.bias.data.zero_()


def _all_layers_slide(model) -> None:  # Qwen2: ignore max_window_layers
    for attn in _attn(model):
        attn.layer_type = "sliding_attention"


def _silu_for_gelu(model) -> None:
    for block in model.layers:
        block.mlp.act = nn.SiLU()


def _exact_gelu(model) -> None:  # Gemma uses the tanh approximation
    for block in model.layers:
        block.mlp.act = nn.GELU()


def _plain_scale(model) -> None:  # Gemma: query_pre_attn_scalar**-0.5 -> head_dim**-0.5
    for attn in _attn(model):
        attn.scale = attn.head_dim ** -0.5


def _no_attn_softcap(model) -> None:
    for attn in _attn(model):
        attn.softcap = None


def _no_qk_norm(model) -> None:
    for attn in _attn(model):
        attn.q_norm = attn.k_norm = None


def _repeat_instead_of_interleave(model) -> None:  # GQA: query head h uses kv head h // groups
    for attn in _attn(model):
        attn.num_kv_heads = attn.num_heads
        k, v = attn.k_proj, attn.v_proj
        groups = model.config.num_kv_groups
        for proj in (k, v):
            weight = proj.weight.data.view(model.config.num_kv_heads, attn.head_dim, -1)
            proj.weight = nn.Parameter(weight.repeat(groups, 1, 1).reshape(-1, weight.shape[-1]))
            if proj.bias is not None:
                bias = proj.bias.data.view(model.config.num_kv_heads, attn.head_dim)
                proj.bias = nn.Parameter(bias.repeat(groups, 1).reshape(-1))


QUIRKS: list[tuple[str, str, Callable]] = [
    ("gemma2", "norm_unit_offset", _no_unit_offset),
    ("gemma3", "norm_unit_offset", _no_unit_offset),
    ("gemma2", "sandwich_norms", _no_sandwich),
    ("gemma3", "sandwich_norms", _no_sandwich),
    ("gemma2", "scale_embeddings", lambda m: _set_config(m, scale_embeddings=False)),
    ("gemma3", "scale_embeddings", lambda m: _set_config(m, scale_embeddings=False)),
    ("gemma2", "query_pre_attn_scalar", _plain_scale),
    ("gemma3", "query_pre_attn_scalar", _plain_scale),
    ("gemma2", "attn_logit_softcap", _no_attn_softcap),
    ("gemma2", "final_logit_softcap", lambda m: _set_config(m, final_logit_softcap=None)),
    ("gemma2", "sliding_window", _no_window),
    ("gemma2", "gelu_tanh", _exact_gelu),
    ("gemma3", "gelu_tanh", _silu_for_gelu),
    ("gemma3", "sliding_window", _no_window),
    ("gemma3", "qk_norm", _no_qk_norm),
    ("gemma3", "local_rope_base", _one_rope_base),
    ("gemma3", "rope_scaling_linear", _default_rope),
    ("mistral_window", "sliding_window", _no_window),
    ("qwen2", "qkv_bias", _zero_qkv_bias),
    ("qwen2_window", "sliding_window", _no_window),
    ("qwen2_window", "max_window_layers", _all_layers_slide),
    ("llama_rope_linear", "rope_scaling", _default_rope),
    ("llama_rope_dynamic", "rope_scaling", _default_rope),
    ("llama_rope_llama3", "rope_scaling", _default_rope),
    ("llama_rope_yarn", "rope_scaling", _default_rope),
    ("llama_mha_tied_bias", "attention_bias", _zero_qkv_bias),
]


@pytest.mark.parametrize("variant,quirk,switch_off", QUIRKS, ids=[f"{v}-{q}" for v, q, _ in QUIRKS])
def test_switching_a_quirk_off_breaks_parity(variant: str, quirk: str, switch_off: Callable) -> None:
    hf, folder = checkpoint(variant)
    model = minidecoder.load(folder)
    ids = random_ids()
    with torch.no_grad():
        reference = hf(ids).logits
        assert (model(ids).logits - reference).abs().max().item() <= ATOL  # parity holds before
        switch_off(model)
        broken = (model(ids).logits - reference).abs().max().item()
    assert broken > 100 * ATOL, f"switching off {quirk} on {variant} moved logits by only {broken:.2e}"


def test_gqa_grouping_is_interleaved_not_tiled() -> None:
    """Query head h reads kv head h // groups (repeat_interleave); tiling the kv heads breaks parity."""
    hf, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    ids = random_ids()
    with torch.no_grad():
        reference = hf(ids).logits
        _repeat_instead_of_interleave(model)
        broken = (model(ids).logits - reference).abs().max().item()
    assert broken > 100 * ATOL
