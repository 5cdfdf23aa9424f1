"""`minidecoder generate PROMPT`: a greedy continuation (KV cache)."""
from __future__ import annotations

import argparse

from minidecoder import generate
from minidecoder.cli.common import add_model_options, load_model
from minidecoder.errors import InputError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="greedy continuation of a prompt",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="at most this many new tokens (0 or more)")
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.prompt:
        raise InputError("the prompt is empty", 'give some text, e.g. minidecoder generate "Once upon a time"')
    if args.max_new_tokens < 0:
        raise InputError(f"--max-new-tokens {args.max_new_tokens} must be 0 or more", "e.g. --max-new-tokens 32")
    model = load_model(args)
    new = generate(model, model.tokenizer.encode(args.prompt), max_new_tokens=args.max_new_tokens)
    print(args.prompt + model.tokenizer.decode(new, skip_special_tokens=True))
    return 0
