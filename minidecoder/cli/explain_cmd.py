"""`minidecoder explain --method NAME [--opt key=value ...] "TEXT"`: watch a method work on one text.

Prints the exact prompt, its tokens with positions, the positions the method acts on, what it did in
each block (TP / HTP: each row written; CP: a, b and the steering term per head; ReBA: the running
maximum's change), which blocks ran, the embedding and its cosine with the method's baseline.
`--json` prints the record instead (stable keys, rounded floats: diff it); `--plot FILE.png` draws it
(claimed before the model loads: a format matplotlib writes, a writable folder, never replacing a file
without --overwrite). `--truncate N` keeps the first N tokens of a text past the model's context.
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from minidecoder.errors import InputError
from minidecoder.running.command_line import (add_model_options, add_output_options, build_cli_method, check_sizes,
                                    claim_cli_outputs, load_model)


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
    parser.add_argument("--truncate", type=int, default=None, metavar="N",
                        help="keep the first N tokens of the text (default: a text past the model's context is an error)")
    add_output_options(parser, "the --plot file")
    add_model_options(parser, ("compile", "pack_weights"))  # its recorded passes take no graphs
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # everything that can fail cheaply fails before the model loads
    check_sizes(args)
    if not args.plot and (args.overwrite or args.wait):  # they act on the figure alone: without one, on nothing
        given = [flag for flag, on in (("--overwrite", args.overwrite), ("--wait", args.wait)) if on]
        raise InputError(f"{' and '.join(given)} {'acts' if len(given) == 1 else 'act'} on the --plot file, and no "
                         "--plot was given",
                         f"add --plot FILE.png, or leave {'it' if len(given) == 1 else 'them'} out: explain writes no "
                         "other file")
    method = build_cli_method(args.method, args.opt)
    claim = contextlib.nullcontext()
    if args.plot:
        from minidecoder.running.figures import check_figure_path
        check_figure_path(args.plot)
        claim = claim_cli_outputs(args, [Path(args.plot)])
    with claim:  # the figure's name is held from here to its write
        return _explain(args, method)


def _explain(args: argparse.Namespace, method) -> int:
    import minidecoder

    model = load_model(args)
    record = minidecoder.explain(model, args.text, method, truncate=args.truncate)
    if args.json:
        print(json.dumps(record.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(record.format())
    if args.plot:
        from minidecoder.audit.plot import plot_explanation
        path = plot_explanation(record, args.plot, overwrite=args.overwrite)
        if not args.json:
            print(f"plot: {path}")
    return 0
