"""Load safetensors weights into a `Decoder`, strictly by Hugging Face parameter names.

The model is built on the meta device (no memory), then each tensor is read from the memory-mapped
file straight onto the target device, cast to the target dtype and assigned; the file's copy is
released before the next tensor is read, so two copies of the weights never coexist. Nothing is
unpickled: safetensors and JSON only.

The only load-time transforms (docs/style.md, rule 2): `lm_head.weight` is tied to the embedding when the
config says so and the checkpoint stores no other head (`_tie_as_transformers`), rotary buffers are
ignored, and a multimodal Gemma3 checkpoint's text weights are found under their prefix (its vision
tower is skipped).
"""
from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from minidecoder.core.config import ModelConfig
from minidecoder.errors import CheckpointError, file_is_there
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
    """`model.safetensors`, else the shards a `model.safetensors.index.json` names (all must exist).

    transformers' order (`modeling_utils._get_resolved_checkpoint_files`, 5.x: the single file is looked
    for first): a folder holding both loads the single file, as transformers does, with a warning naming
    both, since one of them is a stale copy."""
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if file_is_there(single, CheckpointError):
        if index.is_file():
            warnings.warn(f"{folder} holds both {single.name} and {index.name}; {single.name} is loaded, as "
                          f"transformers does; remove the stale one (or the shards) to silence this", stacklevel=3)
        return [single]
    if file_is_there(index, CheckpointError):
        shards = _index_shards(index)
        # a dangling link (or a folder) where a shard belongs is named as such, not as missing
        missing = [name for name in shards if not file_is_there(folder / name, CheckpointError)]
        if missing:
            raise CheckpointError(f"shard(s) named in {index.name} are missing from {folder}: {missing}",
                                  "finish the download (every shard the index lists must be present)")
        return [folder / name for name in shards]
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    hint = (f"this folder has pickle weights ({others[:3]}), which minidecoder never loads: convert them "
            "to safetensors first" if others else "download the weights, or convert a GGUF with `minidecoder convert`")
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {folder}", hint)


