"""Bad method inputs get a clear answer through `minidecoder.embed`: out-of-range layers and block
ranges, non-finite alpha, too-long inputs (error by default, explicit truncation of the TEXT as the
way out), empty texts, bad templates, and NaN/inf traced to the block where it first appears.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import minidecoder
from minidecoder.running.diagnostics import first_nonfinite_layer
from minidecoder.errors import InputError, MinidecoderError, NumericsError
from minidecoder.methods import build_method
from minidecoder.methods.inputs import encode_prompts


@pytest.fixture(scope="module")
def folder(tiny_llama: Path) -> Path:
    return tiny_llama


@pytest.fixture(scope="module")
def model(folder: Path):
    return minidecoder.load(folder)  # 4 blocks: output layers 0..4 (-5..-1), intervention blocks 0..3


def embed_error(model, method: str, texts=("a short text.",), **options) -> MinidecoderError:
    with pytest.raises(MinidecoderError) as caught:
        minidecoder.embed(model, list(texts) if not isinstance(texts, str) else texts, method, **options)
    assert caught.value.fix
    return caught.value


# ---- layers and ranges ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method, options, words", [
    ("mean", {"layer": 5}, "output layer 5 is outside this model's hidden states (it has 4 blocks, so layers 0..4"),
    ("prompteol", {"layer": -6}, "output layer -6 is outside"),
    ("last", {"layer": 1.5}, "output layer 1.5 is not an integer"),
    ("cp", {"steer_layer": 4}, "steer_layer 4 is not a block of this model (0-based blocks 0..3)"),
    ("cp", {"steer_layer": -1}, "steer_layer -1 is not a block"),
    ("tp", {"layer": -1, "start": 1, "end": 9}, "TP range [1, 9) is not within this model's blocks 0..3"),
    ("tp", {"layer": -1, "start": 3, "end": 2}, "TP range [3, 2)"),
    ("tp", {"layer": 2, "start": 1, "end": 4}, "TP range [1, 4) reaches past the output layer 2"),
    ("htp", {"layer": -1, "start": 0, "end": 5}, "HTP range [0, 5) is not within"),
])
def test_out_of_range_layers_name_the_value_and_the_range(model, method: str, options: dict, words: str) -> None:
    error = embed_error(model, method, **options)
    assert isinstance(error, InputError) and words in error.problem, error.problem


@pytest.mark.parametrize("alpha", [math.nan, math.inf, -math.inf, "big", True])
def test_cp_alpha_must_be_finite(model, alpha) -> None:
    error = embed_error(model, "cp", alpha=alpha)
    assert f"alpha {alpha!r}" in error.problem and "finite" in error.problem


# ---- texts ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, options, text", [
    (method, options, text)
    for method, options in [("mean", {}), ("prompteol", {}), ("echo", {}), ("reba", {}),
                            ("htp", {"layer": -1, "start": 0, "end": 2})]
    for text in ["", "   ", "\n\t "]
    if text or method != "prompteol"])  # a prompt read at its last token embeds "" (test_empty_text.py)
def test_empty_or_whitespace_text_names_its_row(model, method: str, options: dict, text: str) -> None:
    error = embed_error(model, method, texts=["fine", "also fine", text], **options)
    assert f"text 2 is empty or whitespace-only ({text!r})" in error.problem  # the caller's row, not a batch's


@pytest.mark.parametrize("texts", ["one string", ["ok", 3], [b"bytes"]])
def test_texts_must_be_a_list_of_strings(model, texts) -> None:
    assert "texts must be a list of strings" in embed_error(model, "mean", texts=texts).problem


@pytest.mark.parametrize("text", ["no sentence boundary here at all", "x", "...", "???"])
def test_htp_text_without_sentence_boundaries_is_one_block(model, text: str) -> None:
    from minidecoder.methods.text import split_sentences

    assert len(split_sentences(text)) <= 1 or text in ("...", "???")
    vector = minidecoder.embed(model, [text], "htp", layer=-1, start=0, end=2)
    assert vector.shape == (1, model.config.hidden_size) and bool(torch.isfinite(vector).all())


# ---- templates -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("template, words", [
    ("This sentence means in one word:", "has no {text} placeholder"),
    ('This {sentence} : "{text}"', "unknown placeholder(s) {sentence}"),
    ("{txt}", "unknown placeholder(s) {txt}"),
])
def test_bad_templates(model, template: str, words: str) -> None:
    for method in ("prompt", "mean", "last"):
        error = embed_error(model, method, template=template)
        assert words in error.problem and "{text}" in error.fix


# ---- inputs longer than the model's context ------------------------------------------------------------
@pytest.fixture
def short_context(model):
    """The tiny checkpoint declares no context; give it one of 40 tokens (tokenizer_config model_max_length)."""
    model.tokenizer.model_max_length = 40
    yield model
    model.tokenizer.model_max_length = None


def test_too_long_input_is_an_error_naming_text_template_and_limit(short_context) -> None:
    model = short_context
    text = "a sentence that is far too long for this context"
    error = embed_error(model, "prompt", texts=["short.", text], template="Say: {text}", senteval_text=False)
    # the text by its index in the caller's list, its own length, the template's share, and the limit
    assert f"text 1 is {len(text)} tokens; with method prompt's prompt and special tokens (6 more) that is " \
           f"{len(text) + 6}, longer than the model's context of 40 tokens" in error.problem
    assert "truncate=34" in error.fix  # the number that fits


def test_truncate_cuts_the_text_not_the_template_and_says_so(short_context) -> None:
    model = short_context
    texts = ["short.", "a sentence that is far too long for this context"]
    report: dict = {}
    from minidecoder.errors import TruncationWarning  # its own category: a caller can silence it alone

    with pytest.warns(TruncationWarning, match=r"truncate=34: 1 of 2 texts were cut to their first 34 tokens \(text 1\)"):
        got = minidecoder.embed(model, texts, "prompt", template="Say: {text}", senteval_text=False, truncate=34,
                                report=report)
    assert report == {"truncate": 34, "truncated_rows": {1: len(texts[1])}}
    expected = minidecoder.embed(model, [texts[0], texts[1][:34]], "prompt", template="Say: {text}",
                                 senteval_text=False)
    torch.testing.assert_close(got, expected)  # the template survived whole; only the text was cut


def test_a_report_without_truncate_records_that_nothing_was_cut(model) -> None:
    """Found: `embed(..., report=report)` without `truncate` left the dict empty, so a caller that always passes
    one and reads `report["truncated_rows"]` for its metadata failed with a KeyError on every uncut run."""
    report: dict = {"mine": 1}
    minidecoder.embed(model, ["a short text."], "mean", report=report)
    assert report == {"mine": 1, "truncate": None, "truncated_rows": {}}


def test_an_explicit_max_length_is_a_limit_too(model) -> None:
    with pytest.raises(InputError, match=r"more than max_length = 8"):
        encode_prompts(model.tokenizer, "{text}", ["twelve chars"], max_length=8)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_truncate_must_be_a_positive_token_count(model, bad) -> None:
    assert "must be a positive number of tokens" in embed_error(model, "mean", truncate=bad).problem


def test_numpy_integers_are_counts_and_a_report_must_be_a_dict(model, tmp_path: Path) -> None:
    """Found: `batch_size=np.int64(4)` and `truncate=np.int64(3)` (from np.arange, a sweep's grid) were refused as
    not integers; `report=[]` failed as a bare TypeError inside the truncation."""
    import numpy as np

    from minidecoder.errors import ArgumentTypeError
    from minidecoder.running.jobs import run_embedding_job

    texts = ["a b c d e f", "g h"]
    report: dict = {}
    with pytest.warns(UserWarning):
        got = minidecoder.embed(model, texts, "mean", batch_size=np.int64(1), truncate=np.int64(3), report=report)
    with pytest.warns(UserWarning):
        want = minidecoder.embed(model, texts, "mean", batch_size=1, truncate=3)
    torch.testing.assert_close(got, want)
    assert report["truncate"] == 3 and type(report["truncate"]) is int
    with pytest.raises(ArgumentTypeError, match="report is a list; it is a dict"):
        minidecoder.embed(model, texts, "mean", truncate=1, report=[])
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    run_embedding_job(model, "mean", source, tmp_path / "o.npy", chunk_size=np.int64(1), batch_size=np.int32(2))
    assert json.loads((tmp_path / "o.npy.json").read_text())["chunk_size"] == 1  # a JSON record: plain ints
    torch.testing.assert_close(minidecoder.embed(model, texts, "tp", start=np.int32(1), end=np.int64(3)),
                               minidecoder.embed(model, texts, "tp", start=1, end=3))  # was "end 3 is not an integer"
    described = build_method("cp", alpha=np.float32(0.5), steer_layer=np.int64(2)).describe()
    assert json.dumps(described) and type(described["steer_layer"]) is int and described["alpha"] == 0.5


def test_declared_context_is_read_from_tokenizer_config(folder: Path, tmp_path: Path) -> None:
    import json
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "c"))
    config = json.loads((copy / "tokenizer_config.json").read_text())
    for value, expected in [(2048, 2048), (int(1e30), None)]:
        config["model_max_length"] = value
        (copy / "tokenizer_config.json").write_text(json.dumps(config))
        assert minidecoder.load(copy).tokenizer.model_max_length == expected
    config["model_max_length"] = "many"  # a wrong type is named, not ignored
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(MinidecoderError, match="model_max_length is .many."):
        minidecoder.load(copy)


# ---- NaN / inf -----------------------------------------------------------------------------------------
def overflowing_fp16_model(folder: Path, block: int = 2):
    """The tiny model in float16 with block `block`'s MLP scaled so its activations overflow."""
    model = minidecoder.load(folder, dtype="float16")
    with torch.no_grad():
        model.layers[block].mlp.gate_proj.weight.mul_(1e3)
        model.layers[block].mlp.up_proj.weight.mul_(1e3)
    return model


def test_first_nonfinite_layer_names_the_block(folder: Path, model) -> None:
    ids = torch.tensor([model.tokenizer.encode("hello there"), model.tokenizer.encode("general kenobi")[:12]])
    assert first_nonfinite_layer(minidecoder.load(folder, dtype="float16"), ids) is None  # fine before scaling
    found = first_nonfinite_layer(overflowing_fp16_model(folder, block=2), ids)
    assert (found.block, found.site, found.hidden_index) == (2, "mlp_out", 3)
    assert "block 2 (0-based), site 'mlp_out'" in found.describe() and "float16" in found.describe()
    found = first_nonfinite_layer(overflowing_fp16_model(folder, block=0), ids)
    assert found.block == 0


def test_first_nonfinite_layer_on_a_padded_batch(folder: Path) -> None:
    model = minidecoder.load(folder, dtype="float16")
    batch = encode_prompts(model.tokenizer, "{text}", ["a long enough text", "short"])
    assert bool((~batch.attention_mask).any())  # left padding present
    assert first_nonfinite_layer(model, batch) is None  # padded positions raise no false alarm
    with torch.no_grad():
        model.model.embed_tokens.weight[ord("s") - 32 + 4] = math.inf  # 's': a real token of both rows
    found = first_nonfinite_layer(model, batch)
    assert (found.block, found.site, found.hidden_index, found.kind) == (None, "embed", 0, "inf")
    assert "the embedding output" in found.describe()


def test_embed_reports_nan_with_the_row_and_the_block(folder: Path) -> None:
    model = overflowing_fp16_model(folder, block=2)
    with pytest.raises(NumericsError) as caught:
        minidecoder.embed(model, ["hello there", "abc"], "prompteol")
    problem = caught.value.problem
    assert "method prompteol produced NaN or inf for text" in problem and "dtype float16" in problem
    assert "first appears in block 2 (0-based), site 'mlp_out'" in problem
    assert "use float32 or bfloat16" in caught.value.fix


def test_a_model_name_where_embed_takes_a_loaded_model_is_named(model, folder: Path) -> None:
    """Found: `minidecoder.embed("smollm2-135m-instruct", texts)` failed as "'str' object has no attribute
    'tokenizer'"; the fix loads the very name given."""
    from minidecoder.errors import ArgumentTypeError

    for given in (folder, str(folder), None):
        with pytest.raises(ArgumentTypeError, match=r"embed\(model=...\) got a .*, not a loaded model") as raised:
            minidecoder.embed(given, ["a cat"], "mean")
        if given is not None:
            assert f"minidecoder.embed(minidecoder.load({str(given)!r}), texts)" in raised.value.fix
    for method in (5, None):  # one check for every call that takes a method: embed, explain, SentenceEncoder
        with pytest.raises(ArgumentTypeError, match=rf"method={method} \(\w+\) is neither a method name nor a Method"):
            minidecoder.SentenceEncoder(model, method)


def test_a_block_range_past_the_model_is_answered_with_an_example_that_fits_it(model) -> None:
    """Found: TP's `end=9` on a 4-block model was answered "e.g. start=1, end=7", itself refused there."""
    from minidecoder.methods.layers import check_block_range

    with pytest.raises(InputError) as raised:
        minidecoder.embed(model, ["a cat"], "tp", end=9)
    assert "e.g. start=1, end=4 copies before blocks 1..3; this model has 4 blocks" in raised.value.fix
    with pytest.raises(InputError) as raised:
        check_block_range(0, 2, 1, "TP")
    assert "e.g. start=0, end=1 copies before blocks 0..0" in raised.value.fix
    assert check_block_range(1, 4, 4, "TP") == (1, 4)  # the example given is itself taken
