"""Placeholder tokens: the input rows TP, HTP and CP's TP extension give them.

A placeholder (`<PST>`, `<B-PST>`) is an added token whose input-embedding row the method chooses
(`placeholder_row`); it is added to a copy of the tokenizer (`Tokenizer.with_placeholders`), never to
the model's own. The copies into it between blocks are TP's and HTP's step (`methods.loop.CopyRows`).
"""
from __future__ import annotations

import weakref

import torch

from minidecoder.errors import InputError

PLACEHOLDER_INITS = ("zeros", "ones", "uniform", "gaussian", "mean", "token:<text>")


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
    unknown = model.tokenizer.unk_token
    if unknown is not None and text != unknown and ids[0] == model.tokenizer.token_to_id(unknown):
        raise InputError(f"pst_init {init!r}: {text!r} is not in the vocabulary; the tokenizer reads it as "
                         f"{unknown}, whose row would be copied instead",
                         "name a text that is a single token of this vocabulary, e.g. 'token: ' (a space)")
    return weight[ids[0]].detach().float().cpu()


def refuse_placeholders_in(contexts: list[str] | None, *names: str) -> None:
    """A context is read as written: one holding a placeholder string would gain a placeholder the method
    never meant, so it is refused, naming the row."""
    for row, context in enumerate(contexts or []):
        for name in names:
            if name in context:
                raise InputError(f"the context of text {row} contains the placeholder string {name}",
                                 "remove it from the context; the method places its placeholders itself")


def check_placeholder_init(init: object, seed: int = 0) -> str:
    """A known `pst_init`; a `seed` other than the default only with an init that draws its row (else the seed
    would be stamped on the output as if it acted, and change nothing)."""
    if not isinstance(init, str) or not (init in PLACEHOLDER_INITS[:-1] or init.startswith("token:")):
        raise InputError(f"unknown pst_init {init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")
    if seed != 0 and init not in ("uniform", "gaussian"):
        raise InputError(f"seed={seed} seeds the row pst_init=gaussian or uniform draws, and pst_init={init!r} draws "
                         "none: it would change nothing", "leave seed out, or pass pst_init=gaussian")
    return init
