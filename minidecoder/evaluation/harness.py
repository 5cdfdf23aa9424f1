"""What every benchmark family's texts go through: each distinct text once, longest first, encoded in
chunks that must come back as finite (N, D) tensors.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

import torch
from tqdm import tqdm

from minidecoder.errors import NumericsError

Encoder = Callable[[list[str]], torch.Tensor]  # sentences -> (N, D)


def longest_first(texts: Iterable[str]) -> list[str]:
    """Every distinct text once, longest first (less padding per batch; a batch that does not fit in memory
    fails at once instead of hours in); ties keep first-appearance order. The order must be the same in
    every process: a resumed job refuses texts in another order, and a set's order follows the per-process
    string hash (PYTHONHASHSEED), so with a set an interrupted run could never resume. A (context, text) pair
    counts the characters of both."""
    return sorted(dict.fromkeys(texts), key=lambda t: len(t[0]) + len(t[1]) + 1 if isinstance(t, tuple) else len(t),
                  reverse=True)


def encode_sentences(
    encode: Encoder, sentences: Sequence[str], chunk_size: int = 256, progress: bool = True,
    desc: str = "STS sentences",
) -> torch.Tensor:
    """Call `encode` on consecutive chunks of `sentences`; returns (N, D) on the CPU, row i = sentences[i].

    Each chunk must come back as a finite (len(chunk), D) tensor. The progress bar (stderr) counts
    sentences, so its rate is sentences per second.
    """
    parts: list[torch.Tensor] = []
    with tqdm(total=len(sentences), unit="sent", desc=desc, file=sys.stderr, disable=not progress,
              dynamic_ncols=True) as bar:
        for start in range(0, len(sentences), chunk_size):
            chunk = list(sentences[start:start + chunk_size])
            vectors = encode(chunk)
            if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or vectors.shape[0] != len(chunk):
                shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
                raise RuntimeError(f"encode returned {shape} for {len(chunk)} sentences; expected a ({len(chunk)}, D) tensor")
            vectors = vectors.detach().cpu()
            bad = ~torch.isfinite(vectors).all(dim=1)
            if bad.any():
                first = chunk[int(bad.nonzero()[0])]
                raise NumericsError(
                    f"{int(bad.sum())} of {len(chunk)} STS embeddings contain NaN or inf (first: {first!r})",
                    "run in float32 (--dtype float32); half precision can overflow in long prompts",
                )
            parts.append(vectors)
            bar.update(len(chunk))
    if not parts:
        return torch.empty(0, 0)
    if len({part.shape[1] for part in parts}) != 1:
        raise RuntimeError(f"encode returned different widths across chunks: {sorted({p.shape[1] for p in parts})}")
    return torch.cat(parts)  # (N, D)
