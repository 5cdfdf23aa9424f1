"""The GGUF converter on tiny GGUF files written in the session (tests/tiny_gguf.py): no downloads.

The oracle is transformers' own GGUF loader (`from_pretrained(..., gguf_file=...)`), which
dequantizes with the same gguf-py code, so weights must be bit-identical.
"""
from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from minidecoder.sources.convert import convert_gguf, parse_size
from minidecoder.sources.convert.gguf_tokenizer import bytes_to_unicode
from minidecoder.sources.convert.hf_config import _gemma_layer_types, float32_value
from minidecoder.sources.convert.names import hf_name
from minidecoder.sources.convert.transforms import permute_for_ggml, unpermute_from_ggml
from minidecoder.errors import CheckpointError, InputError, MinidecoderError
from tiny_gguf import write_tiny_gguf

transformers = pytest.importorskip("transformers")

SAMPLES = ["the capital of the cap", "  the\n\n x\tab", "héllo wörld 東京 🙂", "<|im_start|>the<|im_end|>", ""]


def _load_state(folder: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def _oracle_model(gguf_path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )


# ---- names and layout transforms --------------------------------------------------------------

@pytest.mark.parametrize("arch, gguf_name, expected", [
    ("llama", "token_embd.weight", "model.embed_tokens.weight"),
    ("llama", "output.weight", "lm_head.weight"),
    ("llama", "output_norm.weight", "model.norm.weight"),
    ("llama", "blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"),
    ("llama", "blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"),
    ("llama", "blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"),
    ("llama", "blk.3.attn_norm.weight", "model.layers.3.input_layernorm.weight"),
    ("qwen2", "blk.1.attn_k.bias", "model.layers.1.self_attn.k_proj.bias"),
    ("qwen2", "blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
    ("gemma2", "blk.2.ffn_norm.weight", "model.layers.2.pre_feedforward_layernorm.weight"),
    ("gemma2", "blk.2.post_attention_norm.weight", "model.layers.2.post_attention_layernorm.weight"),
    ("gemma3", "blk.2.post_ffw_norm.weight", "model.layers.2.post_feedforward_layernorm.weight"),
    ("gemma3", "blk.5.attn_q_norm.weight", "model.layers.5.self_attn.q_norm.weight"),
    ("gemma3", "blk.5.attn_k_norm.weight", "model.layers.5.self_attn.k_norm.weight"),
])
def test_gguf_names_map_to_transformers_names(arch: str, gguf_name: str, expected: str) -> None:
    assert hf_name(arch, gguf_name) == expected


@pytest.mark.parametrize("arch, gguf_name", [
    ("llama", "blk.0.attn_q_norm.weight"),  # a gemma3 tensor in a llama file
    ("gemma2", "blk.0.attn_k_norm.weight"),
    ("llama", "blk.0.ffn_gate_exps.weight"),
    ("llama", "rope_freqs.weight"),
])
def test_unknown_tensor_names_are_errors(arch: str, gguf_name: str) -> None:
    with pytest.raises(CheckpointError, match="has no counterpart") as caught:
        hf_name(arch, gguf_name)
    assert gguf_name in str(caught.value)
    if gguf_name == "rope_freqs.weight":
        assert "Llama 3.1" in str(caught.value)


@pytest.mark.parametrize("n_heads, head_dim, cols", [(4, 8, 5), (1, 64, 3), (3, 2, 1), (2, 16, 0)])
def test_permutation_round_trip_and_matches_transformers(n_heads: int, head_dim: int, cols: int) -> None:
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    rng = np.random.default_rng(0)
    shape = (n_heads * head_dim, cols) if cols else (n_heads * head_dim,)  # cols 0: a bias
    original = rng.standard_normal(shape).astype(np.float32)
    stored = permute_for_ggml(original, n_heads)
    assert np.array_equal(unpermute_from_ggml(stored, n_heads), original)
    assert np.array_equal(LlamaTensorProcessor()._reverse_permute_weights(stored, n_heads, n_heads), original)
    if head_dim > 2:  # the permutation really moves rows, so undoing it matters
        assert not np.array_equal(stored, original)


def test_float32_values_are_written_shortest() -> None:
    assert float32_value(9.999999747378752e-06) == 1e-05
    assert float32_value(9.999999974752427e-07) == 1e-06
    assert np.float32(float32_value(0.1234567)) == np.float32(0.1234567)


def test_gemma_layer_types() -> None:
    def gguf(arch: str) -> SimpleNamespace:  # what _gemma_layer_types reads of a GGUFFile
        return SimpleNamespace(architecture=arch, path=Path("m.gguf"))

    assert _gemma_layer_types(gguf("gemma3"), 7, None) == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
    assert _gemma_layer_types(gguf("gemma2"), 4, None) == ["sliding_attention", "full_attention"] * 2
    assert _gemma_layer_types(gguf("gemma3"), 3, [True, False, True]) == ["sliding_attention", "full_attention", "sliding_attention"]
    assert _gemma_layer_types(gguf("gemma3"), 4, 2) == ["sliding_attention", "full_attention"] * 2


# ---- whole conversions against transformers' GGUF loader ---------------------------------------

@pytest.mark.parametrize("arch, tie", [("llama", True), ("llama", False), ("qwen2", False), ("gemma2", True), ("gemma3", True)])
def test_tiny_conversion_matches_transformers_gguf_loader(tmp_path: Path, arch: str, tie: bool) -> None:
    gguf_path = tmp_path / f"{arch}.gguf"
    original = write_tiny_gguf(gguf_path, arch, tie=tie, quant="Q8_0")
    folder = convert_gguf(gguf_path, tmp_path / "out", progress=False)
    mine = _load_state(folder)
    oracle = _oracle_model(gguf_path)
    expected = oracle.state_dict()
    if tie:
        assert "lm_head.weight" not in mine
        expected.pop("lm_head.weight")
    assert set(mine) == set(expected)
    for name, tensor in mine.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, expected[name]), name
    # F32 norms come back as the original weights (Gemma's +1 undone up to one rounding step)
    for name, values in original.items():
        if "norm" in name:
            assert np.abs(mine[name].numpy() - values).max() <= 1e-7, name

    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is tie
    oracle_config = oracle.config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings", "sliding_window"):
        if key in config:
            assert config[key] == getattr(oracle_config, key), key
    assert np.float32(config["rms_norm_eps"]) == np.float32(oracle_config.rms_norm_eps)
    if arch in ("llama", "qwen2"):
        # Same config as transformers': transformers on the converted folder gives the same logits.
        assert config["rope_parameters"] == oracle_config.rope_parameters
        ours = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        ids = torch.tensor([[1, 5, 70, 200, 3, 9]])
        with torch.no_grad():
            assert torch.equal(ours(ids).logits, oracle(ids).logits)


def test_norm_offset_and_permutation_matter(tmp_path: Path) -> None:
    """Undoing llama.cpp's layout changes the weights by far more than rounding: both steps are real."""
    from gguf import GGUFReader

    for arch, name, gguf_name in (("gemma3", "model.layers.0.self_attn.q_norm.weight", "blk.0.attn_q_norm.weight"),
                                  ("llama", "model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight")):
        gguf_path = tmp_path / f"{arch}.gguf"
        write_tiny_gguf(gguf_path, arch)
        folder = convert_gguf(gguf_path, tmp_path / arch, progress=False)
        stored = next(t for t in GGUFReader(gguf_path).tensors if t.name == gguf_name).data
        converted = _load_state(folder)[name].numpy()
        assert np.abs(converted - np.asarray(stored).reshape(converted.shape)).max() > 0.05, arch


def test_every_supported_quant_type(tmp_path: Path) -> None:
    kinds = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
    leaves = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    quant = {f"blk.{i // 7}.{leaves[i % 7]}.weight": kind for i, kind in enumerate(kinds)}
    gguf_path = tmp_path / "quants.gguf"
    write_tiny_gguf(gguf_path, "llama", quant=quant, tie=False)
    folder = convert_gguf(gguf_path, tmp_path / "out", progress=False)
    expected = _oracle_model(gguf_path).state_dict()
    for name, tensor in _load_state(folder).items():
        assert torch.isfinite(tensor).all(), name
        assert torch.equal(tensor, expected[name]), name
    counts = json.loads((folder / "source.json").read_text())["quantization"]
    assert set(kinds) <= set(counts)


def test_unsupported_quant_type_names_type_and_tensor(tmp_path: Path) -> None:
    gguf_path = tmp_path / "iq.gguf"
    write_tiny_gguf(gguf_path, "llama", quant={"blk.1.attn_v.weight": "IQ4_NL"})
    with pytest.raises(CheckpointError) as caught:
        convert_gguf(gguf_path, tmp_path / "out", progress=False)
    assert "IQ4_NL" in str(caught.value) and "blk.1.attn_v.weight" in str(caught.value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["iq.gguf"]  # no half-written folder either


def test_unsupported_architecture_is_refused(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    gguf_path = tmp_path / "phi.gguf"
    writer = GGUFWriter(str(gguf_path), "phi3")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match="'phi3' is not supported"):
        convert_gguf(gguf_path, tmp_path / "out", progress=False)


def test_not_a_gguf_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf at all" * 10)
    with pytest.raises(CheckpointError, match="not a readable GGUF"):
        convert_gguf(bogus, tmp_path / "out", progress=False)


@pytest.mark.parametrize("metadata, message", [
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0}, "RoPE scaling 'yarn'"),
    ({"llama.expert_count": 8}, "mixture-of-experts"),
    ({"llama.attention.some_future_knob": 1.5}, "'llama.attention.some_future_knob'"),
])
def test_metadata_that_changes_numerics_is_refused(tmp_path: Path, metadata: dict, message: str) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama", extra_metadata=metadata)
    with pytest.raises(CheckpointError, match=message):
        convert_gguf(gguf_path, tmp_path / "out", progress=False)


