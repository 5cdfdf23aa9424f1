"""Read a Hugging Face `config.json` into one flat, behaviour-named `ModelConfig`.

Families differ only through the flags below, each named after what it does (docs/style.md, rule 1); the
family name is used here, once, to pick defaults and nowhere else. Both transformers key layouts
are read: v4 (`rope_theta`, `rope_scaling` with `type`/`rope_type`, `torch_dtype`) and v5
(`rope_parameters`, `dtype`, `layer_types`). A key that is not understood is an error naming the
key (docs/style.md, rule 3): a silently ignored key is a silently wrong logit. So is a value of the wrong JSON
type (`_KEY_TYPES`, checked as transformers' config classes declare them): `int(64.9)` or
`bool("false")` would quietly build another model than the checkpoint's.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minidecoder.errors import ConfigError, InputError, MinidecoderError, file_is_there

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gemma2", "gemma3_text", "gemma3")
ACTIVATIONS = {"silu", "gelu_pytorch_tanh", "gelu_tanh"}
ROPE_TYPES = {"default", "linear", "dynamic", "llama3", "yarn"}

# Every key this parser understands: those it reads below, and those with no effect on an inference
# forward pass (ids, bookkeeping, training-only settings). Any other key is an error naming it.
_UNDERSTOOD_KEYS = {
    "architectures", "transformers_version", "model_type", "_name_or_path", "name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range",
    "attention_dropout", "torch_dtype", "dtype", "cache_implementation", "pretraining_tp",
    "tie_word_embeddings", "output_attentions", "output_hidden_states", "return_dict",
    "is_encoder_decoder", "chunk_size_feed_forward", "id2label", "label2id", "problem_type",
    "tokenizer_class", "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params",
    "finetuning_task", "max_length", "min_length", "do_sample", "temperature", "top_p", "top_k",
    "num_beams", "repetition_penalty", "use_return_dict", "bad_words_ids", "begin_suppress_tokens",
    "max_window_layers", "use_sliding_window", "sliding_window", "sliding_window_pattern",
    "_sliding_window_pattern", "rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq",
    "layer_types", "head_dim", "hidden_act", "hidden_activation", "attention_bias", "mlp_bias",
    "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "vocab_size",
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "use_bidirectional_attention",
    "bos_token", "eos_token", "torchscript", "tf_legacy_loss", "use_bfloat16", "pruned_heads",
    "cross_attention_hidden_size", "add_cross_attention", "is_decoder", "tie_encoder_decoder",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "num_return_sequences", "diversity_penalty",
    "num_beam_groups", "length_penalty", "early_stopping", "typical_p", "embedding_dropout",
    "residual_dropout", "attn_pdrop", "resid_pdrop", "dropout", "final_logit_softcapping_",
}
# Keys of a multimodal `gemma3` config outside its text part.
_GEMMA3_OUTER_KEYS = {
    "text_config", "vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
    "image_token_index", "image_token_id", "initializer_range", "vision_soft_tokens_per_image",
}

# The JSON type of every key read below that shapes the model, as transformers' config classes declare it
# ("?": null means "absent, derive it"). transformers 5 refuses other types when it builds the config; a
# float where an int is meant, or the string "false" where a boolean is, must not be coerced here.
_KEY_TYPES = {
    "vocab_size": "int", "hidden_size": "int", "intermediate_size": "int", "num_hidden_layers": "int",
    "num_attention_heads": "int", "num_key_value_heads": "int?", "head_dim": "int?", "max_position_embeddings": "int",
    "sliding_window": "int?", "sliding_window_pattern": "int", "_sliding_window_pattern": "int",
    "max_window_layers": "int", "rms_norm_eps": "float", "rope_theta": "float", "rope_local_base_freq": "float",
    "query_pre_attn_scalar": "int", "attn_logit_softcapping": "float?", "final_logit_softcapping": "float?",
    "tie_word_embeddings": "bool", "attention_bias": "bool", "mlp_bias": "bool", "use_sliding_window": "bool",
    "use_bidirectional_attention": "bool?", "hidden_act": "str?", "hidden_activation": "str?",
    "rope_scaling": "dict?", "rope_parameters": "dict?", "layer_types": "list?", "text_config": "dict?",
}
_ROPE_KEY_TYPES = {
    "rope_type": "str", "type": "str", "rope_theta": "float", "factor": "float", "original_max_position_embeddings": "int?",
    "low_freq_factor": "float", "high_freq_factor": "float", "beta_fast": "float?", "beta_slow": "float?",
    "attention_factor": "float?", "mscale": "float?", "mscale_all_dim": "float?", "truncate": "bool",
}
# What a key left out of config.json means, where transformers' config classes differ by family: one default for
# all ran a Gemma2 without its soft-capping, a Mistral without its 4,096-token window, and a Qwen2's dynamic or
# YaRN RoPE against another context. A null is kept: it means what transformers reads it as (no window, no cap).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"max_position_embeddings": 2048},
    "mistral": {"max_position_embeddings": 4096 * 32, "sliding_window": 4096, "num_key_value_heads": 8},
    "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096, "num_key_value_heads": 32},
    "gemma2": {"max_position_embeddings": 8192, "sliding_window": 4096, "num_key_value_heads": 4, "head_dim": 256,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {"max_position_embeddings": 131_072, "sliding_window": 4096, "num_key_value_heads": 4,
                    "head_dim": 256},
}
_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false (a JSON boolean)", "str": "a string",
               "dict": "an object", "list": "a list"}


@dataclass(frozen=True)
class RopeSpec:
    """Rotary embedding of one layer type: `rope_type` in {default, linear, dynamic, llama3, yarn}."""

    rope_type: str
    theta: float
    factor: float = 1.0
    # llama3 and yarn need the context the model was trained on; dynamic uses max_position_embeddings.
    original_max_position_embeddings: int | None = None
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float | None = None  # yarn: scales cos/sin
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    hidden_act: str  # silu (Llama, Mistral, Qwen2) or gelu_pytorch_tanh (Gemma)
    tie_word_embeddings: bool
    qkv_bias: bool  # Qwen2: biases on q/k/v projections; Llama/Gemma: `attention_bias`
    o_bias: bool  # Llama/Gemma `attention_bias` also covers o_proj; Qwen2's o_proj has none
    mlp_bias: bool  # Llama `mlp_bias`
    norm_unit_offset: bool  # Gemma: RMSNorm scales by (1 + w), computed in float32 before the cast
    sandwich_norms: bool  # Gemma2/3: extra norms after attention and around the MLP
    scale_embeddings: bool  # Gemma: embeddings times sqrt(hidden_size), rounded to the weight dtype
    qk_norm: bool  # Gemma3: RMSNorm on each query and key head before RoPE
    attn_scale: float  # head_dim**-0.5, or Gemma's query_pre_attn_scalar**-0.5
    attn_logit_softcap: float | None  # Gemma2: tanh soft-capping of attention scores
    final_logit_softcap: float | None  # Gemma2: tanh soft-capping of output logits
    layer_types: tuple[str, ...]  # per block: "full_attention" or "sliding_attention"
    sliding_window: int | None  # keys at distance >= window are invisible on sliding layers
    rope: dict[str, RopeSpec] = field(default_factory=dict)  # keyed by layer type
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    checkpoint_dtype: str | None = None
    # Multimodal gemma3 checkpoints keep the text model under a prefix (v4: `language_model.`).
    weight_prefixes: tuple[str, ...] = ()

    @property
    def num_kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads


def load_config(folder: str | Path, ignore_keys: tuple[str, ...] | set[str] = ()) -> ModelConfig:
    """The folder's config.json as a ModelConfig (`parse_config`); every problem is a ConfigError."""
    path = Path(folder) / "config.json"
    if not file_is_there(path, ConfigError):  # a dangling link is named as one
        raise ConfigError(
            f"no config.json in {folder}",
            "point minidecoder at a Hugging Face checkpoint folder (config.json + *.safetensors), "
            "a known model name (`minidecoder fetch --list`), or convert a GGUF with `minidecoder convert`",
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON: {error}", "re-download or re-convert the checkpoint") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} does not hold a JSON object", "re-download or re-convert the checkpoint")
    _check_ignored_keys(raw, ignore_keys, path)
    return parse_config(raw, ignore_keys=ignore_keys, source=str(path))


