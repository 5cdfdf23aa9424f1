"""The real registry models, converted, against transformers' own GGUF loader.

Weights must be bit-identical (both dequantize with gguf-py; the permutation and the norm offset are
exact), transformers on the converted folder must give the very same logits as transformers on the
GGUF (so config.json says what the GGUF says), and token ids must match on a varied sample.
SmolLM2 runs by default; Qwen2.5 and Gemma-3 with `pytest -m slow`.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from real_models import REAL_MODELS, TEXT_SAMPLES, real_files, transformers_from_folder, transformers_from_gguf, \
    transformers_tokenizer_from_gguf

pytest.importorskip("transformers")

# Where the converted tokenizer knowingly differs from transformers' GGUF tokenizer: Qwen2's NFC
# normalizer (restored from its original tokenizer.json) only shows on text that is not NFC already.
NOT_NFC = "cafe\u0301 and A\u030angstro\u0308m"


@pytest.mark.parametrize("name", REAL_MODELS)
def test_conversion_matches_transformers_gguf_loader(name: str) -> None:
    """Bit-identical weights, and transformers builds the same model from our config.json as from the
    GGUF (identical logits). One test, so transformers' slow GGUF load happens once per model."""
    _, folder = real_files(name)
    ours: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        ours.update(load_file(str(file)))
    config = json.loads((folder / "config.json").read_text())
    gguf_model = transformers_from_gguf(name)
    reference = gguf_model.state_dict()
    if config["tie_word_embeddings"]:
        assert "lm_head.weight" not in ours
        assert torch.equal(reference.pop("lm_head.weight"), reference["model.embed_tokens.weight"])
    assert set(ours) == set(reference)
    worst = 0.0
    for key, tensor in ours.items():
        assert tensor.dtype == torch.float32 and tensor.shape == reference[key].shape, key
        worst = max(worst, (tensor - reference[key]).abs().max().item())
    print(f"{name}: {len(ours)} tensors, max abs weight difference {worst}")
    assert worst == 0.0

    folder_model = transformers_from_folder(name)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings",
                "sliding_window", "layer_types", "query_pre_attn_scalar", "rope_parameters",
                "attn_logit_softcapping", "final_logit_softcapping", "bos_token_id", "eos_token_id"):
        if hasattr(gguf_model.config, key):
            assert getattr(folder_model.config, key) == getattr(gguf_model.config, key), key
    assert np.float32(folder_model.config.rms_norm_eps) == np.float32(gguf_model.config.rms_norm_eps)
    ids = torch.tensor([[2, 510, 7321, 293, 44, 9, 1000, 77, 5, 12345 % gguf_model.config.vocab_size]])
    with torch.no_grad():
        difference = (folder_model(ids).logits - gguf_model(ids).logits).abs().max().item()
    print(f"{name}: transformers(folder) vs transformers(GGUF) logits max abs diff {difference}")
    assert difference == 0.0


@pytest.mark.parametrize("name", REAL_MODELS)
def test_token_ids_equal_transformers_gguf_tokenizer(name: str) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    _, folder = real_files(name)
    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    through_config = AutoTokenizer.from_pretrained(str(folder))  # tokenizer.json + tokenizer_config.json
    reference = transformers_tokenizer_from_gguf(name)
    total = 0
    for text in TEXT_SAMPLES:
        expected = reference(text).input_ids
        assert ours.encode(text).ids == expected, text
        assert through_config(text).input_ids == expected, text
        assert ours.decode(expected, skip_special_tokens=False) == reference.decode(expected), text
        total += len(expected)
    print(f"{name}: {len(TEXT_SAMPLES)} texts, {total} tokens, all equal")
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["add_bos_token"] == (name == "gemma-3-270m")
    assert tokenizer_config["bos_token"] == reference.bos_token and tokenizer_config["eos_token"] == reference.eos_token
    if name.startswith("qwen"):
        import unicodedata

        assert ours.encode(NOT_NFC).ids == reference(unicodedata.normalize("NFC", NOT_NFC)).input_ids
        assert ours.encode(NOT_NFC).ids != reference(NOT_NFC).input_ids


# The original checkpoints' generation_config.json eos_token_id (Hugging Face HuggingFaceTB/SmolLM2-135M-Instruct,
# Qwen/Qwen2.5-Coder-0.5B-Instruct, google/gemma-3-270m), and what the conversion writes: the same ids, in the
# same order, but for SmolLM2's <|endoftext|> (0), where llama.cpp stops too.
STOP_IDS = {"smollm2-135m-instruct": ([2], [2, 0]), "qwen2.5-coder-0.5b-instruct": ([151645, 151643], [151645, 151643]),
            "gemma-3-270m": ([1, 106], [1, 106])}


@pytest.mark.parametrize("name", REAL_MODELS)
def test_stop_ids_are_the_original_checkpoints(name: str) -> None:
    """The folders had no generation_config.json: a Gemma 3 chat reply ran on past <end_of_turn> (106)."""
    _, folder = real_files(name)
    original, converted = STOP_IDS[name]
    written = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert written == converted and written[:len(original)] == original


@pytest.mark.real
def test_default_model_metadata() -> None:
    """The default model's folder: what config.json and source.json must say about SmolLM2."""
    from minidecoder.sources import registry

    gguf_path, folder = real_files("smollm2-135m-instruct")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is True and config["num_hidden_layers"] == 30
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 100000.0}
    assert config["rms_norm_eps"] == 1e-05 and config["head_dim"] == 64
    source = json.loads((folder / "source.json").read_text())
    assert source["source_sha256"] == registry.KNOWN_MODELS["smollm2-135m-instruct"].gguf_sha256
    assert source["source_file"] == gguf_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source["quantization"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
