"""The plain loop's poolings (minidecoder.methods.loop): `mean_over_spans` is one masked sum for the batch,
equal to a mean per row, with a number of device operations that does not grow with the batch (the
per-row loop it replaced launched ~2,000 kernels a batch for `mean`)."""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from minidecoder.methods.loop import mean_over_spans


class CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def spans_for(B: int, T: int, generator: torch.Generator) -> list[list[tuple[int, int]]]:
    rows = []
    for _ in range(B):
        a, b = sorted(torch.randint(0, T, (2,), generator=generator).tolist())
        c = int(torch.randint(b + 1, T + 1, (1,), generator=generator)) if b < T else T
        rows.append([(a, b + 1), (b, c)] if c > b else [(a, b + 1), (a, b + 1)])
    return rows


@pytest.mark.parametrize("occurrence", [0, -1])
def test_mean_over_spans_is_each_rows_mean(occurrence: int) -> None:
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(7, 13, 5, generator=generator)
    spans = spans_for(7, 13, generator)
    want = torch.stack([h[b, row[occurrence][0]:row[occurrence][1]].mean(dim=0) for b, row in enumerate(spans)])
    assert_close(mean_over_spans(h, spans, occurrence), want, atol=1e-6, rtol=1e-6)


def test_mean_over_spans_costs_the_same_operations_for_any_batch() -> None:
    counts = []
    for B in (2, 64):
        h = torch.randn(B, 10, 4)
        spans = [[(1, 4 + b % 5)] for b in range(B)]
        with CountOps() as ops:
            mean_over_spans(h, spans)
        counts.append(ops.count)
    assert counts[0] == counts[1], counts


def test_an_empty_span_is_named() -> None:
    with pytest.raises(ValueError, match="row 1 has an empty span"):
        mean_over_spans(torch.zeros(2, 4, 3), [[(0, 2)], [(3, 3)]])
