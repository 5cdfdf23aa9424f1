"""Token Prepending against an independent implementation on top of transformers.

The reference here is written the way the TP authors wrote theirs (fuyuchenIfyw/token_prepending,
evaluate.py + senllm/modeling_*.py): `tokenizer.add_tokens(["<PST>"])`, the new embedding row set
explicitly, left padding, and the copy `h[<PST>] <- h[:, -1]` done by forward pre-hooks on the
decoder layers. Nothing of minidecoder is used to build the reference. Positions are passed to
transformers as mask-derived (cumsum - 1), the choice minidecoder makes, so that fp32 results agree
to rounding; padding invariance is tested separately.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.methods import build_method
from tiny_models import FAMILIES, checkpoint

ATOL = RTOL = 1e-5
SENTENCES = ["a cat sat on the mat.", "dogs run.", "the quick brown fox jumps over it."]
PROMPTEOL_TP = 'This sentence : <PST> "{}" means in one word:"'
SHORT_TP = '<PST>"{text}"'


def hf_tokenizer(folder: Path):
    """transformers' tokenizer for a folder. The tiny folders declare PreTrainedTokenizerFast; on a
    qwen2 folder AutoTokenizer would build Qwen2Tokenizer around the char vocabulary, which drops spaces."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if folder.name.startswith("tiny-"):
        return PreTrainedTokenizerFast.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def gaussian_row(hidden: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(hidden, generator=torch.Generator().manual_seed(seed))


def hf_tp_last_token(hf, folder: Path, prompts: list[str], layer: int, copy_blocks: set[int], row: torch.Tensor,
                     mask_pst_first_layer: bool = False, every_token: bool = False) -> torch.Tensor:
    """(B, E): TP written with transformers + hooks, as the reference code does it ((B, T, E) with
    `every_token`: the whole layer, left-padded)."""
    tokenizer = hf_tokenizer(folder)
    tokenizer.add_tokens(["<PST>"])
    pst = tokenizer.convert_tokens_to_ids("<PST>")
    embedding = hf.get_input_embeddings()
    if len(tokenizer) > embedding.num_embeddings:
        hf.resize_token_embeddings(len(tokenizer))
        embedding = hf.get_input_embeddings()
    saved = embedding.weight.data[pst].clone()
    enc = tokenizer(prompts, padding=True, padding_side="left", return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    is_pst = ids == pst  # (B, T)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)

    def copy_last(module, args, kwargs):
        h = args[0].clone()
        last = h[:, -1:, :].expand_as(h)  # left padding: the last column is every row's last token
        h[is_pst] = last[is_pst]
        return (h, *args[1:]), kwargs

    def hide_pst(module, args, kwargs):
        am = kwargs["attention_mask"]
        assert am is not None, "expected a materialized mask (eager attention, padded batch)"
        if am.dtype == torch.bool:
            kwargs["attention_mask"] = am & ~is_pst[:, None, None, :]
        else:
            kwargs["attention_mask"] = am.masked_fill(is_pst[:, None, None, :], torch.finfo(am.dtype).min)
        return args, kwargs

    layers = hf.model.layers
    handles = []
    try:
        embedding.weight.data[pst] = row
        if mask_pst_first_layer:
            handles.append(layers[0].register_forward_pre_hook(hide_pst, with_kwargs=True))
        for i in sorted(copy_blocks):
            handles.append(layers[i].register_forward_pre_hook(copy_last, with_kwargs=True))
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True,
                     use_cache=False)
        return out.hidden_states[layer] if every_token else out.hidden_states[layer][:, -1, :]
    finally:
        for handle in handles:
            handle.remove()
        embedding.weight.data[pst] = saved


def md_embed(folder: Path, texts: list[str], **options) -> torch.Tensor:
    model = minidecoder.load(folder)
    return minidecoder.embed(model, texts, "tp", **options)


# ---- parity with the hook implementation ---------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_tp_matches_transformers_hooks(name: str) -> None:
    hf, folder = checkpoint(name)
    row = gaussian_row(hf.config.hidden_size)
    ours = md_embed(folder, SENTENCES, layer=-2, start=1, end=3)
    theirs = hf_tp_last_token(hf, folder, [PROMPTEOL_TP.format(s) for s in SENTENCES], -2, {1, 2}, row)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    # With windows of 5 tokens the <PST> of PromptEOL is out of the last token's reach in 2 blocks, so
    # a short template, with short texts, shows that the copy matters in every family (docs/style.md, rule 8).
    texts = ["ab.", "cdef.", "g."]
    ours = md_embed(folder, texts, prompt=SHORT_TP, layer=-2, start=1, end=3)
    theirs = hf_tp_last_token(hf, folder, [SHORT_TP.replace("{text}", t) for t in texts], -2, {1, 2}, row)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    plain = md_embed(folder, texts, prompt=SHORT_TP, layer=-2, start=1, end=1)
    assert (plain - ours).abs().max() > 1e-2


def test_tp_mean_pooling_is_the_mean_over_the_text_tokens_of_the_hook_forward() -> None:
    """pooling=mean ("TP w. Mean", HTP Table 1): the same forward, read as the mean over the tokens that overlap
    the sentence's characters (transformers' offsets), <PST> and the template excluded."""
    hf, folder = checkpoint("llama")
    prompts = [PROMPTEOL_TP.format(s) for s in SENTENCES]
    hidden = hf_tp_last_token(hf, folder, prompts, -2, {1, 2}, gaussian_row(hf.config.hidden_size), every_token=True)
    tokenizer = hf_tokenizer(folder)
    tokenizer.add_tokens(["<PST>"])
    enc = tokenizer(prompts, padding=True, padding_side="left", return_offsets_mapping=True)
    expected = []
    for b, (prompt, sentence) in enumerate(zip(prompts, SENTENCES)):
        first = prompt.index('"') + 1  # the sentence's characters: [first, first + len)
        rows = [t for t, (start, end) in enumerate(enc["offset_mapping"][b]) if enc["attention_mask"][b][t]
                and end > start and start < first + len(sentence) and end > first]
        assert rows and tokenizer.convert_tokens_to_ids("<PST>") not in [enc["input_ids"][b][t] for t in rows]
        expected.append(hidden[b, rows].mean(dim=0))
    ours = md_embed(folder, SENTENCES, layer=-2, start=1, end=3, pooling="mean")
    assert_close(ours, torch.stack(expected), atol=ATOL, rtol=RTOL)
    assert (ours - md_embed(folder, SENTENCES, layer=-2, start=1, end=3)).abs().max() > 1e-2  # not the last token
    with pytest.raises(InputError, match="pooling='max'"):
        build_method("tp", pooling="max")


@pytest.mark.parametrize("name,options,blocks,layer", [
    ("llama", dict(start=0, end=2, layer=-1), {0, 1}, -1),  # copy before block 0 too; final normed layer
    ("gemma2", dict(start=1, end=2, resume_at=3, layer=4), {1, 3}, 4),  # Table 16: resume until the output
    ("gemma3", dict(start=2, end=4, layer=5), {2, 3}, 5),
])
def test_tp_ranges_and_layers_match_transformers(name: str, options: dict, blocks: set[int], layer: int) -> None:
    hf, folder = checkpoint(name)
    ours = md_embed(folder, SENTENCES, **options)
    theirs = hf_tp_last_token(hf, folder, [PROMPTEOL_TP.format(s) for s in SENTENCES], layer, blocks,
                              gaussian_row(hf.config.hidden_size))
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_mask_pst_first_layer_matches_transformers_and_matters(name: str) -> None:
    hf, folder = checkpoint(name)
    row = gaussian_row(hf.config.hidden_size)
    prompts = [PROMPTEOL_TP.format(s) for s in SENTENCES]
    # start=0: the copied row is what block 0 would see, so hiding it there changes the result.
    ours = md_embed(folder, SENTENCES, layer=-2, start=0, end=3, mask_pst_first_layer=True)
    theirs = hf_tp_last_token(hf, folder, prompts, -2, {0, 1, 2}, row, mask_pst_first_layer=True)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    unmasked = md_embed(folder, SENTENCES, layer=-2, start=0, end=3)
    assert (unmasked - ours).abs().max() > 1e-2


@pytest.mark.parametrize("init,row", [
    ("zeros", lambda hf, tok: torch.zeros(hf.config.hidden_size)),
    ("ones", lambda hf, tok: torch.ones(hf.config.hidden_size)),
    ("uniform", lambda hf, tok: torch.rand(hf.config.hidden_size, generator=torch.Generator().manual_seed(3))),
    ("gaussian", lambda hf, tok: gaussian_row(hf.config.hidden_size, 3)),
    ("token: ", lambda hf, tok: hf.get_input_embeddings().weight.data[tok.convert_tokens_to_ids(" ")].clone()),
])
def test_placeholder_inits_match_transformers(init: str, row) -> None:
    hf, folder = checkpoint("gemma2")  # Gemma scales the placeholder row like every row
    tokenizer = hf_tokenizer(folder)
    seed = {"seed": 3} if init in ("uniform", "gaussian") else {}  # the others draw nothing: a seed is refused
    ours = md_embed(folder, SENTENCES, layer=-2, start=1, end=3, pst_init=init, **seed)
    theirs = hf_tp_last_token(hf, folder, [PROMPTEOL_TP.format(s) for s in SENTENCES], -2, {1, 2},
                              row(hf, tokenizer))
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


def test_num_pst_overwrites_every_placeholder() -> None:
    hf, folder = checkpoint("mistral_window")
    ours = md_embed(folder, SENTENCES, layer=-2, start=1, end=3, num_pst=2)
    prompts = ['This sentence : <PST><PST> "{}" means in one word:"'.format(s) for s in SENTENCES]
    theirs = hf_tp_last_token(hf, folder, prompts, -2, {1, 2}, gaussian_row(hf.config.hidden_size))
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


def test_custom_template_and_senteval_text() -> None:
    hf, folder = checkpoint("qwen2_window")
    template = 'After thinking step by step , this sentence : <PST> "{text}" means in one word:"'
    texts = ['he said "yes"', "is it raining ?", "no full stop"]
    prepared = ["he said 'yes'", "is it raining .", "no full stop."]  # docs/spec.md section 2, written out
    ours = md_embed(folder, texts, prompt=template, layer=-2, start=1, end=3)
    theirs = hf_tp_last_token(hf, folder, [template.replace("{text}", t) for t in prepared], -2, {1, 2},
                              gaussian_row(hf.config.hidden_size))
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    named = md_embed(folder, texts, prompt="pretended_cot", layer=-2, start=1, end=3)
    assert_close(named, ours, atol=0, rtol=0)


def test_metaeol_tp_averages_eight_prompts_with_pst() -> None:
    from minidecoder.methods import metaeol
    hf, folder = checkpoint("llama")
    templates = [t.replace('"{text}"', '<PST> "{text}"') for t in metaeol.METAEOL_TEMPLATES]
    assert len(templates) == 8
    ours = md_embed(folder, SENTENCES[:2], prompt="metaeol", layer=-2, start=1, end=3)
    row = gaussian_row(hf.config.hidden_size)
    # The reference stacks sentence x prompt rows into one batch and averages per sentence.
    prompts = [t.replace("{text}", s) for s in SENTENCES[:2] for t in templates]
    theirs = hf_tp_last_token(hf, folder, prompts, -2, {1, 2}, row).view(2, 8, -1).mean(dim=1)
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


# ---- invariants that hold exactly ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_empty_range_is_the_plain_forward_with_the_placeholder(name: str) -> None:
    from minidecoder.methods.inputs import encode_prompts
    from minidecoder.fast.options import fast_paths_overridden
    from minidecoder.methods.loop import last_token
    from minidecoder.methods.placeholders import placeholder_row

    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    texts = SENTENCES
    with torch.inference_mode():
        # bitwise equality is for the plain loop with Decoder.forward's kernel (the fast paths: tests/fast)
        with fast_paths_overridden(model, prefix_cache=False, explicit_attention=False):
            tp = minidecoder.embed(model, texts, "tp", layer=-2, start=2, end=2)
        tokenizer = model.tokenizer.with_placeholders("<PST>")
        pst = tokenizer.token_to_id("<PST>")
        batch = encode_prompts(tokenizer, PROMPTEOL_TP.replace("{}", "{text}"), texts)
        embeds = model.embed(batch.input_ids, {pst: placeholder_row(model, "gaussian", 0)})
        out = model(batch.input_ids, batch.attention_mask, inputs_embeds=embeds, output_hidden_states=True)
        plain = last_token(out.hidden_states[-2], batch)
    assert torch.equal(tp, plain.float())


@pytest.mark.parametrize("name", ["mistral_window", "gemma2"])
def test_padding_and_batch_composition_do_not_change_an_embedding(name: str) -> None:
    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    long = "a very long sentence that forces plenty of padding onto every other row of the batch."
    options = dict(layer=-2, start=1, end=3)
    alone = torch.cat([minidecoder.embed(model, [t], "tp", **options) for t in SENTENCES])
    batched = minidecoder.embed(model, SENTENCES + [long], "tp", batch_size=4, **options)[:3]
    assert_close(batched, alone, atol=ATOL, rtol=RTOL)


# ---- templates, tokenization, errors -------------------------------------------------------------
def test_tp_templates_are_the_prompts_with_pst_before_the_quote() -> None:
    from minidecoder.methods.prompts import TEMPLATES
    from minidecoder.methods.tp import tp_templates

    assert tp_templates("prompteol", 1) == ['This sentence : <PST> "{text}" means in one word:"']
    assert tp_templates("pretended_cot", 1) == [
        'After thinking step by step , this sentence : <PST> "{text}" means in one word:"']
    for name, template in TEMPLATES.items():
        (tp,) = tp_templates(name, 1)
        assert tp.replace("<PST> ", "") == template


def test_placeholder_is_one_token_and_text_around_it_tokenizes_as_transformers() -> None:
    from minidecoder.methods.inputs import encode_one

    _, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    ours_tokenizer = model.tokenizer.with_placeholders("<PST>")
    tokenizer = hf_tokenizer(folder)
    tokenizer.add_tokens(["<PST>"])
    for s in SENTENCES:
        ours, _ = encode_one(ours_tokenizer, PROMPTEOL_TP.replace("{}", "{text}"), s)
        assert ours == tokenizer(PROMPTEOL_TP.format(s))["input_ids"]


@pytest.mark.parametrize("options,words", [
    (dict(layer=-2, start=3, end=2), "start <= end"),
    (dict(layer=-2, start=1, end=9), "blocks 0..3"),
    (dict(layer=7, start=1, end=2), "outside this model's hidden states"),
    (dict(layer=-3, start=1, end=3), "past the output layer"),
    (dict(layer=-1, start=1, end=2, resume_at=1), "resume_at"),
    (dict(layer=-3, start=1, end=2, resume_at=2), "resume_at 2 is past the last block that runs"),  # copied before none
    (dict(layer=-2, start=-1, end=2), "start <= end"),
])
def test_out_of_range_layers_are_clear_input_errors(options: dict, words: str) -> None:
    _, folder = checkpoint("llama")
    with pytest.raises(InputError, match=words):
        md_embed(folder, SENTENCES, **options)


def test_bad_options_and_texts_are_input_errors() -> None:
    _, folder = checkpoint("llama")
    with pytest.raises(InputError, match="pst_init"):
        build_method("tp", pst_init="normal")
    with pytest.raises(InputError, match="num_pst"):
        build_method("tp", prompt='x <PST> "{text}"', num_pst=2)
    with pytest.raises(InputError, match="neither a known prompt"):
        build_method("tp", prompt='no placeholder "{text}"')
    with pytest.raises(InputError, match="not one"):
        md_embed(folder, SENTENCES, layer=-2, start=1, end=2, pst_init="token:ab")
    with pytest.raises(InputError, match=r"'\u2603' is not in the vocabulary; the tokenizer reads it as <unk>"):
        md_embed(folder, SENTENCES, layer=-2, start=1, end=2, pst_init="token:\u2603")  # was <unk>'s row, unsaid
    with pytest.raises(InputError, match="must not contain"):
        md_embed(folder, ["a <PST> inside."], layer=-2, start=1, end=2)


def test_describe_states_the_seeded_gaussian() -> None:
    described = build_method("tp", seed=5).describe()
    assert described["pst_init"] == "gaussian" and described["seed"] == 5
    assert "manual_seed(5)" in described["pst_init_detail"]


# ---- the real default model ----------------------------------------------------------------------
@pytest.mark.real
def test_smollm2_tp_prompt_ids_equal_transformers_add_tokens(smollm2: Path) -> None:
    from transformers import AutoTokenizer

    from minidecoder.methods.inputs import encode_one
    from minidecoder.methods.tp import tp_templates

    model = minidecoder.load(smollm2)
    ours_tokenizer = model.tokenizer.with_placeholders("<PST>")
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    tokenizer.add_tokens(["<PST>"])
    for prompt in ("prompteol", "pretended_cot", "knowledge"):
        (template,) = tp_templates(prompt, 1)
        for s in SENTENCES + ["It's 5 o'clock, isn't it?", "naïve café — ok."]:
            ours, _ = encode_one(ours_tokenizer, template, s)
            assert ours == tokenizer(template.replace("{text}", s))["input_ids"], (prompt, s)


@pytest.mark.real
def test_smollm2_tp_matches_transformers_hooks(smollm2: Path) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32, attn_implementation="eager").eval()
    texts = ["a man is playing a flute.", "two dogs run through the snow.", "the stock fell sharply today.",
             "she reads a book."]
    ours = md_embed(smollm2, texts, prompt="pretended_cot", layer=-2, start=1, end=7)
    template = 'After thinking step by step , this sentence : <PST> "{}" means in one word:"'
    theirs = hf_tp_last_token(hf, smollm2, [template.format(t) for t in texts], -2, set(range(1, 7)),
                              gaussian_row(hf.config.hidden_size))
    assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
