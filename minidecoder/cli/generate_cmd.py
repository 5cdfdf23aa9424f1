"""`minidecoder generate PROMPT` (or `--chat MESSAGE [--system TEXT]`): a greedy continuation (KV cache).

`--chat` wraps the message in the checkpoint's own default chat template (chat_template.jinja, or
tokenizer_config.json's `chat_template`, copied from the GGUF by the converter) with the assistant
turn opened, as transformers' `apply_chat_template(..., add_generation_prompt=True)` does, and prints
only the reply.
"""
from __future__ import annotations

import argparse

from minidecoder import generate
from minidecoder.running.command_line import add_model_options, load_model
from minidecoder.running.generation import continuation_text
from minidecoder.running.texts import check_argument
from minidecoder.errors import InputError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="greedy continuation of a prompt, or a chat reply (--chat)",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", help="raw text to continue (leave out with --chat)")
    parser.add_argument("--chat", metavar="MESSAGE", help="a user message, sent through the model's chat template")
    parser.add_argument("--system", metavar="TEXT", help="a system message before --chat's message")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="at most this many new tokens (0 or more)")
    add_model_options(parser, ("pack_weights",))  # logits and generation run plain: no --compile or --graphs
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if (args.prompt is None) == (args.chat is None):
        raise InputError("give either a PROMPT to continue or --chat MESSAGE, not both or neither",
                         'e.g. minidecoder generate "The capital of France is" or minidecoder generate --chat "Hi!"')
    if args.system is not None and args.chat is None:
        raise InputError("--system needs --chat", 'e.g. --system "Be brief." --chat "What is RoPE?"')
    if args.prompt is not None and not args.prompt:
        raise InputError("the prompt is empty", 'give some text, e.g. minidecoder generate "Once upon a time"')
    if args.max_new_tokens < 0:
        raise InputError(f"--max-new-tokens {args.max_new_tokens} must be 0 or more", "e.g. --max-new-tokens 32")
    for where, text in (("the prompt", args.prompt), ("--chat", args.chat), ("--system", args.system)):
        if text is not None:  # before the model loads
            check_argument(text, where)
    model = load_model(args)
    if args.chat is None:
        prompt = model.tokenizer.encode(args.prompt)
        new = generate(model, prompt, max_new_tokens=args.max_new_tokens)
        print(args.prompt + continuation_text(model.tokenizer, prompt, new))
        return 0
    messages = ([{"role": "system", "content": args.system}] if args.system is not None else []) \
        + [{"role": "user", "content": args.chat}]
    ids = model.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    new = generate(model, ids, max_new_tokens=args.max_new_tokens)
    print(model.tokenizer.decode(new, skip_special_tokens=True).strip())
    return 0
