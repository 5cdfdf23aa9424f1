"""Write safetensors shards one tensor at a time, so converting never holds the whole model.

The safetensors layout (https://github.com/huggingface/safetensors, "Format"): an 8-byte
little-endian header length N, N bytes of JSON (name -> dtype, shape, [begin, end) byte offsets into
the data, plus `__metadata__`), padded with spaces to a multiple of 8, then the raw little-endian
tensor bytes in offset order. Shapes and dtypes are known before any tensor is dequantized, so each
shard's header is written first and its tensors streamed after it. Above the shard size, files are
named `model-0000i-of-0000n.safetensors` with a `model.safetensors.index.json`, as transformers does.
"""
from __future__ import annotations

import json
import math
import re
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from minidecoder.errors import InputError

DEFAULT_SHARD_SIZE = 5 * 1000**3  # bytes; transformers' long-standing default of "5GB"

_SAFETENSORS_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor to write: its final name, shape and dtype, known before its values are."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def n_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def parse_size(text: str | int) -> int:
    """'500MB', '2GiB', '1.5GB', '1000000' -> bytes: a whole number of bytes, at least 1 (a size that comes to
    0.5 bytes would be truncated to 0, and every tensor written as a shard of its own)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 1:
            raise InputError(f"shard size {text} bytes (--shard-size) is under 1 byte",
                             "give a size of at least 1 byte, e.g. 500MB or 2GiB")
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]I?B|B)?\s*", text.upper()) if isinstance(text, str) else None
    if not match or float(match[1]) <= 0:
        raise InputError(f"shard size {text!r} is not a size", "write it like 500MB, 2GB or 1GiB")
    size = Fraction(match[1]) * _UNITS[match[2] or ""]  # exact: 1.1KB is 1100 bytes, not 1100.0000000000002
    if size < 1:
        raise InputError(f"shard size {text!r} (--shard-size) comes to {float(size):g} bytes, under 1 byte",
                         "give a size of at least 1 byte, e.g. 500MB or 2GiB")
    if size.denominator != 1:
        raise InputError(f"shard size {text!r} (--shard-size) comes to {float(size):g} bytes, not a whole number",
                         f"give a whole number of bytes, e.g. {math.floor(size)}B, or a size like 500MB")
    return int(size)


def plan_shards(specs: list[TensorSpec], shard_size: int) -> list[list[TensorSpec]]:
    """Consecutive groups of tensors, each at most `shard_size` bytes unless one tensor alone is larger."""
    shards: list[list[TensorSpec]] = [[]]
    used = 0
    for spec in specs:
        if shards[-1] and used + spec.n_bytes > shard_size:
            shards.append([])
            used = 0
        shards[-1].append(spec)
        used += spec.n_bytes
    return shards


def _header(specs: list[TensorSpec]) -> bytes:
    entries: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec in specs:
        entries[spec.name] = {
            "dtype": _SAFETENSORS_DTYPE[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.n_bytes],
        }
        offset += spec.n_bytes
    header = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    return header + b" " * (-len(header) % 8)


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: write its bits as int16
        tensor = tensor.view(torch.int16)
    array = tensor.numpy()
    if sys.byteorder == "big":
        array = array.byteswap()
    return memoryview(array).cast("B")


def write_safetensors(
    folder: Path,
    specs: list[TensorSpec],
    produce: Callable[[TensorSpec], torch.Tensor],
    shard_size: int = DEFAULT_SHARD_SIZE,
    on_tensor: Callable[[TensorSpec], None] | None = None,
) -> list[Path]:
    """Write `specs` into `folder` as model.safetensors (or shards plus an index), calling
    `produce(spec)` for each tensor's values just before it is written. Returns the files written."""
    shards = plan_shards(specs, shard_size)
    if len(shards) == 1:
        names = ["model.safetensors"]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    for name, shard in zip(names, shards):
        with open(folder / name, "wb") as file:
            header = _header(shard)
            file.write(struct.pack("<Q", len(header)))
            file.write(header)
            for spec in shard:
                tensor = produce(spec)
                if tuple(tensor.shape) != spec.shape or tensor.dtype != spec.dtype:
                    raise AssertionError(f"{spec.name}: produced {tuple(tensor.shape)} {tensor.dtype}, planned {spec}")
                file.write(_raw_bytes(tensor))
                if on_tensor is not None:
                    on_tensor(spec)
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(spec.n_bytes for spec in specs)},
            "weight_map": {spec.name: name for name, shard in zip(names, shards) for spec in shard},
        }
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        names.append("model.safetensors.index.json")
    return [folder / name for name in names]


def numpy_to_torch(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """float32 numpy -> torch tensor of `dtype` (round-to-nearest-even, as `Tensor.to` does)."""
    return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
