"""The empty text "", as SentEval hands a blank line of CR or MPQA to the prompt methods' batchers.

SentEval reads a blank line as a sample with no words; the batcher joins them into "" and fills the prompt
around it (`This sentence : "" means in one word:"`). A method read at the prompt's last token embeds that
like any other prompt; each is compared here with the independent implementations of its own tests, given
the filled prompt. A pooling over the text's own tokens (mean, last of the bare text, Echo, HTP, ReBA, TP w.
Mean) has nothing to pool and refuses "" with an error naming the row; whitespace-only text is refused by all.
"""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.methods import build_method
from test_methods_cp import AUX, PROMPT, checkpoint as cp_checkpoint, oracle
from test_methods_prompts import KNOWLEDGE, PROMPTEOL, PRETENDED_COT, close, pair
from test_methods_tp import PROMPTEOL_TP, gaussian_row, hf_tp_last_token
from tiny_models import checkpoint

TEXTS = ["a cat sat on the mat.", "", "dogs run."]  # the empty text between two others, in one padded batch


@pytest.mark.parametrize("method, template, layer", [("prompteol", PROMPTEOL, -1), ("pretended_cot", PRETENDED_COT, -2),
                                                     ("knowledge", KNOWLEDGE, -2)])
def test_prompt_methods_embed_the_empty_text_as_their_prompt_around_nothing(method, template, layer) -> None:
    model, ref = pair("llama")
    got = minidecoder.embed(model, TEXTS, method, batch_size=len(TEXTS))
    close(got, ref.last(template, TEXTS, layer, senteval_text=True), msg=method)
    assert (got[1] - got[0]).abs().max() > 1e-2  # the empty row is its own prompt, not a neighbour's


def test_tp_embeds_the_empty_text_as_the_hook_forward_of_its_prompt() -> None:
    hf, folder = checkpoint("llama")
    model = minidecoder.load(folder, progress=False)
    got = minidecoder.embed(model, TEXTS, "tp", layer=-2, start=1, end=3)
    want = hf_tp_last_token(hf, folder, [PROMPTEOL_TP.format(text) for text in TEXTS], -2, {1, 2},
                            gaussian_row(hf.config.hidden_size))
    assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cp_embeds_the_empty_text_as_its_hook_oracle() -> None:
    hf, tok, model = cp_checkpoint("llama")
    method = build_method("cp", prompt=PROMPT, aux_prompt=AUX, layer=-1, steer_layer=1, alpha=0.7)
    got = minidecoder.embed(model, TEXTS, method, batch_size=len(TEXTS))
    want = torch.stack([oracle(hf, tok, text, 1, "head", -1, "ns", 0.7, model.config.num_heads) for text in TEXTS])
    assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method, options", [("mean", {}), ("last", {}), ("echo", {}), ("reba", {}),
                                             ("htp", {"layer": -1, "start": 0, "end": 2}), ("tp", {"pooling": "mean"})])
def test_a_pooling_over_the_text_refuses_the_empty_text(method, options) -> None:
    model, _ = pair("llama")
    assert not build_method(method, **options).reads_empty_text()
    with pytest.raises(InputError, match=r"text 1 is empty or whitespace-only \(''\)") as info:
        minidecoder.embed(model, TEXTS, method, **options)
    assert "prompt around nothing" in str(info.value)  # the way out: a method read at its prompt's last token


def test_a_custom_prompt_that_is_the_text_alone_refuses_the_empty_text() -> None:
    model, _ = pair("llama")
    assert build_method("prompt", template='In short, "{text}"').reads_empty_text()
    with pytest.raises(InputError, match=r"text 0 is empty"):
        minidecoder.embed(model, [""], "prompt", template="{text}")  # nothing around it: no last token of a prompt


@pytest.mark.parametrize("method", ["prompteol", "metaeol", "tp", "cp"])
def test_whitespace_only_text_stays_an_error_for_prompt_methods(method) -> None:
    model, _ = pair("llama")
    assert build_method(method).reads_empty_text()
    with pytest.raises(InputError, match=r"text 1 is empty or whitespace-only \(' '\)"):
        minidecoder.embed(model, ["fine", " "], method)
