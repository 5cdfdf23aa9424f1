"""HTP's code gives queries and documents templates of their own, and reads some rows at an appended `</s>`:
`eval retrieval --query-opt` embeds the queries with their own method options (over `--opt`), and a template's
final `{eos}` appends the tokenizer's EOS id, the token a last-token readout then reads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import minidecoder
from family_helpers import run_cli
from minidecoder.errors import InputError
from minidecoder.evaluation.retrieval import evaluate_retrieval, load_beir_set
from minidecoder.methods.inputs import encode_prompts
from test_retrieval import write_beir

INSTRUCT = "Given a query, retrieve documents"
QUERY_TEMPLATE = "Query: {text} Query again: {text}"
DOCUMENT_TEMPLATE = "{text}{text}"


def test_queries_take_their_own_options_and_documents_the_others(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "data")
    prefix = tmp_path / "echo"
    assert run_cli("eval", "retrieval", "--model", str(tiny_llama), "--method", "echo", "--sets", "toy",
                   "--data", str(folder), "--instruction", INSTRUCT, "--opt", f"template={DOCUMENT_TEMPLATE}",
                   "--query-opt", f"template={QUERY_TEMPLATE}", "--output", str(prefix), "--no-progress") == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert report["stamp"]["method"]["template"] == DOCUMENT_TEMPLATE
    assert report["stamp"]["query_method"]["template"] == QUERY_TEMPLATE
    assert f"--query-opt 'template={QUERY_TEMPLATE}'" in report["stamp"]["command"]
    # independently: each query embedded with the query template (instruction as context), each document
    # with the document template, by the public API
    model, data = minidecoder.load(tiny_llama), load_beir_set("toy", folder)
    queries = set(data.queries)

    def encode(items: list) -> torch.Tensor:
        rows = []
        for item in items:
            context, text = item if isinstance(item, tuple) else (None, item)
            template = QUERY_TEMPLATE if context is not None and text in queries else DOCUMENT_TEMPLATE
            rows.append(minidecoder.embed(model, [text], "echo", truncate=512, context=context, template=template))
        return torch.cat(rows)

    direct = evaluate_retrieval(encode, data, INSTRUCT, progress=False)["per_query"]
    run = report["results"]["sets"]["toy"]["per_query"]
    assert {q: m["ndcg_cut_10"] for q, m in direct.items()} == pytest.approx(
        {q: m["ndcg_cut_10"] for q, m in run.items()}, abs=1e-9)
    # and the split matters: one template for both sides scores otherwise
    same = tmp_path / "same"
    assert run_cli("eval", "retrieval", "--model", str(tiny_llama), "--method", "echo", "--sets", "toy",
                   "--data", str(folder), "--instruction", INSTRUCT, "--opt", f"template={DOCUMENT_TEMPLATE}",
                   "--output", str(same), "--no-progress") == 0
    other = json.loads(same.with_suffix(".json").read_text())["results"]["sets"]["toy"]["per_query"]
    assert other != run


def test_a_query_without_instruction_is_never_taken_for_a_document(tiny_llama: Path, tmp_path: Path) -> None:
    """A query whose text equals a document's gets the query options still (no instruction: TP w. PromptEOL)."""
    folder = write_beir(tmp_path / "data")
    data = load_beir_set("toy", folder)
    corpus = folder / "toy" / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + json.dumps({"_id": "same", "title": "", "text": data.queries[0]}) + "\n")
    prefix = tmp_path / "last"
    assert run_cli("eval", "retrieval", "--model", str(tiny_llama), "--method", "last", "--sets", "toy",
                   "--data", str(folder), "--instruction", "none", "--query-opt", "template=Q: {text}",
                   "--output", str(prefix), "--no-progress") == 0
    run = json.loads(prefix.with_suffix(".json").read_text())["results"]["sets"]["toy"]
    model = minidecoder.load(tiny_llama)
    query = minidecoder.embed(model, [data.queries[0]], "last", template="Q: {text}")
    document = minidecoder.embed(model, [data.queries[0]], "last")
    assert not torch.allclose(query, document)  # so the two sides must have been kept apart to score alike
    assert run["queries"] == len(data.queries)


def test_eos_is_appended_and_read_by_the_last_token(tiny_llama: Path) -> None:
    model = minidecoder.load(tiny_llama)
    tokenizer = model.tokenizer
    plain = encode_prompts(tokenizer, 'The sentence "{text}" means in one word:', ["a cat sat."])
    with_eos = encode_prompts(tokenizer, 'The sentence "{text}" means in one word: {eos}', ["a cat sat."])
    ids = plain.input_ids[0].tolist()
    assert with_eos.input_ids[0].tolist() == ids + [tokenizer.eos_id]
    assert with_eos.text_spans == plain.text_spans
    # the readout is the EOS's final hidden state, as a plain forward over the same ids gives it
    vector = minidecoder.embed(model, ["a cat sat."], "last", template='The sentence "{text}" means in one word: {eos}')
    with torch.no_grad():
        hidden = model(torch.tensor([ids + [tokenizer.eos_id]]), output_hidden_states=True).hidden_states[-1][0, -1]
    torch.testing.assert_close(vector[0], hidden.float(), rtol=0, atol=1e-5)  # fp32, the fast executor's order


