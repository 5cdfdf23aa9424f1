"""`mean` with over=after-first (Echo-k's mean over positions n..kn, ReBA Table 2) against a plain forward:
transformers' tokenizer and offsets say which rows are each copy's, and the mean runs over the union of every
copy but the first."""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from test_context import plain_hidden, plain_rows
from tiny_models import checkpoint

TEXTS = ["a cat sat on the mat.", "dogs run.", "the quick brown fox jumps."]


@pytest.fixture(scope="module")
def tiny():
    hf, folder = checkpoint("llama")
    return minidecoder.load(folder), folder, hf


@pytest.mark.parametrize("copies", [2, 3])
def test_after_first_is_the_mean_over_every_later_copy(tiny, copies: int) -> None:
    model, folder, hf = tiny
    template = "{text}" * copies
    got = minidecoder.embed(model, TEXTS, method="mean", template=template, over="after-first", progress=False)
    want = []
    for text in TEXTS:
        ids, rows, _ = plain_rows(hf, folder, template, text, "")
        later = sorted({row for copy in rows[1:] for row in copy})  # a token shared by two copies counts once
        want.append(plain_hidden(hf, ids, -1)[later].mean(dim=0))
    assert_close(torch.as_tensor(got), torch.stack(want), atol=1e-5, rtol=1e-5)
    if copies == 3:  # not the last copy alone (the earlier reading of ReBA's Repetition only (2))
        last = minidecoder.embed(model, TEXTS, method="mean", template=template, progress=False)
        assert (torch.as_tensor(last) - torch.stack(want)).abs().max() > 1e-3


def test_after_first_needs_a_repeating_template(tiny) -> None:
    with pytest.raises(InputError, match="at least twice"):
        minidecoder.embed(tiny[0], TEXTS, method="mean", over="after-first", progress=False)
