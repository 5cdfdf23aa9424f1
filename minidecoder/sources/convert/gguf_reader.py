"""Open a GGUF file: its metadata as plain Python values, its tensors dequantized one at a time.

References: the GGUF format (ggml `docs/gguf.md`) and gguf-py's `GGUFReader`, which memory-maps the
file, so a tensor's bytes are only read when that tensor is dequantized.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from minidecoder.errors import CheckpointError

# The llama.cpp architectures this converter understands (`general.architecture`). Mistral GGUFs
# are written as "llama".
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "gemma2", "gemma3")

# Quantization types dequantized here, by their gguf-py names. gguf-py can unpack more (IQ*, TQ*,
# MXFP4, ...), but those are untested here, so they stay an explicit error.
SUPPORTED_QUANT_TYPES = (
    "F32", "F16", "BF16",
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
)

_ROW_BLOCK_ELEMENTS = 1 << 22  # values unpacked per step (16 MiB of float32)


class GGUFFile:
    """One GGUF file: `metadata` (key -> value), `architecture`, and `tensor_names` in file order."""

    def __init__(self, path: str | Path) -> None:
        import gguf  # imported here so that `minidecoder` itself loads without gguf-py

        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"GGUF file not found: {self.path}", "pass the path of an existing .gguf file")
        try:
            self._reader = gguf.GGUFReader(self.path)
        except (ValueError, OSError, IndexError) as error:
            raise CheckpointError(
                f"{self.path} is not a readable GGUF file ({error})",
                "check that the download is complete (compare its sha256) and that it is a GGUF, not a safetensors or PyTorch file",
            ) from error
        self.metadata: dict[str, Any] = {
            key: field.contents() for key, field in self._reader.fields.items() if not key.startswith("GGUF.")
        }
        self._tensors = {tensor.name: tensor for tensor in self._reader.tensors}
        self.architecture: str = self.metadata.get("general.architecture", "")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise CheckpointError(
                f"{self.path.name}: GGUF architecture {self.architecture!r} is not supported",
                f"convert a GGUF of one of {', '.join(SUPPORTED_ARCHITECTURES)} (Mistral GGUFs use 'llama')",
            )

    @property
    def tensor_names(self) -> list[str]:
        return list(self._tensors)

    def quant_type(self, name: str) -> str:
        """gguf-py's name for how tensor `name` is stored, e.g. 'Q4_K' or 'F32'."""
        return self._tensors[name].tensor_type.name

    def shape(self, name: str) -> tuple[int, ...]:
        """Tensor `name`'s shape in PyTorch order. GGUF lists dimensions fastest-first, so reversed."""
        return tuple(int(n) for n in reversed(self._tensors[name].shape))

    def dequantize(self, name: str) -> np.ndarray:
        """Tensor `name` as float32 in PyTorch shape. Exact: every supported type unpacks to float32.

        Unpacked a block of rows at a time into the output, so that gguf-py's temporaries stay small
        even for a 150k-row embedding."""
        from gguf.quants import dequantize

        tensor = self._tensors[name]
        quant_type = tensor.tensor_type.name
        if quant_type not in SUPPORTED_QUANT_TYPES:
            raise CheckpointError(
                f"{self.path.name}: tensor {name!r} is stored as {quant_type}, which this converter does not dequantize",
                f"use a GGUF quantized with one of {', '.join(SUPPORTED_QUANT_TYPES)}",
            )
        shape = self.shape(name)
        out = np.empty(shape, dtype=np.float32)  # a fresh array: never a view of the memory-mapped file
        data = tensor.data  # (rows, bytes or values per row) for a matrix
        rows = out.reshape(data.shape[0], -1) if data.ndim >= 2 else out.reshape(1, -1)
        data = data if data.ndim >= 2 else data.reshape(1, -1)
        step = max(1, _ROW_BLOCK_ELEMENTS // rows.shape[1])
        for start in range(0, rows.shape[0], step):
            rows[start:start + step] = dequantize(data[start:start + step], tensor.tensor_type).reshape(-1, rows.shape[1])
        return out
