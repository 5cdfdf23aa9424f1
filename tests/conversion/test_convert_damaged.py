"""Damaged and hostile GGUF files: each is a CheckpointError naming the file and the problem, never a
bare traceback, a hang, a huge allocation or a silently wrong model.

Each case patches the bytes of one tiny GGUF (tests/tiny_gguf.py), located with gguf-py's own reader.
"""
from __future__ import annotations

import json
import re
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gguf import GGUFReader

from minidecoder.errors import CheckpointError
from minidecoder.sources.convert import convert_gguf
from tiny_gguf import write_tiny_gguf

U8, STRING = 0, 8  # GGUFValueType codes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, GGUFReader]:
    """One sound llama GGUF: its bytes, and gguf-py's reading of it to find where things are."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    return path.read_bytes(), GGUFReader(path)


def _value_at(reader: GGUFReader, key: str) -> int:
    """Byte offset of metadata `key`'s value: after its 8-byte length, its name and its 4-byte type."""
    return reader.fields[key].offset + 8 + len(key) + 4


def _tensor_info_at(reader: GGUFReader, name: str, part: int) -> int:
    """Byte offset of part `part` of a tensor's info: 0 name length, 1 name, 2 n_dims, 3 dims, 4 type, 5 offset."""
    field = next(tensor.field for tensor in reader.tensors if tensor.name == name)
    return field.offset + sum(int(p.nbytes) for p in field.parts[:part])


def _patched(raw: bytes, offset: int, fmt: str, *values: int) -> bytes:
    data = bytearray(raw)
    struct.pack_into(fmt, data, offset, *values)
    return bytes(data)


class _Hung(Exception):
    """Not an OSError (as TimeoutError is), so that no `except OSError` can take it for a file error."""


