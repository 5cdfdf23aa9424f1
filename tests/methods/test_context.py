"""Unpooled context (an instruction the model reads, never pooled) against an independent computation.

For each method that pools over text, the reference is built without minidecoder's methods: transformers'
tokenizer makes the ids of `"{context} {filled template}"` and the character offsets that say which rows are
the text's, one plain `model(...)` forward per text (no padding) gives the hidden states (and for ReBA the
attention patterns), and the pooling runs over the text's rows only. minidecoder embeds the texts as one
padded batch whose rows carry different contexts (one none). TP and HTP are checked against the
transformers hook implementations of their own tests, given the context as the papers' code gives it:
before the template, and for HTP as a piece of its own after `<s>`.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.methods import Method, build_method
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.htp import encode_htp
from test_methods_htp import hf_htp
from test_methods_tp import gaussian_row, hf_tokenizer, hf_tp_last_token
from tiny_models import checkpoint

ATOL = RTOL = 1e-5  # fp32
TEXTS = ["a cat sat on the mat.", "dogs run. birds fly!", "the quick brown fox."]
CONTEXTS = ["Retrieve documents:", "", "Classify the emotion of this text:"]
ECHO = "Rewrite: {text}. Again: {text}"


@pytest.fixture(scope="module")
def tiny():
    hf, folder = checkpoint("llama")
    return minidecoder.load(folder), folder, hf


def plain_rows(model, folder, template: str, text: str, context: str) -> tuple[torch.Tensor, list[list[int]], list[int]]:
    """(ids (1, T), the rows of each {text} occurrence, the context's rows), from transformers' tokenizer."""
    tokenizer = hf_tokenizer(folder)
    filled = template.replace("{text}", text)
    prompt = f"{context} {filled}" if context else filled
    enc = tokenizer(prompt, return_offsets_mapping=True)
    starts, at = [], prompt.find(text)
    while at >= 0 and len(starts) < template.count("{text}"):
        starts.append(at)
        at = prompt.find(text, at + len(text))
    offsets = enc["offset_mapping"]
    copies = [[t for t, (s, e) in enumerate(offsets) if e > s and s < start + len(text) and e > start] for start in starts]
    context_rows = [t for t, (s, e) in enumerate(offsets) if e > s and s < len(context)] if context else []
    return torch.tensor([enc["input_ids"]]), copies, context_rows


def plain_hidden(model, ids: torch.Tensor, layer: int) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, output_hidden_states=True).hidden_states[layer][0]  # (T, E)


@pytest.mark.parametrize("method,options,template", [
    ("mean", dict(layer=-1), "{text}"),
    ("mean", dict(layer=2), "{text}"),
    ("mean", dict(layer=-1, template="Text: {text} end"), "Text: {text} end"),
    ("echo", dict(template=ECHO), ECHO),
])
def test_mean_poolings_average_the_texts_rows_of_a_plain_forward(tiny, method, options, template) -> None:
    model, folder, _ = tiny
    layer = options.get("layer", -1)
    expected = []
    for text, context in zip(TEXTS, CONTEXTS):
        ids, copies, context_rows = plain_rows(model, folder, template, text, context)
        assert not set(copies[-1]) & set(context_rows)
        expected.append(plain_hidden(model, ids, layer)[copies[-1]].mean(dim=0))  # the last copy: Echo's
    ours = minidecoder.embed(model, TEXTS, method, context=CONTEXTS, **options)
    assert_close(ours, torch.stack(expected), atol=ATOL, rtol=RTOL)
    read = minidecoder.embed(model, TEXTS, method, **options)
    assert (ours[[0, 2]] - read[[0, 2]]).abs().max() > 1e-2  # the context is read: it changes the text's states
    assert_close(ours[1], read[1], atol=ATOL, rtol=RTOL)  # "" is no context


def test_mean_over_all_tokens_leaves_the_context_out(tiny) -> None:
    model, folder, _ = tiny
    expected = []
    for text, context in zip(TEXTS, CONTEXTS):
        ids, _, context_rows = plain_rows(model, folder, "Text: {text}", text, context)
        rows = [t for t in range(ids.shape[1]) if t not in context_rows]  # BOS and template included
        expected.append(plain_hidden(model, ids, -1)[rows].mean(dim=0))
    ours = minidecoder.embed(model, TEXTS, "mean", context=CONTEXTS, template="Text: {text}", over="all")
    assert_close(ours, torch.stack(expected), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("method,options,template", [
    ("last", {}, "{text}"),
    ("echo", dict(template=ECHO, pooling="last"), ECHO),
    ("prompteol", dict(senteval_text=False), 'This sentence : "{text}" means in one word:"'),
])
@pytest.mark.parametrize("contexts", [CONTEXTS, ["Retrieve documents:"] * 3])  # one shared: a prefix run once
def test_one_token_readouts_read_the_context_before_the_template(tiny, method, options, template, contexts) -> None:
    model, folder, _ = tiny
    expected = []
    for text, context in zip(TEXTS, contexts):
        ids, copies, _ = plain_rows(model, folder, template, text, context)
        row = copies[-1][-1] if method == "echo" else ids.shape[1] - 1
        expected.append(plain_hidden(model, ids, -1)[row])
    assert_close(minidecoder.embed(model, TEXTS, method, context=contexts, **options), torch.stack(expected),
                 atol=ATOL, rtol=RTOL)


def fused_attention_of(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ReBA's A (T, T): the max over every block and head of (P + P^T) / 2 (at least 0), and h at -1."""
    with torch.no_grad():
        out = model(ids, output_hidden_states=True, output_attentions=True)
    A = torch.stack([((p + p.transpose(-1, -2)) / 2).amax(dim=1)[0] for p in out.attentions]).amax(dim=0)
    return A.clamp_min(0), out.hidden_states[-1][0]


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_reba_weights_no_context_row(tiny, pooling: str) -> None:
    """pooling=mean: w = sum_{i in copy 1} triu(A)[i] normalized (a context lies before, so k >= i never
    reaches it); pooling=last: the last row of A over every key but the context's."""
    model, folder, _ = tiny
    expected = []
    for text, context in zip(TEXTS, CONTEXTS):
        ids, copies, context_rows = plain_rows(model, folder, "{text}{text}", text, context)
        A, h = fused_attention_of(model, ids)
        A[:, context_rows] = 0  # no key of the context is pooled
        w = torch.triu(A)[copies[0]].sum(dim=0) if pooling == "mean" else A[-1]
        expected.append((w / w.sum()) @ h)
    ours = minidecoder.embed(model, TEXTS, "reba", context=CONTEXTS, pooling=pooling)
    assert_close(ours, torch.stack(expected), atol=ATOL, rtol=RTOL)
    if pooling == "last":  # the reference's full row reaches every key: without the zeroing it would pool the context
        ids, _, context_rows = plain_rows(model, folder, "{text}{text}", TEXTS[0], CONTEXTS[0])
        A, h = fused_attention_of(model, ids)
        assert (A[-1] / A[-1].sum() @ h - ours[0]).abs().max() > 1e-3


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_tp_reads_the_context_before_its_prompt(tiny, pooling: str) -> None:
    """TP w. Mean (HTP Table 1) and TP: the hook implementation on `"{context} This sentence : <PST> ..."`,
    pooled over the sentence's rows (<PST>, template and context excluded), or read at the last token."""
    model, folder, hf = tiny
    template = 'This sentence : <PST> "{text}" means in one word:"'
    prompts = [(f"{c} " if c else "") + template.replace("{text}", t) for t, c in zip(TEXTS, CONTEXTS)]
    row = gaussian_row(hf.config.hidden_size)
    hidden = hf_tp_last_token(hf, folder, prompts, -2, {1, 2}, row, every_token=True)  # (B, T, E), left padded
    tokenizer = hf_tokenizer(folder)
    tokenizer.add_tokens(["<PST>"])
    enc = tokenizer(prompts, padding=True, padding_side="left", return_offsets_mapping=True)
    expected = []
    for b, (prompt, text) in enumerate(zip(prompts, TEXTS)):
        first = prompt.index('"') + 1
        rows = [t for t, (s, e) in enumerate(enc["offset_mapping"][b]) if enc["attention_mask"][b][t]
                and e > s and s < first + len(text) and e > first]
        expected.append(hidden[b, rows].mean(dim=0) if pooling == "mean" else hidden[b, -1])
    ours = minidecoder.embed(model, TEXTS, "tp", context=CONTEXTS, layer=-2, start=1, end=3, pooling=pooling,
                             senteval_text=False)
    assert_close(ours, torch.stack(expected), atol=ATOL, rtol=RTOL)


def test_htp_blocks_start_after_the_context(tiny) -> None:
    model, folder, hf = tiny
    docs = [("A cat sat. It purred!", ["A cat sat.", "It purred!"]), ("no boundary here", ["no boundary here."]),
            ("Dogs run? Birds fly.", ["Dogs run?", "Birds fly."])]
    contexts = ["Given a claim, find support.", "", "Retrieve relevant documents."]
    ours = minidecoder.embed(model, [d[0] for d in docs], "htp", context=contexts, layer=-2, start=1, end=3)
    assert_close(ours, hf_htp(hf, folder, docs, -2, {1, 2}, contexts=contexts), atol=ATOL, rtol=RTOL)
    method = build_method("htp", layer=-2, start=1, end=3)
    inputs = encode_htp(method, model, [d[0] for d in docs], contexts)
    assert inputs.blocks == [2, 1, 2]  # the context never becomes (or joins) a sentence block
    first_target = {}
    for b, target, _ in inputs.pairs:
        first_target[b] = min(first_target.get(b, target), target)
    for b, (start, end) in enumerate(inputs.batch.context_spans):
        assert first_target[b] >= end and not inputs.pool[b, start:end].any()  # no placeholder, no pooled row in it
    pooled = minidecoder.embed(model, [f"{c} {d[0]}" if c else d[0] for d, c in zip(docs, contexts)], "htp",
                               layer=-2, start=1, end=3)
    assert (pooled[[0, 2]] - ours[[0, 2]]).abs().max() > 1e-2  # joined to the text, it is pooled and split


def test_a_context_leaves_the_tokens_of_the_joined_string_and_moves_only_the_pooled_rows(tiny) -> None:
    """With the bare template, (context, text) is tokenized as "{context} {text}" was: the old pooled input
    and the new one differ only in which rows the pooling reads."""
    model, _, _ = tiny
    joined = encode_prompts(model.tokenizer, "{text}", [f"{c} {t}" if c else t for t, c in zip(TEXTS, CONTEXTS)])
    apart = encode_prompts(model.tokenizer, "{text}", TEXTS, contexts=CONTEXTS)
    assert torch.equal(joined.input_ids, apart.input_ids) and torch.equal(joined.attention_mask, apart.attention_mask)
    for b, ((start, end), ((first, last),)) in enumerate(zip(apart.context_spans, apart.text_spans)):
        assert end <= first and last == joined.text_spans[b][0][1]
        assert (end > start) == bool(CONTEXTS[b])


def test_pairs_and_the_context_argument_are_the_same_input(tiny) -> None:
    model, _, _ = tiny
    pairs = [(c, t) if c else t for t, c in zip(TEXTS, CONTEXTS)]
    assert torch.equal(minidecoder.embed(model, pairs, "mean"), minidecoder.embed(model, TEXTS, "mean", context=CONTEXTS))
    one = minidecoder.embed(model, TEXTS, "mean", context="Retrieve documents:")
    assert torch.equal(one, minidecoder.embed(model, TEXTS, "mean", context=["Retrieve documents:"] * 3))


@dataclasses.dataclass
class Plain(Method):
    name = "plain_for_test"
    layer: int = -1

    def passes(self, model, texts):
        return build_method("mean").passes(model, texts)


@pytest.mark.parametrize("call,words", [
    (lambda m: minidecoder.embed(m, TEXTS, "mean", context=["a", "b"]), "2 strings for 3 texts"),
    (lambda m: minidecoder.embed(m, [("a", "b")], "mean", context="c"), "context= was given too"),
    (lambda m: minidecoder.embed(m, [("a", "b", "c")], "mean"), "not a \\(context, text\\) pair"),
    (lambda m: minidecoder.embed(m, ["x"], "mean", context="  "), "whitespace-only"),
    (lambda m: minidecoder.embed(m, ["x"], "mean", context=[3]), "is a int, not a string"),
    (lambda m: minidecoder.embed(m, ["x"], "tp", context="a <PST> b", layer=-2, start=1, end=3), "placeholder"),
    (lambda m: minidecoder.embed(m, ["x."], "htp", context="a <B-PST>", layer=-2, start=1, end=3), "placeholder"),
    (lambda m: minidecoder.embed(m, ["x"], "reba", context="a", first_half_split=True), "cut into a context"),
    (lambda m: minidecoder.embed(m, ["x"], Plain(), context="a"), "takes no context"),
])
def test_bad_contexts_are_input_errors_naming_the_way_out(tiny, call, words: str) -> None:
    with pytest.raises(InputError, match=words):
        call(tiny[0])


def test_one_embedding_job_carries_each_rows_context(tiny, tmp_path) -> None:
    """A .jsonl row's "context" is the row's (context, text) pair; `context=` gives every row one (a .txt)."""
    import json

    import numpy as np

    from minidecoder.running.jobs import load_metadata, run_embedding_job

    model, _, _ = tiny
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": t, **({"context": c} if c else {})}) + "\n"
                            for t, c in zip(TEXTS, CONTEXTS)), encoding="utf-8")
    run_embedding_job(model, "mean", rows, tmp_path / "rows.npy", chunk_size=2)
    want = minidecoder.embed(model, TEXTS, "mean", context=CONTEXTS)
    assert_close(torch.from_numpy(np.load(tmp_path / "rows.npy")), want, atol=ATOL, rtol=RTOL)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    run_embedding_job(model, "mean", lines, tmp_path / "lines.npy", context="Retrieve documents:")
    want = minidecoder.embed(model, TEXTS, "mean", context="Retrieve documents:")
    assert_close(torch.from_numpy(np.load(tmp_path / "lines.npy")), want, atol=ATOL, rtol=RTOL)
    assert load_metadata(tmp_path / "lines.npy")["context"] == "Retrieve documents:"
    rows.write_text(json.dumps({"text": "a", "context": " "}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1 is whitespace-only"):
        run_embedding_job(model, "mean", rows, tmp_path / "bad.npy")


def test_the_sentence_encoder_takes_a_context(tiny) -> None:
    model, _, _ = tiny
    encoder = minidecoder.SentenceEncoder(model, "mean")
    got = encoder.encode(TEXTS, context=CONTEXTS, convert_to_tensor=True)
    assert torch.equal(got, minidecoder.embed(model, TEXTS, "mean", context=CONTEXTS))


def test_the_embed_command_takes_a_context(tiny, tmp_path, capsys) -> None:
    import numpy as np

    from minidecoder.cli import main

    model, folder, _ = tiny
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["embed", "--model", str(folder), "--method", "mean", "--input", str(lines), "--output", str(out),
                 "--context", "Retrieve documents:", "--no-progress"]) == 0
    want = minidecoder.embed(model, TEXTS, "mean", context="Retrieve documents:")
    assert_close(torch.from_numpy(np.load(out)), want, atol=ATOL, rtol=RTOL)
    assert main(["embed", "--model", str(folder), "--method", "mean", "--input", str(lines), "--output",
                 str(tmp_path / "bad.npy"), "--context", " "]) == 2
    assert "(--context) is whitespace-only" in capsys.readouterr().err
