"""`minidecoder demo`: the README's first command. Fetches and converts the default model if needed,
then shows the top next tokens for a prompt, a greedy continuation, and sentence similarities."""
from __future__ import annotations

import argparse

from minidecoder import generate
from minidecoder.running.command_line import add_model_options, build_cli_method, load_model
from minidecoder.running.generation import continuation_text
from minidecoder.running.texts import check_argument
from minidecoder.cli.logits_cmd import top_next_tokens

SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an instrument.",
    "A chef is cooking pasta in the kitchen.",
    "The stock market fell sharply today.",
]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="see the default model work: next tokens, a continuation, "
                                                "sentence similarities", description=__doc__)
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--method", default="prompteol", help="embedding method for the similarities")
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    import minidecoder

    method = build_cli_method(args.method, [])  # an unknown method is refused before the model loads
    check_argument(args.prompt, "--prompt")  # before the model loads
    model = load_model(args)
    method.check(model)  # and its options against this model (layers in range), before anything is printed
    print(f"model: {model.source} ({model.config.model_type}, {model.num_layers} layers, {model.dtype})")
    print(f"\ntop next tokens after {args.prompt!r}:")
    for token, prob in top_next_tokens(model, args.prompt, 5):
        print(f"  {prob:7.2%}  {token!r}")
    prompt = model.tokenizer.encode(args.prompt)
    new = generate(model, prompt, max_new_tokens=12)
    continuation = args.prompt + continuation_text(model.tokenizer, prompt, new)
    print(f"\ngreedy continuation: {continuation!r}")
    vectors = minidecoder.embed(model, SENTENCES, method)
    vectors = torch.nn.functional.normalize(vectors, dim=-1)
    similarity = vectors @ vectors.T
    print(f"\ncosine similarities ({args.method}):")
    for i, sentence in enumerate(SENTENCES):
        row = "  ".join(f"{similarity[i, j]:.2f}" for j in range(len(SENTENCES)))
        print(f"  [{i}] {row}   {sentence}")
    return 0