def _check_ignored_keys(raw: dict[str, Any], ignore_keys: tuple[str, ...] | set[str], path: Path) -> None:
    """Each key a user vouches for must be one the file holds and minidecoder does not read: a key it lacks
    (a typo) would be vouched for in vain, and a key minidecoder reads (`rope_scaling`) is not dropped by it."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    held = set(raw) | set(text)
    unread = sorted(held - _UNDERSTOOD_KEYS - (_GEMMA3_OUTER_KEYS if text else set()))
    for key in ignore_keys:
        if key not in held:
            raise InputError(f"ignore_config_keys (--ignore-config-key) names {key!r}, which {path} does not hold",
                             "leave it out; the keys it holds that minidecoder does not read: "
                             + (", ".join(unread) or "none"))
        if key not in unread:
            raise InputError(f"ignore_config_keys (--ignore-config-key) names {key!r}, which minidecoder reads: "
                             "ignoring it would not drop it", f"leave it out; to change {key}, edit config.json in a "
                             "copy of the checkpoint folder")


def parse_config(raw: dict[str, Any], ignore_keys: tuple[str, ...] | set[str] = (),
                 source: str = "config.json") -> ModelConfig:
    """Map a config dict to a ModelConfig; `ignore_keys` lets a user vouch that unknown keys are inert;
    `source` names the file in messages.

    Every invalid input is a ConfigError. The checks below name the key; the last resort turns a value
    of a wrong type met deeper down into a ConfigError too, so a hand-edited config.json never ends in a
    traceback (tests/cli/test_fuzz.py).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"config.json must hold a JSON object, not {type(raw).__name__}",
                          "re-download or re-convert the checkpoint")
    try:
        config = _parse_config(raw, ignore_keys, source)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError) as error:
        raise ConfigError(f"config.json has a value of the wrong type or range ({type(error).__name__}: {error})",
                          "compare it with the config.json that came with the checkpoint") from None
    _validate(config)
    return config


