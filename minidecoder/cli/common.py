"""Options shared by the sub-commands that load a model."""
from __future__ import annotations

import argparse


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="a known model name (see `minidecoder fetch --list`), a checkpoint folder, or a "
                             "Hub id; default: smollm2-135m-instruct, fetched and converted on first use")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")


def load_model(args: argparse.Namespace):
    import minidecoder
    return minidecoder.load(args.model, dtype=args.dtype, device=args.device)
