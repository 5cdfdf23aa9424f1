"""Parity with transformers' eager path on tiny models of every family and variant, in float32.

Compared: logits, every hidden state and every attention probability. Also: the SDPA fast path
against the eager path, padded batches against unpadded rows, bfloat16 against transformers'
bfloat16, sharded checkpoints, both config layouts, the multimodal Gemma3 wrapper.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch.testing import assert_close

import minidecoder
import minidecoder.core.model as model_module
from tiny_models import SEQ, VARIANTS, checkpoint, random_ids, save_hf_model, save_tiny_tokenizer

ATOL = RTOL = 1e-5  # fp32; the observed difference is 0 for every variant


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_logits_hidden_states_attentions_match_transformers(name: str) -> None:
    hf, folder = checkpoint(name)
    model = minidecoder.load(folder)
    ids = random_ids()
    with torch.no_grad():
        ref = hf(ids, output_hidden_states=True, output_attentions=True)
        out = model(ids, output_hidden_states=True, output_attentions=True)
    assert_close(out.logits, ref.logits, atol=ATOL, rtol=RTOL)
    assert len(out.hidden_states) == len(ref.hidden_states) == model.num_layers + 1
    for layer, (ours, theirs) in enumerate(zip(out.hidden_states, ref.hidden_states)):
        assert_close(ours, theirs, atol=ATOL, rtol=RTOL, msg=f"hidden_states[{layer}]")
    assert len(out.attentions) == model.num_layers
    for layer, (ours, theirs) in enumerate(zip(out.attentions, ref.attentions)):
        assert_close(ours, theirs, atol=ATOL, rtol=RTOL, msg=f"attentions[{layer}]")


@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma3", "llama_mqa_untied"])
def test_sdpa_fast_path_equals_eager_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    ids = random_ids()
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    with torch.no_grad():
        fast = model(ids, output_hidden_states=True)  # no internals requested: SDPA
        assert len(calls) == model.num_layers, "the fused kernel did not run: the test would compare eager to eager"
        eager = model(ids, output_hidden_states=True, output_attentions=True)  # patterns requested: eager
    assert_close(fast.logits, eager.logits, atol=5e-5, rtol=1e-5)
    for ours, theirs in zip(fast.hidden_states, eager.hidden_states):
        assert_close(ours, theirs, atol=5e-5, rtol=1e-5)


def test_attention_path_follows_the_key_count_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the method loop's executor on a CPU, at most EXPLICIT_ATTENTION_MAX_KEYS keys take the explicit path, more
    take SDPA (minidecoder.fast.attention); `Decoder.forward` always takes SDPA."""
    from minidecoder.fast import attention
    from minidecoder.fast.forward import FastForward

    _, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    ids = random_ids()  # SEQ keys
    L = model.num_layers
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    outputs = {}
    for limit, want_calls in ((SEQ, 0), (SEQ - 1, L)):
        monkeypatch.setitem(attention.EXPLICIT_ATTENTION_MAX_KEYS, torch.float32, limit)
        calls.clear()
        with torch.no_grad():
            outputs[limit] = FastForward(model, ids, None, keep={L}).hidden(L)
        assert len(calls) == want_calls, f"limit {limit}: {len(calls)} SDPA calls"
    assert_close(outputs[SEQ], outputs[SEQ - 1], atol=5e-5, rtol=1e-5)
    calls.clear()
    with torch.no_grad():
        model(ids)
    assert len(calls) == L


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3",
                                  "llama_rope_dynamic"])