def _validate(config: ModelConfig) -> None:
    """Sizes and numbers a model can be built from: each a positive int / finite positive float."""
    for key, value in (("vocab_size", config.vocab_size), ("hidden_size", config.hidden_size),
                       ("intermediate_size", config.intermediate_size), ("num_hidden_layers", config.num_layers),
                       ("num_attention_heads", config.num_heads), ("num_key_value_heads", config.num_kv_heads),
                       ("head_dim", config.head_dim), ("max_position_embeddings", config.max_position_embeddings)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"config.json key {key!r} is {value!r}; it must be a positive integer", "fix config.json")
    if not math.isfinite(config.rms_norm_eps) or config.rms_norm_eps < 0:
        raise ConfigError(f"rms_norm_eps={config.rms_norm_eps!r} must be a finite number >= 0", "fix config.json")
    if not math.isfinite(config.attn_scale) or config.attn_scale <= 0:
        raise ConfigError(f"the attention scale {config.attn_scale!r} (from query_pre_attn_scalar or head_dim) must be "
                          "a finite positive number", "fix query_pre_attn_scalar in config.json")
    for kind, spec in config.rope.items():
        for key in ("theta", "factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            value = getattr(spec, key)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"RoPE {key} of {kind} layers is {value!r}; it must be a finite positive number",
                                  "fix rope_parameters / rope_scaling in config.json")
        for key in ("attention_factor", "mscale", "mscale_all_dim"):
            value = getattr(spec, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ConfigError(f"RoPE {key} of {kind} layers is {value!r}; it must be a finite number or absent",
                                  "fix rope_parameters / rope_scaling in config.json")
        if spec.original_max_position_embeddings is not None and spec.original_max_position_embeddings <= 0:
            raise ConfigError(f"RoPE original_max_position_embeddings={spec.original_max_position_embeddings} "
                              "must be positive", "fix rope_parameters / rope_scaling in config.json")


def check_types(values: dict[str, Any], types: dict[str, str], where: str,
                error: type[MinidecoderError] = ConfigError,
                peer: str = "transformers refuses this value too") -> None:
    """Refuse a value whose JSON type is not the one `types` gives its key (`error`, naming the key, the value
    and `where` it was read, and what transformers makes of it: `peer`). "int" takes no float and no boolean;
    "float" takes an int; "?" takes null."""
    for key, kind in types.items():
        if key not in values:
            continue
        value, nullable = values[key], kind.endswith("?")
        kind = kind.rstrip("?")
        if value is None and nullable:
            continue
        fits = {"int": isinstance(value, int) and not isinstance(value, bool),
                "float": isinstance(value, (int, float)) and not isinstance(value, bool),
                "bool": isinstance(value, bool), "str": isinstance(value, str),
                "dict": isinstance(value, dict), "list": isinstance(value, list)}[kind]
        if not fits:
            given = "null" if value is None else f"{value!r} (a JSON {_json_type(value)})"
            raise error(f"{where}: {key} is {given}; it must be {_TYPE_WORDS[kind]}" + (" or null" if nullable else ""),
                        f"write {key} as {_TYPE_WORDS[kind]}, or use the file that came with the checkpoint; "
                        + peer)


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__)


