"""GGUF metadata -> a transformers-style `config.json` (transformers 5 key layout).

References: llama.cpp `convert_hf_to_gguf.py` (which HF keys it writes under which GGUF keys) and
`src/llama-model.cpp` (what it hard-codes instead of reading: Gemma's sliding-window layer
pattern, Gemma 3's local RoPE base, the 27B query scale); transformers
`integrations/ggml.py::GGUF_CONFIG_MAPPING` and the config classes' defaults, which its GGUF loader
falls back on.

Every `<arch>.*` metadata key is either used, known not to change numerics, or an error that names
it: a GGUF that asks for something this code does not implement never converts silently.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from minidecoder.sources.convert.gguf_reader import DAMAGED_FIX, GGUFFile
from minidecoder.sources.convert.gguf_tokenizer import token_id
from minidecoder.errors import CheckpointError, is_whole_number

# Keys that describe the model but change nothing a dense forward pass computes, or that are
# checked against the tensors instead of being trusted.
_IGNORED_KEYS = {"vocab_size", "attention.value_length", "rope.dimension_count", "rope.scaling.finetuned"}

_KEYS_READ = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
    "attention.key_length", "rope.freq_base",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "expert_count", "expert_used_count",
}

# Keys that count or size something: a whole number of at least 1, or a damaged file (a head count
# of 0 divides by zero; a block count of 2**60 would be a list of 2**60 layer names).
_COUNT_KEYS = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "attention.sliding_window",
}
_REAL_KEYS = {
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.freq_base_swa", "rope.scaling.factor",
    "attn_logit_softcapping", "final_logit_softcapping",
}

_EXTRA_KEYS = {
    "llama": set(),
    "qwen2": set(),
    "gemma2": {"attention.sliding_window", "attn_logit_softcapping", "final_logit_softcapping"},
    "gemma3": {
        "attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
        "attn_logit_softcapping", "final_logit_softcapping",
    },
}

_ARCHITECTURE_CLASS = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"),
    # A Gemma 3 GGUF holds the text decoder only (the vision tower ships as a separate mmproj file).
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
}

# Gemma 3 local (sliding-window) layers use RoPE base 10,000 whatever the global base is; llama.cpp
# hard-codes it (`rope_freq_base_train_swa`) and transformers' default `rope_local_base_freq` agrees.
_GEMMA3_LOCAL_ROPE_BASE = 10_000.0
# Layers per sliding-window cycle (the last of each cycle is global), hard-coded by llama.cpp.
_SLIDING_WINDOW_PERIOD = {"gemma2": 2, "gemma3": 6}
# Gemma 2's logit soft-caps when the GGUF does not state them (llama.cpp's and transformers' defaults).
_GEMMA2_SOFTCAPS = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
# The 27B Gemmas scale queries by hidden_size / num_heads instead of head_dim; llama.cpp recognises
# them by their layer count (gemma2: 46, gemma3: 62).
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


def float32_value(value: float) -> float:
    """The shortest decimal that rounds to the same float32: GGUF stores 1e-5 as 9.99999974738e-06,
    which is the same number once a norm adds it to a float32 tensor, but reads badly in config.json."""
    return float(np.format_float_scientific(np.float32(value), unique=True))


def build_config(gguf: GGUFFile, dtype_name: str = "float32") -> dict[str, Any]:
    """The transformers `config.json` dict for this GGUF (the dtype named is the one written)."""
    arch = gguf.architecture
    metadata = gguf.metadata
    _check_keys(gguf)

    def key(name: str, default: Any = ...) -> Any:
        full = f"{arch}.{name}"
        if full in metadata:
            return _checked(gguf, full, name)
        if default is ...:
            raise CheckpointError(
                f"{gguf.path.name}: metadata key {full!r} is missing",
                "the GGUF is incomplete or from an unsupported converter; re-download or re-export it",
            )
        return default

    if key("expert_count", 0):
        raise CheckpointError(
            f"{gguf.path.name}: {arch}.expert_count = {key('expert_count')}: mixture-of-experts models are not supported",
            "convert a dense model",
        )
    if not is_whole_number(metadata.get("split.count", 1), 1):
        raise CheckpointError(f"{gguf.path.name}: metadata key 'split.count' = {metadata['split.count']!r} is not a "
                              "whole number of at least 1", DAMAGED_FIX)
    if metadata.get("split.count", 1) > 1:
        raise CheckpointError(
            f"{gguf.path.name} is one part of a split GGUF ({metadata['split.count']} files)",
            "merge the parts first: `llama-gguf-split --merge FIRST_PART OUT.gguf`",
        )

    hidden_size = key("embedding_length")
    num_heads = key("attention.head_count")
    num_layers = key("block_count")
    if num_layers > len(gguf.tensor_names):  # every layer has several tensors
        raise CheckpointError(f"{gguf.path.name}: {arch}.block_count = {num_layers}, but the file holds only "
                              f"{len(gguf.tensor_names)} tensors", DAMAGED_FIX)
    head_dim = key("attention.key_length", hidden_size // num_heads)
    value_dim = key("attention.value_length", head_dim)
    rotary_dim = key("rope.dimension_count", head_dim)
    if value_dim != head_dim or rotary_dim != head_dim:
        raise CheckpointError(
            f"{gguf.path.name}: head_dim {head_dim}, value length {value_dim}, rotary dims {rotary_dim} differ",
            "only models whose keys, values and RoPE all span the whole head are supported",
        )
    model_type, class_name = _ARCHITECTURE_CLASS[arch]
    tied = "output.weight" not in gguf.tensor_names
    rope_theta = float32_value(key("rope.freq_base", 10_000.0))

    config: dict[str, Any] = {
        "architectures": [class_name],
        "model_type": model_type,
        "vocab_size": gguf.shape("token_embd.weight")[0],
        "hidden_size": hidden_size,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": key("attention.head_count_kv", num_heads),
        "head_dim": head_dim,
        "max_position_embeddings": key("context_length"),
        "rms_norm_eps": float32_value(key("attention.layer_norm_rms_epsilon")),
        "rope_parameters": _rope_parameters(gguf, key, rope_theta),
        "tie_word_embeddings": tied,
    }
    if arch == "llama":
        config["hidden_act"] = "silu"
        # Some llama-architecture models (e.g. InternLM-style exports) carry q/k/v/o biases.
        config["attention_bias"] = "blk.0.attn_q.bias" in gguf.tensor_names
        config["mlp_bias"] = False
    elif arch == "qwen2":
        config["hidden_act"] = "silu"
        del config["head_dim"]  # Qwen2Config has no head_dim: it is always hidden_size // heads
        if head_dim != hidden_size // num_heads:
            raise CheckpointError(f"{gguf.path.name}: qwen2 head_dim {head_dim} != hidden/heads", "re-export the GGUF")
        config["use_sliding_window"] = False
        config["layer_types"] = ["full_attention"] * num_layers
    else:  # gemma2, gemma3
        config["hidden_activation"] = "gelu_pytorch_tanh"
        config["attention_bias"] = False
        config["query_pre_attn_scalar"] = (
            hidden_size // num_heads if num_layers == _GEMMA_27B_LAYERS[arch] else head_dim
        )
        config["sliding_window"] = key("attention.sliding_window")
        config["layer_types"] = _gemma_layer_types(gguf, num_layers, key("attention.sliding_window_pattern", None))
        softcaps = _GEMMA2_SOFTCAPS if arch == "gemma2" else {}
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            value = key(name, softcaps.get(name))
            config[name] = None if value is None else float32_value(value)

    for config_key, gguf_key in (
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
    ):
        try:
            special = token_id(metadata, gguf_key)
        except CheckpointError as error:  # the file's name, as the other metadata checks give it
            raise CheckpointError(f"{gguf.path.name}: {error.problem}", error.fix) from None
        if special is not None:
            config[config_key] = special
    config["dtype"] = dtype_name
    return config


def _checked(gguf: GGUFFile, full: str, name: str) -> Any:
    """Metadata key `full` (`name` without the architecture), refused when it is not the kind of number it names."""
    value = gguf.metadata[full]
    if name in _COUNT_KEYS and not is_whole_number(value, 1):
        kind = "whole number of at least 1"
    elif name in _REAL_KEYS and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        kind = "number"
    else:
        return value
    raise CheckpointError(f"{gguf.path.name}: metadata key {full!r} = {value!r} is not a {kind}", DAMAGED_FIX)


def _check_keys(gguf: GGUFFile) -> None:
    arch = gguf.architecture
    understood = _IGNORED_KEYS | _KEYS_READ | _EXTRA_KEYS[arch]
    prefix = f"{arch}."
    for full in gguf.metadata:
        if full.startswith(prefix) and full[len(prefix):] not in understood:
            raise CheckpointError(
                f"{gguf.path.name}: metadata key {full!r} = {gguf.metadata[full]!r} is not understood by this converter",
                "it may change the model's numerics, so the file is refused; convert a plain dense llama/qwen2/gemma GGUF",
            )


def _rope_parameters(gguf: GGUFFile, key: Any, rope_theta: float) -> dict[str, Any]:
    scaling = key("rope.scaling.type", "none")
    if scaling == "none":
        global_rope: dict[str, Any] = {"rope_type": "default", "rope_theta": rope_theta}
    elif scaling == "linear":
        factor = float32_value(key("rope.scaling.factor"))
        global_rope = {"rope_type": "linear", "factor": factor, "rope_theta": rope_theta}
    else:
        raise CheckpointError(
            f"{gguf.path.name}: RoPE scaling {scaling!r} is not supported",
            "convert a model with plain or linearly scaled RoPE",
        )
    if gguf.architecture != "gemma3":
        return global_rope
    # Gemma 3 uses a second RoPE for its sliding-window layers (and scales only the global one).
    local_theta = float32_value(key("rope.freq_base_swa", _GEMMA3_LOCAL_ROPE_BASE))
    return {
        "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        "full_attention": global_rope,
    }


def _gemma_layer_types(gguf: GGUFFile, num_layers: int, pattern: Any) -> list[str]:
    """Which layers attend within the sliding window. The GGUF may state it per layer (a list of
    booleans, true = sliding) or as a period; llama.cpp's hard-coded period applies otherwise."""
    stated = f"{gguf.path.name}: metadata key '{gguf.architecture}.attention.sliding_window_pattern'"
    if isinstance(pattern, list):
        if len(pattern) != num_layers:
            raise CheckpointError(f"{stated} has {len(pattern)} entries for {num_layers} layers", DAMAGED_FIX)
        return ["sliding_attention" if sliding else "full_attention" for sliding in pattern]
    if pattern is not None and not is_whole_number(pattern, 1):  # a period of 0 would divide by zero
        raise CheckpointError(f"{stated} = {pattern!r} is neither one flag per layer nor a whole number of at "
                              "least 1", DAMAGED_FIX)
    period = int(pattern) if pattern is not None else _SLIDING_WINDOW_PERIOD[gguf.architecture]
    return ["full_attention" if (layer + 1) % period == 0 else "sliding_attention" for layer in range(num_layers)]
