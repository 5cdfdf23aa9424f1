"""CP against an independent implementation on transformers, plus its invariants.

The oracle is the reference's own mechanism (zifengcheng/CP, `activation_intervention/__init__.py`):
a forward pre-hook on `o_proj` of block l that captures (auxiliary pass) or edits (normal pass)
its input at the last position; for the `ffn` and `hidden` sites, forward hooks on the MLP branch's
output (Gemma: `post_feedforward_layernorm`) and on the decoder layer's output. The oracle runs each
sentence alone (no padding); minidecoder runs them as one left-padded batch.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.fast.options import fast_paths_overridden
from minidecoder.methods import build_method
from minidecoder.methods import cp as cp_module
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.loop import Forward, Pass, hidden_at, last_token
import tiny_models

ATOL = RTOL = 1e-5
PROMPT = 'This sentence : "{text}" means in one word:"'
AUX = 'The irrelevant information of this sentence : "{text}" means in one word:"'
# With a window of 5 (mistral_window, qwen2_window, gemma3's first blocks) the last token sees at most 4*4+1 tokens after 4 blocks, all
# inside the suffix that PROMPT and AUX share, so a == b up to rounding there and NR would amplify rounding
# noise; these variants get an auxiliary prompt whose ending differs.
AUX_WINDOWED = 'Irrelevant: "{text}"'
TEXTS = ["a man plays a flute.", "hi.", "the cat sat on the mat and purred."]  # already SentEval-prepared


@functools.cache
def checkpoint(name: str):
    hf, folder = tiny_models.checkpoint(name)
    return hf, hf_tokenizer(folder), minidecoder.load(folder, progress=False)


def hf_tokenizer(folder: Path):
    """The fixture's tokenizer.json as transformers reads it. Not AutoTokenizer: in transformers 5 it picks the
    model type's class (Qwen2Tokenizer for qwen2), whose own pre-tokenizer drops the char-level spaces."""
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


# ---- the oracle: transformers + hooks, one sentence at a time --------------------------------
def _hooked(hf, l: int, site: str, fn):
    """Register fn(last_vector) -> replacement (or None to leave it) at `site` of block l."""
    layer = hf.model.layers[l]

    def apply(x: torch.Tensor) -> torch.Tensor:
        new = fn(x[:, -1])
        if new is None:
            return x
        x = x.clone()
        x[:, -1] = new
        return x

    if site == "head":
        return layer.self_attn.o_proj.register_forward_pre_hook(lambda mod, args: (apply(args[0]),))
    module = {"ffn": getattr(layer, "post_feedforward_layernorm", None) or layer.mlp, "hidden": layer}[site]

    def post(mod, args, out):
        if isinstance(out, tuple):
            return (apply(out[0]),) + out[1:]
        return apply(out)
    return module.register_forward_hook(post)


def oracle(hf, tok, text: str, l: int, site: str, layer: int, mode: str, alpha: float, heads: int,
           prompts: tuple[str, ...] = (PROMPT,), aux: str = AUX) -> torch.Tensor:
    captured = {}

    def capture(v: torch.Tensor) -> None:
        captured["b"] = v.clone()
    handle = _hooked(hf, l, site, capture)
    with torch.no_grad():
        hf(tok(aux.replace("{text}", text), return_tensors="pt").input_ids)
    handle.remove()
    b = captured["b"]

    def replace(a):
        d = a - b
        if mode == "ns":
            return alpha * d
        if mode == "nr":
            return d * a.norm(dim=-1, keepdim=True) / (d.norm(dim=-1, keepdim=True) + 1e-7)
        if mode == "nr_scaled":
            return alpha * d * a.norm(dim=-1, keepdim=True) / (d.norm(dim=-1, keepdim=True) + 1e-7)
        ah, dh = a.view(1, heads, -1), d.view(1, heads, -1)  # nr_head
        return (dh * ah.norm(dim=-1, keepdim=True) / (dh.norm(dim=-1, keepdim=True) + 1e-7)).view(1, -1)

    outs = []
    for prompt in prompts:
        handle = _hooked(hf, l, site, replace)
        with torch.no_grad():
            out = hf(tok(prompt.replace("{text}", text), return_tensors="pt").input_ids, output_hidden_states=True)
        handle.remove()
        outs.append(out.hidden_states[layer][0, -1])
    return torch.stack(outs).mean(0)


