"""GGUF file -> a Hugging Face-style folder, written atomically.

    config.json               hf_config.build_config
    tokenizer.json            gguf_tokenizer.build_tokenizer
    tokenizer_config.json     gguf_tokenizer.build_tokenizer
    generation_config.json    config.json's bos and pad ids, and llama.cpp's end-of-generation ids as eos_token_id
    model.safetensors         one tensor at a time: dequantize -> undo llama.cpp -> cast -> write
    source.json               source file, its sha256, converter version; written last

Everything goes into a hidden temporary folder beside the output, renamed into place at the end, so
an interrupted conversion never leaves a folder that looks complete; the folder is locked while it is
written, so one left by a killed run is removed by the next (`output_files.staging`).

source.json is also the converter's mark on its folders: `overwrite` replaces only a folder that has
it and holds nothing else than what the converter writes (`why_not_replaceable`), so a folder of the
user's, or one holding the input GGUF, is never deleted.
"""
from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from minidecoder.sources.convert.gguf_reader import DAMAGED_FIX, GGUFFile
from minidecoder.sources.convert.gguf_tokenizer import build_tokenizer, end_of_generation_ids
from minidecoder.sources.convert.hf_config import build_config
from minidecoder.sources.convert.names import expected_hf_names, hf_name
from minidecoder.sources.convert.transforms import undo_llama_cpp
from minidecoder.sources.convert.writer import DEFAULT_SHARD_SIZE, TensorSpec, numpy_to_torch, write_safetensors
from minidecoder.errors import CheckpointError, InputError, OutputError, describe_unusable_file, is_whole_number
from minidecoder.output_files import (check_writable_folder, remove_stale_partials, sha256_file, staging,
                                      swap_into_place, write_failure)

if TYPE_CHECKING:
    from tqdm import tqdm

# Bump when the output of a conversion changes, so that registry folders are rebuilt.
# 2: generation_config.json, so that generate stops where llama.cpp does (a chat turn's end, not only the EOS).
CONVERTER_VERSION = "2"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CONVERTER = "minidecoder.sources.convert"  # source.json's "converter": the mark of a folder this code made
# Every name a conversion writes; anything else in a folder is someone else's.
_WRITTEN = re.compile(r"(config|generation_config|tokenizer|tokenizer_config|source)\.json"
                      r"|model\.safetensors(\.index\.json)?"
                      r"|model-\d{5}-of-\d{5}\.safetensors")


def _tensor_order(name: str) -> tuple[int, int, str]:
    """Embedding first, then layers in numeric order, then the final norm and head."""
    if match := re.match(r"model\.layers\.(\d+)\.", name):
        return (1, int(match[1]), name)
    return (0 if "embed_tokens" in name else 2, 0, name)


