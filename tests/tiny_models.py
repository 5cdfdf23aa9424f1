"""Tiny transformers models for every family and variant, built in the test session (nothing is
downloaded). Initialization is large (std 0.2) and norm weights are non-trivial, so that every
quirk moves the logits; windows are shorter than the test inputs; RoPE scaling variants have inputs
longer than their original context. The context (max_position_embeddings) is long enough for every
method's prompt, since minidecoder refuses inputs past it, except where a variant's numerics depend on
it: dynamic NTK keeps 16 (minidecoder puts no limit on it: it is built to run past), YaRN 32 (4 x 8).
"""
from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import torch

VOCAB = 128  # 4 specials + printable ASCII (32..126) + spare rows
SEQ = 24  # test inputs are this long: longer than every window and every original context below

_BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.2,
             bos_token_id=1, eos_token_id=2, pad_token_id=0)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]

# name -> (model_type, config overrides). Each quirk that a family has is switched on in some variant.
VARIANTS: dict[str, tuple[str, dict]] = {
    "llama": ("llama", {}),
    "llama_mqa_untied": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=False)),
    "llama_mha_tied_bias": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
                                          mlp_bias=True)),
    "llama_head_dim": ("llama", dict(head_dim=16)),  # explicit head_dim != hidden / heads
    "llama_rope_linear": ("llama", dict(rope_parameters=dict(rope_type="linear", factor=4.0, rope_theta=10000.0))),
    "llama_rope_dynamic": ("llama", dict(max_position_embeddings=16,
                                            rope_parameters=dict(rope_type="dynamic", factor=3.0, rope_theta=10000.0))),
    "llama_rope_llama3": ("llama", dict(rope_parameters=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                             high_freq_factor=4.0, original_max_position_embeddings=8,
                                                             rope_theta=500000.0))),
    "llama_rope_yarn": ("llama", dict(max_position_embeddings=32,
                                         rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=10000.0,
                                                           original_max_position_embeddings=8))),
    "mistral_window": ("mistral", dict(sliding_window=5)),
    "qwen2": ("qwen2", dict()),
    "qwen2_window": ("qwen2", dict(use_sliding_window=True, sliding_window=5, max_window_layers=2,
                                   tie_word_embeddings=False)),
    "gemma2": ("gemma2", dict(head_dim=16, query_pre_attn_scalar=12, sliding_window=5, attn_logit_softcapping=4.0,
                              final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh")),
    "gemma3": ("gemma3_text", dict(head_dim=16, query_pre_attn_scalar=12, sliding_window=5, num_hidden_layers=6,
                                   sliding_window_pattern=3,
                                   rope_parameters={"full_attention": dict(rope_type="linear", factor=2.0,
                                                                           rope_theta=1_000_000.0),
                                                    "sliding_attention": dict(rope_type="default",
                                                                              rope_theta=10_000.0)})),
}


def build_hf_model(name: str, seed: int = 0):
    """A transformers model of variant `name`, float32, eager attention, with non-trivial norms."""
    import transformers

    model_type, overrides = VARIANTS[name]
    config = transformers.AutoConfig.for_model(model_type, **{**_BASE, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("norm.weight"):
                # Around 0 for Gemma's (1 + w), around 1 for the others: both far from the default.
                param.copy_(torch.randn_like(param) * 0.3 + (0.0 if "gemma" in model_type else 1.0))
            elif param_name.endswith(".bias"):
                param.copy_(torch.randn_like(param) * 0.2)
    return model


def save_hf_model(model, folder: Path, max_shard_size: str | None = None) -> Path:
    kwargs = {"safe_serialization": True}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(folder, **kwargs)
    return folder


def random_ids(batch: int = 2, length: int = SEQ, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


def save_tiny_tokenizer(folder: Path, add_bos: bool = True, merges: tuple[tuple[str, str], ...] = ()) -> Path:
    """A character-level tokenizer (one id per printable ASCII character) as tokenizer.json, loadable
    by minidecoder and by transformers' PreTrainedTokenizerFast. (In a folder whose config.json says
    qwen2, AutoTokenizer picks Qwen2Tokenizer, which drops this vocabulary's spaces: load the
    reference with PreTrainedTokenizerFast.from_pretrained there.) `merges`: BPE merges on top, each a
    token of its own, so that where a string is cut before tokenizing changes the ids."""
    import json

    from tokenizers import Tokenizer, models, processors

    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for code in range(32, 127):
        vocab[chr(code)] = len(vocab)
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), unk_token="<unk>"))
    if add_bos:
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                                 special_tokens=[("<s>", 1)])
    tokenizer.add_special_tokens(SPECIALS)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": add_bos, "add_eos_token": False,
    }))
    return folder


def tiny_checkpoint(name: str, folder: Path, seed: int = 0):
    """Save variant `name` with the tiny tokenizer into `folder`; returns the transformers model."""
    model = build_hf_model(name, seed)
    save_hf_model(model, folder)
    save_tiny_tokenizer(folder)
    return model


# One variant per family, each with its quirk on (windows shorter than the inputs): the methods' tests
# run on these.
FAMILIES = ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3"]

_SESSION_ROOT: list[Path] = []  # the one folder every cached checkpoint lives in; removed at exit


def session_root() -> Path:
    if not _SESSION_ROOT:
        _SESSION_ROOT.append(Path(tempfile.mkdtemp(prefix="minidecoder-tests-")))
    return _SESSION_ROOT[0]


def remove_session_root() -> None:
    """Called by conftest.py at the end of the session."""
    while _SESSION_ROOT:
        shutil.rmtree(_SESSION_ROOT.pop(), ignore_errors=True)


@functools.cache
def _saved(name: str) -> Path:
    folder = session_root() / f"tiny-{name}"  # "tiny-": the oracles pick transformers' tokenizer class by it
    folder.mkdir()
    tiny_checkpoint(name, folder)
    return folder


def checkpoint(name: str) -> tuple[object, Path]:
    """(transformers model, saved folder) of variant `name`. The folder is written once per test session
    and shared by every test that only reads it; the transformers model is built afresh on each call
    (the same seed, so the same weights), because oracles resize or edit it."""
    return build_hf_model(name), _saved(name)
