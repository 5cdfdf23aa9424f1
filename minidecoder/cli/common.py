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
                        help="CPU only: reorder the block weights once into oneDNN's layout (10-13%% faster here, "
                             "a second copy of them in memory); combines with --compile")


def load_model(args: argparse.Namespace):
    import minidecoder
    return minidecoder.load(args.model, dtype=args.dtype, device=args.device, compile=args.compile,
                            pack_weights=args.pack_weights)


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
