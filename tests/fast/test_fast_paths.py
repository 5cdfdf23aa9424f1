"""Every fast path on the embedding route equals the plain path (docs/style.md, rule 7).

    early exit        blocks after the output layer never run, logits are never computed, and the
                      state read equals the full forward's hidden_states[layer]
    bucketing         texts sorted by token length in batches, vectors back in input order
    prefix cache      a shared prompt prefix run once (batch 1, KVCache.expand) gives the plain states
    blocked ReBA      the fused attention one head at a time equals the eager (B, H, T, T) fusion
    bfloat16          within a stated tolerance of float32

Tiny random models (tests/tiny_models.py), float32, CPU; no timings are asserted anywhere.
"""
from __future__ import annotations

import functools

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.fast import prefix_cache
from minidecoder.fast.options import fast_paths_overridden
from minidecoder.methods.base import Method
from minidecoder.methods.inputs import encode_prompts, pad
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.fast.forward import FastForward
from minidecoder.methods.loop import last_token
from minidecoder.methods.text import senteval_sentence
from minidecoder.running.embedding import embed
import tiny_models
from senteval_reference import EDGE_TEXTS

TEXTS = EDGE_TEXTS + ["'quoted at the start' changes the boundary token", "two dogs run"]
ATOL = RTOL = 2e-5  # fp32: different matmul shapes round differently


def hidden_at_layers(model, batch, layers: list[int], reuse_prefix: bool = True) -> dict[int, torch.Tensor]:
    """hidden_states[layer] for each layer (negatives allowed) from one forward of the shared loop."""
    wanted = {layer: resolve_output_layer(layer, model.num_layers) for layer in layers}
    with fast_paths_overridden(model, prefix_cache=reuse_prefix):
        forward = FastForward(model, batch.input_ids, batch.attention_mask, keep=set(wanted.values()))
        return {layer: forward.hidden(index) for layer, index in wanted.items()}


def cacheable(model, batch) -> int:
    return prefix_cache.cacheable_prefix(model.config, batch.input_ids, batch.attention_mask)


def shared(batch) -> int:
    return prefix_cache.shared_prefix_length(batch.input_ids, batch.attention_mask)


@functools.cache
def tiny(name: str, dtype: str = "float32"):
    return minidecoder.load(tiny_models.checkpoint(name)[1], dtype=dtype, progress=False)


# ---- early exit -------------------------------------------------------------------------------------
def test_early_exit_runs_no_block_after_the_output_layer_and_no_logits(monkeypatch) -> None:
    model = tiny("llama")  # 4 blocks
    calls = []
    handles = [block.register_forward_pre_hook(lambda module, args, i=i: calls.append(i))
               for i, block in enumerate(model.layers)]
    monkeypatch.setattr(model, "unembed", lambda h: pytest.fail("logits computed on the embedding path"))
    try:
        with fast_paths_overridden(model, prefix_cache=False):
            got = embed(model, TEXTS[:3], "prompt", layer=2)
    finally:
        for handle in handles:
            handle.remove()
    assert set(calls) == {0, 1}  # blocks 2 and 3 never ran
    monkeypatch.undo()
    batch = encode_prompts(model.tokenizer, 'This sentence : "{text}" means in one word:"',
                           [senteval_sentence(t) for t in TEXTS[:3]])
    with torch.inference_mode():
        full = model(batch.input_ids, batch.attention_mask, output_hidden_states=True).hidden_states[2]
    assert_close(got, last_token(full, batch), atol=ATOL, rtol=RTOL)


def test_final_norm_only_at_the_last_layer() -> None:
    model = tiny("llama")
    batch = encode_prompts(model.tokenizer, "{text}", TEXTS[:2])
    with torch.inference_mode():
        full = model(batch.input_ids, batch.attention_mask, output_hidden_states=True).hidden_states
        got = hidden_at_layers(model, batch, [3, -1], reuse_prefix=False)
    real = batch.attention_mask[..., None]
    assert_close(got[3] * real, full[3] * real)
    assert_close(got[-1] * real, full[4] * real)  # normed: hidden_states[L] is after the final norm