def test_linear_rope_scaling_reaches_config(tmp_path: Path) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "gemma3", extra_metadata={"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0})
    config = json.loads((convert_gguf(gguf_path, tmp_path / "out", progress=False) / "config.json").read_text())
    assert config["rope_parameters"] == {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0},
    }
    assert config["model_type"] == "gemma3_text" and config["query_pre_attn_scalar"] == 64
    assert config["layer_types"] == ["sliding_attention", "sliding_attention"]


def test_missing_tensor_is_refused(tmp_path: Path) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "qwen2", tie=False, drop_tensors=("blk.1.attn_q.bias",))
    with pytest.raises(CheckpointError, match="model.layers.1.self_attn.q_proj.bias"):
        convert_gguf(gguf_path, tmp_path / "out", progress=False)


# ---- tokenizers --------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, sentencepiece", [("qwen2", False), ("gemma3", True), ("llama", True)])
def test_tiny_tokenizer_matches_transformers(tmp_path: Path, arch: str, sentencepiece: bool) -> None:
    from tokenizers import Tokenizer

    gguf_path = tmp_path / f"{arch}.gguf"
    write_tiny_gguf(gguf_path, arch, tie=arch != "qwen2", sentencepiece=sentencepiece)
    folder = convert_gguf(gguf_path, tmp_path / "out", progress=False)
    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    oracle = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=gguf_path.name)
    reloaded = transformers.AutoTokenizer.from_pretrained(str(folder))  # through tokenizer_config.json
    for text in SAMPLES + ["the capital of the cap", " the  capital\nof"]:
        expected = oracle(text).input_ids
        assert ours.encode(text).ids == expected, text
        assert reloaded(text).input_ids == expected, text
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is sentencepiece  # SentencePiece files here ask for BOS, byte-level ones do not
    assert config["bos_token"] == oracle.bos_token and config["eos_token"] == oracle.eos_token