@contextmanager
def _fails_if_longer_than(seconds: int) -> Iterator[None]:
    """A hang becomes a failure instead of stalling the suite."""
    def stop(*_: object) -> None:
        raise _Hung(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _convert(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "damaged.gguf"
    path.write_bytes(data)
    with _fails_if_longer_than(60):
        convert_gguf(path, tmp_path / "out", progress=False)


def _refused(tmp_path: Path, data: bytes, match: str) -> CheckpointError:
    with pytest.raises(CheckpointError, match=match) as caught:
        _convert(tmp_path, data)
    assert "damaged.gguf" in str(caught.value) and "sha256" in str(caught.value)
    assert not (tmp_path / "out").exists()
    return caught.value


# ---- the file's structure ----------------------------------------------------------------------

@pytest.mark.parametrize("where", ["header", "metadata", "tensor info", "tensor data", "last byte"])
def test_a_file_cut_short_says_so(tmp_path: Path, tiny: tuple[bytes, GGUFReader], where: str) -> None:
    raw, reader = tiny
    first_info = min(tensor.field.offset for tensor in reader.tensors)
    cut = {"header": 12, "metadata": _value_at(reader, "general.name") + 3, "tensor info": first_info + 10,
           "tensor data": reader.data_offset + 100, "last byte": len(raw) - 1}[where]
    _refused(tmp_path, raw[:cut], rf"cut short .*the file ends at byte {cut}\b")


@pytest.mark.parametrize("what", ["key length", "string length", "string array", "byte array", "n_kv", "n_tensors"])
def test_an_absurd_count_fails_at_once(tmp_path: Path, tiny: tuple[bytes, GGUFReader], what: str) -> None:
    """2**60 of anything: refused before it is allocated or walked (a byte array of 2**60 values
    used to be walked one empty value at a time, for ever)."""
    raw, reader = tiny
    tokens, types = _value_at(reader, "tokenizer.ggml.tokens"), _value_at(reader, "tokenizer.ggml.token_type")
    data = {
        "key length": _patched(raw, 24, "<Q", 2**60),
        "string length": _patched(raw, _value_at(reader, "general.name"), "<Q", 2**60),
        "string array": _patched(raw, tokens, "<IQ", STRING, 2**60),
        "byte array": _patched(raw, types, "<IQ", U8, 2**60),
        "n_kv": _patched(raw, 16, "<Q", 2**60),
        "n_tensors": _patched(raw, 8, "<Q", 2**60),
    }[what]
    _refused(tmp_path, data, r"cut short or its header is damaged: the (file ends at byte|array at byte \d+ claims "
                             r"1152921504606846976 values)")


def test_a_metadata_key_written_twice_is_refused(tmp_path: Path, tiny: tuple[bytes, GGUFReader]) -> None:
    raw, reader = tiny
    keys = list(reader.fields)
    start, end = reader.fields["general.name"].offset, reader.fields[keys[keys.index("general.name") + 1]].offset
    n_kv = struct.unpack_from("<Q", raw, 16)[0]
    twice = _patched(raw[:end] + raw[start:end] + raw[end:], 16, "<Q", n_kv + 1)
    _refused(tmp_path, twice, "damaged: Duplicate general.name")


@pytest.mark.parametrize("key", ["general.name", "tokenizer.ggml.tokens"])
def test_metadata_text_that_is_not_utf8_is_refused(tmp_path: Path, tiny: tuple[bytes, GGUFReader], key: str) -> None:
    raw, reader = tiny
    first_text = _value_at(reader, key) + (8 if key == "general.name" else 12 + 8)  # past the lengths (and array header)
    data = bytearray(raw)
    data[first_text] = 0xFF
    _refused(tmp_path, bytes(data), f"metadata key '{key}' holds text that is not UTF-8")


# ---- tensor layout -----------------------------------------------------------------------------

def test_tensors_sharing_bytes_are_refused(tmp_path: Path, tiny: tuple[bytes, GGUFReader]) -> None:
    raw, reader = tiny
    data = _patched(raw, _tensor_info_at(reader, "output_norm.weight", 5), "<Q", 0)  # onto token_embd's bytes
    _refused(tmp_path, data, "tensor 'output_norm.weight' starts at offset 0, inside tensor 'token_embd.weight'")


def test_a_tensor_at_a_misaligned_offset_is_refused(tmp_path: Path, tiny: tuple[bytes, GGUFReader]) -> None:
    raw, reader = tiny
    at = _tensor_info_at(reader, "output_norm.weight", 5)
    offset = struct.unpack_from("<Q", raw, at)[0] + 4  # still inside the file, on float32 boundaries
    _refused(tmp_path, _patched(raw, at, "<Q", offset),
             f"tensor 'output_norm.weight' starts at offset {offset}, not a multiple of the file's alignment 32")


def test_a_tensor_with_a_zero_dimension_is_refused(tmp_path: Path, tiny: tuple[bytes, GGUFReader]) -> None:
    raw, reader = tiny
    data = _patched(raw, _tensor_info_at(reader, "output_norm.weight", 3), "<Q", 0)
    _refused(tmp_path, data, r"tensor 'output_norm.weight' has shape \(0,\), with no values")


# ---- the vocabulary ----------------------------------------------------------------------------

@pytest.mark.parametrize("sentencepiece, key, cut, problem", [
    (True, "tokenizer.ggml.scores", -5, "tokenizer.ggml.scores holds 285 entries for 290 tokens"),
    (True, "tokenizer.ggml.token_type", 3, "tokenizer.ggml.token_type holds 3 entries for 290 tokens"),
    (False, "tokenizer.ggml.token_type", -2, "tokenizer.ggml.token_type holds 269 entries for 271 tokens"),
])
def test_token_types_or_scores_that_disagree_with_the_tokens_are_refused(
    tmp_path: Path, sentencepiece: bool, key: str, cut: int, problem: str
) -> None:
    """Read with zip, a short list used to drop the last tokens' types or scores in silence."""
    from tiny_gguf import byte_level_vocab, sentencepiece_vocab

    values = dict(zip(("tokenizer.ggml.token_type", "tokenizer.ggml.scores"), sentencepiece_vocab()[1:])) if sentencepiece \
        else {"tokenizer.ggml.token_type": byte_level_vocab()[1]}
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", sentencepiece=sentencepiece, extra_metadata={key: values[key][:cut]})
    with pytest.raises(CheckpointError, match=rf"damaged.gguf: the GGUF's {problem}"):
        convert_gguf(path, tmp_path / "out", progress=False)


@pytest.mark.parametrize("merge, problem", [
    ("abc", r"merge 12 \(tokenizer.ggml.merges\) is 'abc', not two pieces and a space"),
    ("zz yy", r"merges \(tokenizer.ggml.merges\) do not fit its vocabulary: .*Token `zz` out of vocabulary"),
])
def test_merges_that_do_not_fit_are_refused(tmp_path: Path, merge: str, problem: str) -> None:
    from tiny_gguf import byte_level_vocab

    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", extra_metadata={"tokenizer.ggml.merges": byte_level_vocab()[2] + [merge]})
    with pytest.raises(CheckpointError, match=rf"damaged.gguf: .*{problem}"):
        convert_gguf(path, tmp_path / "out", progress=False)


@pytest.mark.parametrize("template, found", [(5, "int 5"), ([1, 2], r"list \[1, 2\]")])
def test_a_chat_template_that_is_not_text_is_refused(tmp_path: Path, template: object, found: str) -> None:
    """It was copied into tokenizer_config.json as is, and only loading the converted folder refused it."""
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", extra_metadata={"tokenizer.chat_template": template})
    with pytest.raises(CheckpointError, match=rf"'tokenizer.chat_template' is {found}, not a Jinja template"):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tokens, found", [(None, "missing"), ([], r"list \[\]"), ("hello", "str hello"), ([1, 2], r"list \[1, 2\]")])
def test_a_vocabulary_that_is_not_a_list_of_tokens_is_refused(tokens: object, found: str) -> None:
    from minidecoder.sources.convert.gguf_tokenizer import build_tokenizer

    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm"}
    if tokens is not None:
        metadata["tokenizer.ggml.tokens"] = tokens
    with pytest.raises(CheckpointError, match=rf"vocabulary \(tokenizer.ggml.tokens\) is {found}, not a non-empty list"):
        build_tokenizer(metadata, "llama")


def test_an_unknown_token_id_past_the_vocabulary_is_ignored_like_the_other_special_ids(tmp_path: Path) -> None:
    """As bos/eos/padding ids out of range are, and said as llama.cpp says it (it warns and goes on); it used to
    be an IndexError, and an out-of-range bos id left the tokenizer without its BOS, unsaid."""
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", sentencepiece=True, extra_metadata={"tokenizer.ggml.unknown_token_id": 10**6,
                                                                       "tokenizer.ggml.bos_token_id": 10**6})
    with pytest.warns(UserWarning) as said:
        out = convert_gguf(path, tmp_path / "out", progress=False)
    written = json.loads((out / "tokenizer_config.json").read_text())
    assert written["unk_token"] is None and written["bos_token"] is None and not written["add_bos_token"]
    lines = [str(warning.message) for warning in said]
    for name in ("unknown", "bos"):  # each said once (the SentencePiece model reads the unknown token too)
        assert sum(f"tokenizer.ggml.{name}_token_id 1000000 is past its vocabulary" in line for line in lines) == 1, lines