# ---- bucketing ----------------------------------------------------------------------------------------
class _Spy(Method):
    """Records each batch; a text's vector is (its index in TEXTS, its token count, 0...)."""

    name = "spy"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def embed_batch(self, model, texts: list[str], forward=None) -> torch.Tensor:
        assert torch.is_inference_mode_enabled()  # no autograd bookkeeping anywhere on the embedding path
        self.batches.append(list(texts))
        out = torch.zeros(len(texts), model.config.hidden_size)
        for row, text in enumerate(texts):
            out[row, 0] = TEXTS.index(text)
            out[row, 1] = len(model.tokenizer.encode(text, add_special_tokens=False))
        return out


def test_batches_are_sorted_by_token_length_and_output_is_in_input_order() -> None:
    model = tiny("llama")
    spy = _Spy()
    out = embed(model, TEXTS, spy, batch_size=3)
    assert out[:, 0].tolist() == list(range(len(TEXTS)))  # input order restored
    seen = [len(model.tokenizer.encode(t, add_special_tokens=False)) for batch in spy.batches for t in batch]
    assert seen == sorted(seen)  # rows met in token-length order
    assert [len(b) for b in spy.batches] == [3, 3, 1]


def test_token_length_not_character_length_orders_the_batches(monkeypatch) -> None:
    model = tiny("llama")
    spy = _Spy()
    # A tokenizer for which characters and tokens disagree: every 'x' is a token, the rest is one token.
    fake_lengths = {text: (10 if "fox" in text else len(text) % 5) for text in TEXTS}
    monkeypatch.setattr(model.tokenizer, "encode_batch",
                        lambda texts, add_special_tokens=True: [[0] * fake_lengths[t] for t in texts])
    embed(model, TEXTS, spy, batch_size=len(TEXTS))
    order = spy.batches[0]
    assert [fake_lengths[t] for t in order] == sorted(fake_lengths[t] for t in order)
    assert order[-1].startswith("The quick brown fox")


@pytest.mark.parametrize("method", ["prompteol", "mean", "echo"])
def test_bucketed_batches_equal_one_text_at_a_time(method: str) -> None:
    model = tiny("llama")
    batched = embed(model, TEXTS, method, batch_size=4)
    single = torch.cat([embed(model, [t], method, batch_size=1) for t in TEXTS])
    assert_close(batched, single, atol=ATOL, rtol=RTOL)


# ---- shared-prefix cache ---------------------------------------------------------------------------------
def prefix_lengths_used(monkeypatch) -> list[int]:
    """The cached prefix length of every forward from now on that ran a shared prefix once."""
    used: list[int] = []
    original = prefix_cache.split
    monkeypatch.setattr(prefix_cache, "split", lambda ids, mask, p: used.append(p) or original(ids, mask, p))
    return used


PREFIX_METHODS = [
    ("prompteol", {}),
    ("pretended_cot", {}),
    ("knowledge", {}),
    ("metaeol", {"tasks": [0, 4]}),
    ("echo", {}),
    ("echo", {"pooling": "last"}),
    ("mean", {"template": 'This sentence : "{text}" means in one word:"'}),
    ("mean", {"template": 'This sentence : "{text}" means in one word:"', "over": "all"}),
    ("last", {"template": 'This sentence : "{text}" means in one word:"', "layer": 2}),
    ("prompt", {"layer": 0}),
]


@pytest.mark.parametrize("name", ["llama", "llama_mqa_untied", "qwen2", "llama_head_dim"])
@pytest.mark.parametrize("method,options", PREFIX_METHODS)
def test_prefix_cache_equals_plain_path(name: str, method: str, options: dict, monkeypatch) -> None:
    model = tiny(name)
    used = prefix_lengths_used(monkeypatch)
    fast = embed(model, TEXTS, method, batch_size=4, **options)
    assert used and min(used) >= prefix_cache.MIN_PREFIX  # the fast path really ran
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, TEXTS, method, batch_size=4, **options)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


TP_PREFIX_OPTIONS = [
    {"prompt": "prompteol"},
    {"prompt": "knowledge", "end": 3},
    {"prompt": "metaeol", "layer": 3},
    {"prompt": "pretended_cot", "num_pst": 2, "resume_at": 3},
]


