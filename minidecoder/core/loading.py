"""Load safetensors weights into a `Decoder`, strictly by Hugging Face parameter names.

The model is built on the meta device (no memory), then each tensor is read from the memory-mapped
file straight onto the target device, cast to the target dtype and assigned; the file's copy is
released before the next tensor is read, so two copies of the weights never coexist. Nothing is
unpickled: safetensors and JSON only.

The only load-time transforms (style rule 2): `lm_head.weight` is tied to the embedding when the
config says so, rotary buffers are ignored, and a multimodal Gemma3 checkpoint's text weights are
found under their prefix (its vision tower is skipped).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from minidecoder.core.config import ModelConfig
from minidecoder.errors import CheckpointError
from minidecoder.core.model import Decoder

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise CheckpointError(f"unsupported dtype {dtype}", "use float32, bfloat16 or float16")
        return dtype
    if dtype not in DTYPES:
        raise CheckpointError(f"unsupported dtype {dtype!r}", f"use one of {sorted(set(DTYPES))}")
    return DTYPES[dtype]


def weight_files(folder: Path) -> list[Path]:
    """`model.safetensors`, or the shards a `model.safetensors.index.json` names (all must exist)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise CheckpointError(f"{index} is not a valid safetensors index ({error})",
                                  "re-download or re-convert the checkpoint") from None
        shards = sorted(set(weight_map.values()))
        missing = [name for name in shards if not (folder / name).is_file()]
        if missing:
            raise CheckpointError(f"shard(s) named in {index.name} are missing from {folder}: {missing}",
                                  "finish the download (every shard the index lists must be present)")
        return [folder / name for name in shards]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    hint = (f"this folder has pickle weights ({others[:3]}), which minidecoder never loads: convert them "
            "to safetensors first" if others else "download the weights, or convert a GGUF with `minidecoder convert`")
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {folder}", hint)


def _checkpoint_name(name: str, prefixes: tuple[str, ...]) -> str | None:
    """Map a stored tensor name to this model's parameter name; None = skip it."""
    if name.endswith(_IGNORED_SUFFIXES) or name.startswith(_VISION_PREFIXES):
        return None
    for prefix in prefixes:
        if prefix == "model.language_model." and name.startswith(prefix):  # transformers 5 layout
            return "model." + name[len(prefix):]
        if prefix == "language_model." and name.startswith(prefix):  # transformers 4 layout
            return name[len(prefix):]
    return name


def load_weights(config: ModelConfig, folder: Path, dtype: torch.dtype, device: torch.device) -> Decoder:
    with torch.device("meta"):
        model = Decoder(config)
    expected = {name: p for name, p in model.named_parameters()}
    files = weight_files(folder)

    # First pass: names only (cheap), so that a mismatch is reported whole, before any memory is used.
    locations: dict[str, tuple[Path, str]] = {}
    for path in files:
        for stored in _tensor_names(path):
            name = _checkpoint_name(stored, config.weight_prefixes)
            if name is None or (name == "lm_head.weight" and config.tie_word_embeddings):
                continue  # a tied checkpoint may still store lm_head; the embedding is the source of truth
            locations[name] = (path, stored)
    missing = sorted(set(expected) - set(locations))
    unexpected = sorted(set(locations) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"weights in {folder} do not match the config ({config.model_type}, {config.num_layers} layers):"
            f"\n  missing: {_short(missing)}\n  unexpected: {_short(unexpected)}",
            "check that config.json belongs to these weights (e.g. attention_bias, tie_word_embeddings, "
            "num_hidden_layers)",
        )

    state = {}
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for name, (path, stored) in locations.items():
        by_file.setdefault(path, []).append((name, stored))
    for path, names in by_file.items():
        try:
            with safe_open(str(path), framework="pt", device=str(device)) as handle:
                for name, stored in names:
                    tensor = handle.get_tensor(stored)
                    _check_tensor(name, tensor, expected[name], path)
                    state[name] = tensor.to(dtype)  # the file's copy is dropped here (memory-mapped)
        except CheckpointError:
            raise
        except Exception as error:  # safetensors raises several types for truncated/corrupt files
            raise CheckpointError(f"could not read {path}: {error}",
                                  "the file is truncated or corrupt: download or convert it again") from None
    model.load_state_dict(state, strict=True, assign=True)
    model._inv_freq = {kind: (freq.to(device), scale) for kind, (freq, scale) in _cpu_inv_freq(config).items()}
    return model.eval()


def _tensor_names(path: Path) -> list[str]:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return list(handle.keys())
    except Exception as error:
        raise CheckpointError(f"{path} is not a readable safetensors file: {error}",
                              "the file is truncated or corrupt: download or convert it again") from None


def _check_tensor(name: str, tensor: torch.Tensor, param: torch.nn.Parameter, path: Path) -> None:
    if tuple(tensor.shape) != tuple(param.shape):
        raise CheckpointError(f"tensor {name} in {path.name} has shape {tuple(tensor.shape)}, "
                              f"the config implies {tuple(param.shape)}",
                              "config.json and the weights disagree: use the config that came with them")
    if not tensor.dtype.is_floating_point:
        raise CheckpointError(f"tensor {name} in {path.name} has dtype {tensor.dtype}, expected a float type",
                              "quantized safetensors are not supported; dequantize (or convert the GGUF) first")


def _cpu_inv_freq(config: ModelConfig) -> dict[str, tuple[torch.Tensor, float]]:
    from minidecoder.core.rope import inverse_frequencies
    with torch.device("cpu"):
        return {kind: inverse_frequencies(spec, config.head_dim, config.max_position_embeddings)
                for kind, spec in config.rope.items()}


def _short(names: list[str], limit: int = 12) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