def convert_gguf(
    gguf_path: str | Path,
    output_dir: str | Path,
    *,
    dtype: str = "float32",
    shard_size: int = DEFAULT_SHARD_SIZE,
    overwrite: bool = False,
    progress: bool = True,
    source_sha256: str | None = None,
) -> Path:
    """Convert `gguf_path` into the folder `output_dir` and return it.

    `source_sha256`, when the caller has just verified it, saves hashing the file again.
    """
    gguf_path, output_dir = Path(gguf_path), Path(output_dir)
    if dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r} is not supported", f"use one of {', '.join(DTYPES)}")
    if not is_whole_number(shard_size, 1):  # 0: a shard per tensor
        raise InputError(f"shard_size={shard_size!r} is not a whole number of bytes of at least 1",
                         "e.g. shard_size=2_000_000_000 (--shard-size 2GB)")
    shard_size = int(shard_size)  # a NumPy integer is one too
    if not gguf_path.is_file():
        raise InputError(f"GGUF file {gguf_path} {describe_unusable_file(gguf_path)}", "give the path of a .gguf file")
    if os.path.lexists(output_dir):
        if not overwrite:
            raise InputError(f"output folder {output_dir} already exists", "pass --overwrite (overwrite=True) or choose another folder")
        _check_replaceable(output_dir, gguf_path)
    check_writable_folder(output_dir.parent, f"the folder for {output_dir}")  # before reading a large GGUF
    remove_stale_partials(output_dir)  # what a killed conversion into the same folder left
    torch_dtype = DTYPES[dtype]

    gguf = GGUFFile(gguf_path)
    config = build_config(gguf, dtype)
    architecture = gguf.architecture
    num_heads, num_kv_heads = config["num_attention_heads"], config["num_key_value_heads"]

    gguf_of = _hf_to_gguf_names(gguf, config)
    _check_shapes(gguf, gguf_of, config)
    specs = sorted(
        (TensorSpec(hf, gguf.shape(gguf_name), torch_dtype) for hf, gguf_name in gguf_of.items()),
        key=lambda spec: _tensor_order(spec.name),
    )

    def produce(spec: TensorSpec) -> torch.Tensor:
        gguf_name = gguf_of[spec.name]
        values = undo_llama_cpp(architecture, gguf_name, gguf.dequantize(gguf_name), num_heads, num_kv_heads)
        return numpy_to_torch(values, torch_dtype)

    try:
        tokenizer, tokenizer_config = build_tokenizer(gguf.metadata, architecture)
        stop_ids = end_of_generation_ids(gguf.metadata)
    except CheckpointError as error:  # both see the metadata only: name the file here
        raise CheckpointError(f"{gguf_path.name}: {error.problem}", error.fix) from None
    # The GGUF's context_length, where minidecoder.load and transformers' tokenizers look for it.
    tokenizer_config["model_max_length"] = config["max_position_embeddings"]
    if tokenizer.get_vocab_size(with_added_tokens=True) > config["vocab_size"]:
        raise CheckpointError(
            f"{gguf_path.name}: tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, the embedding {config['vocab_size']} rows",
            "the GGUF's vocabulary and weights disagree; re-export it",
        )

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staging(output_dir, folder=True) as partial:
            _write_json(partial / "config.json", config)
            try:
                tokenizer.save(str(partial / "tokenizer.json"))
            except Exception as error:  # tokenizers reports a failed write as a plain Exception: "... (os error 28)"
                code = re.search(r"\(os error (\d+)\)", str(error))
                raise (OSError(int(code[1]), os.strerror(int(code[1])), str(partial / "tokenizer.json")) if code
                       else OSError(str(error))) from None
            del tokenizer  # a large vocabulary's Python objects are not needed while tensors stream
            _write_json(partial / "tokenizer_config.json", tokenizer_config)
            _write_json(partial / "generation_config.json", _generation_config(config, stop_ids))
            bar = _progress_bar(len(specs), f"converting {gguf_path.name}", progress)
            try:
                write_safetensors(partial, specs, produce, shard_size, on_tensor=lambda spec: bar.update(1) if bar else None)
            finally:
                if bar is not None:
                    bar.close()
            source = {
                "source_file": gguf_path.name,
                "source_sha256": source_sha256 or sha256_file(gguf_path),
                "source_size": gguf_path.stat().st_size,
                "converter": CONVERTER,
                "converter_version": CONVERTER_VERSION,
                "gguf_architecture": architecture,
                "quantization": dict(sorted(Counter(gguf.quant_type(n) for n in gguf.tensor_names).items())),
                "dtype": dtype,
            }
            _write_json(partial / "source.json", source)  # last: its presence marks a finished folder
            _move_into_place(partial, output_dir, overwrite, gguf_path)
    except OSError as error:  # a full disk, a folder made read-only meanwhile: say so, leave nothing behind
        cause, way_out = write_failure(error, output_dir)
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            way_out += " (the weights take about as much as the GGUF dequantized to --dtype)"
        raise OutputError(f"writing the converted model to {output_dir} failed: {cause}; nothing of it was kept",
                          f"{way_out}, or choose another folder, then run the same command again") from None
    return output_dir


def _generation_config(config: dict[str, Any], stop_ids: list[int]) -> dict[str, Any]:
    """What transformers' GGUF loader makes of the file (`GenerationConfig.from_model_config`: config.json's bos, eos
    and pad ids), the eos widened to llama.cpp's end-of-generation ids: transformers' `generate`, and minidecoder's,
    then stop at a turn's end as llama.cpp and the original checkpoints do (Gemma 3 at <end_of_turn>, not <eos> alone)."""
    generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if key in config}
    if stop_ids:
        generation["eos_token_id"] = stop_ids
    return generation


def _hf_to_gguf_names(gguf: GGUFFile, config: dict[str, Any]) -> dict[str, str]:
    """{transformers name: GGUF name} for every tensor, checked to be exactly the set the config implies."""
    architecture = gguf.architecture
    names = {hf_name(architecture, gguf_name): gguf_name for gguf_name in gguf.tensor_names}
    if architecture == "qwen2":
        biased: tuple[str, ...] = ("q_proj", "k_proj", "v_proj")
    elif config.get("attention_bias"):
        biased = ("q_proj", "k_proj", "v_proj", "o_proj")  # transformers' attention_bias covers all four
    else:
        biased = ()
    expected = expected_hf_names(architecture, config["num_hidden_layers"], config["tie_word_embeddings"], biased)
    if missing := sorted(expected - set(names)):
        raise CheckpointError(
            f"{gguf.path.name} lacks {len(missing)} tensors a {architecture} model of this shape needs, e.g. {missing[:3]}",
            "the file is truncated or not a plain dense model; re-download it and compare its sha256",
        )
    if unexpected := sorted(set(names) - expected):
        raise CheckpointError(
            f"{gguf.path.name} has tensors a {architecture} model of this shape does not, e.g. {unexpected[:3]}",
            "check the metadata (block_count, head counts) against the tensors; the file may be corrupt",
        )
    return names


