"""Tiny GGUF files written in the test session with gguf-py's GGUFWriter (nothing is downloaded).

`write_tiny_gguf(path, arch)` writes a 2-layer llama / qwen2 / gemma2 / gemma3 model with random
weights, laid out the way llama.cpp's converter writes real ones (q/k rows permuted for llama, norms
stored as w + 1 for Gemma), and a small tokenizer of the kind each family uses: byte-level BPE with
merges for llama/qwen2, a SentencePiece vocabulary with byte fallback for Gemma.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, quants

from minidecoder.sources.convert.gguf_tokenizer import bytes_to_unicode  # pinned to GPT-2's by test_convert_units

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 256, 512, 2, 4, 2  # 256: K-quants need rows of 256 values
HEAD_DIM = HIDDEN // HEADS

# Where each K-quant block keeps its float16 scales (ggml-common.h block layouts), and the block size.
_K_QUANT_F16_OFFSETS = {"Q2_K": (84, (80, 82)), "Q3_K": (110, (108,)), "Q4_K": (144, (0, 2)),
                        "Q5_K": (176, (0, 2)), "Q6_K": (210, (208,))}


def byte_level_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): three specials, the 256 byte symbols, and a few merges."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    symbols = list(bytes_to_unicode().values())
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ c", "Ġc a", "a p", "Ġ 1", "1 2"]
    tokens = specials + symbols + [m.replace(" ", "") for m in merges]
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return tokens, types, merges


def sentencepiece_vocab() -> tuple[list[str], list[int], list[float]]:
    """(tokens, token types, scores) shaped like a Gemma vocabulary: controls, a user-defined
    newline, a run of spaces stored as real spaces, byte-fallback tokens, then scored pieces."""
    head = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "\n", "  "]
    head_types = [3, 3, 3, 3, 3, 4, 4]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["▁", "e", "t", "h", "a", "c", "p", "i", "l", "s", "o", "f", "r", "n",
              "▁t", "he", "▁the", "▁c", "ap", "it", "al", "▁cap", "ital", "▁capital", "▁o", "▁of", "▁is"]
    tokens = head + byte_tokens + pieces
    types = head_types + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * (len(head) + 256) + [-float(i) for i in range(len(pieces))]
    return tokens, types, scores


def random_k_quant(rows: int, cols: int, quant: str, rng: np.random.Generator) -> np.ndarray:
    """Random but valid K-quant blocks (gguf-py cannot quantize to these): random bytes with
    small float16 scales written where the block keeps them."""
    block_bytes, f16_offsets = _K_QUANT_F16_OFFSETS[quant]
    blocks = rng.integers(0, 256, size=(rows, cols // 256, block_bytes), dtype=np.uint8)
    for offset in f16_offsets:
        scale = rng.uniform(0.001, 0.01, size=(rows, cols // 256)).astype(np.float16)
        blocks[:, :, offset:offset + 2] = scale.view(np.uint8).reshape(rows, cols // 256, 2)
    return blocks.reshape(rows, -1)


def _permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute` (convert_hf_to_gguf.py), applied when writing llama q/k."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    *,
    quant: str | dict[str, str] = "F32",
    tie: bool = True,
    pre: str | None = None,
    extra_metadata: dict[str, Any] | None = None,
    drop_tensors: tuple[str, ...] = (),
    sentencepiece: bool | None = None,
    extra_tokens: tuple[tuple[str, int], ...] = (),
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Write the GGUF; return the Hugging Face state dict it stands for (before quantization).

    `quant`: one gguf-py type name for every 2-D weight, or {GGUF tensor name: type} overrides.
    `sentencepiece`: SentencePiece vocabulary (default for Gemma; a Llama-2-style one for llama).
    `extra_tokens`: (text, llama.cpp token type) pairs appended to the vocabulary, e.g. ("<end_of_turn>", 3).
    """
    rng = np.random.default_rng(seed)
    gemma = arch in ("gemma2", "gemma3")
    sentencepiece = gemma if sentencepiece is None else sentencepiece
    if sentencepiece:
        tokens, types, scores = sentencepiece_vocab()
    else:
        tokens, types, merges = byte_level_vocab()
    tokens, types = tokens + [text for text, _ in extra_tokens], types + [kind for _, kind in extra_tokens]
    if sentencepiece:
        scores += [0.0] * len(extra_tokens)
    vocab = len(tokens)

    writer = GGUFWriter(str(path), arch)
    writer.add_name(f"tiny {arch}")
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    if arch == "llama":
        writer.add_rope_dimension_count(HEAD_DIM)
    if gemma:
        writer.add_key_length(HEAD_DIM)
        writer.add_value_length(HEAD_DIM)
        writer.add_sliding_window(16)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)
    writer.add_file_type(0)
    if sentencepiece:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(2)
        writer.add_eos_token_id(1)
        writer.add_unk_token_id(3)
        writer.add_pad_token_id(0)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        if gemma:
            writer.add_add_space_prefix(False)  # Llama 2 / Mistral files leave it out: a prefix space
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre or ("qwen2" if arch == "qwen2" else "smollm"))
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(False)
    for key, value in (extra_metadata or {}).items():
        _add_value(writer, key, value)

    hf: dict[str, np.ndarray] = {}
    tensors: list[tuple[str, np.ndarray]] = []

    def add(gguf_name: str, hf_name: str, shape: tuple[int, ...], scale: float = 0.05) -> None:
        values = (rng.standard_normal(shape) * scale).astype(np.float32)
        stored = values
        if gemma and gguf_name.endswith("norm.weight"):
            stored = values + np.float32(1.0)  # llama.cpp folds Gemma's unit offset into the weight
        if arch == "llama" and ".attn_q." in gguf_name:
            stored = _permute(values, HEADS)
        if arch == "llama" and ".attn_k." in gguf_name:
            stored = _permute(values, KV_HEADS)
        hf[hf_name] = values
        tensors.append((gguf_name, stored))

    add("token_embd.weight", "model.embed_tokens.weight", (vocab, HIDDEN))
    add("output_norm.weight", "model.norm.weight", (HIDDEN,))
    if not tie:
        add("output.weight", "lm_head.weight", (vocab, HIDDEN))
    for i in range(LAYERS):
        p, h = f"blk.{i}.", f"model.layers.{i}."
        add(p + "attn_norm.weight", h + "input_layernorm.weight", (HIDDEN,))
        add(p + "attn_q.weight", h + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN))
        add(p + "attn_k.weight", h + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN))
        add(p + "attn_v.weight", h + "self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN))
        add(p + "attn_output.weight", h + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM))
        add(p + "ffn_gate.weight", h + "mlp.gate_proj.weight", (FFN, HIDDEN))
        add(p + "ffn_up.weight", h + "mlp.up_proj.weight", (FFN, HIDDEN))
        add(p + "ffn_down.weight", h + "mlp.down_proj.weight", (HIDDEN, FFN))
        if arch == "qwen2":
            add(p + "attn_q.bias", h + "self_attn.q_proj.bias", (HEADS * HEAD_DIM,))
            add(p + "attn_k.bias", h + "self_attn.k_proj.bias", (KV_HEADS * HEAD_DIM,))
            add(p + "attn_v.bias", h + "self_attn.v_proj.bias", (KV_HEADS * HEAD_DIM,))
        if gemma:
            add(p + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight", (HIDDEN,))
            add(p + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (HIDDEN,))
            add(p + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", (HIDDEN,))
        else:
            add(p + "ffn_norm.weight", h + "post_attention_layernorm.weight", (HIDDEN,))
        if arch == "gemma3":
            add(p + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (HEAD_DIM,))
            add(p + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (HEAD_DIM,))

    for gguf_name, stored in tensors:
        if gguf_name in drop_tensors:
            continue
        kind = quant.get(gguf_name, "F32") if isinstance(quant, dict) else (quant if stored.ndim == 2 else "F32")
        if kind == "F32":
            writer.add_tensor(gguf_name, stored)
        elif kind == "F16":
            writer.add_tensor(gguf_name, stored.astype(np.float16))
        elif kind in _K_QUANT_F16_OFFSETS:
            raw = random_k_quant(stored.shape[0], stored.shape[1], kind, rng)
            writer.add_tensor(gguf_name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind])
        elif kind in ("IQ4_NL",):  # a type the converter refuses: any bytes of the right length do
            raw = np.zeros((stored.shape[0], stored.shape[1] // 32 * 18), dtype=np.uint8)
            writer.add_tensor(gguf_name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind])
        else:
            raw = quants.quantize(stored, GGMLQuantizationType[kind])
            writer.add_tensor(gguf_name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind])

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return hf


def _add_value(writer: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    else:
        writer.add_array(key, value)