def test_the_byte_alphabet_is_gpt2s_as_tokenizers_spells_it() -> None:
    """The byte -> character table the byte-level vocabularies are read with (and tests/tiny_gguf.py builds
    its vocabulary from) is the one `tokenizers`' ByteLevel writes: the same 256 characters, byte for byte."""
    from tokenizers.pre_tokenizers import ByteLevel

    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and set(table.values()) == set(ByteLevel.alphabet())
    spell = ByteLevel(add_prefix_space=False, use_regex=False)
    # every byte UTF-8 writes (all but C0, C1, F5-FF): each lead byte of 2, 3 and 4 bytes, each continuation byte
    every_byte_utf8_has = [range(0, 0x800), [0x800, *range(0x1000, 0x10000, 0x1000)], range(0x10000, 0x110000, 0x40000),
                           [0x100000]]
    for text in (" é", "a\n\t~", "".join(chr(c) for codes in every_byte_utf8_has for c in codes)):
        assert spell.pre_tokenize_str(text)[0][0] == "".join(table[b] for b in text.encode("utf-8"))


def test_smollm_pre_tokenizer_splits_digits(tmp_path: Path) -> None:
    """llama.cpp's "smollm" pre-tokenizer isolates every digit (SmolLM2's own tokenizer.json does too);
    transformers' GGUF loader does not know it. The tiny vocabulary has a "12" merge to show the difference."""
    from tokenizers import Tokenizer

    gguf_path = tmp_path / "s.gguf"
    write_tiny_gguf(gguf_path, "llama", pre="smollm")
    tokenizer = Tokenizer.from_file(str(convert_gguf(gguf_path, tmp_path / "out", progress=False) / "tokenizer.json"))
    assert tokenizer.encode("a 12").tokens == ["a", "Ġ", "1", "2"]
    write_tiny_gguf(tmp_path / "g.gguf", "llama", pre="gpt2")
    plain = Tokenizer.from_file(str(convert_gguf(tmp_path / "g.gguf", tmp_path / "out2", progress=False) / "tokenizer.json"))
    assert plain.encode("a 12").tokens == ["a", "Ġ1", "2"]