def _parse_config(raw: dict[str, Any], ignore_keys: tuple[str, ...] | set[str], source: str) -> ModelConfig:
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"unsupported model_type {model_type!r}",
            f"minidecoder supports {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    if model_type == "gemma3":  # multimodal wrapper: only its text part is a decoder
        unknown = set(raw) - _UNDERSTOOD_KEYS - _GEMMA3_OUTER_KEYS - set(ignore_keys)
        if unknown:
            raise ConfigError(f"config.json has keys minidecoder does not understand: {sorted(unknown)}",
                              "if you know they do not change numerics, pass ignore_config_keys=[...] to load() "
                              "(CLI: --ignore-config-key KEY, once per key)")
        check_types(raw, _KEY_TYPES, source)
        text = dict(raw.get("text_config") or {})
        _check_text_config_holds_the_sizes(raw, text, source)
        text["model_type"] = "gemma3_text"
        text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", True))
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype"):
            if key in raw and key not in text:
                text[key] = raw[key]
        config = parse_config(text, ignore_keys, source=f"{source} (its text_config)")
        # v4 checkpoints: `language_model.model.*`; v5: `model.language_model.*`.
        return _replace(config, weight_prefixes=("language_model.", "model.language_model."))

    unknown = set(raw) - _UNDERSTOOD_KEYS - set(ignore_keys)
    if unknown:
        raise ConfigError(
            f"config.json has keys minidecoder does not understand: {sorted(unknown)}",
            "if they do not change the model's numerics, pass ignore_config_keys=[...] to load() "
            "(CLI: --ignore-config-key KEY, once per key); "
            "otherwise this checkpoint needs support that minidecoder lacks",
        )
    check_types(raw, _KEY_TYPES, source)
    raw = {**_FAMILY_DEFAULTS[model_type], **raw}
    is_gemma = model_type.startswith("gemma")
    get = _getter(raw, source)

    hidden_size = get("hidden_size")
    num_heads = get("num_attention_heads")
    # absent or null means the default, as transformers reads them; a 0 is refused, not read as absent
    num_kv_heads = num_heads if raw.get("num_key_value_heads") is None else get("num_key_value_heads")
    head_dim = hidden_size // num_heads if raw.get("head_dim") is None else get("head_dim")
    num_layers = get("num_hidden_layers")
    if num_layers > _MOST_LAYERS:  # refused before per-layer tuples of that length fill the memory
        raise ConfigError(f"config.json key 'num_hidden_layers' is {num_layers}, far past any model of these families "
                          "(Llama 3.1 405B has 126 blocks)", "fix config.json: check num_hidden_layers against the "
                          "weights' model.layers.N names")
    if num_heads % num_kv_heads:
        raise ConfigError(f"num_attention_heads={num_heads} is not a multiple of num_key_value_heads={num_kv_heads}",
                          "fix config.json")

    # Gemma's modeling reads `hidden_activation` alone, the others `hidden_act` alone: each ignores the other key
    act_key, default_act = ("hidden_activation", "gelu_pytorch_tanh") if is_gemma else ("hidden_act", "silu")
    hidden_act = raw.get(act_key) or default_act
    if hidden_act not in ACTIVATIONS:
        raise ConfigError(f"unsupported activation {hidden_act!r} ({act_key})",
                          f"supported: {sorted(ACTIVATIONS)}")
    if raw.get("use_bidirectional_attention"):
        raise ConfigError("use_bidirectional_attention=true (an embedding-model variant) is not supported",
                          "use a causal Gemma3 checkpoint")

    layer_types, sliding_window = _layer_types(raw, model_type, num_layers)
    # A key the family's transformers modeling never reads is not read here either: soft-capping on a Llama (or of
    # a Gemma3's attention scores: its attention never passes the cap on), or biases on a Mistral (its projections
    # have none) or on any MLP but Llama's, run there without them.
    attention_bias = model_type in ("llama", "gemma2", "gemma3_text") and bool(raw.get("attention_bias", False))
    softcaps = {"attn_logit_softcapping": raw.get("attn_logit_softcapping") if model_type == "gemma2" else None,
                "final_logit_softcapping": raw.get("final_logit_softcapping") if is_gemma else None}
    scalar = float(raw.get("query_pre_attn_scalar", 256 if is_gemma else head_dim)) if is_gemma else head_dim
    if not scalar > 0:  # a negative one has a complex square root: refused by name, not by a TypeError later
        raise ConfigError(f"query_pre_attn_scalar is {scalar!r}; the attention scale is its inverse square root, so it "
                          "must be a positive number", "fix query_pre_attn_scalar in config.json (Gemma 2 uses 256)")
    attn_scale = scalar ** -0.5
    return ModelConfig(
        model_type=model_type,
        vocab_size=get("vocab_size"),
        hidden_size=hidden_size,
        intermediate_size=get("intermediate_size"),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=int(num_kv_heads),
        head_dim=int(head_dim),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(raw["max_position_embeddings"]),
        hidden_act="gelu_pytorch_tanh" if hidden_act == "gelu_tanh" else hidden_act,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", is_gemma)),  # transformers' defaults
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=model_type == "llama" and bool(raw.get("mlp_bias", False)),
        norm_unit_offset=is_gemma,
        sandwich_norms=is_gemma,
        scale_embeddings=is_gemma,
        qk_norm=model_type == "gemma3_text",
        attn_scale=attn_scale,
        attn_logit_softcap=_positive_or_none(softcaps["attn_logit_softcapping"], "attn_logit_softcapping"),
        final_logit_softcap=_positive_or_none(softcaps["final_logit_softcapping"], "final_logit_softcapping"),
        layer_types=layer_types,
        sliding_window=sliding_window,
        rope=_rope_specs(raw, model_type, layer_types, source),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id"),
        pad_token_id=raw.get("pad_token_id"),
        checkpoint_dtype=raw.get("dtype") or raw.get("torch_dtype"),
    )