CASES = [  # (variant, site, mode, output layer, steer layer)
    ("llama", "head", "ns", -1, 1), ("llama", "ffn", "nr", 3, 2), ("llama", "hidden", "ns", -2, 0),
    ("llama", "head", "nr_head", -1, 2), ("mistral_window", "head", "ns", -1, 1),
    ("mistral_window", "hidden", "nr", -1, 2), ("qwen2_window", "head", "nr", -2, 1),
    ("qwen2_window", "ffn", "ns", -1, 3), ("gemma2", "head", "ns", -1, 1), ("gemma2", "ffn", "nr_scaled", -1, 2),
    ("gemma3", "head", "ns", -1, 4), ("gemma3", "hidden", "nr", 5, 1),
]


@pytest.mark.parametrize("name,site,mode,layer,l", CASES)
def test_cp_matches_transformers_hooks(name, site, mode, layer, l) -> None:
    hf, tok, model = checkpoint(name)
    aux = AUX_WINDOWED if name in ("mistral_window", "qwen2_window", "gemma3") else AUX
    coefficient = {} if mode in ("nr", "nr_head") else {"alpha": 0.7}  # NR takes none (the oracle ignores it)
    method = build_method("cp", prompt=PROMPT, aux_prompt=aux, layer=layer, steer_layer=l, mode=mode, site=site,
                          **coefficient)
    ours = minidecoder.embed(model, TEXTS, method, batch_size=8)
    heads = model.config.num_heads
    theirs = torch.stack([oracle(hf, tok, t, l, site, layer, mode, 0.7, heads, aux=aux) for t in TEXTS])
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    # The steering matters: the plain prompt is far away (docs/style.md, rule 8).
    plain = torch.stack([last_token(hidden_at(model, encode_prompts(model.tokenizer, PROMPT, [t]), layer),
                                    encode_prompts(model.tokenizer, PROMPT, [t]))[0] for t in TEXTS])
    assert (ours - plain).abs().max() > 1e-2


def test_token_ids_match_transformers_tokenizer() -> None:
    _, tok, model = checkpoint("llama")
    for template in (PROMPT, AUX):
        batch = encode_prompts(model.tokenizer, template, TEXTS[:1])
        assert batch.input_ids[0].tolist() == tok(template.replace("{text}", TEXTS[0])).input_ids


def test_alpha_one_and_zero_auxiliary_equals_plain_prompt(monkeypatch) -> None:
    _, _, model = checkpoint("qwen2_window")
    original = Forward.recorded
    monkeypatch.setattr(Forward, "recorded", lambda self, block, site: torch.zeros_like(original(self, block, site)))
    with fast_paths_overridden(model, prefix_cache=False, explicit_attention=False, blocked_fusion_from=None):
        steered = minidecoder.embed(model, TEXTS, "cp", prompt=PROMPT, layer=-1, steer_layer=1, alpha=1.0)  # b = 0
    order = sorted(range(len(TEXTS)), key=lambda i: len(TEXTS[i]))  # embed's length-sorted batch
    batch = encode_prompts(model.tokenizer, PROMPT, [TEXTS[i] for i in order])
    with torch.inference_mode():
        plain = last_token(hidden_at(model, batch, -1), batch)
    assert torch.equal(steered[order], plain)


@pytest.mark.parametrize("site", ["head", "ffn", "hidden"])
def test_steered_hidden_with_identity_equals_plain_forward_exactly(site) -> None:
    _, _, model = checkpoint("gemma2")
    batch = encode_prompts(model.tokenizer, PROMPT, TEXTS)
    config = model.config
    shape = (len(TEXTS), config.num_heads, config.head_dim) if site == "head" else (len(TEXTS), config.hidden_size)
    with torch.inference_mode():
        plain = hidden_at(model, batch, -1)
        identity = cp_module.SteerLastToken(blocks=frozenset({2}), site=cp_module.SITE_NAMES[site], last=batch.last,
                                            b=torch.zeros(shape), mode="ns", alpha=1.0)  # a' = 1 * (a - 0)
        same = hidden_at(model, batch, -1, identity)
    assert torch.equal(plain, same)


