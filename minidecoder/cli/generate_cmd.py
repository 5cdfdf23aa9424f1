"""`minidecoder generate PROMPT`: a greedy continuation (KV cache)."""
from __future__ import annotations

import argparse

from minidecoder import generate
from minidecoder.cli.common import add_model_options, load_model


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="greedy continuation of a prompt",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    model = load_model(args)
    new = generate(model, model.tokenizer.encode(args.prompt), max_new_tokens=args.max_new_tokens)
    print(args.prompt + model.tokenizer.decode(new, skip_special_tokens=True))
    return 0
