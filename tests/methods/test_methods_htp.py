"""Hierarchical Token Prepending against an independent implementation on top of transformers.

The reference below follows snap-research/HTP: the text is written `"<PST> " + sentence` per
sentence (`parser.py`, `add_pst_to_sentences`), template pieces and the text are tokenized
separately, M `<B-PST>` ids go before the text piece, `<PST>`/`<B-PST>` are added with
`add_special_tokens` and get the mean row of the embedding table, right padding with pad id 0, and
the copy `h[pst], h[b-pst] <- h[end of block]` is done by forward pre-hooks on the decoder layers
(`modeling_mistral.py`, plan `tp_sentence_begin`). Sentences are split by hand here, so nothing of
minidecoder (nor its splitter) builds the reference.
"""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.methods.htp import encode_htp
from minidecoder.errors import InputError
from minidecoder.methods import build_method
from test_methods_tp import hf_tokenizer
from tiny_models import FAMILIES, checkpoint

ATOL = RTOL = 1e-5
# (text, its sentences as the reference writes them)
DOCS = [
    ("A cat sat. It purred!", ["A cat sat.", "It purred!"]),
    ("no boundary here", ["no boundary here."]),
    ("Dogs run? Birds fly. Fish swim", ["Dogs run?", "Birds fly.", "Fish swim."]),
]


def hf_htp(hf, folder, docs, layer: int, blocks: set[int], *, local_only=False, global_only=False,
           after_text=False, every_n_tokens=None, per_block=1, contexts=None) -> torch.Tensor:
    """(B, E) mean over the text tokens, HTP written as the reference writes it; a context is a template
    piece of its own after `<s>` (`embed_mask = 0`: `<s> {instruct} <B-PST>... <PST> sentence 1 ...`)."""
    tokenizer = hf_tokenizer(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<PST>", "<B-PST>"]})
    pst, bpst = tokenizer.convert_tokens_to_ids("<PST>"), tokenizer.convert_tokens_to_ids("<B-PST>")
    embedding = hf.get_input_embeddings()
    assert len(tokenizer) <= embedding.num_embeddings  # the tiny tables have spare rows
    rows, embed_masks, pst_pos, end_pos, bpst_pos = [], [], [], [], []
    for row, (text, sentences) in enumerate(docs):
        if every_n_tokens:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            piece = [t for i in range(0, len(ids), every_n_tokens) for t in [pst, *ids[i:i + every_n_tokens]]]
        else:
            groups = [" ".join(sentences[i:i + per_block]) for i in range(0, len(sentences), per_block)]
            piece = tokenizer(" ".join(f"<PST> {g}" for g in groups), add_special_tokens=False)["input_ids"]
        context = contexts[row] if contexts else ""
        head = [tokenizer.bos_token_id] + (tokenizer(context, add_special_tokens=False)["input_ids"] if context else [])
        n_pst = piece.count(pst)
        text_piece = ([] if local_only else [bpst] * n_pst) + piece
        ids = head + text_piece + [tokenizer.eos_token_id]
        text_end = len(head) + len(text_piece)  # parser.py `text_end_idx`: one past the text piece
        psts = [i for i, t in enumerate(ids) if t == pst]
        ends = [p - 1 for p in psts[1:]] + [text_end if after_text else text_end - 1]
        if global_only:  # parser.py, tp_sentence_omit_pst: drop the PSTs, keep the marked ends
            marks = torch.zeros(len(ids))
            marks[ends] = 1
            keep = [i for i, t in enumerate(ids) if t != pst]
            ids = [ids[i] for i in keep]
            ends = marks[keep].nonzero().flatten().tolist()
            psts = []
        embed_mask = [1 if len(head) <= i < len(ids) - 1 and t not in (pst, bpst) else 0 for i, t in enumerate(ids)]
        rows.append(ids)
        embed_masks.append(embed_mask)
        pst_pos.append(psts)
        end_pos.append(ends)
        bpst_pos.append([i for i, t in enumerate(ids) if t == bpst])
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])  # right padding, pad id 0
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    embed_mask = torch.tensor([m + [0] * (width - len(m)) for m in embed_masks]).float()

    def copy(module, args, kwargs):
        h = args[0].clone()
        for i in range(h.shape[0]):
            replacement = h[i, end_pos[i]].clone()
            if pst_pos[i]:
                h[i, pst_pos[i]] = replacement
            if bpst_pos[i]:
                h[i, bpst_pos[i]] = replacement
        return (h, *args[1:]), kwargs

    mean_row = embedding.weight.data.mean(dim=0)  # resize_token_embeddings' mean initialisation
    saved = embedding.weight.data[[pst, bpst]].clone()
    handles = []
    try:
        embedding.weight.data[pst] = mean_row
        embedding.weight.data[bpst] = mean_row
        handles = [hf.model.layers[i].register_forward_pre_hook(copy, with_kwargs=True) for i in sorted(blocks)]
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        h = out.hidden_states[layer]
        return (h * embed_mask[..., None]).sum(1) / embed_mask.sum(1, keepdim=True)
    finally:
        for handle in handles:
            handle.remove()
        embedding.weight.data[[pst, bpst]] = saved