def test_an_end_of_turn_id_that_is_not_a_token_id_is_refused_and_one_past_the_vocabulary_dropped(
        tmp_path: Path) -> None:
    """tokenizer.ggml.eot_token_id / eom_token_id became stop ids of generation_config.json: one that is not a whole
    number is refused naming the key; one past the vocabulary is said and left out, as llama.cpp goes on without it."""
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", extra_metadata={"tokenizer.ggml.eot_token_id": "<|eot_id|>"})
    with pytest.raises(CheckpointError, match="damaged.gguf: GGUF metadata 'tokenizer.ggml.eot_token_id' is "
                                              "'<|eot_id|>', not a token id"):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    write_tiny_gguf(path, "llama", extra_metadata={"tokenizer.ggml.eom_token_id": 10**6})
    with pytest.warns(UserWarning, match="tokenizer.ggml.eom_token_id 1000000 is past its vocabulary of 271 tokens"):
        out = convert_gguf(path, tmp_path / "out", progress=False)
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [2, 0]


@pytest.mark.parametrize("name", ["bos", "eos", "padding", "unknown"])
@pytest.mark.parametrize("value", ["1", 1.5, True, [1]])
def test_a_special_token_id_that_is_not_a_token_id_is_refused(tmp_path: Path, name: str, value: object) -> None:
    """config.json's bos/eos/pad_token_id and the tokenizer's special tokens are read from these keys: "1", 1.5 and
    True became id 1 in silence (`int`), [1] ended in a bare TypeError."""
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", sentencepiece=True, extra_metadata={f"tokenizer.ggml.{name}_token_id": value})
    key = f"tokenizer.ggml.{name}_token_id"
    with pytest.raises(CheckpointError, match=re.escape(f"damaged.gguf: GGUF metadata {key!r} is {value!r}, not a "
                                                        "token id")):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


