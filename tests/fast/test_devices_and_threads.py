"""The fast paths are right under threads and on any device.

    threads    two threads calling one model with graphs on get their own texts' vectors: the graph bank's
               static buffers are shared by every caller (checked on the CPU's buffer bank, which shares
               them the same way)
    device     every CUDA event, stream, capture and replay in the library runs on the model's device, not
               the current one (a lint over the source, since CI has no GPU; and a test on two GPUs)
    capture    a capture that fails puts the caller's stream back (checked on the CPU with stand-ins for
               torch.cuda's streams around torch's own `torch.cuda.graph`)
"""
from __future__ import annotations

import ast
import contextlib
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.fast.graphs import GraphBank, graph_bank
from minidecoder.fast.options import fast_paths_overridden
from repo_paths import REPO

GRAPHS = dict(buckets=True, graphs=True, prefix_cache=False, fused=False)
EAGER = dict(buckets=True, graphs=False, prefix_cache=False, fused=False)  # the plain block, as a graph captures it


# ---- two threads, one model ------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none): the CPU's buffer bank runs above"))])
def test_two_threads_calling_one_model_get_their_own_vectors(tiny_llama, device: str) -> None:
    """Each thread embeds its own texts of one shape (so both use the same static buffers) again and again;
    every call must give that thread's vectors. With one shared input per shape and no lock, the threads
    overwrote each other's input between copy-in and the block call: other texts' vectors in most calls.
    On a GPU each thread queues on a stream of its own, so the bank must also order the streams."""
    model = minidecoder.load(tiny_llama, progress=False, graphs=True, device=device)
    texts = {"first": ["a man plays a flute.", "dogs run in a park.."],  # a token a character: equal lengths
             "second": ["rain falls on roofs.", "two kids play ball.."]}
    with fast_paths_overridden(model, **EAGER):
        want = {name: minidecoder.embed(model, rows, "mean", batch_size=2) for name, rows in texts.items()}
    assert not torch.allclose(want["first"], want["second"], atol=1e-3)  # a mix-up would show
    calls, wrong, errors = 100, {name: 0 for name in texts}, []
    start = threading.Barrier(len(texts))

    def caller(name: str) -> None:
        own = torch.cuda.stream(torch.cuda.Stream(model.device)) if device == "cuda" else contextlib.nullcontext()
        try:
            start.wait(timeout=30)
            with own:
                for _ in range(calls):
                    got = minidecoder.embed(model, texts[name], "mean", batch_size=2)
                    wrong[name] += not torch.allclose(got, want[name], atol=1e-5, rtol=1e-5)
        except Exception as error:  # noqa: BLE001 - reported below, with the thread's name
            errors.append(f"{name}: {type(error).__name__}: {error}")

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often, so an unguarded bank mixes callers in many calls
    try:
        with fast_paths_overridden(model, **GRAPHS):
            threads = [threading.Thread(target=caller, args=(name,)) for name in texts]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
    finally:
        sys.setswitchinterval(switching)
    assert not any(thread.is_alive() for thread in threads), "a caller never finished (a deadlock?)"
    assert not errors, errors
    assert graph_bank(model).captures > 0 and len(graph_bank(model).shapes) == 1  # one shape, shared buffers
    assert wrong == {name: 0 for name in texts}, f"calls that got other texts' vectors, of {calls} each: {wrong}"


# ---- every event, stream and capture on the model's device (a lint over the source) ----------------------
# torch.cuda calls that act on the current device unless told which: they must name it (a device or a
# stream argument: a stream carries its device) or run inside `with torch.cuda.device(...)`
NAMES_WITH_AN_ARGUMENT = {"Stream", "current_stream", "default_stream", "synchronize", "stream", "set_stream"}
ONLY_INSIDE = {"Event", "CUDAGraph", "graph"}  # no device argument to give: inside the `with` only
METHODS = {"record": "an event's record (with a stream argument, or inside the `with`)",
           "replay": "a graph's replay (inside the `with` only)"}


def _torch_cuda_name(node: ast.AST) -> str | None:
    """X for an expression `torch.cuda.X`, else None."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "cuda"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "torch"):
        return node.attr
    return None


def _inside_device_block(node: ast.AST, parents: dict) -> bool:
    """Whether `node` lies in a `with torch.cuda.device(...)` of its own function."""
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call) and _torch_cuda_name(item.context_expr.func) == "device"
                for item in node.items):
            return True
    return False


def device_rule_breaches(source: str, path: str = "<source>") -> list[str]:
    """Every use of the CUDA stream machinery in `source` that neither names its device nor runs inside
    `with torch.cuda.device(...)` (see the constants above), as 'path:line: what'."""
    tree = ast.parse(source)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    breaches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch.cuda":
            for alias in node.names:
                if alias.name in NAMES_WITH_AN_ARGUMENT | ONLY_INSIDE:
                    breaches.append(f"{path}:{node.lineno}: `from torch.cuda import {alias.name}` (call it as "
                                    f"torch.cuda.{alias.name} so this rule can see it)")
        if not isinstance(node, ast.Call):
            continue
        name = _torch_cuda_name(node.func)
        named = bool(node.args or node.keywords)
        if name in ONLY_INSIDE or (name in NAMES_WITH_AN_ARGUMENT and not named):
            what = f"torch.cuda.{name}(...)"
        elif isinstance(node.func, ast.Attribute) and node.func.attr in METHODS and name is None:
            if node.func.attr == "record" and named:
                continue
            what = f".{node.func.attr}(...), {METHODS[node.func.attr]}"
        else:
            continue
        if not _inside_device_block(node, parents):
            breaches.append(f"{path}:{node.lineno}: {what} neither names its device nor runs inside "
                            "`with torch.cuda.device(...)`")
    return breaches


def test_the_device_rule_catches_what_it_should() -> None:
    """The lint itself: each way of reaching the current device is caught, each way of naming one is not."""
    caught = """
