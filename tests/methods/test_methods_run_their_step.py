"""What a reader reads is what runs: each method's default path enters its own step through the one
block loop (`minidecoder.methods.loop.Forward.run_to`), with every fast path at its default (the shared
prefix included, run by the executor beneath the loop, `fast.forward.FastForward`). Counting calls, on a
tiny Llama."""
from __future__ import annotations

import pytest

import minidecoder
from minidecoder.fast import forward as executor, prefix_cache
from minidecoder.methods import cp, loop, reading, reba, tp

TEXTS = ["a man plays a flute.", "the cat sat on the mat.", "dogs run."]


@pytest.fixture(scope="module")
def model(tiny_llama):
    return minidecoder.load(tiny_llama, progress=False)


def count(monkeypatch, owner, name: str) -> list:
    """Record the arguments of every call of owner.name (which still runs)."""
    calls = []
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(a) or original(*a, **k))
    return calls


def test_every_method_runs_the_shared_loop(model, monkeypatch) -> None:
    forwards = count(monkeypatch, loop.Forward, "run_to")
    for method in sorted(minidecoder.methods.METHODS):
        forwards.clear()
        options = {"tp": {"layer": -1, "end": 3}, "htp": {"end": 3}, "cp": {"steer_layer": 1},
                   "cp+tp": {"steer_layer": 1, "end": 1}}.get(method, {})  # 4 blocks
        minidecoder.embed(model, TEXTS, method, **options)
        assert forwards, f"{method} never ran a block through the shared loop"


def test_tp_runs_its_step_with_the_prefix_cache_on(model, monkeypatch) -> None:
    copies = count(monkeypatch, tp.CopyRows, "before")
    runs = count(monkeypatch, loop.Pass, "start")
    prefixes = count(monkeypatch, prefix_cache, "split")
    minidecoder.embed(model, TEXTS, "tp", layer=-1, start=1, end=3)
    assert len(runs) == 1 and isinstance(runs[0][0].step, tp.TPStep) and prefixes  # one TP pass, prefix once
    assert sorted({call[1] for call in copies}) == [0, 1, 2, 3]  # asked before every block ...
    assert {call[1] for call in copies if call[1] in call[0].blocks} == {1, 2}  # ... copying before 1 and 2


def test_htp_runs_its_step(model, monkeypatch) -> None:
    copies = count(monkeypatch, tp.CopyRows, "before")
    minidecoder.embed(model, ["A cat sat. It purred.", "Dogs bark."], "htp", layer=-1, start=1, end=2)
    assert {call[1] for call in copies if call[1] in call[0].blocks} == {1}


def test_cp_runs_its_steering_and_auxiliary_read(model, monkeypatch) -> None:
    edits = count(monkeypatch, cp.SteerLastToken, "edits")
    reads = count(monkeypatch, executor.FastForward, "recorded")
    steered = count(monkeypatch, cp, "steer")
    minidecoder.embed(model, TEXTS, "cp", steer_layer=2)
    assert len(reads) == 1 and len(steered) == 1  # b read once, a steered once (one batch, one prompt)
    assert [call[1] for call in edits] == [0, 1, 2, 3]  # asked at every block, edits at block 2


def test_reba_folds_every_blocks_pattern(model, monkeypatch) -> None:
    folds = count(monkeypatch, reba.FoldAttention, "fold")
    blocks = count(monkeypatch, loop.Forward, "block")
    minidecoder.embed(model, TEXTS, "reba")
    assert len(folds) == model.num_layers and [call[1] for call in blocks] == list(range(model.num_layers))


@pytest.mark.parametrize("method,templates", [("prompteol", 1), ("mean", 1), ("echo", 1), ("metaeol", 8)])
def test_reading_methods_pool_through_their_own_hook(model, monkeypatch, method: str, templates: int) -> None:
    cls = type(minidecoder.methods.build_method(method))
    pools = count(monkeypatch, cls, "pool")
    assert issubclass(cls, reading.ReadsOneLayer)
    minidecoder.embed(model, TEXTS, method)
    assert len(pools) == templates
