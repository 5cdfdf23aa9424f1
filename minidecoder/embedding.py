"""`minidecoder.embed`: run a method over a list of texts in length-sorted batches.

Sorting by length before batching keeps padding small (the references padded each batch of
SentEval's order); results are put back in input order. Everything runs under inference_mode.
"""
from __future__ import annotations

import time

import torch

from minidecoder.errors import InputError, NumericsError
from minidecoder.methods.base import Method, build_method


def embed(model, texts: list[str], method: str | Method = "prompteol", batch_size: int = 32,
          progress: bool = False, **options) -> torch.Tensor:
    """(N, E) float32 embeddings of `texts`, in input order."""
    if isinstance(method, str):
        method = build_method(method, **options)
    elif options:
        raise InputError("options were given together with a method object", "set them on the method object")
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InputError("texts must be a list of strings", "pass e.g. ['first sentence', 'second sentence']")
    for row, text in enumerate(texts):  # named here, before sorting, so the row number is the caller's
        if not text.strip():
            raise InputError(f"text {row} is empty or whitespace-only ({text!r})",
                             "remove that row or give it some text; an embedding of nothing is undefined")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size {batch_size!r} must be a positive integer", "e.g. batch_size=32")
    if model.tokenizer is None:
        raise InputError("the model has no tokenizer", "load it with minidecoder.load(), which attaches one")
    method.check(model)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = torch.empty(len(texts), model.config.hidden_size, dtype=torch.float32)
    bar = _progress_bar(len(texts)) if progress else None
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(order), batch_size):
            index = order[first:first + batch_size]
            vectors = method.embed_batch(model, [texts[i] for i in index])
            if not torch.isfinite(vectors).all():
                raise NumericsError(
                    f"method {method.name} produced NaN or inf for text {index[0]}... in dtype {model.dtype}",
                    "float16 overflows on many models: use float32 or bfloat16; "
                    "minidecoder.diagnostics.first_nonfinite_layer names the block where it starts",
                )
            out[index] = vectors.float().cpu()
            if bar is not None:
                bar.update(len(index))
                bar.set_postfix_str(f"{bar.n / (time.perf_counter() - start):.1f} sentences/s")
    if bar is not None:
        bar.close()
    return out


def _progress_bar(total: int):
    from tqdm.auto import tqdm
    return tqdm(total=total, unit="sent", desc="embedding", dynamic_ncols=True)
