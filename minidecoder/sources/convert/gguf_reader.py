"""Open a GGUF file: its metadata as plain Python values, its tensors dequantized one at a time.

References: the GGUF format (ggml `docs/gguf.md`) and gguf-py's `GGUFReader`, which memory-maps the
file, so a tensor's bytes are only read when that tensor is dequantized.
"""
from __future__ import annotations

import functools
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

# the way out of every damaged-GGUF error: its reader's, its metadata's, its vocabulary's, its tensors'
DAMAGED_FIX = ("the file is damaged, incomplete or written by a faulty converter: download it again (compare its "
               "sha256 with the published one) or re-export it")


class _CutShort(ValueError):
    """A read that would run past the end of the file."""


@functools.cache
def _strict_reader_class() -> type:
    """gguf-py's `GGUFReader`, refusing to read past the end of the file.

    gguf-py slices its memory map, and a slice past the end is merely shorter: a string whose length
    field says 2**60 comes back cut, and an array that claims 2**60 values is walked one empty value
    at a time, for ever. Here such a read is an error, and an array's count is checked against the
    bytes left before its first value is read."""
    import gguf  # imported here so that `minidecoder` itself loads without gguf-py
    from gguf import GGUFValueType

    class StrictReader(gguf.GGUFReader):
        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
            end = int(offset) + np.dtype(dtype).itemsize * int(count)
            if end > len(self.data):
                raise _CutShort(f"the file ends at byte {len(self.data)}, but the {int(count)} value(s) at byte "
                                f"{int(offset)} would end at byte {end}")
            return super()._get(offset, dtype, count, override_order)

        def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple:
            if raw_type == GGUFValueType.ARRAY:
                item_type = GGUFValueType(int(self._get(orig_offs, np.uint32)[0]))
                count = int(self._get(orig_offs + 4, np.uint64)[0])
                scalar = self.gguf_scalar_to_np.get(item_type)
                smallest = np.dtype(scalar).itemsize if scalar is not None else 8  # a string: its 8-byte length
                room = len(self.data) - (orig_offs + 12)
                if count * smallest > room:
                    raise _CutShort(f"the array at byte {orig_offs} claims {count} values, more than the "
                                    f"{room} bytes left in the file can hold")
            return super()._get_field_parts(orig_offs, raw_type)

    return StrictReader


class GGUFFile:
    """One GGUF file: `metadata` (key -> value), `architecture`, and `tensor_names` in file order."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"GGUF file not found: {self.path}", "pass the path of an existing .gguf file")
        try:
            self._reader = _strict_reader_class()(self.path)
        except _CutShort as error:
            raise CheckpointError(f"{self.path} is cut short or its header is damaged: {error}", DAMAGED_FIX) from error
        except KeyError as error:  # gguf-py's word for a metadata key written twice
            raise CheckpointError(f"{self.path} is damaged: {error.args[0]}", DAMAGED_FIX) from error
        except (ValueError, OSError, IndexError) as error:
            raise CheckpointError(
                f"{self.path} is not a readable GGUF file ({error})",
                "check that the download is complete (compare its sha256) and that it is a GGUF, not a safetensors or PyTorch file",
            ) from error
        self._check_tensor_layout()
        self.metadata: dict[str, Any] = self._read_metadata()
        self._tensors = {tensor.name: tensor for tensor in self._reader.tensors}
        self.architecture: str = self.metadata.get("general.architecture", "")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise CheckpointError(
                f"{self.path.name}: GGUF architecture {self.architecture!r} is not supported",
                f"convert a GGUF of one of {', '.join(SUPPORTED_ARCHITECTURES)} (Mistral GGUFs use 'llama')",
            )

    def _check_tensor_layout(self) -> None:
        """Every tensor non-empty, at an aligned offset, its bytes shared with no other tensor.

        gguf-py takes each offset on trust; llama.cpp refuses a file whose tensors are not laid end to
        end at aligned offsets. A damaged offset would otherwise convert into silently wrong weights."""
        reader = self._reader
        end, previous = 0, None
        for tensor in sorted(reader.tensors, key=lambda tensor: tensor.data_offset):
            offset = tensor.data_offset - reader.data_offset  # as the file states it, from the data section
            problem = None
            if tensor.n_elements == 0:
                problem = f"has shape {tuple(int(n) for n in reversed(tensor.shape))}, with no values"
            elif offset % reader.alignment:
                problem = f"starts at offset {offset}, not a multiple of the file's alignment {reader.alignment}"
            elif offset < end:
                problem = f"starts at offset {offset}, inside tensor {previous!r} (which ends at {end})"
            if problem:
                raise CheckpointError(f"{self.path} is damaged: tensor {tensor.name!r} {problem}", DAMAGED_FIX)
            end, previous = offset + tensor.n_bytes, tensor.name

    def _read_metadata(self) -> dict[str, Any]:
        """Every key but gguf-py's own `GGUF.*` ones, as plain values. gguf-py decodes strings only here."""
        metadata: dict[str, Any] = {}
        for key, field in self._reader.fields.items():
            if key.startswith("GGUF."):
                continue
            try:
                metadata[key] = field.contents()
            except UnicodeDecodeError as error:
                raise CheckpointError(f"{self.path}: metadata key {key!r} holds text that is not UTF-8 ({error})",
                                      DAMAGED_FIX) from error
        return metadata

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
