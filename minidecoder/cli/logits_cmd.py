"""`minidecoder logits PROMPT`: the top-k next tokens and their probabilities."""
from __future__ import annotations

import argparse

import torch

from minidecoder.cli.common import add_model_options, load_model


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("logits", help="top-k next tokens for a prompt",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--top-k", type=int, default=10)
    add_model_options(parser)
    parser.set_defaults(run=run)


def top_next_tokens(model, prompt: str, k: int) -> list[tuple[str, float]]:
    ids = torch.tensor([model.tokenizer.encode(prompt)], device=model.device)
    with torch.inference_mode():
        probs = torch.softmax(model(ids).logits[0, -1].float(), dim=-1)
    values, indices = probs.topk(k)
    return [(model.tokenizer.decode([int(i)]), float(p)) for p, i in zip(values, indices)]


def run(args: argparse.Namespace) -> int:
    model = load_model(args)
    print(f"next token after {args.prompt!r}:")
    for token, prob in top_next_tokens(model, args.prompt, args.top_k):
        print(f"  {prob:7.2%}  {token!r}")
    return 0
