"""How far a reader travels to follow a method's embedding: the modules its `embed_batch` passes the model
through, in order.

    python tools/reading_path.py tp cp reba          # on a tiny random llama (no download)

Follows the model argument, as a reader would: every function of the package that receives the model
object (as an argument or as `self`), in the order of its first call; properties are attribute reads,
not places to go. Consecutive calls in one module are one stop; a stop in a module already left is a
return. The loop (`methods/loop.py`) is where every method comes back to, so returns to it are counted
apart. Each method is followed twice: with the model's default fast paths, and with every fast path
off; for each, the stops in `fast/` (the executor beneath the loop) are counted as entries into that
folder and returns from it (the targets: once each with the defaults, never with all off).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

TEXTS = ["a man plays a flute.", "the cat sat on the mat. It purred."]
OPTIONS = {"tp": {"layer": -1, "end": 3}, "htp": {"end": 3}, "cp": {"steer_layer": 1}, "cp+tp": {"steer_layer": 1, "end": 1}}


def reading_path(model, name: str) -> list[tuple[str, list[str]]]:
    """[(module, [functions]), ...]: the stops of `name`'s embed_batch, following the model argument."""
    from minidecoder.fast.forward import executor
    from minidecoder.methods import build_method

    method = build_method(name, **OPTIONS.get(name, {}))
    seen, calls = set(), []

    def tracer(frame, event, arg):
        code = frame.f_code
        if event != "call" or "/minidecoder/" not in code.co_filename:
            return None
        module = code.co_filename.split("/minidecoder/", 1)[1]
        key = (code.co_filename, code.co_name, code.co_firstlineno)
        if key in seen or _is_property(code):
            return None
        if any(frame.f_locals.get(v) is model for v in code.co_varnames[:code.co_argcount]):
            seen.add(key)
            calls.append((module, code.co_qualname))
        return None

    with torch.inference_mode():
        sys.settrace(tracer)
        try:
            method.embed_batch(model, TEXTS, forward=executor(model.fast_paths))  # as minidecoder.embed picks it
        finally:
            sys.settrace(None)
    stops: list[tuple[str, list[str]]] = []
    for module, function in calls:
        if stops and stops[-1][0] == module:
            stops[-1][1].append(function)
        else:
            stops.append((module, [function]))
    return stops


def _is_property(code) -> bool:
    import minidecoder.core.model as model_module
    owner = getattr(model_module, code.co_qualname.split(".")[0], None)
    return isinstance(getattr(owner, code.co_name, None), property) if owner is not None else False


def summary(stops: list[tuple[str, list[str]]]) -> tuple[int, int, int]:
    """(modules, stops, returns to a module already left other than methods/loop.py)."""
    visited, returns = [], 0
    for module, _ in stops:
        if module in visited and module != "methods/loop.py":
            returns += 1
        if module not in visited:
            visited.append(module)
    return len(visited), len(stops), returns


def fast_crossings(stops: list[tuple[str, list[str]]]) -> tuple[int, int]:
    """(entries into fast/ from methods/, returns from fast/ to methods/). Calls into core/ (the model's own
    context and blocks, made from either folder) go down and come back; they do not change which folder
    the path is in."""
    entries, back, where = 0, 0, None
    for module, _ in stops:
        folder = module.split("/")[0]
        if folder == "core":
            continue
        entries += folder == "fast" and where != "fast"
        back += folder == "methods" and where == "fast"
        where = folder
    return entries, back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=["tp", "cp", "reba"])
    args = parser.parse_args()
    import minidecoder
    from minidecoder.fast.options import fast_paths_overridden
    from tiny_models import tiny_checkpoint

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="reading-path-") as scratch:
        folder = Path(scratch) / "tiny"
        tiny_checkpoint("llama", folder)
        model = minidecoder.load(folder, progress=False)
        off = dict(prefix_cache=False, explicit_attention=False, compiled=False, buckets=False, graphs=False,
                   blocked_fusion_from=None)
        for name in args.methods:
            for setting, changes in (("defaults", {}), ("every fast path off", off)):
                with fast_paths_overridden(model, **changes):
                    stops = reading_path(model, name)
                modules, count, returns = summary(stops)
                entries, back = fast_crossings(stops)
                print(f"{name} ({setting}): {modules} modules, {count} stops, {returns} returns (not counting "
                      f"methods/loop.py); fast/ entered {entries}x, left for methods/ {back}x")
                for module, functions in stops:
                    print(f"  {module}: {', '.join(functions)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