def test_auxiliary_pass_stops_after_the_steer_block() -> None:
    _, _, model = checkpoint("gemma3")
    calls = []
    handles = [block.register_forward_pre_hook(lambda mod, args, i=i: calls.append(i))
               for i, block in enumerate(model.layers)]
    try:
        auxiliary = build_method("cp", aux_prompt=AUX, steer_layer=2).passes(model, TEXTS)[0]
        with torch.inference_mode():
            run = auxiliary.start(model).run_to(auxiliary.blocks)
            b = last_token(run.recorded(2, "z"), auxiliary.batch)
    finally:
        for h in handles:
            h.remove()
    assert auxiliary.role == "auxiliary prompt" and auxiliary.layer is None
    assert calls == [0, 1, 2] and b.shape == (3, model.config.num_heads, model.config.head_dim)  # z: (B, H, D)


def test_one_auxiliary_pass_serves_every_prompt(monkeypatch) -> None:
    hf, tok, model = checkpoint("llama")
    from minidecoder.methods import prompts as prompts_mod
    roles = []
    original = Pass.start
    monkeypatch.setattr(Pass, "start", lambda self, *a, **k: roles.append(self.role) or original(self, *a, **k))
    ours = minidecoder.embed(model, TEXTS, "cp", prompt="ck", layer=-2, steer_layer=1, alpha=0.5)
    assert roles == ["auxiliary prompt", "prompt", "prompt"]  # one batch, two prompts, one auxiliary pass
    T = prompts_mod.TEMPLATES
    theirs = torch.stack([oracle(hf, tok, t, 1, "head", -2, "ns", 0.5, 4, (T["knowledge"], T["pretended_cot"]))
                          for t in TEXTS])
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


def test_padding_and_batch_composition_do_not_change_an_embedding() -> None:
    _, _, model = checkpoint("mistral_window")
    method = build_method("cp", prompt=PROMPT, aux_prompt=AUX_WINDOWED, layer=-1, steer_layer=1, mode="nr")
    together = minidecoder.embed(model, TEXTS, method, batch_size=8)
    alone = torch.cat([minidecoder.embed(model, [t], method) for t in TEXTS])
    assert_close(together, alone, atol=ATOL, rtol=RTOL)


# ---- CP + TP in one forward (a minidecoder extension) -----------------------------------------------
def oracle_cp_tp(hf, tok, text: str, l: int, layer: int, alpha: float, copy_blocks: set[int], row: torch.Tensor,
                 tp_aux: bool) -> torch.Tensor:
    """Transformers + hooks: TP's copy as a pre-hook on each decoder layer in copy_blocks (the <PST> row takes
    the last row, TP reference `senllm/modeling_llama.py`), CP's as the o_proj pre-hook of block l."""
    tok.add_tokens(["<PST>"])
    pst = tok.convert_tokens_to_ids("<PST>")
    if len(tok) > hf.get_input_embeddings().num_embeddings:
        hf.resize_token_embeddings(len(tok))
    hf.get_input_embeddings().weight.data[pst] = row

    def run(template: str, fn, with_tp: bool):
        template = template.replace('"{text}"', '<PST> "{text}"') if with_tp else template
        ids = tok(template.replace("{text}", text), return_tensors="pt").input_ids
        is_pst = ids[0] == pst

        def copy_last(module, args, kwargs):
            h = args[0].clone()
            h[0, is_pst] = h[0, -1].clone()
            return (h, *args[1:]), kwargs
        handles = [hf.model.layers[i].register_forward_pre_hook(copy_last, with_kwargs=True)
                   for i in sorted(copy_blocks)] if with_tp else []
        handles.append(_hooked(hf, l, "head", fn))
        try:
            with torch.no_grad():
                return hf(ids, output_hidden_states=True).hidden_states[layer][0, -1]
        finally:
            for handle in handles:
                handle.remove()

    captured = {}

    def capture(v):
        captured["b"] = v.clone()
    run(AUX, capture, tp_aux)
    return run(PROMPT, lambda a: alpha * (a - captured["b"]), True)


