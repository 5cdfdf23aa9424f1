"""The plain loop is the oracle: every registered method, run by the executor with one `Plan` field forced
on at a time, equals the same passes run by the plain `Forward` (minidecoder.methods.loop).

Comparing the executor with a flag on against itself with the flag off cannot catch a bug both share; here
the reference is the loop a reader reads, and each case also checks that its field really applied
(a spy records every plan), so no case compares plain with plain. Tiny random Llama, float32, CPU: the
graph case runs the CPU bank (`GraphBank(capture=False)`: the static buffers, no capture).
"""
from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.fast import attention, graphs as graphs_module
from minidecoder.fast.forward import FastForward
from minidecoder.fast.options import FastPaths
from minidecoder.fast.plan import Plan
from minidecoder.methods import METHODS, build_method
from minidecoder.methods.loop import Forward, run_passes
from tiny_models import checkpoint, random_ids

TEXTS = ["a man plays a flute.", "the cat sat. It purred.", "dogs run.", "Rain."]
OPTIONS = {"tp": {"layer": -1, "end": 3}, "htp": {"end": 3}, "cp": {"steer_layer": 1},  # 4 blocks
           "cp+tp": {"steer_layer": 2, "start": 0, "end": 2, "mode": "nr"}, "metaeol": {"tasks": [0, 4]}}
CONFIGURATIONS = sorted(METHODS)  # cp+tp included
ATOL = RTOL = 2e-5  # today's tolerance for every fast path in fp32 (tests/fast/test_fast_paths.py, test_graphs.py)
OFF = FastPaths(prefix_cache=False, explicit_attention=False, compiled=False, buckets=False, graphs=False,
                blocked_fusion_from=None)
ALONE = {  # each Plan field, forced on alone (a graph needs its bucket)
    "prefix": ({"prefix_cache": True}, lambda plan: plan.prefix > 0),
    "bucket": ({"buckets": True}, lambda plan: plan.bucket is not None and plan.block_call == "plain"),
    "explicit": ({"explicit_attention": True}, lambda plan: plan.explicit),
    "compiled": ({"compiled": True}, lambda plan: plan.block_call == "compiled"),
    "graph": ({"buckets": True, "graphs": True}, lambda plan: plan.block_call == "graph"),
    "blocked": ({"blocked_fusion_from": 0}, lambda plan: plan.heads_per_fold is not None),
}
# Where a field cannot apply, by the plan's rules: a fold reads every column (no prefix, no padding); mean,
# last and HTP on the bare text share only BOS (below MIN_PREFIX); only a folding step gets head groups.
NEVER = {"prefix": {"reba", "mean", "last", "htp"}, "bucket": {"reba"}, "graph": {"reba"}}
ONLY = {"blocked": {"reba"}}


@functools.cache
def tiny():
    return minidecoder.load(checkpoint("llama")[1], progress=False)


def method_of(name: str):
    return build_method(name, **OPTIONS.get(name, {}))


class Spy(FastForward):
    plans: list[Plan] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        Spy.plans.append(self.plan)


@pytest.mark.parametrize("field", list(ALONE))
@pytest.mark.parametrize("name", CONFIGURATIONS)
def test_the_executor_with_one_plan_field_on_equals_the_plain_loop(name: str, field: str, monkeypatch) -> None:
    model, method = tiny(), method_of(name)
    settings, applied = ALONE[field]
    # forced: the explicit kernel at any length, and graphs for block calls of any size
    monkeypatch.setitem(attention.EXPLICIT_ATTENTION_MAX_KEYS, torch.float32, 1 << 20)
    monkeypatch.setattr(graphs_module, "GRAPH_MAX_TOKENS", 1 << 20)
    with torch.inference_mode():
        passes = method.passes(model, TEXTS)
        plain = run_passes(model, passes)  # methods.loop.Forward: the loop a reader reads
        Spy.plans = []
        fast = run_passes(model, passes, functools.partial(Spy, paths=dataclasses.replace(OFF, **settings)))
    base = "cp" if name == "cp+tp" else name
    expected = base in ONLY[field] if field in ONLY else base not in NEVER.get(field, set())
    assert any(applied(plan) for plan in Spy.plans) == expected, (field, Spy.plans)
    assert_close(fast, plain, atol=ATOL, rtol=RTOL)


def test_every_fast_path_off_runs_the_plain_loop_itself() -> None:
    """With every fast path off, `minidecoder.embed` gives `Method.embed_batch` `methods.loop.Forward`: nothing of
    fast/ runs."""
    from minidecoder.fast.forward import executor
    assert executor(OFF) is Forward
    assert executor(FastPaths()) is FastForward
    assert all(executor(dataclasses.replace(OFF, **settings)) is FastForward for settings, _ in ALONE.values())


def test_the_plain_loop_equals_the_decoders_own_forward() -> None:
    """Every hidden state of the plain `Forward` is `Decoder.forward`'s (itself tested against transformers)."""
    model = tiny()
    ids = random_ids(batch=2, length=9)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, :3] = False  # left padding
    L = model.num_layers
    with torch.inference_mode():
        want = model(ids, mask, output_hidden_states=True).hidden_states
        forward = Forward(model, ids, mask, keep=range(L + 1))
        for index in range(L + 1):
            assert_close(forward.hidden(index)[mask], want[index][mask], atol=1e-6, rtol=1e-5)