@pytest.mark.parametrize("misplaced, said, in_htp", [
    ("{eos} {text}", "has \\{eos\\} before its end", "{text} {eos}"),
    ("{text} {bos}", "has \\{bos\\} after its start", "{bos}{text}")])
def test_eos_anywhere_but_last_and_bos_anywhere_but_first_are_refused(tiny_llama: Path, misplaced: str, said: str,
                                                                      in_htp: str) -> None:
    model = minidecoder.load(tiny_llama)
    with pytest.raises(InputError, match=said):
        minidecoder.embed(model, ["a cat"], "last", template=misplaced)
    with pytest.raises(InputError, match="which HTP does not read"):  # HTP's own options put them
        minidecoder.embed(model, ["a cat."], "htp", template=in_htp)


@pytest.mark.parametrize("method, template, options", [
    ("mean", "Text:{text}", {}), ("last", "{text} {eos}", {}), ("echo", "Query: {text} Query again: {text}", {}),
    ("tp", 'The sentence <PST> "{text}" means in one word: {eos}', {"start": 1, "end": 3, "layer": -2})])
def test_a_leading_bos_puts_the_bos_first_as_htps_literal_s(tiny_llama: Path, tmp_path: Path, method: str,
                                                           template: str, options: dict) -> None:
    """HTP's code writes a literal `<s>` before its baselines' templates, read as the BOS whatever the tokenizer's
    policy; `{bos}` first is that token: on a tokenizer that adds none, the same ids and embeddings as the plain
    template on one that adds it, and on one that adds it, a single BOS."""
    import shutil

    from tiny_models import save_tiny_tokenizer

    no_bos = shutil.copytree(tiny_llama, tmp_path / "no-bos")
    save_tiny_tokenizer(no_bos, add_bos=False)
    policy, literal = minidecoder.load(tiny_llama), minidecoder.load(no_bos)
    assert policy.tokenizer.add_bos and not literal.tokenizer.add_bos
    key = "prompt" if method == "tp" else "template"
    texts = ["a cat sat on the mat.", "dogs ran."]
    if method != "tp":  # TP adds its <PST> to the tokenizer itself; its ids are compared through the embeddings
        plain = encode_prompts(policy.tokenizer, template, texts)
        for tokenizer in (policy.tokenizer, literal.tokenizer):
            first = encode_prompts(tokenizer, "{bos}" + template, texts)
            assert first.input_ids.tolist() == plain.input_ids.tolist() and first.text_spans == plain.text_spans
    expected = minidecoder.embed(policy, texts, method, **{key: template}, **options)
    torch.testing.assert_close(minidecoder.embed(literal, texts, method, **{key: "{bos}" + template}, **options),
                               expected, rtol=0, atol=0)
    assert (minidecoder.embed(literal, texts, method, **{key: template}, **options) - expected).abs().max() > 1e-3


def test_bos_without_a_bos_token_is_refused(tiny_llama: Path) -> None:
    model = minidecoder.load(tiny_llama)
    model.tokenizer.bos_id = None
    with pytest.raises(InputError, match="puts a BOS token first, and this tokenizer has none"):
        encode_prompts(model.tokenizer, "{bos}{text}", ["a cat"])


@pytest.mark.parametrize("method, options, takes", [
    ("mean", [], True), ("htp", [], True), ("prompteol", [], False),
    ("tp", ["prompt=prompteol"], False),  # TP w. PromptEOL: the prompt is its instruction (HTP section 5)
    ("tp", ["pooling=mean"], True), ("tp", ['pooling="mean"'], True),  # TP w. Mean takes the task's
])
def test_auto_gives_the_instruction_to_every_method_but_tp_with_prompteol(method, options, takes) -> None:
    import argparse

    from minidecoder.evaluation.family import instruction_for

    args = argparse.Namespace(instruction="auto", method=method, opt=options)
    assert instruction_for(args, INSTRUCT) == (INSTRUCT if takes else None)


PIECE_TEMPLATES = ["{text} {eos}", "Query: {text} Query again: {text}", 'The sentence "{text}" means in one word: {eos}',
                   "Text:{text}", 'The sentence "{text}" means in one word: {|}"']


