"""`minidecoder` / `python -m minidecoder`: one sub-command per module in this package.

Each sub-command module defines `add_parser(subparsers)` and `run(args) -> int`. A
`MinidecoderError` is printed as a message (problem and fix) with exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from minidecoder.errors import MinidecoderError

# Order is the order of `--help`.
SUBCOMMANDS = ["demo", "logits", "generate", "fetch", "convert", "embed", "eval", "sweep", "explain"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minidecoder", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"minidecoder.cli.{name}_cmd")
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except MinidecoderError as error:
        print(f"minidecoder: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # printed once: a job's says what it saved
        print(f"minidecoder: {interrupt or 'interrupted'}", file=sys.stderr)
        return 130