def test_unknown_pre_tokenizer_is_refused(tmp_path: Path) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama", pre="chatglm-bpe")
    with pytest.raises(CheckpointError, match="'chatglm-bpe'"):
        convert_gguf(gguf_path, tmp_path / "out", progress=False)


# ---- generation_config.json: where generation stops --------------------------------------------

# Tokens llama.cpp takes by their text and those it takes but the original checkpoints' generate does not: a
# normal "</s>" (Qwen2.5's 128247), a user-defined one (Gemma 3's 212), fill-in-the-middle tokens (Qwen2.5-Coder's).
DECOYS = (("</s>", 1), ("<|file_sep|>", 3), ("<|fim_pad|>", 3), ("<reponame>", 3))


def _token_ids(folder: Path) -> Callable[[str], int | None]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).token_to_id


def test_generation_config_holds_llama_cpps_end_of_generation_ids(tmp_path: Path) -> None:
    """A converted folder had no generation_config.json, so generate stopped at the GGUF's one EOS where llama.cpp
    also stops at a chat turn's end. Now its eos_token_id is the EOS first, then every control token llama.cpp
    names by its text (<|endoftext|>, <|eot_id|>) and the eot / eom id the file states, whatever its text; bos
    and pad are transformers' own reading of the GGUF."""
    from transformers import GenerationConfig

    gguf_path = tmp_path / "m.gguf"
    extra = (("<|eot_id|>", 3), ("<|stop|>", 3), ("<|eom_id|>", 4), *DECOYS)
    write_tiny_gguf(gguf_path, "qwen2", tie=False, extra_tokens=extra,
                    extra_metadata={"tokenizer.ggml.eom_token_id": 272, "tokenizer.ggml.padding_token_id": 0})
    folder = convert_gguf(gguf_path, tmp_path / "out", progress=False)
    token_id = _token_ids(folder)
    assert token_id("<|stop|>") == 272  # 3 specials, 256 bytes, 12 merges, <|eot_id|>
    written = json.loads((folder / "generation_config.json").read_text())
    # <|im_end|> (the EOS), <|endoftext|>, <|eot_id|>, <|stop|> (the eom); not <|im_start|>, a user-defined
    # <|eom_id|> or any decoy
    assert written["eos_token_id"] == [2, 0, token_id("<|eot_id|>"), 272]
    oracle = _oracle_model(gguf_path).generation_config
    assert (written["bos_token_id"], written["pad_token_id"]) == (oracle.bos_token_id, oracle.pad_token_id) == (1, 0)
    assert oracle.eos_token_id == 2  # transformers' GGUF loader: the EOS alone
    assert GenerationConfig.from_pretrained(folder).eos_token_id == written["eos_token_id"]


