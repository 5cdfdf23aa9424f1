"""Fuzzing the two places where arbitrary user input meets the library first: the config parser and
the template/tokenizer path. Whatever goes in, what comes out is a result or a documented
`MinidecoderError` (a clear message), never an internal exception with a traceback.

Example counts are modest so the suite stays fast; `--hypothesis-seed` reproduces a failure.
"""
from __future__ import annotations

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidecoder.core.config import ModelConfig, parse_config
from minidecoder.errors import MinidecoderError
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.text import fill_template
from minidecoder.core.tokenizer import Tokenizer
from tiny_models import save_tiny_tokenizer

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

VALID = {
    "model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
}
GEMMA2 = {**VALID, "model_type": "gemma2", "head_dim": 16, "query_pre_attn_scalar": 12, "sliding_window": 5,
          "attn_logit_softcapping": 4.0, "final_logit_softcapping": 3.0, "hidden_activation": "gelu_pytorch_tanh",
          "hidden_act": "gelu_pytorch_tanh"}
GEMMA3 = {"model_type": "gemma3", "text_config": {**GEMMA2, "model_type": "gemma3_text", "sliding_window_pattern": 3,
                                                  "attn_logit_softcapping": None, "final_logit_softcapping": None}}

# Values of every JSON type, including the awkward ones (NaN, huge, negative, nested).
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**40, max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["default", "linear", "dynamic", "llama3", "yarn", "silu", "llama", "gemma2", "full_attention",
                     "sliding_attention", "gelu_pytorch_tanh"]),
    st.sampled_from([0, 1, 2, 3, 4, 5, 8, 16, 32, -1]),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=8)


def _mutate(base: dict, data: st.DataObject) -> dict:
    raw = copy.deepcopy(base)
    target = raw["text_config"] if "text_config" in raw and data.draw(st.booleans()) else raw
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["set", "delete", "add", "rope"]))
        keys = sorted(target)
        if action == "set" and keys:
            target[data.draw(st.sampled_from(keys))] = data.draw(json_values)
        elif action == "delete" and keys:
            target.pop(data.draw(st.sampled_from(keys)))
        elif action == "add":
            target[data.draw(st.sampled_from(["layer_types", "sliding_window", "use_sliding_window", "head_dim",
                                              "rope_scaling", "rope_theta", "max_window_layers", "attention_bias",
                                              "mlp_bias", "sliding_window_pattern", "query_pre_attn_scalar",
                                              "something_new"]))] = data.draw(json_values)
        else:
            target["rope_parameters"] = data.draw(st.dictionaries(
                st.sampled_from(["rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
                                 "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor",
                                 "full_attention", "sliding_attention"]), json_values, max_size=5))
    return raw


def _check_config(config: ModelConfig) -> None:
    """A config that parses must describe a model that can be built: positive sizes, consistent heads."""
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "max_position_embeddings"):
        value = getattr(config, name)
        assert isinstance(value, int) and value > 0, (name, value)
    assert config.num_heads % config.num_kv_heads == 0
    assert len(config.layer_types) == config.num_layers
    assert math.isfinite(config.rms_norm_eps) and config.rms_norm_eps >= 0
    assert math.isfinite(config.attn_scale) and config.attn_scale > 0
    for spec in config.rope.values():
        assert math.isfinite(spec.theta) and spec.theta > 0, spec
        assert math.isfinite(spec.factor) and spec.factor > 0, spec


@pytest.mark.parametrize("base", [VALID, GEMMA2, GEMMA3], ids=["llama", "gemma2", "gemma3"])
@FAST
@given(data=st.data())
def test_parse_config_mutations_give_a_config_or_a_clear_error(base: dict, data: st.DataObject) -> None:
    raw = _mutate(base, data)
    try:
        config = parse_config(raw)
    except MinidecoderError as error:
        assert error.problem and error.fix, error
        return
    _check_config(config)


@FAST
@given(raw=st.one_of(json_values, st.dictionaries(st.text(max_size=10), json_values, max_size=6)))
def test_parse_config_arbitrary_json_gives_a_config_or_a_clear_error(raw) -> None:
    try:
        parse_config(raw)
    except MinidecoderError:
        pass


# ---- templates and tokenization -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer(save_tiny_tokenizer(tmp_path_factory.mktemp("tok")))


fields = st.sampled_from(["{text}", "{text}", "{}", "{txt}", "{ text }", "{0}", "{", "}", "{{text}}", "<PST>", '"'])
templates = st.lists(st.one_of(st.text(max_size=8), fields), max_size=6).map("".join)


@FAST
@given(template=templates, text=st.text(max_size=30))
def test_fill_template_substitutes_or_explains(template: str, text: str) -> None:
    try:
        filled = fill_template(template, text)
    except MinidecoderError as error:
        assert "{text}" in error.fix or "placeholder" in error.problem, error
        return
    assert filled == template.replace("{text}", text).strip()


@FAST
@given(template=templates, texts=st.lists(st.text(max_size=30), min_size=1, max_size=3))
def test_encode_prompts_any_unicode_any_template(tokenizer: Tokenizer, template: str, texts: list[str]) -> None:
    try:
        batch = encode_prompts(tokenizer, template, texts)
    except MinidecoderError:
        return
    B, T = batch.input_ids.shape
    assert B == len(texts) and batch.attention_mask.shape == (B, T)
    assert int(batch.input_ids.max()) < tokenizer.vocab_size and int(batch.input_ids.min()) >= 0
    for row, spans in enumerate(batch.text_spans):
        assert len(spans) == template.count("{text}")  # one span per {text} field
        for start, end in spans:
            assert 0 <= start <= end <= T
            assert bool(batch.attention_mask[row, start:end].all())  # a text span never covers padding


@pytest.mark.parametrize("scalar", [-1, 0])
def test_a_query_pre_attn_scalar_that_is_not_positive_is_named(scalar) -> None:
    """A negative one made the scale complex and math.isfinite raised a TypeError (a hypothesis find)."""
    with pytest.raises(MinidecoderError, match="query_pre_attn_scalar is"):
        parse_config({**GEMMA2, "query_pre_attn_scalar": scalar})
