"""The methods' side (docs/reliability.md rows 25-26): every method's sentence-transformers
module saves and loads back, and the placeholders TP and HTP add never leak into the model's tokenizer.
Each test fails on the code without its fix."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.methods import METHODS

TEXTS = ["a man plays a flute.", "The cat sat. It purred."]
OPTIONS = {"tp": dict(layer=-1, end=3, pst_init="uniform", seed=3), "htp": dict(end=3),
           "cp": dict(steer_layer=1, tp=True, start=0, end=1), "cp+tp": dict(steer_layer=1, start=0, end=1)}  # 4 blocks


@pytest.fixture(scope="module")
def model(tiny_llama: Path):
    return minidecoder.load(tiny_llama, progress=False)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_17_every_methods_sentence_transformer_saves_and_loads_back(model, name: str, tmp_path: Path) -> None:
    """`save()` wrote descriptive keys (TP's `pst_init_detail`, HTP's `sentence_splitter`) that are not
    options, and loading refused them; now only the options are written."""
    from sentence_transformers import SentenceTransformer

    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    module = MinidecoderModule(minidecoder.SentenceEncoder(model, name, **OPTIONS.get(name, {})))
    original = SentenceTransformer(modules=[module], device="cpu")
    original.save(str(tmp_path / "saved"))
    reloaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    np.testing.assert_array_equal(reloaded.encode(TEXTS), original.encode(TEXTS))
    assert reloaded[0].options == module.options


def test_18_placeholders_never_enter_the_models_tokenizer(model, tiny_llama: Path) -> None:
    """After TP and HTP ran, a text holding the literal strings `<PST>` / `<B-PST>` tokenizes, embeds,
    generates and runs through `model(ids)` exactly as in a fresh process (it used to crash with an
    IndexError: the added ids were past the embedding table)."""
    fresh = minidecoder.load(tiny_llama, progress=False)
    minidecoder.embed(model, TEXTS, "tp", **OPTIONS["tp"])
    minidecoder.embed(model, TEXTS, "htp", **OPTIONS["htp"])
    literal = "a <PST> and a <B-PST> inside."
    assert model.tokenizer.encode(literal) == fresh.tokenizer.encode(literal)
    assert model.tokenizer.vocab_size == fresh.tokenizer.vocab_size
    for method in ("prompteol", "mean"):
        torch.testing.assert_close(minidecoder.embed(model, [literal], method), minidecoder.embed(fresh, [literal], method),
                                   rtol=0, atol=0)
    ids = model.tokenizer.encode(literal)
    assert minidecoder.generate(model, ids, max_new_tokens=3) == minidecoder.generate(fresh, ids, max_new_tokens=3)
    with torch.inference_mode():
        torch.testing.assert_close(model(torch.tensor([ids])).logits, fresh(torch.tensor([ids])).logits, rtol=0, atol=0)
    encoder = minidecoder.SentenceEncoder(model, "prompteol")
    np.testing.assert_array_equal(encoder.encode([literal]), minidecoder.SentenceEncoder(fresh, "prompteol").encode([literal]))
