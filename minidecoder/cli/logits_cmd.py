"""`minidecoder logits PROMPT`: the top-k next tokens and their probabilities."""
from __future__ import annotations

import argparse

import torch

from minidecoder.running.command_line import add_model_options, load_model
from minidecoder.running.texts import check_argument
from minidecoder.errors import InputError, NumericsError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("logits", help="top-k next tokens for a prompt",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--top-k", type=int, default=10, help="how many tokens to list (1 to the vocabulary size)")
    add_model_options(parser, ("pack_weights",))  # logits and generation run plain: no --compile or --graphs
    parser.set_defaults(run=run)


def top_next_tokens(model, prompt: str, k: int) -> list[tuple[str, float]]:
    ids = torch.tensor([model.tokenizer.encode(prompt)], device=model.device)
    if ids.shape[1] == 0:
        raise InputError("the prompt is empty (it encodes to no tokens, and this model adds no start token)",
                         'give some text, e.g. "The capital of France is"')
    vocab = model.config.vocab_size
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vocab:
        raise InputError(f"top-k {k!r} must be between 1 and the vocabulary size {vocab}", "e.g. --top-k 10")
    with torch.inference_mode():
        logits = model(ids, logits_to_keep=1).logits[0, -1].float()  # the next token's alone
    if not torch.isfinite(logits).all():
        from minidecoder.running.embedding import nonfinite_hint
        raise NumericsError(f"the next-token logits after {prompt[:40]!r} hold NaN or inf", nonfinite_hint(model))
    probs = torch.softmax(logits, dim=-1)
    values, indices = probs.topk(k)
    return [(model.tokenizer.decode([int(i)]), float(p)) for p, i in zip(values, indices)]


def run(args: argparse.Namespace) -> int:
    if not args.prompt:
        raise InputError("the prompt is empty", 'give some text, e.g. minidecoder logits "The capital of France is"')
    if args.top_k < 1:
        raise InputError(f"--top-k {args.top_k} must be at least 1", "e.g. --top-k 10")
    check_argument(args.prompt, "the prompt")  # before the model loads
    model = load_model(args)
    top = top_next_tokens(model, args.prompt, args.top_k)
    print(f"next token after {args.prompt!r}:")
    for token, prob in top:
        print(f"  {prob:7.2%}  {token!r}")
    return 0
