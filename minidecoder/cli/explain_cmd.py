"""`minidecoder explain --method NAME [--opt key=value ...] "TEXT"`: watch a method work on one text.

Prints the exact prompt, its tokens with positions, the positions the method acts on, what it did in
each block (TP / HTP: each row written; CP: a, b and the steering term per head; ReBA: the running
maximum's change), which blocks ran, the embedding and its cosine with the method's baseline.
`--json` prints the record instead (stable keys, rounded floats: diff it); `--plot FILE.png` draws it.
"""
from __future__ import annotations

import argparse
import json

from minidecoder.cli.common import add_model_options, load_model, parse_options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("explain", help="watch a method work on one text, block by block",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("text", help="the text to embed")
    parser.add_argument("--method", default="tp", help="tp, htp, cp, reba (recorded block by block) or any other "
                                                        "method (prompt, tokens, blocks run); default tp")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a method option, e.g. --opt end=7 --opt alpha=0.5 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the record as JSON (floats rounded to 4 places)")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="also draw the record (matplotlib: pip install 'minidecoder[plots]')")
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import minidecoder

    options = parse_options(args.opt)
    model = load_model(args)
    record = minidecoder.explain(model, args.text, args.method, **options)
    if args.json:
        print(json.dumps(record.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(record.format())
    if args.plot:
        from minidecoder.running.explain_plot import plot_explanation
        path = plot_explanation(record, args.plot)
        if not args.json:
            print(f"plot: {path}")
    return 0
