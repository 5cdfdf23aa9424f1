"""Shared prompt prefix, encoded once: a fast path for methods that only read hidden states.

Every row of a prompt batch starts with the same template text (`This sentence : "` for PromptEOL,
two sentences of instructions for Knowledge, a paragraph for each MetaEOL prompt). A causal model's
states at those positions depend only on those tokens, so they are the same in every row. This
module runs the shared prefix once with batch 1, broadcasts its keys and values to the batch
(`KVCache.expand`, no copy) and runs only the rest of each row against them:

    plain path              fast path
    [pad pad P P P s s s]   prefix pass (B = 1):  [P P P]                 -> KV cache, states of P
    [P P P s s s s s s s]   rest pass:            [P P P] + [pad pad s s s] (cache + new tokens)
                                                  [P P P] + [s s s s s s s]

Positions come from the mask, counting real tokens only (`Decoder.context`), so the rest of a row
gets positions p, p+1, ... whatever padding sits between the prefix and it.

Which prefix: the longest run of token ids that every row's real tokens begin with, read from the
batch itself, not from the template. A row whose tokenization of the template/text boundary differs
(`: "` + `'Hello` may merge into one token) shortens the shared run for the batch; the cached part
is by construction identical in every row, so the fast path cannot be silently wrong.

When it is off (the plain loop runs instead): a batch of one row, a shared run shorter than
`MIN_PREFIX` tokens, a model with sliding-window layers whose window the batch exceeds (the window
rule counts indices in the cache + new sequence, and padding between prefix and rest would shift
them), dynamic RoPE (its frequencies depend on the longest position in the call), rows whose real
tokens are not one run at the left or right end.
TP and HTP come here too, through `before_rest_block`: their copies go from the ends of the text into
the placeholders, all after the prefix, which is cut to end before the first placeholder
(`tp.forward_with_copies`). CP comes through `sites_for`: its record and edit touch only each row's
last token, which is never in the prefix. Methods that read the prefix's internals back (ReBA's
attention, TP's `mask_pst_first_layer`) run their own loops.

Tested equal to the plain path in tests/test_fast_paths.py.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from minidecoder.methods.inputs import PromptBatch
from minidecoder.core.model import KVCache, Sites

# Below this the second, batch-1 pass costs about what it saves. PromptEOL's 4-token prefix on SmolLM2
# (32 rows a batch) pays on an idle machine: 0.78x the plain loop's FLOPs, 0.91x its time
# (docs/benchmarks.md, run F); an earlier 8 had been set from runs on a loaded machine.
MIN_PREFIX = 4
_enabled = True  # switched off only by `disabled()` (benchmarks and tests compare against the plain loop)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the plain loop inside this block (the runner's `reuse_prefix` default is then ignored)."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before


def shared_prefix_length(batch: PromptBatch) -> int:
    """Number of leading real-token ids common to every row (0 for a single row)."""
    ids, mask = batch.input_ids, batch.attention_mask
    B, T = ids.shape
    if B < 2:
        return 0
    lengths = mask.sum(dim=1)  # (B,)
    shortest = int(lengths.min())
    # Gather each row's first `shortest` real tokens: with left padding they start at T - length;
    # with right padding at 0. Both are "the first True of the row".
    starts = batch.first_positions()  # (B,)
    cols = starts[:, None] + torch.arange(shortest)[None, :]  # (B, shortest)
    heads = torch.gather(ids, 1, cols)  # (B, shortest)
    same = (heads == heads[:1]).all(dim=0)  # (shortest,)
    differs = torch.nonzero(~same)
    # Keep at least one token of every row out of the prefix: the rest pass must have a query per row.
    p = int(differs[0]) if differs.numel() else shortest
    return min(p, shortest - 1)


def prefix_cache_applies(model, batch: PromptBatch) -> int:
    """The prefix length the fast path would cache for this batch, or 0 where it must not run."""
    config = model.config
    if not _enabled:
        return 0
    if any(spec.rope_type == "dynamic" for spec in config.rope.values()):
        return 0
    if config.sliding_window is not None and "sliding_attention" in config.layer_types \
            and batch.input_ids.shape[1] > config.sliding_window:
        return 0
    mask = batch.attention_mask
    first, lengths = batch.first_positions(), mask.sum(dim=1)  # (B,), (B,)
    if not bool((first + lengths == mask.shape[1]).all() or (first == 0).all()):
        return 0  # real tokens must be one run per row: left padding (prompt methods) or right (HTP)
    p = shared_prefix_length(batch)
    return p if p >= MIN_PREFIX else 0


def hidden_with_prefix(model, batch: PromptBatch, wanted: dict[int, int], p: int,
                       extra_rows: dict[int, torch.Tensor] | None = None,
                       before_rest_block: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                       sites_for: Callable[[int], Sites | None] | None = None,
                       ) -> dict[int, torch.Tensor]:
    """The runner's `hidden_at_layers` through a cached prefix of `p` tokens.

    wanted: requested layer -> resolved hidden_states index. Returns layer -> (B, T, E) laid out as
    the plain path's padded batch; real positions hold the same states, padded positions hold
    finite values that no pooling reads.
    extra_rows: placeholder embedding rows (`Decoder.embed`), for methods whose rest holds `<PST>`.
    before_rest_block: (i, h) -> h applied to the rest pass's (B, T - p, E) stream before block i (TP's
        copies, with positions shifted by -p); it must not read or write the prefix, which is cached.
    sites_for: i -> Sites for block i of the rest pass (CP's record and edit of the last token), in rest
        coordinates too: column j of the rest is column j + p of the batch. The prefix pass has none."""
    L = model.num_layers
    deepest = max(wanted.values())
    device = model.device
    ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
    B, T = ids.shape
    lengths = mask.sum(dim=1)  # (B,)
    first = batch.first_positions(device)  # (B,)

    # 1) the prefix, once: (1, p)
    prefix_ids = ids[:1, int(first[0]):int(first[0]) + p]  # (1, p)
    cache = KVCache.empty(L)
    h = model.embed(prefix_ids)  # (1, p, E)
    ctx = model.context(None, p, 1, cache)
    keep = set(wanted.values())  # only the requested states stay alive
    prefix_states = {0: h} if 0 in keep else {}
    for i, block in enumerate(model.layers[:deepest]):
        h = block(h, ctx)
        if i + 1 in keep:
            prefix_states[i + 1] = h

    # 2) the rest of every row, padded to W = T - p, after the broadcast prefix:
    #    row b's rest sits exactly where it sits in the plain batch, shifted by p.
    W = T - p
    rest_ids = ids[:, p:]  # (B, W)
    # Row b's real tokens are ids[b, first_b : first_b + length_b], its rest starts p later; in
    # ids[:, p:] it occupies [first_b, first_b + length_b - p) (left padding: the right end; right
    # padding: the left end), so only the mask needs rebuilding.
    cols = torch.arange(W, device=device)[None, :]  # (1, W)
    rest_mask = (cols >= first[:, None]) & (cols < (first + lengths - p)[:, None])  # (B, W)
    rest_ids = rest_ids.masked_fill(~rest_mask, 0)
    shared = cache.expand(B)
    h = model.embed(rest_ids, extra_rows)  # (B, W, E)
    ctx = model.context(rest_mask, W, B, shared)
    rest_states = {0: h} if 0 in keep else {}
    for i, block in enumerate(model.layers[:deepest]):
        if before_rest_block is not None:
            h = before_rest_block(i, h)
        h = block(h, ctx, sites_for(i) if sites_for is not None else None)
        if i + 1 in keep:
            rest_states[i + 1] = h
    if deepest == L:  # only the last entry is normed (transformers' convention)
        prefix_states[L] = model.norm(prefix_states[L])
        rest_states[L] = model.norm(rest_states[L])

    # 3) reassemble (B, T, E) in the plain layout: row b = [padding][prefix][rest].
    out = {}
    rows = torch.arange(B, device=device)[:, None]  # (B, 1)
    prefix_cols = first[:, None] + torch.arange(p, device=device)[None, :]  # (B, p)
    for layer, index in wanted.items():
        full = rest_states[index].new_zeros(B, T, rest_states[index].shape[-1])  # (B, T, E); padding stays 0
        full[:, p:] = rest_states[index]
        full[rows, prefix_cols] = prefix_states[index].expand(B, p, -1)
        out[layer] = full
    return out