# ---- the model's numbers -----------------------------------------------------------------------

@pytest.mark.parametrize("arch, metadata, problem", [
    ("llama", {"llama.attention.head_count": 0}, "'llama.attention.head_count' = 0 is not a whole number of at least 1"),
    ("llama", {"llama.embedding_length": "256"}, "'llama.embedding_length' = '256' is not a whole number"),
    ("llama", {"llama.feed_forward_length": [512, 512]}, r"'llama.feed_forward_length' = \[512, 512\] is not a whole"),
    ("llama", {"llama.attention.layer_norm_rms_epsilon": "x"}, "'llama.attention.layer_norm_rms_epsilon' = 'x' is not a number"),
    ("llama", {"split.count": "2"}, "'split.count' = '2' is not a whole number"),
    ("llama", {"llama.block_count": 2**31}, "llama.block_count = 2147483648, but the file holds only 20 tensors"),
    ("gemma3", {"gemma3.attention.sliding_window_pattern": 0},
     "damaged.gguf: metadata key 'gemma3.attention.sliding_window_pattern' = 0 is neither one flag per layer"),
    ("gemma3", {"gemma3.attention.sliding_window_pattern": [True]},
     "damaged.gguf: metadata key 'gemma3.attention.sliding_window_pattern' has 1 entries for 2 layers"),
])
def test_metadata_numbers_that_cannot_be_are_refused(tmp_path: Path, arch: str, metadata: dict, problem: str) -> None:
    """They used to end in a ZeroDivisionError, TypeError, ValueError, or a list of 2**31 layer names
    (MemoryError), or, for the per-layer feed-forward list, a config.json holding that list."""
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, arch, extra_metadata=metadata)
    with pytest.raises(CheckpointError, match=problem):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("metadata, problem", [
    ({"llama.attention.head_count_kv": 3}, r"tensor 'blk.0.attn_k.weight' has shape \(128, 256\), but the metadata .* implies \(192, 256\)"),
    ({"llama.feed_forward_length": 100}, r"tensor 'blk.0.ffn_gate.weight' has shape \(512, 256\), but the metadata .* implies \(100, 256\)"),
])
def test_tensors_the_metadata_does_not_describe_are_refused(tmp_path: Path, metadata: dict, problem: str) -> None:
    """A head count that does not divide the rows used to fail in the q/k unpermutation as a numpy
    ValueError; other disagreements converted, and only minidecoder.load refused the folder."""
    path = tmp_path / "damaged.gguf"
    write_tiny_gguf(path, "llama", extra_metadata=metadata)
    with pytest.raises(CheckpointError, match=rf"damaged.gguf: {problem}"):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
