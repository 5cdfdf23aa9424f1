"""Pooling and prompt methods (`mean`, `last`, `prompteol`, `pretended_cot`, `knowledge`, `prompt`)
against an independent implementation on top of transformers.

The reference below never calls minidecoder: it fills templates with `str.replace`, prepares text
with the SentEval batcher steps written out again, tokenizes with `AutoTokenizer` (left padding, the
references' setting), runs `AutoModelForCausalLM(..., attn_implementation="eager")` with plain
`output_hidden_states=True` over the whole model (no early exit) and default positions 0..T-1 over
the padded row (what the reference scripts fed), and pools by hand. minidecoder runs the same texts
through `minidecoder.embed` (length-sorted, left-padded batch, mask-derived positions, early exit).
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
import tiny_models
from tiny_models import FAMILIES
from repo_paths import REPO
from senteval_reference import EDGE_TEXTS, reference_batcher_step

ATOL = RTOL = 1e-5  # fp32, relative to the largest entry (see `close`)

TEXTS = EDGE_TEXTS

PROMPTEOL = 'This sentence : "{text}" means in one word:"'
PRETENDED_COT = 'After thinking step by step , this sentence : "{text}" means in one word:"'
KNOWLEDGE = ('The essence of a sentence is often captured by its main subjects and actions, while descriptive terms '
             'provide additional but less central details. With this in mind , this sentence : "{text}" means in '
             'one word:"')


# ---- the independent reference ---------------------------------------------------------------------


class Reference:
    """transformers model + tokenizer of one checkpoint folder, pooled by hand."""

    def __init__(self, folder: Path, tiny: bool = True) -> None:
        import transformers

        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
        # AutoTokenizer picks a family's own class from config.json; for a tiny Qwen2 folder that is
        # Qwen2Tokenizer, whose byte-level pre-tokenizer drops the char-level vocabulary's spaces. The
        # tiny folders hold a plain tokenizer.json, which PreTrainedTokenizerFast reads as it is.
        cls = transformers.PreTrainedTokenizerFast if tiny else transformers.AutoTokenizer
        self.tokenizer = cls.from_pretrained(folder)
        self.tokenizer.padding_side = "left"

    def forward(self, prompts: list[str]):
        batch = self.tokenizer(prompts, padding=True, return_tensors="pt", return_offsets_mapping=True)
        offsets = batch.pop("offset_mapping")  # (B, T, 2) character spans; (0, 0) for BOS and padding
        with torch.no_grad():
            hidden_states = self.model(**batch, output_hidden_states=True).hidden_states
        return hidden_states, batch["attention_mask"], offsets

    @staticmethod
    def fill(template: str, text: str, senteval_text: bool) -> str:
        return template.replace("{text}", reference_batcher_step(text) if senteval_text else text).strip()

    def last(self, template: str, texts: list[str], layer: int, senteval_text: bool) -> torch.Tensor:
        hidden_states, _, _ = self.forward([self.fill(template, t, senteval_text) for t in texts])
        return hidden_states[layer][:, -1, :]  # left padding: the last column is every row's last token

    def mean(self, template: str, texts: list[str], layer: int, senteval_text: bool, over: str = "text",
             occurrence: int = -1) -> torch.Tensor:
        texts = [reference_batcher_step(t) if senteval_text else t for t in texts]
        hidden_states, mask, offsets = self.forward([template.replace("{text}", t) for t in texts])
        h = hidden_states[layer]
        rows = []
        for b, text in enumerate(texts):
            if over == "all":
                keep = mask[b].bool()
            else:
                # character span of copy number `occurrence` of the text in the filled string
                parts = template.split("{text}")
                k = occurrence % (len(parts) - 1)
                start = len("".join(parts[:k + 1])) + k * len(text)
                end = start + len(text)
                keep = (offsets[b, :, 0] < end) & (offsets[b, :, 1] > start) & mask[b].bool()
            rows.append(h[b][keep].mean(dim=0))
        return torch.stack(rows)


def folder_of(name: str) -> Path:
    return tiny_models.checkpoint(name)[1]


@functools.lru_cache(maxsize=None)
def pair(name: str) -> tuple[minidecoder.Decoder, Reference]:
    folder = folder_of(name)
    return minidecoder.load(folder, progress=False), Reference(folder)


def close(got: torch.Tensor, want: torch.Tensor, msg: str = "") -> None:
    """fp32 agreement scaled to the vectors' size. Measured on llama: the Knowledge prompt (~250
    char-level tokens) puts entries up to ~8 and differs from the reference by up to 1.7e-5, while the
    reference itself moves by 1.2e-5 between a padded and an unpadded run of the same row."""
    scale = max(1.0, float(want.abs().max()))
    assert_close(got, want, atol=ATOL * scale, rtol=RTOL, msg=msg)


def ours(model, method: str, texts: list[str] = TEXTS, **options) -> torch.Tensor:
    return minidecoder.embed(model, texts, method, batch_size=len(texts), **options)


# ---- parity ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_fixed_prompts_match_reference(name: str) -> None:
    model, ref = pair(name)
    for method, template, layer in [("prompteol", PROMPTEOL, -1), ("pretended_cot", PRETENDED_COT, -2),
                                    ("knowledge", KNOWLEDGE, -2)]:
        close(ours(model, method), ref.last(template, TEXTS, layer, senteval_text=True), msg=method)


@pytest.mark.parametrize("name", FAMILIES)
def test_generic_prompt_matches_reference(name: str) -> None:
    model, ref = pair(name)
    template = 'In short, "{text}" is about:"'
    close(ours(model, "prompt", template=template, layer=2),
          ref.last(template, TEXTS, 2, senteval_text=True))
    close(ours(model, "prompt", template=template, layer=1, senteval_text=False),
          ref.last(template, TEXTS, 1, senteval_text=False))


@pytest.mark.parametrize("name", FAMILIES)
def test_mean_and_last_pooling_match_reference(name: str) -> None:
    model, ref = pair(name)
    close(ours(model, "mean"), ref.mean("{text}", TEXTS, -1, senteval_text=False))
    close(ours(model, "mean", layer=2, over="all", template=PROMPTEOL, senteval_text=True),
          ref.mean(PROMPTEOL, TEXTS, 2, senteval_text=True, over="all"))
    close(ours(model, "mean", layer=-2, template=PROMPTEOL),
          ref.mean(PROMPTEOL, TEXTS, -2, senteval_text=False))
    close(ours(model, "last"), ref.last("{text}", TEXTS, -1, senteval_text=False))
    close(ours(model, "last", layer=0, template=PROMPTEOL),
          ref.last(PROMPTEOL, TEXTS, 0, senteval_text=False))


# ---- each knob matters (a test that cannot fail is a defect) ---------------------------------------
def test_options_change_the_embedding() -> None:
    model, _ = pair("llama")
    base = ours(model, "prompteol")
    far = lambda a, b: (a - b).abs().max() > 100 * ATOL  # noqa: E731
    assert far(base, ours(model, "prompteol", layer=-2))
    assert far(base, ours(model, "prompteol", senteval_text=False))  # rows 0-2 change under the SentEval steps
    assert far(ours(model, "mean"), ours(model, "mean", over="all"))  # BOS in or out
    assert far(ours(model, "pretended_cot"), ours(model, "knowledge"))
    close(ours(model, "prompt"), base)  # the generic method's default is PromptEOL


def test_senteval_steps_only_touch_rows_that_need_them() -> None:
    model, _ = pair("llama")
    texts = ["a cat sat.", "a cat sat"]  # the second gains its '.' from the SentEval steps
    with_steps = ours(model, "prompteol", texts)
    assert_close(with_steps[0], with_steps[1])
    without = ours(model, "prompteol", texts, senteval_text=False)
    assert (without[0] - without[1]).abs().max() > 100 * ATOL


# ---- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, bad", [(method, bad) for method in ("mean", "last", "prompteol", "prompt")
                                         for bad in ("", "   ", "\n\t") if bad or method in ("mean", "last")])
def test_empty_text_is_an_input_error_naming_the_row(method: str, bad: str) -> None:
    """Whitespace-only text is an error for every method; "" for a pooling over the text only (a prompt read at
    its last token embeds "" as SentEval's batchers do: test_empty_text.py)."""
    model, _ = pair("llama")
    with pytest.raises(InputError, match="text 1 is empty or whitespace-only") as info:
        minidecoder.embed(model, ["fine", bad, "also fine"], method)
    assert "remove that row" in str(info.value)
    # the method itself says the same when called directly with a batch
    with pytest.raises(InputError, match="text 0 is empty"):
        minidecoder.methods.build_method(method).embed_batch(model, [bad])


BAD_OPTIONS = [  # (method, options, what the error names)
    ("prompt", {"template": "This sentence means in one word:"}, "no \\{text\\}"),
    ("last", {"template": "{sentence}"}, "unknown placeholder"),
    ("mean", {"over": "tokens"}, "over="),
    ("mean", {"occurrence": 1}, "occurrence"),  # '{text}' has one copy
    ("prompteol", {"senteval_text": "yes"}, "senteval_text"),
    ("prompteol", {"template": "{text}"}, "no option"),  # fixed prompts have no template; `prompt` has
]


@pytest.mark.parametrize("method, options, message", BAD_OPTIONS)
def test_bad_options_are_input_errors_before_any_work(method: str, options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        minidecoder.methods.build_method(method, **options)


def test_an_output_layer_past_the_model_is_an_input_error() -> None:
    model, _ = pair("llama")  # 4 blocks: layers -5..4
    with pytest.raises(InputError, match="output layer 5"):
        minidecoder.embed(model, ["x"], "prompteol", layer=5)


def test_shared_templates_are_the_spec_strings() -> None:
    from minidecoder.methods.prompts import REFERENCE_LAYERS, TEMPLATES

    assert TEMPLATES == {"prompteol": PROMPTEOL, "pretended_cot": PRETENDED_COT, "knowledge": KNOWLEDGE}
    assert REFERENCE_LAYERS == {"prompteol": -1, "pretended_cot": -2, "knowledge": -2, "ck": -2, "metaeol": -1}
    text = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")  # the repository's copy of the spec
    for template in TEMPLATES.values():
        assert f"`{template}`" in text


# ---- the real model (SmolLM2-135M-Instruct) --------------------------------------------------------
@pytest.mark.real
@pytest.mark.parametrize("method", ["prompteol", "knowledge", "mean", "echo"])
def test_real_smollm2_matches_reference(smollm2: Path, method: str) -> None:
    """Measured: max |difference| 2.6e-5 (PromptEOL, entries up to 49), 1.2e-4 (Knowledge at -2, entries up
    to 606), 1e-5 (mean, Echo); MetaEOL shares PromptEOL's last-token path and is checked on tiny models."""
    model, ref = _real_pair(smollm2)
    texts = TEXTS[:3]
    got = minidecoder.embed(model, texts, method, batch_size=len(texts))
    if method == "prompteol":
        want = ref.last(PROMPTEOL, texts, -1, senteval_text=True)
    elif method == "knowledge":
        want = ref.last(KNOWLEDGE, texts, -2, senteval_text=True)
    elif method == "mean":
        want = ref.mean("{text}", texts, -1, senteval_text=False)
    else:
        echo = "Rewrite the following paragraph: {text}. The rewritten paragraph: {text}"
        want = ref.mean(echo, texts, -1, senteval_text=False, occurrence=1)
    close(got, want)  # scaled to the largest entry: 30 real blocks, positions mask-derived vs 0..T-1


@functools.lru_cache(maxsize=None)
def _real_pair(folder: Path) -> tuple[minidecoder.Decoder, Reference]:
    return minidecoder.load(folder, progress=False), Reference(folder, tiny=False)