def test_padded_batch_equals_unpadded_rows(name: str, side: str) -> None:
    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    # Dynamic NTK RoPE derives its base from the longest position in the batch (as transformers
    # does), so it is batch-independent only while every row fits the trained context (16 here).
    lengths = [16, 11, 5] if name == "llama_rope_dynamic" else [SEQ, SEQ - 7, 9]
    rows = [random_ids(1, n, seed=10 + i)[0] for i, n in enumerate(lengths)]
    ids = torch.zeros(len(rows), SEQ, dtype=torch.long)
    mask = torch.zeros(len(rows), SEQ, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(SEQ - len(row), SEQ) if side == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    with torch.no_grad():
        batched = model(ids, attention_mask=mask, output_hidden_states=True)
        for i, row in enumerate(rows):
            alone = model(row[None], output_hidden_states=True)
            span = slice(SEQ - len(row), SEQ) if side == "left" else slice(0, len(row))
            assert_close(batched.logits[i, span], alone.logits[0], atol=5e-5, rtol=1e-5)
            assert_close(batched.hidden_states[-1][i, span], alone.hidden_states[-1][0], atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["llama", "gemma2", "qwen2_window"])
def test_padded_batch_matches_transformers_with_same_positions(name: str) -> None:
    """With the same explicit position ids, a left-padded batch equals transformers' exactly."""
    hf, folder = checkpoint(name)
    model = minidecoder.load(folder)
    ids = random_ids(2)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask, position_ids=positions).logits
        out = model(ids, attention_mask=mask, position_ids=positions).logits
    assert_close(out[:, 5:], ref[:, 5:], atol=ATOL, rtol=RTOL)  # padded query rows are unused


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2", "gemma3"])
def test_bfloat16_matches_transformers_bfloat16(name: str) -> None:
    """Same primitives and cast points: the eager path equals transformers' bf16 eager path exactly;
    the SDPA kernel rounds differently but stays within bfloat16's own error."""
    import transformers

    hf, folder = checkpoint(name)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16,
                                                                  attn_implementation="eager")
    model = minidecoder.load(folder, dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    ids = random_ids()
    with torch.no_grad():
        ref = ref_model(ids).logits.float()
        eager = model(ids, output_attentions=True).logits.float()
        fast = model(ids).logits.float()
        bf16_error = (ref - hf(ids).logits).abs().max().item()  # how far bfloat16 itself moves logits
    assert_close(eager, ref, atol=0.0, rtol=0.0)
    assert (fast - ref).abs().max().item() <= 1.5 * bf16_error


def test_sharded_checkpoint_loads_and_matches(tmp_path: Path) -> None:
    hf, _ = checkpoint("llama_mqa_untied")
    save_hf_model(hf, tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    save_tiny_tokenizer(tmp_path)
    ids = random_ids()
    with torch.no_grad():
        assert_close(minidecoder.load(tmp_path)(ids).logits, hf(ids).logits, atol=ATOL, rtol=RTOL)


def _v4_layout(config: dict) -> dict:
    """Rewrite a transformers-5 config.json in the transformers-4 key layout."""
    config = dict(config)
    params = config.pop("rope_parameters", None) or {}
    if config.pop("dtype", None):
        config["torch_dtype"] = "float32"
    config.pop("layer_types", None)
    if config["model_type"] == "gemma3_text":
        config["rope_theta"] = params["full_attention"]["rope_theta"]
        config["rope_local_base_freq"] = params["sliding_attention"]["rope_theta"]
        scaling = {k: v for k, v in params["full_attention"].items() if k != "rope_theta"}
        config["rope_scaling"] = {"type" if k == "rope_type" else k: v for k, v in scaling.items()}
        config["sliding_window_pattern"] = 3
    else:
        config["rope_theta"] = params.pop("rope_theta", 10000.0)
        config["rope_scaling"] = None if params.get("rope_type", "default") == "default" else params
    return config


@pytest.mark.parametrize("name", ["llama_rope_llama3", "llama_rope_linear", "qwen2_window", "gemma2", "gemma3"])
def test_transformers_4_config_layout_gives_the_same_model(name: str, tmp_path: Path) -> None:
    hf, folder = checkpoint(name)
    for item in folder.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    v5 = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(_v4_layout(v5)))
    assert minidecoder.load(tmp_path).config == minidecoder.load(folder).config
    ids = random_ids()
    with torch.no_grad():
        assert_close(minidecoder.load(tmp_path)(ids).logits, hf(ids).logits, atol=ATOL, rtol=RTOL)


def test_multimodal_gemma3_checkpoint_loads_its_text_model(tmp_path: Path) -> None:
    """A `gemma3` (vision + text) checkpoint: the text weights under `language_model.`, vision skipped."""
    hf, folder = checkpoint("gemma3")
    text_config = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text_config,
        "vision_config": {"hidden_size": 8}, "mm_tokens_per_image": 4, "image_token_index": 5}))
    weights = {f"language_model.{k}": v for k, v in load_file(folder / "model.safetensors").items()}
    weights["vision_tower.vision_model.embeddings.weight"] = torch.zeros(2, 2)
    save_file(weights, tmp_path / "model.safetensors")
    save_tiny_tokenizer(tmp_path)
    ids = random_ids()
    with torch.no_grad():
        assert_close(minidecoder.load(tmp_path)(ids).logits, hf(ids).logits, atol=ATOL, rtol=RTOL)


def test_model_holds_no_transformers_object() -> None:
    """Requested internals come from minidecoder's own modules, not from a wrapped transformers model."""
    _, folder = checkpoint("gemma3")
    model = minidecoder.load(folder)
    for module in model.modules():
        assert type(module).__module__.split(".")[0] in ("minidecoder", "torch"), type(module)
    for value in vars(model).values():
        assert "transformers" not in type(value).__module__


def test_library_never_imports_transformers(tmp_path: Path) -> None:
    import subprocess
    import sys

    _, folder = checkpoint("llama")
    code = ("import sys, torch, minidecoder, minidecoder.methods, minidecoder.cli\n"
            f"m = minidecoder.load({str(folder)!r})\n"
            "m(torch.tensor([[5, 6, 7]]), output_attentions=True, output_hidden_states=True)\n"
            "print('transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