import torch
from torch.cuda import Event
def f(x):
    e = torch.cuda.Event()
    e.record()
    s = torch.cuda.current_stream()
    g.replay()
    with torch.cuda.graph(g):
        pass
"""
    assert len(device_rule_breaches(caught)) == 6
    fine = """
import torch
def f(x, device):
    s = torch.cuda.Stream(device)
    torch.cuda.current_stream(device).wait_stream(s)
    torch.cuda.synchronize(device)
    with torch.cuda.device(device):
        e = torch.cuda.Event()
        e.record()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            pass
        g.replay()
    e.record(s)
"""
    assert device_rule_breaches(fine) == []


def _library_files() -> list:
    files = []
    for path in sorted((REPO / "minidecoder").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "torch.cuda" not in text and ".record(" not in text and ".replay(" not in text:
            continue  # nothing the rule could catch (the self-test above shows what it catches)
        files.append(pytest.param(path, id=path.relative_to(REPO).as_posix()))
    return files


@pytest.mark.parametrize("path", _library_files())
def test_every_cuda_event_stream_and_capture_is_on_the_models_device(path: Path) -> None:
    """A model on cuda:1 while cuda:0 is current must have its events, streams, captures and replays on
    cuda:1: an event recorded on cuda:0's stream says nothing about a copy queued on cuda:1's."""
    breaches = device_rule_breaches(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())
    assert breaches == [], "\n".join(breaches)


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason="needs two CUDA GPUs (a model on cuda:1 while cuda:0 is current); CI has none")
def test_a_model_on_the_second_gpu_reads_every_batch_back_whole(tiny_llama) -> None:
    """The read-back of each batch is two batches late (running.embedding._Results): its event must be on
    cuda:1's stream, where the copy runs, or the last batches may be read before they land."""
    texts = [f"sentence {i} " + "word " * (i % 9) for i in range(40)]
    want = minidecoder.embed(minidecoder.load(tiny_llama, progress=False), texts, "prompteol", batch_size=1)
    model = minidecoder.load(tiny_llama, progress=False, device="cuda:1")
    torch.cuda.set_device(0)
    for _ in range(3):
        assert_close(minidecoder.embed(model, texts, "prompteol", batch_size=1), want, atol=1e-4, rtol=1e-4)


# ---- a failed capture puts the caller's stream back ------------------------------------------------------
class _Streams:
    """Stand-ins for torch.cuda's stream calls on a CPU: the current stream is a name, set and read here;
    torch's own `torch.cuda.graph` runs on top of them with a graph whose capture fails to end."""

    def __init__(self) -> None:
        self.current = "the caller's stream"

    def patch(self, monkeypatch) -> None:
        streams = self

        class Stream:
            def __init__(self, device=None) -> None:
                self.name = "the capture's side stream"

            def wait_stream(self, other) -> None:
                pass

        @contextlib.contextmanager
        def stream(s):
            before, streams.current = streams.current, s
            yield
            streams.current = before

        class Graph:
            def capture_begin(self, *args, **kwargs) -> None:
                pass

            def capture_end(self) -> None:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

        caller = self.current

        class Caller:  # what current_stream() returns: waits on nothing, names the caller's stream
            def wait_stream(self, other) -> None:
                pass

        def current_stream(device=None):
            return Caller() if streams.current == caller else streams.current

        def set_stream(s) -> None:
            streams.current = caller if isinstance(s, Caller) else s

        for name, value in dict(Stream=Stream, stream=stream, CUDAGraph=Graph, current_stream=current_stream,
                                set_stream=set_stream, device=lambda device: contextlib.nullcontext(),
                                synchronize=lambda device=None: None, empty_cache=lambda: None).items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)


def test_a_capture_that_fails_to_end_puts_the_callers_stream_back(tiny_llama, monkeypatch) -> None:
    """torch.cuda.graph's exit ends the capture before it restores the stream: when ending raises, the
    capture's side stream stays current, and every later kernel of the thread queues on it."""
    model = minidecoder.load(tiny_llama, progress=False)
    texts = ["a man plays a flute.", "dogs run."]
    with fast_paths_overridden(model, **EAGER):
        want = minidecoder.embed(model, texts, "mean", batch_size=2)
    bank = graph_bank(model)
    bank.capture = True  # a GPU's bank, over the stand-ins below
    streams = _Streams()
    streams.patch(monkeypatch)
    with fast_paths_overridden(model, **GRAPHS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = minidecoder.embed(model, texts, "mean", batch_size=2)
    assert any("capturing a CUDA graph" in str(w.message) for w in caught), "the capture never ran"
    assert bank.failed is not None and "previous error during capture" in bank.failed
    assert streams.current == "the caller's stream", f"after the failed capture the current stream is {streams.current!r}"
    assert torch.equal(got, want)  # every call ran eagerly
    assert isinstance(bank, GraphBank)