@pytest.mark.parametrize("template", PIECE_TEMPLATES)
@pytest.mark.parametrize("context", [None, "Retrieve it."])
def test_pieces_tokenize_each_piece_on_its_own_as_htps_code(tiny_llama: Path, template: str, context: str | None) -> None:
    """HTP's code (parser.py `_tokenize_from_pieces`) tokenizes the template's text around each field, and the text,
    on their own, ids joined: the oracle here is the `tokenizers` library on each piece. The context opens the
    first piece with one space (HTP writes its instruction there); `{eos}` is the EOS id after the last piece;
    `{|}` cuts a piece in two (HTP's `{"}`: PromptEOL's read quote, a field of its own)."""
    from tokenizers import Tokenizer as FastTokenizer

    model = minidecoder.load(tiny_llama)
    tokenizer, fast = model.tokenizer, FastTokenizer.from_file(str(tiny_llama / "tokenizer.json"))
    text = "a cat sat."
    body = template.removesuffix("{eos}")
    parts = body.split("{text}")
    parts[0] = f"{context} {parts[0]}" if context else parts[0]
    expected, spans = [tokenizer.bos_id], []
    for k, part in enumerate(parts):
        if k:
            spans.append((len(expected), len(expected) + len(fast.encode(text, add_special_tokens=False).ids)))
            expected += fast.encode(text, add_special_tokens=False).ids
        for piece in part.split("{|}"):
            expected += fast.encode(piece, add_special_tokens=False).ids if piece else []
    expected += [tokenizer.eos_id] if template.endswith("{eos}") else []
    batch = encode_prompts(tokenizer, template, [text], contexts=None if context is None else [context], pieces=True)
    assert batch.input_ids[0].tolist() == expected and batch.text_spans == [spans]
    if context is not None:  # the context's tokens, never pooled
        assert batch.context_spans == [(1, 1 + len(fast.encode(context, add_special_tokens=False).ids))]


def test_a_piece_cut_splits_what_one_piece_merges_and_only_pieces_read_it(tiny_llama: Path, tmp_path: Path) -> None:
    """`{|}` cuts a piece in two (HTP's code's PromptEOL reads its closing quote as a field, `{"}`, tokenized on its
    own): with a merge of ' "', the piece `means "` ends in ' "', cut before the quote in ' ', '"'. One string has
    no pieces to cut, so there it is refused, as by HTP, which cuts its own."""
    import shutil

    from tiny_models import save_tiny_tokenizer

    merged = shutil.copytree(tiny_llama, tmp_path / "merges")
    save_tiny_tokenizer(merged, merges=((" ", '"'),))
    model = minidecoder.load(merged)
    tokens = lambda template: [model.tokenizer.decode([i]) for i in encode_prompts(
        model.tokenizer, template, ["a cat."], pieces=True).input_ids[0].tolist()]
    assert tokens('It: "{text}" means "')[-2:] == ["s", ' "'] and tokens('It: "{text}" means {|}"')[-3:] == ["s", " ", '"']
    with pytest.raises(InputError, match="which only pieces=true reads"):
        minidecoder.embed(model, ["a cat."], "prompt", template='It: "{text}" means {|}"')
    with pytest.raises(InputError, match="holds \\{\\|\\}, which HTP does not read"):
        minidecoder.embed(model, ["a cat."], "htp", template="Text: {|}{text}")


@pytest.mark.parametrize("method, key, template, options", [
    ("last", "template", "{text} {eos}", {}),
    ("prompt", "template", 'The sentence "{text}" means in one word: {eos}', {}),
    ("tp", "prompt", 'The sentence <PST> "{text}" means in one word: {eos}', {"start": 1, "end": 3, "layer": -2})])
def test_pieces_reach_the_tokens_a_method_reads(tiny_llama: Path, method: str, key: str, template: str,
                                                options: dict) -> None:
    """The space before `{eos}` is a token of its own by pieces (one string strips it): the last token read
    follows it, so the embedding moves; by pieces, `last` is the plain forward's final state over those ids."""
    model = minidecoder.load(tiny_llama)
    texts = ["a cat sat on the mat.", "dogs ran."]
    whole = minidecoder.embed(model, texts, method, **{key: template}, **options)
    pieces = minidecoder.embed(model, texts, method, **{key: template}, pieces=True, **options)
    assert (pieces - whole).abs().max() > 1e-3
    if method == "last":
        ids = encode_prompts(model.tokenizer, template, texts[1:], pieces=True).input_ids
        assert [model.tokenizer.decode([i]) for i in ids[0, -2:].tolist()] == [" ", "</s>"]  # the space, the EOS
        with torch.no_grad():
            hidden = model(ids, output_hidden_states=True).hidden_states[-1][0, -1]
        torch.testing.assert_close(pieces[1], hidden.float(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["mean", "last", "echo", "prompt", "prompteol", "metaeol", "tp"])
def test_every_method_that_fills_a_template_takes_pieces_and_refuses_a_non_boolean(tiny_llama: Path,
                                                                                   method: str) -> None:
    model = minidecoder.load(tiny_llama)
    options = {"end": 3} if method == "tp" else {}  # the tiny model has 4 blocks
    minidecoder.embed(model, ["a cat."], method, pieces=True, **options)
    with pytest.raises(InputError, match="pieces"):
        minidecoder.embed(model, ["a cat."], method, pieces="yes", **options)