def test_a_gemma_folder_stops_at_end_of_turn_as_the_original_checkpoint(tmp_path: Path) -> None:
    """The original gemma-3-270m lists [1, 106]: <eos> and <end_of_turn>. Its GGUF states <eos> alone."""
    gguf_path = tmp_path / "g.gguf"
    write_tiny_gguf(gguf_path, "gemma3", extra_tokens=(("<start_of_turn>", 3), ("<end_of_turn>", 3), *DECOYS))
    folder = convert_gguf(gguf_path, tmp_path / "out", progress=False)
    written = json.loads((folder / "generation_config.json").read_text())
    assert written == {"bos_token_id": 2, "eos_token_id": [1, _token_ids(folder)("<end_of_turn>")], "pad_token_id": 0}


def test_generate_on_a_converted_gemma_stops_at_end_of_turn(tmp_path: Path) -> None:
    """The converted Gemma 3 ran a chat reply on past <end_of_turn> into the next turn; it stops there now, as
    llama.cpp and the original checkpoint stop. <end_of_turn> is made the greedy choice by giving its (tied)
    embedding row twice the row of the token the model picks."""
    import minidecoder

    gguf_path = tmp_path / "g.gguf"
    write_tiny_gguf(gguf_path, "gemma3", extra_tokens=(("<start_of_turn>", 3), ("<end_of_turn>", 3)))
    model = minidecoder.load(convert_gguf(gguf_path, tmp_path / "out", progress=False))
    end_of_turn = model.tokenizer.token_to_id("<end_of_turn>")
    prompt = model.tokenizer.encode("<start_of_turn>user\nthe capital<end_of_turn>\n<start_of_turn>model\n")
    first = minidecoder.generate(model, prompt, max_new_tokens=1)[0]
    with torch.no_grad():
        rows = model.model.embed_tokens.weight
        rows[end_of_turn] = 2 * rows[first]
    assert minidecoder.generate(model, prompt, max_new_tokens=8, stop_at_eos=False)[0] == end_of_turn
    assert minidecoder.generate(model, prompt, max_new_tokens=8) == [end_of_turn]
    assert end_of_turn not in (model.config.eos_token_id, model.tokenizer.eos_id)  # only generation_config.json


# ---- output files: shards, dtypes, atomic writes -----------------------------------------------

def test_sharded_bfloat16_output(tmp_path: Path) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "qwen2", tie=False)
    single = _load_state(convert_gguf(gguf_path, tmp_path / "single", progress=False))
    folder = convert_gguf(gguf_path, tmp_path / "sharded", dtype="bfloat16", shard_size=parse_size("1MB"), progress=False)
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 2 and not (folder / "model.safetensors").exists()
    assert shards[0].name == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(single)
    assert set(index["weight_map"].values()) == {p.name for p in shards}
    assert index["metadata"]["total_size"] == sum(t.numel() * 2 for t in single.values())
    sharded = _load_state(folder)
    for name, tensor in single.items():
        assert sharded[name].dtype == torch.bfloat16
        assert torch.equal(sharded[name], tensor.to(torch.bfloat16)), name
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"


def test_parse_size() -> None:
    assert parse_size("500MB") == 500_000_000
    assert parse_size("2GiB") == 2 * 1024**3
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("123") == 123
    with pytest.raises(InputError):
        parse_size("big")



@pytest.mark.parametrize(("size", "problem"), [
    ("0.5B", "shard size '0.5B' (--shard-size) comes to 0.5 bytes, under 1 byte"),
    ("0.0001KB", "comes to 0.1 bytes, under 1 byte"),
    ("1.5B", "shard size '1.5B' (--shard-size) comes to 1.5 bytes, not a whole number"),
    ("1.0005KB", "comes to 1000.5 bytes, not a whole number"),
    (0, "shard size 0 bytes (--shard-size) is under 1 byte"),
])
def test_a_shard_size_under_one_byte_or_of_a_fraction_of_a_byte_is_refused(tmp_path: Path, size, problem: str) -> None:
    """--shard-size 0.5B passed the `> 0` check and was truncated to 0 bytes: one shard per tensor."""
    with pytest.raises(InputError, match=re.escape(problem)) as error:
        parse_size(size)
    assert "e.g." in error.value.fix
    if isinstance(size, str):
        with pytest.raises(InputError, match=re.escape(problem)):
            _cli(str(tmp_path / "absent.gguf"), str(tmp_path / "out"), "--quiet", "--shard-size", size)
        assert not (tmp_path / "out").exists()
    assert parse_size("1.1KB") == 1100 and parse_size("1B") == 1  # exact: not 1100.0000000000002 truncated