@pytest.mark.parametrize("name,tp_aux", [("llama", True), ("llama", False), ("gemma2", True)])
def test_cp_with_tp_matches_transformers_hooks(name, tp_aux) -> None:
    hf, tok, model = checkpoint(name)
    options = dict(prompt=PROMPT, aux_prompt=AUX, layer=-1, steer_layer=2, alpha=0.7, tp=True, start=1,
                   end=3, tp_aux=tp_aux)
    ours = minidecoder.embed(model, TEXTS, "cp", **options)
    row = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0))  # pst_init gaussian
    theirs = torch.stack([oracle_cp_tp(hf, tok, t, 2, -1, 0.7, {1, 2}, row, tp_aux) for t in TEXTS])
    assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    without_tp = minidecoder.embed(model, TEXTS, "cp", **{**options, "tp": False})
    assert (ours - without_tp).abs().max() > 1e-2  # TP matters


@pytest.mark.parametrize("options,match", [
    (dict(steer_layer=4), "steer_layer 4 is not a block"),
    (dict(steer_layer=-1), "steer_layer -1 is not a block"),
    (dict(layer=9), "output layer 9 is outside"),
    (dict(layer=2, steer_layer=2), "comes before the steered block"),
    (dict(alpha=float("nan")), "not a finite number"),
    (dict(alpha=float("inf")), "not a finite number"),
    (dict(mode="add"), "mode 'add' is unknown"),
    (dict(site="mlp"), "site 'mlp' is unknown"),
    (dict(mode="nr_head", site="ffn"), "nr_head needs site='head'"),
    (dict(prompt="no placeholder"), "unknown prompt|no module named"),
    (dict(aux_prompt="nonsense"), "unknown CP auxiliary prompt"),
    (dict(tp=True, start=2, end=9), "TP range"),
    (dict(tp="yes"), "not true or false"),
])
def test_bad_options_are_input_errors(options, match) -> None:
    _, _, model = checkpoint("llama")
    with pytest.raises((InputError, ModuleNotFoundError), match=match):
        minidecoder.embed(model, TEXTS, "cp", **{"prompt": PROMPT, "steer_layer": 1, **options})


@pytest.mark.real
def test_real_smollm2_matches_transformers(smollm2: Path, smollm2_transformers) -> None:
    hf, tok = smollm2_transformers
    model = minidecoder.load(smollm2, progress=False)
    texts = ["A man is playing a flute.", "Two dogs run on the beach."]
    ours = minidecoder.embed(model, texts, "cp", prompt=PROMPT, layer=-1, steer_layer=4, alpha=0.5)
    theirs = torch.stack([oracle(hf, tok, t, 4, "head", -1, "ns", 0.5, model.config.num_heads) for t in texts])
    assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_cp_keeps_its_papers_options_and_tp_true_is_the_composite_method() -> None:
    """CP's options are the paper's; TP's extension is the method cp+tp, which `cp tp=true` still builds."""
    paper = {"prompt", "aux_prompt", "layer", "steer_layer", "alpha", "mode", "site", "senteval_text"}
    assert set(cp_module.CP().option_values()) == paper
    both = build_method("cp", tp=True, start=0, end=2, tp_aux=False, alpha=0.7)
    assert both.name == "cp+tp" and both.option_values() == {
        **build_method("cp", alpha=0.7).option_values(), "start": 0, "end": 2, "pst_init": "gaussian", "seed": 0,
        "tp_aux": False}
    assert build_method("cp+tp", **both.option_values()).describe() == both.describe()  # its stamp rebuilds it
    assert build_method("cp", tp=False, start=3).describe() == build_method("cp").describe()  # TP's options unused
    with pytest.raises(InputError, match="unknown pst_init 'nonsense'"):  # ... but checked, never passed over
        build_method("cp", tp=False, pst_init="nonsense")
    with pytest.raises(InputError, match=r"method 'cp' has no option\(s\) \['foo'\]"):
        build_method("cp", tp=False, foo=1)
    with pytest.raises(InputError, match="tp 'yes' is not true or false"):
        build_method("cp", tp="yes")