def _expected_shape(name: str, config: dict[str, Any]) -> tuple[int, ...]:
    """The shape transformers gives parameter `name` under `config` (vocab_size is the embedding's own)."""
    hidden, ffn = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])  # Qwen2's config has none
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes = {
        "embed_tokens": (config["vocab_size"], hidden), "lm_head": (config["vocab_size"], hidden),
        "q_proj": (q, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden), "o_proj": (hidden, q),
        "gate_proj": (ffn, hidden), "up_proj": (ffn, hidden), "down_proj": (hidden, ffn),
        "q_norm": (head_dim,), "k_norm": (head_dim,),
    }
    module, kind = name.split(".")[-2:]
    shape = shapes.get(module, (hidden,))  # every other parameter is a norm over the hidden size
    return shape[:1] if kind == "bias" else shape


def _check_shapes(gguf: GGUFFile, gguf_of: dict[str, str], config: dict[str, Any]) -> None:
    """Every tensor shaped as the metadata implies, before any is dequantized: otherwise a damaged
    head count fails deep in the q/k unpermutation as a numpy error, or converts into a folder that
    only `minidecoder.load` refuses, blaming its config.json."""
    for hf, gguf_name in gguf_of.items():
        if (shape := gguf.shape(gguf_name)) != (expected := _expected_shape(hf, config)):
            raise CheckpointError(
                f"{gguf.path.name}: tensor {gguf_name!r} has shape {shape}, but the metadata (hidden size, head "
                f"counts, feed-forward length) implies {expected}",
                DAMAGED_FIX,
            )


def read_source_info(folder: str | Path) -> dict[str, Any] | None:
    """A converted folder's source.json, or None when the folder is absent or unfinished."""
    path = Path(folder) / "source.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def why_not_replaceable(folder: Path, keep: Path | None = None) -> str | None:
    """None when `folder` may be deleted to make way for a conversion: an empty folder, or one this
    converter made (source.json says so) that holds only files it writes and not `keep` (the input).
    Otherwise what was found, as the end of a sentence that starts with the folder's name."""
    if folder.is_symlink() or not folder.is_dir():
        return "is a symbolic link" if folder.is_symlink() else "is a file, not a folder"
    if keep is not None and Path(os.path.realpath(keep)).is_relative_to(os.path.realpath(folder)):
        return f"holds the GGUF being converted ({Path(keep).name})"
    entries = sorted(os.listdir(folder))
    if not entries:
        return None
    info = read_source_info(folder)
    if info is None or info.get("converter") != CONVERTER:
        return (f"was not made by `minidecoder convert` (it has no source.json of minidecoder's; it holds "
                f"{_names(entries)})")
    foreign = [name for name in entries if not _WRITTEN.fullmatch(name) or not (folder / name).is_file()]
    if foreign:
        return f"holds files `minidecoder convert` did not write: {_names(foreign)}"
    return None


def _check_replaceable(folder: Path, gguf_path: Path) -> None:
    if problem := why_not_replaceable(folder, gguf_path):
        raise InputError(f"output folder {folder} {problem}; --overwrite only replaces a folder that "
                         "`minidecoder convert` made, and deletes nothing else",
                         "choose a new output folder (e.g. one inside it: OUTPUT_DIR/converted), or move "
                         "what you want to keep out of it first")


def _names(entries: list[str], limit: int = 5) -> str:
    shown = ", ".join(entries[:limit])
    return shown + (f" and {len(entries) - limit} more" if len(entries) > limit else "")


def _move_into_place(partial: Path, output_dir: Path, overwrite: bool, gguf_path: Path) -> None:
    if os.path.lexists(output_dir):
        if not overwrite:
            raise InputError(f"output folder {output_dir} appeared while converting",
                             "pass --overwrite or choose another folder")
        _check_replaceable(output_dir, gguf_path)  # again: files may have appeared while converting
    swap_into_place(partial, output_dir)  # the old folder is set aside first, so a failure never loses both


def _progress_bar(total: int, description: str, enabled: bool) -> tqdm | None:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="tensor", file=sys.stderr, dynamic_ncols=True)
