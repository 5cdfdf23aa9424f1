"""Which fast paths the method loop may take, per model: an explicit setting, never a global switch.

`minidecoder.load(compile=..., pack_weights=...)` fills `model.fast_paths`; the shared block loop
(`minidecoder.methods.loop`) reads it to decide, batch by batch, whether a fast path applies. Each
fast path computes what the plain loop computes (tests/fast/); switching one off is how the tests
and `tools/bench.py` compare against the plain loop:

    with fast_paths_overridden(model, prefix_cache=False):
        plain = minidecoder.embed(model, texts, "tp")
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class FastPaths:
    prefix_cache: bool = True  # a prompt's shared leading tokens run once, reused through the KV cache
    explicit_attention: bool = True  # short inputs on a CPU take the explicit kernel (fast.attention)
    compiled: bool = False  # site-free block calls run torch.compile'd Block.forward (fast.compiled)
    packed: bool = False  # the blocks' linear layers are fast.packed.PackedLinear (set at load; informative)
    blocked_fusion_from: int | None = 256  # ReBA: fold patterns one head at a time from this many tokens on;
    #                                        0 = always, None = never (fast.blocked_fusion)


def fast_paths_of(model) -> FastPaths:
    """The model's setting; a model built without `minidecoder.load` gets the defaults."""
    return getattr(model, "fast_paths", None) or FastPaths()


@contextlib.contextmanager
def fast_paths_overridden(model, **changes) -> Iterator[FastPaths]:
    """Change some of `model.fast_paths` inside the block, restored on exit (tests, benchmarks)."""
    before = fast_paths_of(model)
    model.fast_paths = dataclasses.replace(before, **changes)
    try:
        yield model.fast_paths
    finally:
        model.fast_paths = before