@pytest.mark.parametrize("name", ["llama", "qwen2", "llama_mqa_untied"])
@pytest.mark.parametrize("options", TP_PREFIX_OPTIONS)
def test_tp_prefix_cache_equals_plain_tp(name: str, options: dict, monkeypatch) -> None:
    """TP's copies go from the last token into `<PST>`, both after the shared prefix: caching the
    template's first words must not change a single copy (forward_with_copies' `reuse_prefix`)."""
    model = tiny(name)
    used = prefix_lengths_used(monkeypatch)
    fast = embed(model, TEXTS, "tp", batch_size=4, start=1, **{"end": 2, "layer": -1, **options})
    assert used and min(used) >= prefix_cache.MIN_PREFIX  # the fast path really ran
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, TEXTS, "tp", batch_size=4, start=1, **{"end": 2, "layer": -1, **options})
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


def test_tp_prefix_stops_before_the_first_placeholder() -> None:
    """The ids every row shares run on through `<PST>` and the opening quote; the cached prefix
    must end before the first copy target, or the copy would land in a state that is never recomputed."""
    from minidecoder.methods import build_method
    model = tiny("llama")
    method = build_method("tp", prompt="knowledge", layer=1, end=1)
    (tp_pass,) = method.passes(model, TEXTS[:4])
    batch = tp_pass.batch
    forward = tp_pass.start(model, FastForward)
    first = batch.input_ids.shape[1] - batch.attention_mask.sum(dim=1)
    pst_offsets = [int(t) - int(first[b]) for b, t in zip(tp_pass.step.rows, tp_pass.step.target)]
    assert shared(batch) > min(pst_offsets)  # the shared run does pass the placeholder here ...
    assert forward.prefix_length == min(pst_offsets)  # ... and the cache stops right before it


def test_prefix_cache_states_equal_plain_states_at_every_real_position() -> None:
    model = tiny("llama")
    batch = encode_prompts(model.tokenizer, 'Before the text, "{text}" and after it.', TEXTS)
    p = cacheable(model, batch)
    assert p == len('Before the text, "') + 1  # BOS + the template's characters (char-level tokenizer)
    with torch.inference_mode():
        fast = hidden_at_layers(model, batch, [0, 1, 3, -1])
        plain = hidden_at_layers(model, batch, [0, 1, 3, -1], reuse_prefix=False)
    real = batch.attention_mask[..., None]
    for layer in plain:
        assert torch.isfinite(fast[layer]).all()
        assert_close(fast[layer] * real, plain[layer] * real, atol=ATOL, rtol=RTOL)


def test_shared_prefix_is_read_from_the_ids_so_a_diverging_row_shortens_it() -> None:
    rows = [[1, 5, 6, 7, 8, 9, 10], [1, 5, 6, 7, 8, 20], [1, 5, 6, 30, 31, 32, 33, 34]]
    batch = pad(rows, [[(0, 0)]] * 3, 0, "left")
    assert shared(batch) == 3  # row 3 diverges at its 4th token
    batch = pad(rows[:2], [[(0, 0)]] * 2, 0, "left")
    assert shared(batch) == 5
    same = pad([[1, 2, 3, 4, 5]] * 2, [[(0, 0)]] * 2, 0, "left")
    assert shared(same) == 4  # one token per row is always left to run
    single = pad([[1, 2, 3, 4, 5, 6]], [[(0, 0)]], 0, "left")
    assert shared(single) == 0


def test_a_diverging_boundary_token_falls_back_to_the_shorter_prefix_and_stays_exact() -> None:
    model = tiny("llama")
    template = 'This sentence : "{text}" means in one word:"'
    base = encode_prompts(model.tokenizer, template, ["a cat", "a dog"])
    p = cacheable(model, base)
    # A row whose ids differ one token before the text (as a BPE merge of '"' with the text's first
    # character would make them): the shared run must stop there.
    rows = [base.input_ids[0][base.attention_mask[0]].tolist(), base.input_ids[1][base.attention_mask[1]].tolist()]
    rows.append(rows[0][:p - 1] + [ord("#") - 32 + 4] + rows[0][p:])
    batch = pad(rows, [[(0, 0)]] * 3, 0, "left")
    assert cacheable(model, batch) == p - 1
    with torch.inference_mode():
        fast = hidden_at_layers(model, batch, [-1])[-1]
        plain = hidden_at_layers(model, batch, [-1], reuse_prefix=False)[-1]
    assert_close(last_token(fast, batch), last_token(plain, batch), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["mistral_window", "gemma2", "llama_rope_dynamic"])
