"""llama.cpp tensor names -> Hugging Face parameter names, per architecture.

References: gguf-py `gguf/tensor_mapping.py` (the same table, read the other way) and the
`*ForCausalLM` parameter names of transformers' llama, qwen2, gemma2 and gemma3_text models.
"""
from __future__ import annotations

import re

from minidecoder.errors import CheckpointError

# Tensors outside the blocks. `output` (the unembedding) is absent when it is tied to the embedding.
_TOP_LEVEL = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_ATTENTION_AND_MLP = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# Llama and Qwen2 have one norm before the MLP, which transformers calls post_attention_layernorm.
_PRE_NORM_BLOCK = _ATTENTION_AND_MLP | {"ffn_norm": "post_attention_layernorm"}

# Gemma 2/3 wrap attention and MLP in "sandwich" norms: llama.cpp's ffn_norm is the pre-MLP one.
_SANDWICH_BLOCK = _ATTENTION_AND_MLP | {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

BLOCK_NAMES: dict[str, dict[str, str]] = {
    "llama": _PRE_NORM_BLOCK,
    "qwen2": _PRE_NORM_BLOCK,
    "gemma2": _SANDWICH_BLOCK,
    "gemma3": _SANDWICH_BLOCK | {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"},
}

_BLOCK_TENSOR = re.compile(r"blk\.(?P<layer>\d+)\.(?P<leaf>\w+)\.(?P<kind>weight|bias)")
_TOP_TENSOR = re.compile(r"(?P<leaf>\w+)\.(?P<kind>weight|bias)")


def hf_name(architecture: str, gguf_name: str) -> str:
    """The transformers parameter name of GGUF tensor `gguf_name`, e.g. blk.3.attn_q.weight ->
    model.layers.3.self_attn.q_proj.weight. Unknown tensors are an error, never skipped silently."""
    if match := _BLOCK_TENSOR.fullmatch(gguf_name):
        leaf = BLOCK_NAMES[architecture].get(match["leaf"])
        if leaf is not None:
            return f"model.layers.{match['layer']}.{leaf}.{match['kind']}"
    elif (match := _TOP_TENSOR.fullmatch(gguf_name)) and match["leaf"] in _TOP_LEVEL:
        return f"{_TOP_LEVEL[match['leaf']]}.{match['kind']}"
    hint = ""
    if gguf_name == "rope_freqs.weight":
        hint = " (per-frequency RoPE scaling, as in Llama 3.1, is not supported)"
    raise CheckpointError(
        f"GGUF tensor {gguf_name!r} has no counterpart in a {architecture} model{hint}",
        "convert a plain dense llama/qwen2/gemma2/gemma3 GGUF; this converter never drops a tensor it does not understand",
    )


def expected_hf_names(
    architecture: str, num_layers: int, tie_word_embeddings: bool, biased_projections: tuple[str, ...] = ()
) -> set[str]:
    """Every parameter a complete checkpoint of this shape must have, to catch a truncated GGUF.

    `biased_projections` names the attention projections with a bias: ("q_proj", "k_proj", "v_proj")
    for Qwen2, all four for a Llama with `attention_bias`."""
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not tie_word_embeddings:
        names.add("lm_head.weight")
    for layer in range(num_layers):
        for leaf in BLOCK_NAMES[architecture].values():
            names.add(f"model.layers.{layer}.{leaf}.weight")
        for projection in biased_projections:
            names.add(f"model.layers.{layer}.self_attn.{projection}.bias")
    return names