def _index_shards(index: Path) -> list[str]:
    """The shard file names an index's `weight_map` ({tensor name: file name}) points to, sorted."""
    fix = "re-download or re-convert the checkpoint (transformers writes {\"weight_map\": {tensor: shard file}})"
    try:
        raw = json.loads(index.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{index} is not valid JSON ({error})", fix) from None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        found = "nothing" if weight_map is None else f"{type(weight_map).__name__} {_clip(weight_map)}"
        raise CheckpointError(f"{index}: weight_map must be a non-empty object of tensor names to shard files; "
                              f"found {found}", fix)
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise CheckpointError(f"{index}: weight_map gives tensor {tensor!r} the shard {_clip(shard)}, not the "
                                  "name of a file in this folder", fix)
    return sorted(set(weight_map.values()))


def _index_names(folder: Path) -> dict[str, str]:
    """{tensor: shard file} from the folder's index; {} without one (called after _index_shards checked it)."""
    index = folder / "model.safetensors.index.json"
    return json.loads(index.read_text(encoding="utf-8"))["weight_map"] if index.is_file() else {}


def _clip(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


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


def load_weights(config: ModelConfig, folder: Path, dtype: torch.dtype, device: torch.device,
                 check_finite: bool = True) -> Decoder:
    """The Decoder of `config` with the weights of `folder`, cast to `dtype` on `device`.

    check_finite: refuse weights holding NaN or inf (after the cast, so a float16 overflow is caught too).
    A NaN can hide behind a one-token prompt (single-key attention never mixes it in) and print finite
    numbers; checking costs one pass over the weights (docs/reliability.md gives the figure).
    """
    config, locations = _tie_as_transformers(config, folder, _locate(config, folder, weight_files(folder)))
    with torch.device("meta"):
        model = Decoder(config)
    expected = {name: p for name, p in model.named_parameters()}
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
    not_finite: list[tuple[str, str, bool]] = []  # (name, what, finite in the file)
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
                    if check_finite and not _all_finite(state[name]):
                        not_finite.append((name, _nonfinite_kind(state[name]), _all_finite(tensor)))
        except CheckpointError:
            raise
        except Exception as error:  # safetensors raises several types for truncated/corrupt files
            raise _read_failure(path, names[0][1], device, error) from None
    if not_finite:
        raise _not_finite_error(folder, dtype, not_finite)
    model.load_state_dict(state, strict=True, assign=True)
    model._inv_freq = {kind: (freq.to(device), scale) for kind, (freq, scale) in _cpu_inv_freq(config).items()}
    return model.eval()


def checkpoint_parameters(config: ModelConfig, folder: Path, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every parameter `load_weights` would give the Decoder of `config`, in the Decoder's
    parameter order, each read alone onto the CPU and cast to `dtype`: a checkpoint compared with a loaded
    model (a sentence-transformers save checks it gives the model back) without a second model in memory."""
    config, locations = _tie_as_transformers(config, folder, _locate(config, folder, weight_files(folder)))
    with torch.device("meta"):
        names = [name for name, _ in Decoder(config).named_parameters()]
    if missing := [name for name in names if name not in locations]:
        raise CheckpointError(f"weights in {folder} do not match the config: missing {_short(missing)}",
                              "check that config.json belongs to these weights")
    with contextlib.ExitStack() as opened:
        handles: dict[Path, Any] = {}
        for name in names:
            path, stored = locations[name]
            if path not in handles:
                handles[path] = opened.enter_context(safe_open(str(path), framework="pt", device="cpu"))
            yield name, handles[path].get_tensor(stored).to(dtype)


def _locate(config: ModelConfig, folder: Path, files: list[Path]) -> dict[str, tuple[Path, str]]:
    """{parameter name: (file, stored name)}: names only (cheap), so a mismatch is reported whole before
    any memory is used. A tensor stored in two files is an error naming both (and the one the index names):
    which copy is the real one is not ours to guess, and taking the last file read chose silently."""
    locations: dict[str, tuple[Path, str]] = {}
    for path in files:
        for stored in _tensor_names(path):
            name = _checkpoint_name(stored, config.weight_prefixes)
            if name is None:
                continue
            if name in locations:
                first = locations[name][0]
                named = _index_names(folder).get(stored)
                said = f"; {folder / 'model.safetensors.index.json'} names {named}" if named else ""
                raise CheckpointError(f"tensor {name} is stored twice, in {first.name} and in {path.name}{said}",
                                      "remove the stale copy (the index names the shard transformers writes it "
                                      "to), or download the checkpoint again")
            locations[name] = (path, stored)
    return locations


def _tie_as_transformers(config: ModelConfig, folder: Path, locations: dict[str, tuple[Path, str]]
                         ) -> tuple[ModelConfig, dict[str, tuple[Path, str]]]:
    """(config, locations) with the head transformers 5 runs. It ties lm_head to the embedding only where the
    checkpoint stores no lm_head.weight or an equal one (`PreTrainedModel.tie_weights`): a tied config whose file
    holds another head runs that head there, with a warning; taking the embedding gave other logits, unsaid."""
    head, embedding = locations.get("lm_head.weight"), locations.get("model.embed_tokens.weight")
    if not config.tie_word_embeddings or head is None:
        return config, locations
    if embedding is not None and not _equal(_read_tensor(*head), _read_tensor(*embedding)):
        warnings.warn(f"{folder}: config.json sets tie_word_embeddings, but {head[0].name} stores an lm_head.weight "
                      "unlike the embedding; that head is used, as transformers 5 does (4 used the embedding): set "
                      "tie_word_embeddings to false to silence this, or remove lm_head.weight if it is stale",
                      stacklevel=4)
        return replace(config, tie_word_embeddings=False), locations
    return config, {name: where for name, where in locations.items() if name != "lm_head.weight"}


def _read_tensor(path: Path, stored: str) -> torch.Tensor:
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return handle.get_tensor(stored)
    except Exception as error:  # safetensors raises several types for truncated/corrupt files
        raise _read_failure(path, stored, torch.device("cpu"), error) from None


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b.to(a.dtype))


def _read_failure(path: Path, stored: str, device: torch.device, error: Exception) -> CheckpointError:
    """Why reading `path` onto `device` failed: the device, when the same tensor reads fine on the CPU (then
    the file is good and must not be deleted), else the file."""
    if device.type != "cpu":
        try:
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                handle.get_tensor(stored)
        except Exception:
            pass
        else:
            return CheckpointError(f"could not load the weights onto device {str(device)!r}: {error}",
                                   f"the file {path.name} is fine (it reads on the CPU): check that {device.type} "
                                   "works in this PyTorch, or use --device cpu (device='cpu')")
    return CheckpointError(f"could not read {path}: {error}",
                           "the file is truncated or corrupt: download or convert it again")


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite. The float32 sum is one read with no temporary (isfinite().all() first
    writes a boolean tensor the size of the weight) and is NaN or inf whenever a value is; only a finite
    tensor whose sum overflows (no real weight does) takes the exact check."""
    return bool(torch.isfinite(tensor.sum(dtype=torch.float32))) or bool(torch.isfinite(tensor).all())


def _nonfinite_kind(tensor: torch.Tensor) -> str:
    nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
    return " and ".join(part for part in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if part)


def _not_finite_error(folder: Path, dtype: torch.dtype, found: list[tuple[str, str, bool]]) -> CheckpointError:
    names = [f"{name} ({what})" for name, what, _ in found]
    if all(finite_in_file for _, _, finite_in_file in found):
        return CheckpointError(f"weights of {folder} overflow {str(dtype).replace('torch.', '')}: "
                               f"{_short(names, 6)} become inf", "load them in bfloat16 or float32 (--dtype)")
    return CheckpointError(f"weights of {folder} hold NaN or inf: {_short(names, 6)}",
                           "the checkpoint is corrupt (a damaged file or a diverged training run): download or "
                           "convert it again, or use another checkpoint; load(..., check_finite=False) loads it "
                           "anyway, to inspect it")


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
