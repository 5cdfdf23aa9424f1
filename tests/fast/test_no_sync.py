"""No host-device synchronisation inside a forward: nothing in the block loop reads a device value back.

A GPU runs ahead of the Python loop only while the host never waits for it: an `.item()`, a `nonzero`, a
boolean-mask index or a data-dependent shape makes the host stop until every queued kernel has run.
CI has no GPU, so the test runs every method on the `meta` device: tensors there have shapes but no
values, so any of those reads raises. Index tensors are built on the host before the forward; decisions
(the shared prefix, the longest row) are made on the host's copy of the batch. On a GPU,
`tools/bench.py --device cuda` wraps a batch in `torch.cuda.set_sync_debug_mode("error")` too.

Placeholder rows read from the embedding table (`pst_init=mean` or `token:...`) are computed once per
model, before the first batch, so the methods here use seeded rows.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import minidecoder
from minidecoder.methods import METHODS, build_method
from minidecoder.fast.forward import FastForward
from minidecoder.methods.loop import Forward, run_passes

TEXTS = ["a man plays a flute.", "the cat sat on the mat. It purred.", "dogs run."]
OPTIONS = {"tp": dict(layer=-1, end=3), "htp": dict(end=3, pst_init="gaussian"), "cp": dict(steer_layer=1),
           "cp+tp": dict(steer_layer=1, end=2)}
CASES = [(name, OPTIONS.get(name, {})) for name in sorted(METHODS)] + [
    ("cp", dict(steer_layer=1, tp=True, start=0, end=2, mode="nr")),
    ("tp", dict(layer=-1, end=3, mask_pst_first_layer=True, resume_at=3)),
    ("reba", dict(pooling="last")),
    ("tp", dict(layer=-1, end=3, pooling="mean")),
]
DATA_DEPENDENT = {"nonzero", "_local_scalar_dense", "masked_select", "unique", "_unique2", "item", "masked_scatter"}
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}  # with a boolean index: a nonzero on a GPU


class ReadBacks(TorchDispatchMode):
    """The ops on device (meta) tensors that would make the host wait on a GPU: the data-dependent ones,
    indexing with a boolean mask (which the meta kernels accept, so it must be caught here), and a host
    tensor copied to the device without `non_blocking` (on a GPU the host waits for that copy; the meta
    device never does, so the flag itself is checked)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        tensors = [a for a in _flat(args) if isinstance(a, torch.Tensor)]
        on_device = any(t.device.type == "meta" for t in tensors)
        boolean_index = name in INDEXING and any(t.dtype == torch.bool for t in _flat(args[1:2]) if t is not None)
        if on_device and (name in DATA_DEPENDENT or boolean_index):
            self.found.append(name)
        if _blocking_upload(name, args, kwargs or {}):
            self.found.append(f"blocking {name} to the device")
        return func(*args, **(kwargs or {}))


def _blocking_upload(name: str, args: tuple, kwargs: dict) -> bool:
    """A host tensor copied to the (meta) device without non_blocking: `.to(device)` (dispatched as `to` under
    inference_mode, `_to_copy` outside it) or `dst.copy_(src)`."""
    if name in ("to", "_to_copy"):
        source = args[0]
        target = kwargs.get("device", next((a for a in args[1:] if isinstance(a, torch.device)), None))
        positional = len(args) > 3 and isinstance(args[1], torch.device)  # to.device(self, device, dtype, non_blocking)
        non_blocking = kwargs.get("non_blocking", args[3] if positional else False)
        return (source.device.type == "cpu" and target is not None and torch.device(target).type == "meta"
                and not non_blocking)
    if name == "copy_":
        target, source = args[0], args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        return source.device.type == "cpu" and target.device.type == "meta" and not non_blocking
    return False


def _flat(values):
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _flat(value)
        else:
            yield value


@pytest.fixture(scope="module")
def meta_model(tiny_llama):
    model = minidecoder.load(tiny_llama, progress=False)
    return copy.deepcopy(model).to("meta")  # shapes without values: a device that cannot be read back


@pytest.mark.parametrize("forward", [Forward, FastForward], ids=["plain-loop", "executor"])
@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES])
def test_every_method_runs_without_reading_the_device(meta_model, name: str, options: dict, forward) -> None:
    method = build_method(name, **options)
    with torch.inference_mode(), ReadBacks() as reads:
        out = run_passes(meta_model, method.passes(meta_model, TEXTS), forward)
    assert out.device.type == "meta" and out.shape == (len(TEXTS), meta_model.config.hidden_size)
    assert reads.found == []


def test_a_blocking_upload_is_found() -> None:
    """A host tensor moved to the device without non_blocking is found; the same move with it is not."""
    host = torch.ones(3)
    with ReadBacks() as reads:
        host.to("meta", non_blocking=True)
        torch.empty(3, device="meta").copy_(host, non_blocking=True)
    assert reads.found == []
    with ReadBacks() as reads:
        host.to("meta")
        torch.empty(3, device="meta").copy_(host)
    assert reads.found == ["blocking _to_copy to the device", "blocking copy_ to the device"]
    with torch.inference_mode(), ReadBacks() as reads:
        host.to(torch.device("meta"), non_blocking=True)
        assert reads.found == []
        host.to(torch.device("meta"))
    assert reads.found == ["blocking to to the device"]


def test_the_checks_can_fail() -> None:
    """A boolean-mask write (what the embedding of placeholder rows used to do) is found; a read of a value
    (the old context length check, `int(positions.max())`) raises on this device."""
    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    h = torch.zeros(2, 3, 4, device="meta")
    with ReadBacks() as reads:
        h[ids == 0] = torch.ones(4, device="meta")
    assert reads.found == ["index_put_"]
    with pytest.raises(RuntimeError, match="meta"):
        int(ids.max())
