"""Placeholder tokens and the row copies into them: the pieces TP, HTP and CP's TP extension share.

A placeholder (`<PST>`, `<B-PST>`) is an added token whose input-embedding row the method chooses
(`placeholder_row`); it is added to a copy of the tokenizer (`Tokenizer.with_placeholders`), never to
the model's own. Between blocks, the residual-stream row at a placeholder is overwritten by the row of
another position of the same sequence, before given blocks (`CopyRows`).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.fast.prefix_cache import column_field
from minidecoder.methods.loop import Step

PLACEHOLDER_INITS = ("zeros", "ones", "uniform", "gaussian", "mean", "token:<text>")


@dataclass(frozen=True, eq=False, kw_only=True)
class CopyRows(Step):
    """Before every block in `blocks`: h[rows[k], target[k]] <- h[rows[k], source[k]] for every k, all
    sources read before any target is written (TP's and HTP's step). Index tensors are (K,) long."""

    blocks: frozenset[int]
    rows: torch.Tensor
    target: torch.Tensor = column_field(rows="rows")
    source: torch.Tensor = column_field(rows="rows")

    @classmethod
    def of_pairs(cls, blocks: set[int], pairs: list[tuple[int, int, int]], **fields) -> "CopyRows":
        """From (row, target, source) triples."""
        rows, target, source = (torch.tensor([p[k] for p in pairs], dtype=torch.long) for k in range(3))
        return cls(blocks=frozenset(blocks), rows=rows, target=target, source=source, **fields)

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        if i not in self.blocks:
            return h
        out = h.clone()  # a copy: rows read later keep their values (the references wrote in place)
        out[self.rows, self.target] = h[self.rows, self.source]  # the whole vector is replaced
        return out

    def acts_on(self, row: int) -> list[dict]:
        return [{"position": t, "source": s, "blocks": sorted(self.blocks),
                 "note": "h[position] <- h[source] before each of these blocks"}
                for b, t, s in zip(self.rows.tolist(), self.target.tolist(), self.source.tolist()) if b == row]

    def report(self, i: int, where: str, old, new, shift: int) -> list[dict]:
        """Each row written: its norm, the norm of the row it replaced, and their cosine."""
        if where != "stream":
            return []
        events = []
        for b, t, s in zip(self.rows.tolist(), self.target.tolist(), self.source.tolist()):
            written, replaced = new[b, t].float(), old[b, t].float()
            events.append({"block": i, "target": t + shift, "source": s + shift,
                           "written_norm": float(written.norm()), "replaced_norm": float(replaced.norm()),
                           "cosine": float(torch.nn.functional.cosine_similarity(written, replaced, dim=0))})
        return events


_ROWS: dict[int, tuple[weakref.ref, dict]] = {}  # id of an embedding table -> (the table, its rows by init)


def placeholder_row(model, init: str, seed: int = 0, index: int = 0) -> torch.Tensor:
    """(E,) float32 input-embedding row for a placeholder, *before* Gemma's sqrt(hidden) scaling
    (`Decoder.embed` scales it like every row, as transformers scales the resized table's row).

    zeros / ones; uniform: U[0, 1); gaussian: N(0, I) (the TP reference's `torch.randn`); both drawn
    from `torch.Generator('cpu').manual_seed(seed)`, skipping `index` earlier draws (HTP's second
    placeholder uses index 1); mean: the mean row of the embedding table (what transformers'
    `resize_token_embeddings` gives a new row, up to its 1e-9-covariance noise; HTP's reference
    default); token:<text>: a copy of that token's row (the TP paper's Table 4 uses a space).
    Rows read from the table are computed once per table (and again if it changes).
    """
    check_placeholder_init(init)
    weight = model.model.embed_tokens.weight
    E = weight.shape[1]
    if init == "zeros":
        return torch.zeros(E)
    if init == "ones":
        return torch.ones(E)
    if init in ("uniform", "gaussian"):
        generator = torch.Generator().manual_seed(seed)
        draw = torch.rand if init == "uniform" else torch.randn
        for _ in range(index):
            draw(E, generator=generator)
        return draw(E, generator=generator)
    key = (init, weight._version)
    table, known = _ROWS.get(id(weight), (None, {}))
    if table is None or table() is not weight:  # a new table (or one at a recycled address)
        known = {}
        _ROWS[id(weight)] = (weakref.ref(weight), known)
    if key not in known:
        known[key] = _table_row(model, weight, init)
    return known[key]


def _table_row(model, weight: torch.Tensor, init: str) -> torch.Tensor:
    if init == "mean":
        return weight.detach().float().mean(dim=0).cpu()
    text = init[len("token:"):]
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise InputError(f"pst_init {init!r}: {text!r} is {len(ids)} tokens ({ids}), not one",
                         "name a text that is a single token, e.g. 'token: ' (a space, the paper's choice)")
    return weight[ids[0]].detach().float().cpu()


def check_placeholder_init(init: object) -> str:
    if not isinstance(init, str) or not (init in PLACEHOLDER_INITS[:-1] or init.startswith("token:")):
        raise InputError(f"unknown pst_init {init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")
    return init