def md_htp(folder, texts, **options) -> torch.Tensor:
    model = minidecoder.load(folder)
    return minidecoder.embed(model, texts, "htp", **options)


@pytest.mark.parametrize("name", FAMILIES)
def test_htp_matches_transformers_hooks(name: str) -> None:
    hf, folder = checkpoint(name)
    ours = md_htp(folder, [d[0] for d in DOCS], layer=-2, start=1, end=3)
    theirs = hf_htp(hf, folder, DOCS, -2, {1, 2})
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    plain = md_htp(folder, [d[0] for d in DOCS], layer=-2, start=1, end=1)
    assert (plain - ours).abs().max() > 1e-2  # the copies matter (docs/style.md, rule 8)


@pytest.mark.parametrize("options,reference", [
    (dict(local_only=True), dict(local_only=True)),
    (dict(global_only=True), dict(global_only=True)),
    (dict(last_block_source="after_text"), dict(after_text=True)),
    (dict(global_only=True, last_block_source="after_text"), dict(global_only=True, after_text=True)),
    (dict(every_n_tokens=5), dict(every_n_tokens=5)),
    (dict(sentences_per_block=2), dict(per_block=2)),
])
def test_htp_options_match_transformers_hooks(options: dict, reference: dict) -> None:
    hf, folder = checkpoint("llama")
    ours = md_htp(folder, [d[0] for d in DOCS], layer=-1, start=0, end=3, **options)
    theirs = hf_htp(hf, folder, DOCS, -1, {0, 1, 2}, **reference)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    default = md_htp(folder, [d[0] for d in DOCS], layer=-1, start=0, end=3)
    assert (default - ours).abs().max() > 1e-3  # every option changes the embedding


def test_htp_quirk_matters_on_a_windowed_model() -> None:
    hf, folder = checkpoint("gemma2")
    ours = md_htp(folder, [d[0] for d in DOCS], layer=4, start=1, end=4, last_block_source="after_text")
    theirs = hf_htp(hf, folder, DOCS, 4, {1, 2, 3}, after_text=True)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    default = md_htp(folder, [d[0] for d in DOCS], layer=4, start=1, end=4)
    assert (default - ours).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["qwen2_window", "gemma3"])
def test_padding_side_and_batch_composition_do_not_change_an_embedding(name: str) -> None:
    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    texts = [d[0] for d in DOCS]
    long = "A much longer document. It has several sentences! Each one adds padding to the others. Right?"
    alone = torch.cat([minidecoder.embed(model, [t], "htp", layer=-2, start=1, end=3) for t in texts])
    for side in ("right", "left"):
        batched = minidecoder.embed(model, texts + [long], "htp", layer=-2, start=1, end=3, padding_side=side)[:3]
        assert_close(batched, alone, atol=ATOL, rtol=RTOL)


