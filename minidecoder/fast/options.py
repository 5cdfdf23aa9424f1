"""Which fast paths the method loop may take, per model: an explicit setting, never a global switch.

`minidecoder.load(compile=..., pack_weights=..., graphs=...)` fills `model.fast_paths`; the executor beneath
the shared block loop (`fast.forward`, through `fast.plan`) reads it to decide, batch by batch, whether a
fast path applies. Each fast path computes what the plain loop computes (tests/fast/); switching one off is
how the tests and `tools/bench.py` compare against the plain loop:

    with fast_paths_overridden(model, prefix_cache=False):
        plain = minidecoder.embed(model, texts, "tp")

A setting left at None is decided per device (`for_device`, and per batch where the batch matters), as
`describe(model)` prints it:

    path              CPU                                   GPU (CUDA)
    prefix_cache      a template run of >= 4 tokens         only when the tokens it saves, (rows - 1) x prefix,
                                                            are >= 1,024 (a second, batch-1 pass costs launches)
    explicit_attention  up to 80 keys (fp32), 256 (bf16)    never (the fused kernel)
    buckets, graphs   off                                   off: opt-in (`load(graphs=True)`, `--graphs`);
                                                            buckets follow graphs unless set: then only a
                                                            batch that runs as a graph is padded
    compiled, packed  opt-in at load                        compiled opt-in; packed is CPU-only
    fused             off (bit-exact float32 kept)          on (fast.fused: merged GEMMs, fused norms)
    blocked_fusion    from 256 tokens                       from 256 tokens

Why buckets and graphs are opt-in on a GPU too: padding a batch to a bucket shape adds half its
FLOPs or more (PromptEOL on STS-B test at 8,192 tokens a batch: computed/real tokens 1.66 padded to buckets
against 1.09 unpadded, `python tools/plan_budget.py`), while a graph only saves the host's
launch time, which a block call larger than a few hundred tokens hides behind its GPU work
(`fast.graphs.GRAPH_MAX_TOKENS`). So the default on a GPU is the eager, unpadded token-budget batch
(`running.memory.GPU_MAX_TOKENS`); graphs are for many small calls (a few texts a call, serving).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class FastPaths:
    prefix_cache: bool | None = None  # a prompt's shared leading tokens run once, reused through the KV cache;
    #                                   None: where it pays on the device (fast.prefix_cache.pays)
    explicit_attention: bool = True  # short inputs on a CPU take the explicit kernel (fast.attention)
    compiled: bool = False  # site-free block calls run torch.compile'd Block.forward (fast.compiled)
    packed: bool = False  # the blocks' linear layers are fast.packed.PackedLinear (set at load; informative)
    buckets: bool | None = None  # batches padded to a bounded set of shapes (fast.graphs.bucket); None: as graphs
    graphs: bool | None = None  # small site-free block calls replayed from CUDA graphs (fast.graphs); None: off
    fused: bool | None = None  # site-free block calls run fast.fused (merged projections, fused elementwise work);
    #                            None: on a GPU only (a CPU keeps the plain block's bit-exact float32 numbers)
    blocked_fusion_from: int | None = 256  # ReBA: fold patterns one head at a time from this many tokens on;
    #                                        0 = always, None = never (fast.blocked_fusion)

    def for_device(self, device) -> "FastPaths":
        """These settings with every None decided for `device` (prefix_cache stays None: it is decided per
        batch, `prefix_cache.pays`). Graphs are off unless asked for, on every device; buckets follow graphs
        (a graph needs a bounded set of shapes) unless set themselves."""
        graphs = bool(self.graphs)
        fused = fused_on(self, device)
        return dataclasses.replace(self, graphs=graphs, buckets=graphs if self.buckets is None else self.buckets,
                                   fused=fused)


def fused_on(paths: FastPaths, device) -> bool:
    """Whether site-free block calls run fused (fast.fused) on `device`: as set, else on CUDA only."""
    import torch
    return paths.fused if paths.fused is not None else torch.device(device).type == "cuda"


def describe(model) -> dict[str, str]:
    """Each fast path's setting on `model`, what it means on its device and why, in words (the benchmarks
    print it)."""
    from minidecoder.fast.attention import EXPLICIT_ATTENTION_MAX_KEYS
    from minidecoder.fast.graphs import GRAPH_BANK_MAX_BYTES, GRAPH_MAX_TOKENS
    from minidecoder.fast.prefix_cache import GPU_MIN_SAVED_TOKENS, MIN_PREFIX

    asked = fast_paths_of(model)
    paths = asked.for_device(model.device)
    gpu = model.device.type == "cuda"
    rule = (f"per batch: where it saves >= {GPU_MIN_SAVED_TOKENS} tokens ((rows - 1) x prefix)" if gpu
            else f"per batch: a shared run of >= {MIN_PREFIX} tokens")
    prefix = {True: f"on (a shared run of >= {MIN_PREFIX} tokens)", False: "off"}.get(paths.prefix_cache, rule)
    keys = EXPLICIT_ATTENTION_MAX_KEYS.get(model.dtype, 0)
    graphs = "off"
    if paths.graphs:
        graphs = (f"on for block calls of <= {GRAPH_MAX_TOKENS} tokens (rows x columns; larger ones run eagerly), "
                  f"at most {GRAPH_BANK_MAX_BYTES / 2**20:.0f} MiB of static buffers"
                  + (" (captured CUDA graphs)" if gpu else " (buffers only: no CUDA graphs here)"))
    buckets = ("on" + (" (following graphs: only a batch that runs as a graph is padded)" if asked.buckets is None
                       else "")) if paths.buckets else "off"
    why = ("graphs on: asked for at load (graphs=True / --graphs)" if paths.graphs else
           "buckets and graphs are opt-in on every device (load(graphs=True), --graphs): padding costs more "
           "FLOPs than graphs save at token-budget batch sizes, so the default is the eager, unpadded batch")
    return {
        "device": str(model.device),
        "prefix_cache": prefix,
        "explicit_attention": (f"up to {keys} keys" if paths.explicit_attention and model.device.type == "cpu"
                               and keys else "off (the fused kernel)"),
        "buckets": buckets,
        "graphs": graphs,
        "compiled": "on" if paths.compiled else "off",
        "packed": "on" if paths.packed else "off",
        "fused": ("on (merged q/k/v and gate/up GEMMs, fused norms and RoPE)" if paths.fused
                  else "off (the plain Block.forward)"),
        "blocked_fusion_from": "never" if paths.blocked_fusion_from is None else f"{paths.blocked_fusion_from} tokens",
        "why": why,
    }


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
