"""ReBA against an independent implementation on transformers, plus its invariants.

The oracle follows the reference (cqdyf099/ReBA, `Code/models.py`, `2 Evaluation_MTEB.py`): each text
alone (batch 1, no padding), `output_attentions=True` on the eager path, every stored (H, T, T) matrix
symmetrized and fused by an explicit max over all of them, then numpy weights as the reference writes
them. minidecoder runs the texts as one left-padded batch and never stores more than one block's
pattern.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.methods.reba import encode_repeated, fused_attention, reba_word_embedding
import tiny_models
from tiny_models import FAMILIES

ATOL = RTOL = 1e-5
TEXTS = ["a man plays a flute.", "hi there", "the cat sat on the mat and purred."]


@functools.cache
def checkpoint(name: str):
    hf, folder = tiny_models.checkpoint(name)
    from transformers import PreTrainedTokenizerFast  # not AutoTokenizer: see tests/methods/test_methods_cp.py
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>", unk_token="<unk>")
    return hf, tok, minidecoder.load(folder, progress=False)


# ---- the oracle ---------------------------------------------------------------------------------
def oracle_forward(hf, tok, text: str, r: int = 2, sep: str = ""):
    """(A as numpy (T, T), h (T, E) float32, offsets): every matrix stored, then one explicit max."""
    enc = tok(sep.join([text] * r), return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    P = torch.stack(out.attentions)[:, 0].float()  # (L, H, T, T): all of them, as the reference keeps them
    S = (P + P.transpose(-1, -2)) / 2
    A = torch.cat([torch.zeros(1, *S.shape[-2:]), S.flatten(0, 1)]).amax(dim=0)  # A starts at 0
    return A.numpy(), out.hidden_states, enc["offset_mapping"]


def oracle_embedding(hf, tok, text: str, pooling: str = "mean", weights: str = "pooled", rows: str = "backward",
                     first_half_split: bool = False, layer: int = -1, r: int = 2, sep: str = "") -> torch.Tensor:
    A, hidden, offsets = oracle_forward(hf, tok, text, r, sep)
    em = hidden[layer][0].float().numpy()  # (T, E)
    T = len(A)
    if pooling == "last":
        R = [T - 1]
    elif first_half_split:
        R = list(range(T // 2))  # `A[:len(A)//2]` in LLM_ours_mean_pool
    else:  # the first copy's tokens (BOS has offsets (0, 0) and is not one of them)
        R = [i for i, (s, e) in enumerate(offsets) if e > s and s < len(text)]
    M = np.triu(A) if rows == "backward" else A
    if weights == "pooled":  # LLM_ours_mean_pool: weights = A[R].sum(0); weights / sum(weights); np.average
        w = M[R].sum(axis=0)
        return torch.tensor(np.average(em, axis=0, weights=w / w.sum()))
    if weights == "normalized":
        return torch.tensor(np.mean([M[i] @ em / M[i].sum() for i in R], axis=0))
    return torch.tensor(np.mean([M[i] @ em for i in R], axis=0))  # raw: the paper's sum


# ---- parity ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_reba_mean_and_last_match_transformers(name: str) -> None:
    hf, tok, model = checkpoint(name)
    for options, oracle_options in [
        (dict(), dict()),  # mean over the first copy, backward rows, pooled weights
        (dict(pooling="last"), dict(pooling="last", rows="full")),  # reference last-token variant: full row
    ]:
        ours = minidecoder.embed(model, TEXTS, "reba", batch_size=8, **options)
        theirs = torch.stack([oracle_embedding(hf, tok, t, **oracle_options) for t in TEXTS]).float()
        assert_close(ours, theirs, atol=ATOL, rtol=RTOL, msg=str(options))


@pytest.mark.parametrize("options,oracle_options", [
    (dict(weights="normalized"), dict(weights="normalized")),
    (dict(weights="raw"), dict(weights="raw")),
    (dict(first_half_split=True), dict(first_half_split=True)),
    (dict(pooling="last", last_row="backward"), dict(pooling="last", rows="backward")),
    (dict(layer=2), dict(layer=2)),
    (dict(repetitions=3, separator=" "), dict(r=3, sep=" ")),
])
def test_reba_options_match_transformers(options: dict, oracle_options: dict) -> None:
    hf, tok, model = checkpoint("gemma2")
    ours = minidecoder.embed(model, TEXTS, "reba", batch_size=8, **options)
    theirs = torch.stack([oracle_embedding(hf, tok, t, **oracle_options) for t in TEXTS]).float()
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


def test_reba_word_embedding_matches_transformers() -> None:
    hf, tok, model = checkpoint("qwen2_window")
    text, start, end = "the cat sat on the mat.", 4, 7  # "cat"
    A, hidden, offsets = oracle_forward(hf, tok, text)
    em = hidden[-1][0].float().numpy()
    R = [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]  # first occurrence only
    w = A[R].sum(axis=0)  # merge_token_embedding_by_attention: full rows, summed, normalized once
    expected = torch.tensor(np.average(em, axis=0, weights=w / w.sum())).float()
    assert_close(reba_word_embedding(model, text, start, end), expected, atol=ATOL, rtol=RTOL)
    spec_variant = reba_word_embedding(model, text, start, end, rows="backward", weights="normalized")
    expected = torch.tensor(np.mean([np.triu(A)[i] @ em / np.triu(A)[i].sum() for i in R], axis=0)).float()
    assert_close(spec_variant, expected, atol=ATOL, rtol=RTOL)


# ---- invariants -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_fusion_equals_explicit_max_over_all_stored_matrices(name: str) -> None:
    _, _, model = checkpoint(name)
    batch = encode_repeated(model.tokenizer, ["a cat."], 2)
    with torch.inference_mode():
        A, _ = fused_attention(model, batch, model.num_layers)
        stored = torch.stack(model(batch.input_ids, output_attentions=True).attentions)  # (L, 1, H, T, T)
    S = (stored + stored.transpose(-1, -2)) / 2
    explicit = S.permute(1, 0, 2, 3, 4).flatten(1, 2).amax(dim=1).clamp_min(0)  # (1, T, T)
    assert torch.equal(A, explicit)


@pytest.mark.parametrize("name", ["mistral_window", "gemma2"])
def test_padding_and_batch_composition_do_not_change_an_embedding(name: str) -> None:
    _, _, model = checkpoint(name)
    for options in (dict(), dict(pooling="last"), dict(first_half_split=True), dict(weights="raw")):
        together = minidecoder.embed(model, TEXTS, "reba", batch_size=8, **options)
        alone = torch.cat([minidecoder.embed(model, [t], "reba", **options) for t in TEXTS])
        assert_close(together, alone, atol=ATOL, rtol=RTOL, msg=str(options))
    batch = encode_repeated(model.tokenizer, TEXTS, 2)
    with torch.inference_mode():
        A, _ = fused_attention(model, batch, model.num_layers)
        short, _ = fused_attention(model, encode_repeated(model.tokenizer, [TEXTS[1]], 2), model.num_layers)
    n = batch.lengths[1]
    T = batch.input_ids.shape[1]
    assert A[1, : T - n].abs().max() == 0 and A[1, :, : T - n].abs().max() == 0  # padding never enters A
    assert_close(A[1, T - n:, T - n:], short[0], atol=ATOL, rtol=RTOL)


def test_quirks_and_variants_matter() -> None:
    _, _, model = checkpoint("llama")
    base = minidecoder.embed(model, TEXTS, "reba")
    for options in (dict(first_half_split=True), dict(weights="normalized"), dict(pooling="last"),
                    dict(repetitions=1), dict(separator=" ")):
        other = minidecoder.embed(model, TEXTS, "reba", **options)
        assert (other - base).abs().max() > 1e-3, options
    # The backward last row is h_last itself (k >= last leaves one key), the full row is not.
    last_backward = minidecoder.embed(model, TEXTS, "reba", pooling="last", last_row="backward")
    batch = encode_repeated(model.tokenizer, TEXTS[:1], 2)
    with torch.inference_mode():
        h_last = model(batch.input_ids, output_hidden_states=True).hidden_states[-1][0, -1]
    assert_close(last_backward[0], h_last, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("options,match", [
    (dict(repetitions=0), "repetitions 0"),
    (dict(pooling="max"), "pooling 'max'"),
    (dict(weights="softmax"), "weights 'softmax'"),
    (dict(last_row="half"), "last_row 'half'"),
    (dict(layer=5), "output layer 5 is outside"),
])
def test_bad_options_are_input_errors(options: dict, match: str) -> None:
    _, _, model = checkpoint("llama")
    with pytest.raises(InputError, match=match):
        minidecoder.embed(model, TEXTS, "reba", **options)


def test_word_span_errors() -> None:
    _, _, model = checkpoint("llama")
    with pytest.raises(InputError, match="not inside the text"):
        reba_word_embedding(model, "a cat", 3, 9)


@pytest.mark.real
def test_real_smollm2_matches_transformers(smollm2: Path, smollm2_transformers) -> None:
    hf, tok = smollm2_transformers
    model = minidecoder.load(smollm2, progress=False)
    texts = ["A man is playing a flute.", "Two dogs run on the beach."]
    ours = minidecoder.embed(model, texts, "reba")
    theirs = torch.stack([oracle_embedding(hf, tok, t) for t in texts]).float()
    assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_blocked_fusion_equals_eager_fusion(name: str, tmp_path, monkeypatch) -> None:
    """The executor's blocked fusion (patterns a head at a time, T^2 memory once) gives the eager fusion's
    embeddings, and by default it takes over from FastPaths.blocked_fusion_from tokens on."""
    import minidecoder
    from minidecoder.fast.options import fast_paths_overridden
    from minidecoder.fast import forward as executor
    from tiny_models import tiny_checkpoint

    tiny_checkpoint(name, tmp_path)
    model = minidecoder.load(tmp_path)
    texts = ["A man plays a guitar on the stage.", "Short one.", "Dogs run in the park at noon today."]
    with fast_paths_overridden(model, blocked_fusion_from=None):
        eager = minidecoder.embed(model, texts, "reba")
    with fast_paths_overridden(model, blocked_fusion_from=0):
        blocked = minidecoder.embed(model, texts, "reba")
    torch.testing.assert_close(blocked, eager, atol=1e-5, rtol=1e-5)
    calls = []
    original = executor.head_group_patterns
    monkeypatch.setattr(executor, "head_group_patterns", lambda *a, **k: calls.append(1) or original(*a, **k))
    minidecoder.embed(model, texts, "reba")  # ~80 tokens: below the threshold, eager
    assert calls == []
    minidecoder.embed(model, ["word " * 140], "reba")  # 2 x 700 characters: blocked, once per block
    assert len(calls) == model.num_layers