def test_prefix_cache_stays_off_where_it_would_be_wrong(name: str) -> None:
    """Windows shorter than the batch (padding between prefix and rest would shift the window) and
    dynamic RoPE (frequencies depend on the call's longest position): plain loop, same answer."""
    model = tiny(name)
    batch = encode_prompts(model.tokenizer, 'This sentence : "{text}" means in one word:"', TEXTS)
    assert cacheable(model, batch) == 0


def test_token_budget_batches_of_dynamic_rope_are_the_plain_loops() -> None:
    """Dynamic RoPE never runs a prefix once, and there a row's vector depends on its batch (the call's longest
    position sets the frequencies): the token-budget batches must not count the prompt as run once, or
    switching the prefix cache off would regroup the rows and change their vectors."""
    model = tiny("llama_rope_dynamic")
    texts = TEXTS[:6]  # Knowledge's long prompt: 6 rows fit the CPU budget only with the prefix counted once
    fast = embed(model, texts, "knowledge", layer=-1)
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, texts, "knowledge", layer=-1)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name, once", [("llama_rope_dynamic", False), ("mistral_window", False), ("llama", True)])
def test_token_budget_batches_count_a_prompt_once_only_where_it_runs_once(name: str, once: bool, monkeypatch) -> None:
    """Past a sliding window a prefix runs in every row, as under dynamic RoPE, but the CPU's planner counted it
    once a batch there, and packed more rows than its token budget holds. Such rows are planned as with the
    prefix cache off; elsewhere the prompt is counted once, and the batches are fuller."""
    import minidecoder.running.embedding as embedding
    from minidecoder.running import memory

    planned, plan = [], embedding.plan_batches
    monkeypatch.setattr(embedding, "plan_batches", lambda *args: planned.append(plan(*args)) or planned[-1])
    monkeypatch.setattr(memory, "CPU_TOKENS", 160)  # a few rows a batch, where counting the prompt once shows
    model = tiny(name)
    embed(model, TEXTS, "knowledge", layer=-1)
    with fast_paths_overridden(model, prefix_cache=False):
        embed(model, TEXTS, "knowledge", layer=-1)
    assert (planned[0] != planned[1]) == once, planned


def test_prefix_cache_takes_right_padding_and_stays_off_for_single_rows_and_holes() -> None:
    model = tiny("llama")
    right = encode_prompts(model.tokenizer, 'This sentence : "{text}"', TEXTS[:3], padding_side="right")
    assert cacheable(model, right) >= prefix_cache.MIN_PREFIX
    with torch.inference_mode():
        fast = hidden_at_layers(model, right, [-1, 1])
        plain = hidden_at_layers(model, right, [-1, 1], reuse_prefix=False)
    real = right.attention_mask.bool()
    for layer in (-1, 1):
        assert_close(fast[layer][real], plain[layer][real], atol=ATOL, rtol=RTOL)
    one = encode_prompts(model.tokenizer, 'This sentence : "{text}"', TEXTS[:1])
    assert cacheable(model, one) == 0
    holed = encode_prompts(model.tokenizer, 'This sentence : "{text}"', TEXTS[:3])
    holed.attention_mask[0, -2] = 0  # real tokens not one run: positions would not be the plain ones
    assert cacheable(model, holed) == 0


CP_PREFIX_OPTIONS = [
    {"steer_layer": 1},
    {"steer_layer": 2, "site": "ffn", "mode": "nr", "layer": 3},
    {"steer_layer": 0, "site": "hidden", "prompt": "knowledge"},
    {"steer_layer": 1, "mode": "nr_head", "prompt": "metaeol", "layer": -1},
]


@pytest.mark.parametrize("name", ["llama", "qwen2", "llama_mqa_untied"])
@pytest.mark.parametrize("options", CP_PREFIX_OPTIONS)
def test_cp_prefix_cache_equals_plain_cp(name: str, options: dict, monkeypatch) -> None:
    """CP records the auxiliary prompt's site and edits the normal prompt's at each row's last token,
    never inside the shared prefix: both passes may run the prefix once."""
    model = tiny(name)
    used = prefix_lengths_used(monkeypatch)
    fast = embed(model, TEXTS, "cp", batch_size=4, **options)
    assert len(used) >= 2 and min(used) >= prefix_cache.MIN_PREFIX  # auxiliary and normal pass both cached
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, TEXTS, "cp", batch_size=4, **options)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("options", [{"template": 'This sentence : "{text}" means in one word:"', "end": 2},
                                     {"template": 'Summarize the passage : {text}', "padding_side": "left",
                                      "end": 3}])