# The sizes transformers' Gemma3Config reads from text_config alone (it ignores them at the top level).
_TEXT_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim")


def _check_text_config_holds_the_sizes(raw: dict[str, Any], text: dict[str, Any], source: str) -> None:
    """A multimodal gemma3 config whose text sizes sit at its top level, not in text_config: say where they
    are and where they belong, rather than that text_config lacks them (the file does hold them)."""
    misplaced = [key for key in _TEXT_SIZES if key in raw and key not in text]
    if misplaced:
        where = "has no text_config" if "text_config" not in raw or not text else "its text_config lacks them"
        raise ConfigError(f"{source} (model_type gemma3, the multimodal wrapper) has {', '.join(misplaced)} at its top "
                          f"level, and {where}: transformers' Gemma3Config reads the text model's sizes from "
                          "text_config only", "move these keys into text_config, or set model_type to gemma3_text "
                          "if this is a text-only model")


# A bound on num_hidden_layers that no checkpoint comes near: 10**9 was taken, and building its per-layer tuples and
# blocks took minutes, or all the memory, before the weights' missing blocks were named.
_MOST_LAYERS = 10_000


def _getter(raw: dict[str, Any], source: str):
    def get(key: str) -> int:
        """A required size or count, present and positive (check_types has already made it a JSON integer)."""
        if key not in raw:
            raise ConfigError(f"{source} lacks required key {key!r}", "fix or re-convert the checkpoint")
        if raw[key] <= 0:  # before `hidden_size // num_heads` divides by it
            raise ConfigError(f"config.json key {key!r} is {raw[key]!r}; it must be a positive integer", "fix config.json")
        return raw[key]
    return get