@pytest.mark.parametrize("size", [0, 0.5, True, "2GB"])
def test_convert_gguf_refuses_a_shard_size_that_is_not_whole_bytes(tmp_path: Path, size) -> None:
    """From Python, `convert_gguf(shard_size=0)` wrote one shard per tensor, silently (only the CLI's
    parse_size checked the size)."""
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama")
    with pytest.raises(InputError, match=re.escape(f"shard_size={size!r} is not a whole number of bytes")):
        convert_gguf(gguf_path, tmp_path / "out", shard_size=size, progress=False)
    assert not (tmp_path / "out").exists()


def test_convert_gguf_takes_a_numpy_shard_size_as_a_whole_number_of_bytes(tmp_path: Path) -> None:
    """A size computed with NumPy (`np.int64`) was refused as "not a whole number of bytes"."""
    import numpy as np

    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama")
    plain = convert_gguf(gguf_path, tmp_path / "plain", shard_size=100_000, progress=False)
    numpy = convert_gguf(gguf_path, tmp_path / "numpy", shard_size=np.int64(100_000), progress=False)
    shards = sorted(p.name for p in plain.glob("*.safetensors"))
    assert len(shards) > 1 and shards == sorted(p.name for p in numpy.glob("*.safetensors"))
    assert all((plain / name).read_bytes() == (numpy / name).read_bytes() for name in shards)


def test_existing_output_needs_overwrite(tmp_path: Path) -> None:
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="already exists"):
        convert_gguf(gguf_path, out, progress=False)
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(InputError, match="was not made by `minidecoder convert`.*keep.txt"):  # never deleted
        convert_gguf(gguf_path, out, overwrite=True, progress=False)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    convert_gguf(gguf_path, out, overwrite=True, progress=False)  # an empty folder
    convert_gguf(gguf_path, out, overwrite=True, progress=False)  # a folder the converter made
    assert (out / "source.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "out"]


def test_interrupted_conversion_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import minidecoder.sources.convert.converter as converter

    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama")
    real = converter.undo_llama_cpp
    calls = []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr(converter, "undo_llama_cpp", dying)
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(gguf_path, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_source_json(tmp_path: Path) -> None:
    from minidecoder.sources.convert import CONVERTER_VERSION
    from minidecoder.sources.fetch import sha256_file

    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama", quant="Q4_0")
    source = json.loads((convert_gguf(gguf_path, tmp_path / "out", progress=False) / "source.json").read_text())
    assert source["source_file"] == "m.gguf"
    assert source["source_sha256"] == sha256_file(gguf_path)
    assert source["converter_version"] == CONVERTER_VERSION
    assert source["quantization"]["Q4_0"] > 0 and source["dtype"] == "float32"


# ---- the CLI sub-command -----------------------------------------------------------------------

def _cli(*argv: str) -> int:
    from minidecoder.cli import convert_cmd

    parser = argparse.ArgumentParser()
    convert_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["convert", *argv])
    return args.run(args)


def test_convert_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from minidecoder.cli import SUBCOMMANDS

    assert "convert" in SUBCOMMANDS and "fetch" in SUBCOMMANDS
    gguf_path = tmp_path / "m.gguf"
    write_tiny_gguf(gguf_path, "llama")
    out = tmp_path / "out"
    assert _cli(str(gguf_path), str(out), "--quiet", "--dtype", "float16") == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float16"
    with pytest.raises(MinidecoderError, match="already exists"):
        _cli(str(gguf_path), str(out), "--quiet")
    assert _cli(str(gguf_path), str(out), "--quiet", "--overwrite", "--shard-size", "300KB") == 0
    assert (out / "model.safetensors.index.json").is_file()
