"""Where did the NaN come from? Rerun a forward block by block and name the first non-finite site.

    report = first_nonfinite_layer(model, input_ids, attention_mask)
    report  # NonFinite(block=2, site='mlp_out', hidden_index=3, dtype=torch.float16, ...) or None

The rerun visits, in forward order, the embedding output, then inside every block the TransformerLens
sites of `minidecoder.core.model.SITES` (`resid_pre`, `q`, `k`, `v`, `pattern`, `z`, `attn_out`,
`resid_mid`, `mlp_out`, `resid_post`), then the final norm; the first one holding NaN or inf at a
real (unpadded) position is reported. Padded positions are ignored: their values are never read.
Requesting the `pattern` site makes attention take the eager path; it computes the same values as the
fused path (tested in test_parity), so a value that overflows there overflows here.

This is a diagnosis tool: it runs one extra forward pass, and only when something already went
wrong (`minidecoder.embed` calls it before raising `NumericsError`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minidecoder.core.model import SITES
from minidecoder.methods.loop import Forward


@dataclass(frozen=True)
class NonFinite:
    """The first site of a forward pass that holds NaN or inf."""

    block: int | None  # 0-based block index; None for the embedding output and the final norm
    site: str  # "embed", one of model.SITES, or "final_norm"
    hidden_index: int  # the hidden_states entry this site feeds (block k -> k + 1; embed -> 0; final_norm -> L)
    kind: str  # "nan", "inf" or "nan and inf"
    count: int  # non-finite values at real positions
    dtype: torch.dtype

    def describe(self) -> str:
        where = (f"block {self.block} (0-based), site {self.site!r}" if self.block is not None
                 else f"the {'embedding output' if self.site == 'embed' else 'final norm'}")
        return (f"{self.kind} first appears in {where}, i.e. on the way to hidden_states[{self.hidden_index}] "
                f"({self.count} values, dtype {str(self.dtype).replace('torch.', '')})")


def first_nonfinite_layer(model, batch_or_ids, attention_mask: torch.Tensor | None = None,
                          extra_rows: dict | None = None) -> NonFinite | None:
    """Rerun `model` on `batch_or_ids` (a (B, T) id tensor, a list of id lists, or a PromptBatch) and
    return the first site with NaN/inf at a real position, or None if every activation is finite.
    extra_rows: input rows of placeholder ids (a method's pass)."""
    ids, mask = _inputs(batch_or_ids, attention_mask)
    ids = ids.to(model.device)
    mask = None if mask is None else mask.to(device=model.device, dtype=torch.bool)
    real = mask if mask is not None else torch.ones(ids.shape, dtype=torch.bool, device=ids.device)  # (B, T)
    L = model.num_layers
    with torch.inference_mode():
        every_site = {i: set(SITES) for i in range(L)}
        forward = Forward(model, ids, mask, keep=range(L + 1), record=every_site, extra_rows=extra_rows)  # plain loop
        found = _check(forward.hidden(0), real, "embed", None, 0, model.dtype)
        if found:
            return found
        for i in range(L):
            forward.run_to(i + 1)
            for name in SITES:  # forward order
                found = _check(forward.recorded(i, name), real, name, i, i + 1, model.dtype)
                if found:
                    return found
        return _check(forward.hidden(L), real, "final_norm", None, L, model.dtype)


def _inputs(batch_or_ids, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    if hasattr(batch_or_ids, "input_ids") and hasattr(batch_or_ids, "attention_mask"):  # a PromptBatch
        return batch_or_ids.input_ids, batch_or_ids.attention_mask if attention_mask is None else attention_mask
    ids = batch_or_ids if isinstance(batch_or_ids, torch.Tensor) else torch.tensor(batch_or_ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
        attention_mask = None if attention_mask is None else attention_mask.reshape(1, -1)
    return ids, attention_mask


def _check(value: torch.Tensor, real: torch.Tensor, site: str, block: int | None, hidden_index: int,
           dtype: torch.dtype) -> NonFinite | None:
    if site in ("q", "k", "v", "pattern"):  # (B, H, T, ...): the query/key axis is 2 (z is (B, T, H, D))
        value = value.transpose(1, 2)  # (B, T, H, ...)
        if value.shape[1] != real.shape[1]:  # keys of a cache: not ours to judge
            return None
    selected = value[real]  # real positions only: (N, ...)
    nan, inf = torch.isnan(selected), torch.isinf(selected)
    count = int(nan.sum() + inf.sum())
    if count == 0:
        return None
    kind = " and ".join(word for word, hit in (("nan", bool(nan.any())), ("inf", bool(inf.any()))) if hit)
    return NonFinite(block=block, site=site, hidden_index=hidden_index, kind=kind, count=count, dtype=dtype)


def nonfinite_parameters(model) -> list[str]:
    """Names of the parameters holding NaN or inf: a corrupt checkpoint, not an overflow."""
    with torch.no_grad():
        return [name for name, param in model.named_parameters() if not bool(torch.isfinite(param).all())]