def _positive_or_none(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive number or null", "fix config.json")
    return float(value)


def _layer_types(raw: dict[str, Any], model_type: str, num_layers: int) -> tuple[tuple[str, ...], int | None]:
    """Which blocks use a sliding window, exactly as each family's transformers config derives it."""
    window = raw.get("sliding_window")
    if model_type == "qwen2" and not raw.get("use_sliding_window", False):
        window = None  # Qwen2 ignores sliding_window unless use_sliding_window is set
    if model_type == "llama":  # transformers' Llama reads neither sliding_window nor layer_types: no block slides
        if window is not None or "sliding_attention" in (raw.get("layer_types") or ()):
            raise ConfigError(f"a llama config with sliding_window={window} or sliding_attention in layer_types: "
                              "transformers' Llama applies neither", "remove them, or set model_type to mistral "
                              "if the model slides")
        return ("full_attention",) * num_layers, None
    if raw.get("layer_types") is not None:  # a mistral config with them is read as Ministral, which honors them
        types = tuple(raw["layer_types"])
        if len(types) != num_layers or set(types) - {"full_attention", "sliding_attention"}:
            raise ConfigError(f"layer_types {list(types)} must name full_attention/sliding_attention for each of "
                              f"{num_layers} layers", "fix config.json")
    elif model_type == "gemma2":  # even blocks slide, odd blocks are global
        types = tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(num_layers))
    elif model_type == "gemma3_text":  # every `pattern`-th block is global (default 6)
        # transformers reads `sliding_window_pattern` alone: the `_sliding_window_pattern` it saves is its private
        # copy, overwritten on reading (a file holding only that one runs with 6 there)
        pattern = int(raw.get("sliding_window_pattern", 6))
        types = tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers))
    elif model_type == "qwen2":  # blocks from max_window_layers on slide, when sliding is on at all
        first = int(raw.get("max_window_layers", 28))
        types = tuple("sliding_attention" if window is not None and i >= first else "full_attention"
                      for i in range(num_layers))
    else:  # mistral: every block slides when a window is set
        types = tuple("sliding_attention" if window is not None else "full_attention" for _ in range(num_layers))
    if "sliding_attention" in types and (window is None or int(window) <= 0):
        raise ConfigError("layer_types has sliding_attention layers but sliding_window is not a positive integer",
                          "set sliding_window in config.json")
    return types, (int(window) if "sliding_attention" in types else None)


