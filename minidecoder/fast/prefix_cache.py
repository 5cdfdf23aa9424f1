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
(`: "` + `'Hello` may merge into one token) shortens the shared run for the batch by that token; the
cached part is by construction identical in every row, so the fast path cannot be silently wrong.

When it is off (the plain loop runs instead): a batch of one row, on a CPU a template run shorter than
`MIN_PREFIX` tokens (`cacheable_prefix`: one row whose first characters merged with the template's last
token shortens the cached run by that token, never switches it off), a GPU batch where it saves fewer than
`GPU_MIN_SAVED_TOKENS` tokens (`pays`), a model with sliding-window layers whose window the batch exceeds (the window
rule counts indices in the cache + new sequence, and padding between prefix and rest would shift
them), dynamic RoPE (its frequencies depend on the longest position in the call), rows whose real
tokens are not one run at the left or right end. A method's step also bounds the prefix: the loop
cuts it before the first column the step reads or writes (TP's `<PST>`, CP's last token), and turns
it off for a step that reads every column (ReBA's attention) or hides keys from block 0.

The contract with a method's step is written once, here: a step declares which of its fields hold
batch columns (`methods.loop.column_field`); the loop cuts the prefix before the first column any of them names
(`first_touched`) and hands the rest pass a copy of the step with those fields shifted (`shifted`).
No step reasons about columns. What runs the two passes is the executor, `minidecoder.fast.forward`.
Tested equal to the plain path in tests/fast/test_fast_paths.py.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from minidecoder.methods.loop import COLUMNS

# Below this the second, batch-1 pass costs about what it saves. PromptEOL's 4-token prefix on SmolLM2
# (32 rows a batch) pays on an idle machine: 0.78x the plain loop's FLOPs, 0.91x its time
# (docs/benchmarks.md). It is the CPU's rule, tested on the run the template gives (`cacheable_prefix`), not on
# one row's tokenization.
MIN_PREFIX = 4
# On a GPU the second, batch-1 pass costs launches (about fifteen a block), not work: the decision there is
# the tokens saved alone, a threshold not yet measured on a GPU: `tools/bench_gpu.py` times PromptEOL with the
# cache on and off to set it.
GPU_MIN_SAVED_TOKENS = 1024


def shortest_template(device, forced: bool | None) -> int:
    """The shortest template run `cacheable_prefix` accepts: MIN_PREFIX (the CPU's rule, and the forced
    setting's), or 1 under a GPU's own rule, where the tokens saved alone decide (`pays`): a 3-token
    template over 400 rows saves 1,197 tokens."""
    if forced is None and getattr(device, "type", device) == "cuda":
        return 1
    return MIN_PREFIX


def pays(device, p: int, rows: int, forced: bool | None) -> bool:
    """Whether running a `p`-token shared prefix once pays for a batch of `rows` on `device`; `forced` is
    the setting (True: wherever `cacheable_prefix` found one; False: never; None: the device's rule: on a
    CPU the template's run of >= MIN_PREFIX tokens, which `cacheable_prefix` already tested; on a GPU the
    tokens it saves, (rows - 1) x p >= GPU_MIN_SAVED_TOKENS, alone)."""
    if forced is False or p < 1:
        return False
    if forced is None and getattr(device, "type", device) == "cuda":
        return (rows - 1) * p >= GPU_MIN_SAVED_TOKENS
    return True


NOWHERE = 1 << 30  # the first column of a row no column field names


def _column_fields(obj: Any):
    """(value, rows or None) of every column field of a step, its nested dataclasses and tuples of steps."""
    if isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _column_fields(item)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if COLUMNS in f.metadata:
                rows = f.metadata[COLUMNS]
                yield value, None if rows is None else getattr(obj, rows)
            else:
                yield from _column_fields(value)


def shifted(obj: Any, columns: int) -> Any:
    """`obj` (a step) on a stream whose column j is batch column j + `columns`: every column field minus
    `columns`, through nested dataclasses and tuples; other fields are shared, not copied."""
    if isinstance(obj, (tuple, list)):
        return type(obj)(shifted(item, columns) for item in obj)
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return obj
    changes = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if COLUMNS in f.metadata:
            changes[f.name] = None if value is None else value - columns
        elif dataclasses.is_dataclass(value) or isinstance(value, (tuple, list)):
            changes[f.name] = shifted(value, columns)
    return dataclasses.replace(obj, **changes) if changes else obj


def first_touched(obj: Any, batch_size: int) -> torch.Tensor:
    """(B,) the first column each row's column fields name (NOWHERE for a row they never name)."""
    first = torch.full((batch_size,), NOWHERE, dtype=torch.long)
    for value, rows in _column_fields(obj):
        if value is None or value.numel() == 0:
            continue
        value = value.cpu().long()
        if rows is None:  # one entry (or several) per batch row
            first = torch.minimum(first, value.reshape(batch_size, -1).amin(dim=1))
        else:
            first = first.scatter_reduce(0, rows.cpu().long(), value.reshape(-1), reduce="amin")
    return first


def first_real_positions(mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each row's first real token (left or right padding)."""
    return torch.argmax(mask.long(), dim=-1)


def _runs(ids: torch.Tensor, mask: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(shortest row's real tokens, (B,) each row's run of leading real tokens that agree with most rows').

    Column j's most common token (over the rows' first real tokens) is the batch's token there; a row's
    run ends at its first column that differs. The run every row shares is the smallest of them."""
    shortest = int(mask.sum(dim=1).min())
    # Gather each row's first `shortest` real tokens: with left padding they start at T - length;
    # with right padding at 0. Both are "the first True of the row".
    starts = first_real_positions(mask)  # (B,)
    cols = starts[:, None] + torch.arange(shortest, device=ids.device)[None, :]  # (B, shortest)
    heads = torch.gather(ids, 1, cols)  # (B, shortest)
    agrees = heads == heads.mode(dim=0).values[None, :]  # (B, shortest)
    # a row's run: the columns before its first disagreement (all of them where it never disagrees)
    runs = torch.where(agrees.all(dim=1), shortest, (~agrees).long().argmax(dim=1))  # (B,)
    return shortest, runs


def shared_prefix_length(ids: torch.Tensor, mask: torch.Tensor) -> int:
    """Number of leading real-token ids common to every row (0 for a single row)."""
    if ids.shape[0] < 2:
        return 0
    shortest, runs = _runs(ids, mask)
    # Keep at least one token of every row out of the prefix: the rest pass must have a query per row.
    return min(int(runs.min()), shortest - 1)


def may_cache(config, tokens: int) -> bool:
    """Whether a batch of rows `tokens` long may run a shared prefix once, as far as the model decides (the
    batch's own ids decide the rest, `cacheable_prefix`). Never under dynamic RoPE, whose frequencies depend
    on the call's longest position, so a prefix run on its own would get other ones; nor past a sliding
    window, where the rest pass's keys would need the prefix's window, not all of it."""
    if any(spec.rope_type == "dynamic" for spec in config.rope.values()):
        return False
    return not (config.sliding_window is not None and "sliding_attention" in config.layer_types
                and tokens > config.sliding_window)


def cacheable_prefix(config, ids: torch.Tensor, mask: torch.Tensor, shortest: int = MIN_PREFIX) -> int:
    """The prefix length the fast path may cache for this batch, or 0 where it must not run; `shortest`:
    the shortest template run worth caching (`shortest_template`).

    The cached run is what every row shares (`shared_prefix_length`). Whether it is long enough is asked of
    the run most rows share, the template's: a text's first characters may merge with the template's last
    token (PromptEOL's ` "` + `'Hello` -> ` "'` + `Hello`), which shortens that one row's run by the merged
    token; one such row must not switch the prefix off for its whole batch, so it costs the batch that one
    token and no more. Only that one token is forgiven: rows that share less (texts that merely start alike,
    no template) are judged on what every row shares."""
    if not may_cache(config, ids.shape[1]):
        return 0
    first, lengths = first_real_positions(mask), mask.sum(dim=1)  # (B,), (B,)
    if not bool((first + lengths == mask.shape[1]).all() or (first == 0).all()):
        return 0  # real tokens must be one run per row: left padding (prompt methods) or right (HTP)
    p = shared_prefix_length(ids, mask)
    if p < 1:
        return 0
    _, runs = _runs(ids, mask)
    template = min(int(runs.median()), p + 1)  # most rows' run; at most the one merged token past the shared run
    return p if template >= shortest else 0


def split(ids: torch.Tensor, mask: torch.Tensor, p: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prefix ids (1, p), rest ids (B, T - p), rest mask (B, T - p)).

    Row b's real tokens are ids[b, first_b : first_b + length_b] and its rest starts p later; in
    ids[:, p:] it occupies [first_b, first_b + length_b - p) (left padding: the right end; right
    padding: the left end). So column j of the rest is column j + p of the batch, for every row."""
    first, lengths = first_real_positions(mask), mask.sum(dim=1)  # (B,), (B,)
    prefix_ids = ids[:1, int(first[0]):int(first[0]) + p]  # (1, p)
    cols = torch.arange(ids.shape[1] - p, device=ids.device)[None, :]  # (1, T - p)
    rest_mask = (cols >= first[:, None]) & (cols < (first + lengths - p)[:, None])  # (B, T - p)
    return prefix_ids, ids[:, p:].masked_fill(~rest_mask, 0), rest_mask


def assemble(prefix_state: torch.Tensor, rest_state: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(1, p, ...) prefix values and (B, T - p, ...) rest values -> (B, T, ...) in the plain batch's layout:
    row b = [padding][prefix][rest]; padded positions hold zeros, which no pooling reads. Any value whose
    dimension 1 is the token (hidden states; the sites z, attn_out, resid_mid, mlp_out, resid_post)."""
    B, W = rest_state.shape[:2]
    p = prefix_state.shape[1]
    full = rest_state.new_zeros(B, W + p, *rest_state.shape[2:])
    full[:, p:] = rest_state
    rows = torch.arange(B, device=rest_state.device)[:, None]  # (B, 1)
    prefix_cols = first_real_positions(mask)[:, None] + torch.arange(p, device=rest_state.device)[None, :]  # (B, p)
    full[rows, prefix_cols] = prefix_state.expand(B, *prefix_state.shape[1:])
    return full
