"""Options shared by the sub-commands that load a model or take method options."""
from __future__ import annotations

import argparse
import json
from typing import Any

from minidecoder.errors import InputError


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="a known model name (see `minidecoder fetch --list`), a checkpoint folder, or a "
                             "Hub id; default: smollm2-135m-instruct, fetched and converted on first use")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    parser.add_argument("--compile", action="store_true",
                        help="fuse each block's elementwise work with torch.compile: the first batch compiles "
                             "(tens of seconds), later ones run faster; needs a C++ compiler on CPU")
    parser.add_argument("--pack-weights", action="store_true",
                        help="CPU only: reorder the block weights once into oneDNN's layout (8-13%% faster in docs/benchmarks.md's runs, "
                             "a second copy of them in memory); combines with --compile")
    parser.add_argument("--ignore-config-key", action="append", default=[], metavar="KEY",
                        help="a config.json key you know does not change numerics (unknown keys are errors); "
                             "repeat for more")


def load_model(args: argparse.Namespace):
    import minidecoder
    extra = {"ignore_config_keys": tuple(args.ignore_config_key)} if getattr(args, "ignore_config_key", None) else {}
    return minidecoder.load(args.model, dtype=args.dtype, device=args.device, compile=args.compile,
                            pack_weights=args.pack_weights, **extra)


def build_cli_method(name: str, pairs: list[str]):
    """The method `name` with `--opt` pairs, each value checked against the option's type first, so that
    `--opt prompt=true` is named as a boolean given to a text option rather than failing inside the method."""
    import minidecoder.methods
    from minidecoder.methods.base import mistyped_options

    options = parse_options(pairs)
    cls = minidecoder.methods.METHODS.get(name) if isinstance(name, str) else None
    for key, value, default in mistyped_options(cls, options) if cls is not None else []:
        expected = type(default)
        raise InputError(
            f"--opt {key}={_raw(pairs, key)} gives {_kind(value)}, but {name}'s option {key} takes "
            f"{_kind(default)} (default {json.dumps(default)})",
            f"e.g. --opt {key}={default if expected is not bool else str(default).lower()}"
            + ("; a text that looks like JSON is quoted: --opt " + key + "='\"" + _raw(pairs, key) + "\"'"
               if expected is str else ""))
    return minidecoder.methods.build_method(name, **options)


def _raw(pairs: list[str], key: str) -> str:
    for pair in pairs:
        k, _, raw = pair.partition("=")
        if k.strip() == key:
            return raw
    return ""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`["alpha=0.5", "prompt=cot"]` -> `{"alpha": 0.5, "prompt": "cot"}` (JSON when it parses)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--opt {pair!r} is not KEY=VALUE", "write e.g. --opt alpha=0.5 or --opt prompt=cot")
        if key in options:
            raise InputError(f"--opt {key} is given twice", "give each option once")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options