def _rope_specs(raw: dict[str, Any], model_type: str, layer_types: tuple[str, ...], source: str) -> dict[str, RopeSpec]:
    """RoPE per layer type, from the keys transformers reads, in its order (`convert_rope_params_to_dict`): a set
    `rope_scaling` wins over `rope_parameters` (both transformers 4 and 5 take it), and a theta the dict lacks
    comes from the top-level `rope_theta` (Gemma3's local layers: `rope_local_base_freq`), else the default."""
    params, scaling = raw.get("rope_parameters"), raw.get("rope_scaling")
    if model_type == "gemma3_text":  # local and global layers rotate with different bases
        if params and not {"full_attention", "sliding_attention"} & set(params):
            raise ConfigError(f"{source}: a gemma3 rope_parameters must be keyed by layer type (full_attention, "
                              f"sliding_attention), not {sorted(params)}; transformers ignores a flat one",
                              'write {"full_attention": {...}, "sliding_attention": {...}}, or put the scaling of '
                              "the global layers in rope_scaling")
        params = params or {}
        check_types(params, {"full_attention": "dict?", "sliding_attention": "dict?"}, f"{source} rope_parameters")
        full = {**(params.get("full_attention") or {}), **(scaling or {})}  # rope_scaling updates the global layers
        full.setdefault("rope_theta", raw.get("rope_theta", 1_000_000.0))
        local = dict(params.get("sliding_attention") or {})
        local.setdefault("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
        return {"full_attention": _rope_spec(full, raw, f"{source} RoPE of full_attention layers"),
                "sliding_attention": _rope_spec(local, raw, f"{source} RoPE of sliding_attention layers")}
    merged = dict(scaling or params or {})
    merged.setdefault("rope_theta", raw.get("rope_theta", 10_000.0))
    # A rope_scaling added to a v5 file (as some model cards say to) hides its rope_parameters, theta included, in
    # transformers too, which the file's author rarely means: said
    if scaling and params and {**merged, **params} != merged:
        warnings.warn(f"{source} holds both rope_scaling and rope_parameters: rope_scaling is read (with rope_theta "
                      f"{merged['rope_theta']}), as transformers does, and rope_parameters {params} ignored; move "
                      "the scaling into rope_parameters (or remove it) to say which is meant")
    spec = _rope_spec(merged, raw, f"{source} {'rope_scaling' if scaling else 'rope_parameters'}")
    return {kind: spec for kind in set(layer_types)}


_ROPE_KEYS = {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings", "low_freq_factor",
              "high_freq_factor", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"}


def _rope_spec(params: dict[str, Any], raw: dict[str, Any], where: str) -> RopeSpec:
    check_types(params, _ROPE_KEY_TYPES, where)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ConfigError(f"unsupported RoPE type {rope_type!r}", f"supported: {sorted(ROPE_TYPES)}")
    unknown = set(params) - _ROPE_KEYS
    if unknown:
        raise ConfigError(f"RoPE parameters have keys minidecoder does not understand: {sorted(unknown)}",
                          "remove them if they are inert, or use a supported rope_type")
    factor = float(params.get("factor", 1.0))
    if rope_type != "default" and "factor" not in params and rope_type != "yarn":
        raise ConfigError(f"RoPE type {rope_type!r} needs a 'factor'", "add it to rope_scaling/rope_parameters")
    original = params.get("original_max_position_embeddings")
    if rope_type in ("llama3", "yarn") and original is None:
        if rope_type == "llama3":
            raise ConfigError("llama3 RoPE needs original_max_position_embeddings", "add it to rope_scaling")
        original = raw.get("max_position_embeddings")
    if rope_type == "llama3" and {"low_freq_factor", "high_freq_factor"} - set(params):
        # not guessed from Llama 3.1's values: transformers refuses such a config too
        raise ConfigError(f"{where}: llama3 RoPE needs low_freq_factor and high_freq_factor",
                          "add both to rope_scaling / rope_parameters (Llama 3.1 uses 1.0 and 4.0)")
    if rope_type == "yarn" and "factor" not in params:
        factor = float(raw.get("max_position_embeddings")) / float(original)
    return RopeSpec(
        rope_type=rope_type,
        theta=float(params.get("rope_theta", 10_000.0)),
        factor=factor,
        original_max_position_embeddings=None if original is None else int(original),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        attention_factor=params.get("attention_factor"),
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        truncate=bool(params.get("truncate", True)),
    )


def _replace(config: ModelConfig, **changes: Any) -> ModelConfig:
    from dataclasses import replace
    return replace(config, **changes)
