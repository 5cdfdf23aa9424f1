"""minidecoder: a compact, readable PyTorch decoder for training-free sentence embeddings.

    model = minidecoder.load()                        # default model, fetched and converted offline
    out = model(input_ids, output_hidden_states=True) # logits + transformers-style hidden states
    emb = minidecoder.embed(model, ["a sentence"], "prompteol")
    encoder = minidecoder.SentenceEncoder(model, "prompteol")  # sentence-transformers' encode()
"""
from __future__ import annotations

import torch

from minidecoder.core.config import ModelConfig
from minidecoder.errors import MinidecoderError
from minidecoder.core.model import Decoder, DecoderOutput, KVCache, Sites
from minidecoder.running.load_model import load
from minidecoder.running.encoder import SentenceEncoder

__version__ = "0.1.0"
__all__ = ["load", "embed", "explain", "generate", "SentenceEncoder", "Decoder", "DecoderOutput", "KVCache", "Sites", "ModelConfig",
           "MinidecoderError",
           "__version__"]


def embed(model: Decoder, texts: list[str], method: "str | object" = "prompteol", batch_size: int | None = None,
          progress: bool = False, truncate: int | None = None, report: dict | None = None,
          context: str | list[str] | None = None, **options) -> torch.Tensor:
    """Sentence embeddings (N, hidden) float32 for `texts` with a method name or method object.

    context: text the model reads before each text but no pooling touches (an instruction): one string for
    every text, or a list with one per text ("" for none); a text may also be given as a (context, text) pair.

    batch_size: sentences per batch; None (the default, as `encode` and the CLI) fills each batch up to the
    device's token budget (minidecoder.running.embedding). progress: a tqdm bar on stderr (off by default).

    An input longer than the model's context is an error; `truncate=N` keeps the first N tokens of each
    text (the template stays whole), warns, and lists the cut rows in `report` (a dict you pass; without
    `truncate` it records truncate None and no rows).
    """
    from minidecoder.running.embedding import embed as _embed
    return _embed(model, texts, method, batch_size=batch_size, progress=progress, truncate=truncate, report=report,
                  context=context, **options)


def explain(model: Decoder, text: str, method: "str | object" = "tp", truncate: int | None = None, **options):
    """One text through one method, recorded block by block (minidecoder.audit.explain): the prompt, its
    tokens, the positions the method acts on, what it did in each block, the blocks that ran, the
    embedding (equal to `embed`'s) and its cosine with the method's baseline. `.format()` is the text,
    `.to_dict()` the JSON record. A text past the model's context is an error; `truncate=N` keeps its
    first N tokens, as `embed`'s does (with a warning)."""
    from minidecoder.audit.explain import explain as _explain
    return _explain(model, text, method, truncate=truncate, **options)


def generate(model: Decoder, input_ids: torch.Tensor | list[int], max_new_tokens: int = 32,
             stop_at_eos: bool = True, static: bool | None = None) -> list[int]:
    """Greedy continuation of one prompt with a KV cache: the ids of up to `max_new_tokens` new tokens
    (minidecoder.running.generation; a batch of prompts is refused: one call per prompt). stop_at_eos (True):
    stop after the first end-of-sequence id (config.json's and the tokenizer's), which is kept in the result;
    False runs all `max_new_tokens`. static: a static cache and a captured decode step, kept across calls
    (None: on a GPU, or where the model's graphs are on)."""
    from minidecoder.running.generation import greedy
    return greedy(model, input_ids, max_new_tokens, stop_at_eos, static)
