"""config.json as transformers reads it: keys that fill in or override other keys, and keys a file may leave
out. Each case edits a saved tiny checkpoint's config.json (a key transformers honors that the tiny models do
not set), loads the folder with transformers and with minidecoder, and compares the logits in float32; each
failed on the code before its fix, but for the guards marked so (red team: config keys transformers honors).
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from test_parity import ATOL, RTOL
from tiny_models import checkpoint, random_ids


def _set(**keys) -> Callable[[dict], None]:
    return lambda config: config.update(keys)


def _drop(*keys: str, **then) -> Callable[[dict], None]:
    def edit(config: dict) -> None:
        for key in keys:
            config.pop(key, None)
        config.update(then)
    return edit


# case -> (variant, edit of its config.json). The edits keep each variant's weights valid.
CASES: dict[str, tuple[str, Callable[[dict], None]]] = {
    # transformers fills a theta rope_parameters lacks from the top-level rope_theta (minidecoder took 10,000)
    "rope_theta_beside_rope_parameters": ("llama", _set(rope_parameters={"rope_type": "linear", "factor": 2.0},
                                                         rope_theta=500.0)),
    # transformers takes rope_scaling over rope_parameters (minidecoder took rope_parameters)
    "rope_scaling_beside_rope_parameters": ("llama", _set(rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                                          rope_scaling={"rope_type": "linear", "factor": 4.0})),
    # Gemma3: top-level thetas fill the layer types' dicts; rope_scaling updates the global layers' dict
    "gemma3_thetas_beside_rope_parameters": ("gemma3", _set(
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0},
                         "sliding_attention": {"rope_type": "default"}}, rope_theta=500.0, rope_local_base_freq=50.0)),
    "gemma3_rope_scaling_beside_rope_parameters": ("gemma3", _set(rope_scaling={"rope_type": "linear", "factor": 8.0})),
    # Gemma reads hidden_activation alone, the others hidden_act alone (minidecoder took hidden_activation first)
    "gemma2_hidden_act_beside_no_hidden_activation": ("gemma2", _drop("hidden_activation", hidden_act="silu")),
    "llama_hidden_activation_beside_hidden_act": ("llama", _set(hidden_activation="gelu_pytorch_tanh")),
    # Gemma3 without layer_types: transformers takes its pattern from sliding_window_pattern alone, never from the
    # private copy it saves (minidecoder read `_sliding_window_pattern`: 3 here, where transformers runs 6)
    "gemma3_private_sliding_window_pattern": ("gemma3", _drop("layer_types", "sliding_window_pattern",
                                                              _sliding_window_pattern=3)),
    # keys the family's transformers never reads (minidecoder soft-capped a Llama's logits and a Qwen2's scores)
    "llama_final_logit_softcapping": ("llama", _set(final_logit_softcapping=3.0)),
    "qwen2_attn_logit_softcapping": ("qwen2", _set(attn_logit_softcapping=3.0)),
    "gemma3_attn_logit_softcapping": ("gemma3", _set(attn_logit_softcapping=3.0)),
    "gemma3_final_logit_softcapping": ("gemma3", _set(final_logit_softcapping=3.0)),  # guard: Gemma3 reads this one
    # keys left out mean the family's transformers default: Gemma2 soft-caps at 50 and 30 (minidecoder: none), and
    # a Qwen2's context is 32,768 (minidecoder: 2,048), which YaRN takes as its original context
    "gemma2_softcaps_left_out": ("gemma2", _drop("attn_logit_softcapping", "final_logit_softcapping")),
    "qwen2_context_left_out_under_yarn": ("qwen2", _drop("max_position_embeddings", rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0})),
}


def _edited_copy(name: str, edit: Callable[[dict], None], folder: Path) -> Path:
    shutil.copytree(checkpoint(name)[1], folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_edited_config_gives_transformers_logits(case: str, tmp_path: Path) -> None:
    import transformers

    folder = _edited_copy(*CASES[case], tmp_path / "model")
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                  attn_implementation="eager").eval()
    ids = random_ids()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model = minidecoder.load(folder)
    with torch.no_grad():
        assert_close(model(ids).logits, reference(ids).logits, atol=ATOL, rtol=RTOL)
    # where rope_scaling shadows rope_parameters, transformers drops the latter's settings: that is said
    shadowed = [str(w.message) for w in said if "rope_parameters" in str(w.message)]
    assert bool(shadowed) == (case == "rope_scaling_beside_rope_parameters"), shadowed


def test_a_flat_gemma3_rope_parameters_is_refused(tmp_path: Path) -> None:
    """transformers ignores a Gemma3 rope_parameters not keyed by layer type (both layer types get plain RoPE);
    minidecoder applied it to the global layers."""
    folder = _edited_copy("gemma3", _set(rope_parameters={"rope_type": "linear", "factor": 8.0}), tmp_path / "model")
    with pytest.raises(minidecoder.errors.ConfigError, match="keyed by layer type.*full_attention"):
        minidecoder.load(folder)


# Sizes at which every family default below differs from what the other keys would give (64 heads of 16).
_SIZES = dict(vocab_size=128, hidden_size=1024, intermediate_size=64, num_hidden_layers=4, num_attention_heads=64)
_DEFAULTED = {"max_position_embeddings": "max_position_embeddings", "sliding_window": "sliding_window",
              "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim",
              "attn_logit_softcapping": "attn_logit_softcap", "final_logit_softcapping": "final_logit_softcap"}


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma2", "gemma3_text"])
def test_keys_left_out_mean_the_familys_transformers_defaults(model_type: str) -> None:
    """One default for all families ran a Gemma2 without soft-capping, a Mistral without its window, and dynamic
    or YaRN RoPE against another context (the parity suite shows these values drive the forward as there)."""
    import transformers

    from minidecoder.core.config import parse_config

    qwen2 = {"use_sliding_window": True, "max_window_layers": 2} if model_type == "qwen2" else {}
    raw = dict(_SIZES, model_type=model_type, **qwen2)
    ours, theirs = parse_config(raw), transformers.AutoConfig.for_model(**raw)
    for key, field in _DEFAULTED.items():
        if not hasattr(theirs, key):  # a key the family does not read (Llama's window, soft-capping)
            continue
        want = getattr(theirs, key)
        if key == "sliding_window" and "sliding_attention" not in getattr(theirs, "layer_types", ["sliding_attention"]):
            want = None  # no block slides (Mistral's blocks all slide when a window is set)
        assert getattr(ours, field) == want, key


def test_a_llama_config_whose_layer_types_slide_is_refused(tmp_path: Path) -> None:
    """transformers' Llama reads neither layer_types nor sliding_window; minidecoder refused sliding_window alone,
    but with layer_types beside it slid the blocks those named."""
    folder = _edited_copy("llama", _set(layer_types=["sliding_attention"] * 4, sliding_window=5), tmp_path / "model")
    with pytest.raises(minidecoder.errors.ConfigError, match="llama config.*layer_types.*applies neither"):
        minidecoder.load(folder)


@pytest.mark.parametrize("name", ["llama_mha_tied_bias", "gemma2"])
def test_a_tied_config_runs_a_different_head_its_checkpoint_stores_as_transformers(name: str, tmp_path: Path) -> None:
    """transformers 5 ties lm_head to the embedding only where the file stores no other head; minidecoder always
    took the embedding, so a tied config beside a stored, different lm_head.weight gave other logits, unsaid."""
    import transformers
    from safetensors.torch import load_file, save_file

    ids = random_ids()
    for head, warns in (("equal", False), ("different", True)):
        folder = _edited_copy(name, _set(), tmp_path / head)
        weights = load_file(folder / "model.safetensors")
        embedding = weights["model.embed_tokens.weight"]
        weights["lm_head.weight"] = embedding.clone() if head == "equal" else torch.randn_like(embedding) * 0.2
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                      attn_implementation="eager").eval()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            model = minidecoder.load(folder)
        assert any("tie_word_embeddings" in str(w.message) for w in said) == warns, head
        assert (model.lm_head is None) == (not warns), head
        with torch.no_grad():
            assert_close(model(ids).logits, reference(ids).logits, atol=ATOL, rtol=RTOL, msg=head)


@pytest.mark.parametrize("name, key, where", [("qwen2", "mlp_bias", "mlp.up_proj"),
                                              ("mistral_window", "attention_bias", "self_attn.q_proj")])
def test_biases_a_family_never_reads_are_refused_not_added(name: str, key: str, where: str, tmp_path: Path) -> None:
    """Qwen2's MLP and Mistral's projections have no bias in transformers, whatever config.json says; minidecoder
    read mlp_bias / attention_bias for every family and added the stored biases (transformers drops them)."""
    from safetensors.torch import load_file, save_file

    folder = _edited_copy(name, _set(**{key: True}), tmp_path / "model")
    weights = load_file(folder / "model.safetensors")
    for tensor in [tensor for tensor in weights if tensor.endswith(f"{where}.weight")]:
        weights[tensor.replace(".weight", ".bias")] = torch.randn(weights[tensor].shape[0])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(minidecoder.errors.CheckpointError, match=f"unexpected: model.layers.0.{where}.bias"):
        minidecoder.load(folder)
    (folder / "model.safetensors").unlink()
    shutil.copy(checkpoint(name)[1] / "model.safetensors", folder)  # the family's weights alone: they load
    minidecoder.load(folder)


def test_llama3_rope_without_its_frequency_factors_is_refused(tmp_path: Path) -> None:
    """transformers refuses a llama3 RoPE without low_freq_factor and high_freq_factor; minidecoder ran it with
    Llama 3.1's 1.0 and 4.0, guessed."""
    folder = _edited_copy("llama_rope_llama3", lambda config: config["rope_parameters"].pop("low_freq_factor"),
                          tmp_path / "model")
    with pytest.raises(minidecoder.errors.ConfigError, match="llama3 RoPE needs low_freq_factor and high_freq_factor"):
        minidecoder.load(folder)