def test_htp_prefix_cache_equals_plain_htp(name: str, options: dict, monkeypatch) -> None:
    """HTP's global placeholders follow the template's first words: the cache is cut before them."""
    model = tiny(name)
    used = prefix_lengths_used(monkeypatch)
    texts = ["A cat sat. It purred loudly.", "Dogs bark.", "One. Two. Three sentences here."]
    fast = embed(model, texts, "htp", batch_size=4, start=1, layer=-1, **options)
    assert used and min(used) >= prefix_cache.MIN_PREFIX
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, texts, "htp", batch_size=4, start=1, layer=-1, **options)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


# ---- blocked ReBA ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama", "llama_mqa_untied", "gemma2", "gemma3", "mistral_window"])
def test_blocked_fused_attention_equals_the_eager_fusion(name: str) -> None:
    from minidecoder.methods.reba import encode_repeated, fused_attention

    model = tiny(name)
    batch = encode_repeated(model.tokenizer, TEXTS[:4], 2)
    with torch.inference_mode():
        for index in (model.num_layers, 2):
            with fast_paths_overridden(model, blocked_fusion_from=None):
                A, h = fused_attention(model, batch, index)
            with fast_paths_overridden(model, blocked_fusion_from=0):
                A2, h2 = fused_attention(model, batch, index)
            assert_close(A2, A, atol=1e-6, rtol=1e-5)
            assert_close(h2, h)


@pytest.mark.parametrize("heads_per_step", [1, 3])
def test_head_groups_cover_every_head_once_with_the_eager_pattern(heads_per_step: int) -> None:
    from minidecoder.core.model import Sites
    from minidecoder.fast.blocked_fusion import head_group_patterns

    model = tiny("llama_mqa_untied")
    batch = encode_prompts(model.tokenizer, "{text}", TEXTS[:3])
    with torch.inference_mode():
        h = model.embed(batch.input_ids)
        ctx = model.context(batch.attention_mask, h.shape[1], h.shape[0])
        sites = Sites(record={"q", "k", "pattern"})
        model.layers[0](h, ctx, sites)
        attn = model.layers[0].self_attn
        groups = list(head_group_patterns(attn, sites.store["q"], sites.store["k"], ctx.masks[attn.layer_type],
                                          heads_per_step))
    assert_close(torch.cat(groups, dim=1), sites.store["pattern"], atol=1e-6, rtol=1e-5)


def test_reba_method_through_the_blocked_fusion_equals_the_plain_method() -> None:
    model = tiny("llama")
    with fast_paths_overridden(model, blocked_fusion_from=None):
        plain = embed(model, TEXTS, "reba", batch_size=3)
    with fast_paths_overridden(model, blocked_fusion_from=0):
        fast = embed(model, TEXTS, "reba", batch_size=3)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


# ---- bfloat16 -----------------------------------------------------------------------------------------------
BF16_MIN_COSINE = 0.98  # tiny random models with large weights; on SmolLM2 the bench reports the STS change


@pytest.mark.parametrize("method", ["prompteol", "mean", "echo"])
def test_bfloat16_is_close_to_float32(method: str) -> None:
    fp32 = embed(tiny("llama"), TEXTS, method, batch_size=4)
    bf16 = embed(tiny("llama", "bfloat16"), TEXTS, method, batch_size=4)
    assert bf16.dtype == torch.float32  # embeddings are always returned in float32
    cosine = torch.nn.functional.cosine_similarity(fp32, bf16)
    assert cosine.min() > BF16_MIN_COSINE, cosine


def test_bfloat16_prefix_cache_is_close_to_bfloat16_plain_path() -> None:
    model = tiny("llama", "bfloat16")
    fast = embed(model, TEXTS, "knowledge", batch_size=4)
    with fast_paths_overridden(model, prefix_cache=False):
        plain = embed(model, TEXTS, "knowledge", batch_size=4)
    assert torch.nn.functional.cosine_similarity(fast, plain).min() > 0.995
