"""minidecoder on the real registry models against transformers (float32, eager, CPU).

transformers reads the same converted folder; tests/conversion/test_convert_real.py shows that folder gives
bit-identical logits to transformers' own GGUF loader, so this closes the chain
minidecoder == transformers(folder) == transformers(GGUF). SmolLM2 by default; Qwen2.5 and Gemma-3
with `pytest -m slow`.
"""
from __future__ import annotations

import pytest
import torch

import minidecoder
from real_models import REAL_MODELS, TEXT_SAMPLES, real_files, transformers_from_folder

pytest.importorskip("transformers")

LOGITS_ATOL = 1e-4
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Été à Paris: naïve café. 東京は日本の首都です。 🙂",
    "A man is playing a guitar while   three people\tdance.\n\nThen",
]


@pytest.mark.parametrize("name", REAL_MODELS)
def test_logits_match_transformers(name: str) -> None:
    from transformers import AutoTokenizer

    _, folder = real_files(name)
    model = minidecoder.load(name, dtype=torch.float32)
    reference = transformers_from_folder(name)
    hf_tokenizer = AutoTokenizer.from_pretrained(str(folder))
    for text in TEXT_SAMPLES:
        assert model.tokenizer.encode(text) == hf_tokenizer(text).input_ids, text
    worst = 0.0
    for prompt in PROMPTS:
        ids = torch.tensor([model.tokenizer.encode(prompt)])  # (1, T)
        with torch.no_grad():
            ours = model(ids).logits.float()
            theirs = reference(ids).logits.float()
        assert ours.shape == theirs.shape
        difference = (ours - theirs).abs().max().item()
        worst = max(worst, difference)
        assert torch.equal(ours[0, -1].argmax(), theirs[0, -1].argmax()), prompt
    print(f"{name}: logits max abs diff vs transformers {worst:.3g} over {len(PROMPTS)} prompts")
    assert worst <= LOGITS_ATOL


@pytest.mark.parametrize("name", [p for p in REAL_MODELS if p.values[0] != "gemma-3-270m"])  # a base model: no Paris
def test_greedy_continuation_knows_paris(name: str) -> None:
    model = minidecoder.load(name, dtype=torch.float32)
    prompt = model.tokenizer.encode("The capital of France is")
    new = minidecoder.generate(model, prompt, max_new_tokens=8)
    text = model.tokenizer.decode(new)
    print(f"{name}: 'The capital of France is' -> {text!r}")
    assert "Paris" in text
    reference = transformers_from_folder(name)
    with torch.no_grad():
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=len(new), do_sample=False)
    assert new == expected[0, len(prompt):].tolist()
