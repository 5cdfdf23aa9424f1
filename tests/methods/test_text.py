"""SentEval batcher text handling and template filling (docs/spec.md section 2)."""
from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

import minidecoder.methods.text
from minidecoder.errors import InputError, MinidecoderError
from minidecoder.methods.text import fill_template, senteval_sentence
from senteval_reference import reference_batcher_step

PROMPTEOL = 'This sentence : "{text}" means in one word:"'


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["a", "cat", "sits"], "a cat sits."),  # "." appended
        (["a", "cat", "sits", "."], "a cat sits ."),  # already ends in "."
        (["is", "it", "?"], "is it ."),  # final "?" becomes "."
        (["is", "it?"], "is it."),
        (["he", "said", '"hi"'], "he said 'hi'"),  # ends in '"': no "." (checked before replacing)
        (["he", "said", "'hi'"], "he said 'hi'"),  # ends in "'": no "."
        (['"quoted"', "start"], "'quoted' start."),  # every '"' replaced
        (["why", '?"'], "why ?'"),  # "?" not final after the quote swap: kept
        (["a?", "b"], "a? b."),  # only a final "?" changes
        ([], ""),  # empty stays empty
        (["ends", "with", "!"], "ends with !."),
    ],
)
def test_senteval_sentence_cases(words: list[str], expected: str) -> None:
    assert senteval_sentence(words) == expected
    assert senteval_sentence(" ".join(words)) == expected


@given(st.lists(st.text(alphabet=st.sampled_from(list('ab ."?\'!x')), min_size=1, max_size=4), max_size=5))
def test_senteval_sentence_matches_reference(words: list[str]) -> None:
    assert senteval_sentence(words) == reference_batcher_step(" ".join(words))  # the batcher joins the words


def test_string_is_used_verbatim() -> None:
    # A string is not re-split: double spaces survive (SentEval only ever passes joined words).
    assert senteval_sentence("a  b") == "a  b."


def test_fill_template_prompteol() -> None:
    got = fill_template(PROMPTEOL, senteval_sentence(["he", "said", '"no"', "?"]))
    assert got == "This sentence : \"he said 'no' .\" means in one word:\""


def test_fill_template_every_occurrence_and_strip() -> None:
    echo = "  Rewrite the following paragraph: {text}. The rewritten paragraph: {text} "
    assert fill_template(echo, "x") == "Rewrite the following paragraph: x. The rewritten paragraph: x"


def test_fill_template_keeps_placeholder_tokens_and_braces_in_text() -> None:
    tp = 'This sentence : <PST> "{text}" means in one word:"'
    assert fill_template(tp, "a {b} c.") == 'This sentence : <PST> "a {b} c." means in one word:"'
    # lone braces in a template are literal
    assert fill_template("{ {text} }", "x") == "{ x }"


def test_fill_template_matches_reference_marker_replacement() -> None:
    reference = PROMPTEOL.replace("{text}", "*sent 0*")
    s = senteval_sentence(["a", "b"])
    assert fill_template(PROMPTEOL, s) == reference.replace("*sent 0*", s).strip()


@pytest.mark.parametrize("template", ["no placeholder here", 'This sentence : "*sent 0*"', "{Text}"])
def test_fill_template_requires_text(template: str) -> None:
    with pytest.raises(InputError) as info:
        fill_template(template, "x")
    assert isinstance(info.value, MinidecoderError)
    assert info.value.fix is not None


@pytest.mark.parametrize(("template", "name"), [("{text} {sentence}", "{sentence}"), ("{txt}", "{txt}"), ("{} {text}", "{}")])
def test_fill_template_rejects_unknown_placeholders(template: str, name: str) -> None:
    with pytest.raises(InputError, match=name.replace("{", r"\{").replace("}", r"\}")):
        fill_template(template, "x")


def test_doctests() -> None:
    assert doctest.testmod(minidecoder.methods.text).failed == 0
