"""Undo what llama.cpp's converter did to the weights on the way into the GGUF.

1. Llama (and Mistral, stored as llama): the rows of q_proj and k_proj (weight and bias) are
   permuted from Hugging Face's "rotate half" RoPE layout to GGML's interleaved-pairs layout.
   Reference: llama.cpp `convert_hf_to_gguf.py`, `LlamaModel.permute`; transformers
   `modeling_gguf_pytorch_utils.py`, `LlamaTensorProcessor`. Qwen2 and Gemma are written unpermuted.
2. Gemma 2/3: every RMSNorm weight is stored as `w + 1`, because GGML's norm has no unit offset.
   Reference: llama.cpp `Gemma2Model.modify_tensors` / `Gemma3Model.modify_tensors` (all names ending
   in `norm.weight`, q/k norms and the final norm included); transformers `Gemma2TensorProcessor`,
   which subtracts 1 from every tensor whose name contains `norm.weight`, in float32.
"""
from __future__ import annotations

import numpy as np

_NORM_OFFSET_ARCHITECTURES = ("gemma2", "gemma3")


def permute_for_ggml(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's permutation: per head, rows [first half | second half] -> interleaved pairs."""
    head_dim = rows.shape[0] // n_heads
    return rows.reshape(n_heads, 2, head_dim // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def unpermute_from_ggml(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of `permute_for_ggml`: back to the layout transformers' `rotate_half` expects."""
    head_dim = rows.shape[0] // n_heads
    return rows.reshape(n_heads, head_dim // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def undo_llama_cpp(
    architecture: str, gguf_name: str, values: np.ndarray, num_heads: int, num_kv_heads: int
) -> np.ndarray:
    """Tensor `gguf_name` (float32, PyTorch shape) as the original Hugging Face checkpoint stored it."""
    if architecture == "llama":
        if ".attn_q." in gguf_name:
            return unpermute_from_ggml(values, num_heads)
        if ".attn_k." in gguf_name:
            return unpermute_from_ggml(values, num_kv_heads)
    if architecture in _NORM_OFFSET_ARCHITECTURES and gguf_name.endswith("norm.weight"):
        # In float32, before any cast, as transformers does: bit-identical weights.
        return values - np.float32(1.0)
    return values