def test_sentence_splitter_and_one_block_text() -> None:
    from minidecoder.methods.text import split_sentences

    assert split_sentences("Mr. Smith arrived at 5 p.m. on Monday. He left") == [
        "Mr. Smith arrived at 5 p.m. on Monday.", "He left."]
    assert split_sentences("no boundary at all") == ["no boundary at all."]
    assert split_sentences('She said "go." Then') == ['She said "go."', "Then."]
    assert split_sentences("") == [] and split_sentences("   ") == []
    _, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    method = build_method("htp", layer=-2, start=1, end=3)
    inputs = encode_htp(method, model, ["no boundary at all", "One. Two. Three."])
    assert inputs.blocks == [1, 3]
    assert minidecoder.embed(model, ["no boundary at all", "..."], method).isfinite().all()


def test_htp_errors() -> None:
    _, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    with pytest.raises(InputError, match="start <= end"):
        minidecoder.embed(model, ["a."], "htp", layer=-2, start=2, end=1)
    with pytest.raises(InputError, match="blocks 0..3"):
        minidecoder.embed(model, ["a."], "htp")  # the reference's end=7 on a 4-block model
    with pytest.raises(InputError, match="outside this model's hidden states"):
        minidecoder.embed(model, ["a."], "htp", layer=9, start=1, end=2)
    with pytest.raises(InputError, match="past the output layer"):
        minidecoder.embed(model, ["a."], "htp", layer=2, start=1, end=3)
    with pytest.raises(InputError, match="empty"):
        minidecoder.embed(model, ["  "], "htp", layer=-2, start=1, end=3)
    with pytest.raises(InputError, match="placeholder"):
        minidecoder.embed(model, ["a <PST> b."], "htp", layer=-2, start=1, end=3)
    with pytest.raises(InputError, match="needs a token after the text"):
        minidecoder.embed(model, ["a."], "htp", layer=-2, start=1, end=3, append_eos=False,
                          last_block_source="after_text")
    with pytest.raises(InputError, match="at most one"):
        build_method("htp", local_only=True, global_only=True)
    assert build_method("htp").describe()["sentence_splitter"].startswith("pysbd")


def test_htp_puts_the_literal_bos_first_when_the_tokenizer_adds_none(tmp_path) -> None:
    """The reference's template is the literal text `<s> {text} </s>`, so its sequence starts with BOS
    on every tokenizer. On one whose policy adds no BOS (SmolLM2, Qwen2.5), `<B-PST>_1` would sit at
    position 0, the attention sink, and the copies would overwrite it."""
    import shutil

    from tiny_models import save_tiny_tokenizer

    hf, folder = checkpoint("llama")
    no_bos = shutil.copytree(folder, tmp_path / "no-bos")
    save_tiny_tokenizer(no_bos, add_bos=False)
    model = minidecoder.load(no_bos)
    assert not model.tokenizer.add_bos and model.tokenizer.bos_id is not None
    texts = [d[0] for d in DOCS]
    ours = minidecoder.embed(model, texts, "htp", layer=-2, start=1, end=3)
    assert_close(ours, hf_htp(hf, no_bos, DOCS, -2, {1, 2}), atol=ATOL, rtol=RTOL)

    policy = build_method("htp", layer=-2, start=1, end=3, literal_bos=False)
    first = encode_htp(policy, model, texts).batch.input_ids[:, 0]
    assert (first == model.tokenizer.with_placeholders("<PST>", "<B-PST>").token_to_id("<B-PST>")).all()  # the placeholder starts the sequence
    assert (minidecoder.embed(model, texts, policy) - ours).abs().max() > 1e-2


def test_htp_without_a_bos_token_is_an_input_error_naming_the_way_out() -> None:
    model = minidecoder.load(checkpoint("llama")[1])
    model.tokenizer.bos_id, model.tokenizer.add_bos = None, False  # a tokenizer that defines no BOS at all
    with pytest.raises(InputError, match="no BOS token") as error:
        minidecoder.embed(model, ["A cat sat."], "htp", layer=-2, start=1, end=3)
    assert "literal_bos=False" in str(error.value)
    assert minidecoder.embed(model, ["A cat sat."], "htp", layer=-2, start=1, end=3, literal_bos=False).isfinite().all()
