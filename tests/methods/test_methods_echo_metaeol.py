"""MetaEOL and Echo against the independent transformers implementation of test_methods_prompts.

MetaEOL's reference (Yibin-Lei/MetaEOL `evaluation.py`) puts all 8 x B prompts into one left-padded
batch and averages `hidden_states[-1][:, -1, :]` over the 8; the reference here does exactly that, in
one forward. Echo's reference (jakespringer/echo-embeddings `echo_embeddings.py`) averages
`last_hidden_state` over the second copy's tokens; here the tokens are found by character offsets.
"""
from __future__ import annotations

import re

import pytest
import torch

import minidecoder
from minidecoder.errors import InputError
from test_methods_prompts import ATOL, FAMILIES, TEXTS, close, ours, pair
from senteval_reference import reference_batcher_step
from repo_paths import REPO

ECHO = "Rewrite the following paragraph: {text}. The rewritten paragraph: {text}"
SPEC = REPO / "docs" / "spec.md"


def metaeol_templates_from_spec() -> list[str]:
    text = SPEC.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"^\s+\d\. `(In this task.*)`$", text, flags=re.MULTILINE)]


def reference_metaeol(ref, texts: list[str], templates: list[str], layer: int = -1) -> torch.Tensor:
    prompts = []
    for text in texts:  # sentence-major, prompt-minor, as the reference's loop appends them
        s = reference_batcher_step(text)
        prompts += [t.replace("{text}", s).strip() for t in templates]
    hidden_states, _, _ = ref.forward(prompts)  # one left-padded forward of 8 x B rows
    last = hidden_states[layer][:, -1, :]
    return last.view(-1, len(templates), last.shape[-1]).mean(dim=1)


@pytest.fixture(scope="module")
def templates() -> list[str]:
    from minidecoder.methods.prompts import METAEOL_TEMPLATES

    return METAEOL_TEMPLATES


def test_metaeol_templates_are_the_spec_strings(templates: list[str]) -> None:
    assert len(templates) == 8 and all(t.count("{text}") == 1 for t in templates)
    assert templates == metaeol_templates_from_spec()


@pytest.mark.parametrize("name", FAMILIES)
def test_metaeol_matches_reference(name: str, templates: list[str]) -> None:
    model, ref = pair(name)
    texts = TEXTS[1:3]  # 8 prompts of ~400 char-level tokens each: two texts keep this quick
    close(ours(model, "metaeol", texts), reference_metaeol(ref, texts, templates))
    close(ours(model, "metaeol", texts, layer=2, tasks=[4, 0]), reference_metaeol(ref, texts, [templates[4], templates[0]], 2))


@pytest.mark.parametrize("name", FAMILIES)
def test_echo_matches_reference(name: str) -> None:
    model, ref = pair(name)
    close(ours(model, "echo"), ref.mean(ECHO, TEXTS, -1, senteval_text=False, occurrence=1))
    close(ours(model, "echo", layer=2, senteval_text=True), ref.mean(ECHO, TEXTS, 2, senteval_text=True, occurrence=1))
    # pooling=last: the last token of the second copy, which this template ends with
    close(ours(model, "echo", pooling="last"), ref.last(ECHO, TEXTS, -1, senteval_text=False))


def test_echo_pools_the_second_copy_only() -> None:
    model, ref = pair("llama")
    echo = ours(model, "echo")
    first_copy = ref.mean(ECHO, TEXTS, -1, senteval_text=False, occurrence=0)
    whole_row = ref.mean(ECHO, TEXTS, -1, senteval_text=False, over="all")
    assert (echo - first_copy).abs().max() > 100 * ATOL
    assert (echo - whole_row).abs().max() > 100 * ATOL
    # and `mean` with the echo template and occurrence=-1 is the same computation
    close(ours(model, "mean", template=ECHO), echo)


def test_echo_last_pooling_follows_the_copy_not_the_row() -> None:
    model, ref = pair("llama")
    template = "{text} again: {text} (end)"  # the row ends after the second copy
    got = ours(model, "echo", template=template, pooling="last")
    assert (got - ref.last(template, TEXTS, -1, senteval_text=False)).abs().max() > 100 * ATOL
    # the reference: the state of the last character of copy 2
    hidden_states, mask, offsets = ref.forward([template.replace("{text}", t) for t in TEXTS])
    rows = []
    for b, text in enumerate(TEXTS):
        end = len(text) + len(" again: ") + len(text)
        index = int(torch.nonzero((offsets[b, :, 1] == end) & mask[b].bool())[0])
        rows.append(hidden_states[-1][b, index])
    close(got, torch.stack(rows))


def test_metaeol_is_the_average_of_its_prompts(templates: list[str]) -> None:
    model, _ = pair("llama")
    texts = TEXTS[:2]
    each = [ours(model, "prompt", texts, template=t) for t in templates]
    close(ours(model, "metaeol", texts), torch.stack(each).mean(0))
    assert (each[0] - each[4]).abs().max() > 100 * ATOL  # the prompts really differ


BAD_OPTIONS = [  # (method, options, what the error names)
    ("echo", {"template": "Rewrite: {text}"}, "needs 2"),
    ("echo", {"pooling": "max"}, "pooling="),
    ("metaeol", {"tasks": [8]}, "tasks="),
    ("metaeol", {"tasks": []}, "tasks="),
]


@pytest.mark.parametrize("method, options, message", BAD_OPTIONS)
def test_bad_options_are_input_errors(method: str, options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        minidecoder.methods.build_method(method, **options)


@pytest.mark.parametrize("method", ["echo", "metaeol"])
def test_an_empty_text_is_an_input_error(method: str) -> None:
    model, _ = pair("llama")
    with pytest.raises(InputError, match="text 2 is empty"):
        minidecoder.embed(model, ["a", "b", " "], method)
