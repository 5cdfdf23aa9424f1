"""What every `minidecoder eval <family>` command beyond STS shares with `eval sts`: the options, the
checks made before the model loads, the resumable embedding job, the stamp and the report.

A family's command module adds its own options and supplies `score(encode, kept) -> results` (its
`evaluate_<family>` with the data already read; `kept` a folder that survives an interruption, `identity`
the model and method that make the embeddings), `table(results) -> str` and `markdown(results, stamp)`.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from minidecoder.cli.common import (add_model_options, add_output_options, build_cli_method, check_sizes,
                                    claim_cli_outputs, load_model, model_stamp)


def add_family_options(parser: argparse.ArgumentParser, data_help: str, limit_help: str) -> None:
    parser.add_argument("--method", required=True, help="method name, e.g. prompteol, tp, cp, mean")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option; repeat for more")
    parser.add_argument("--data", default=None, metavar="DIR", help=data_help)
    parser.add_argument("--limit", type=int, default=None, metavar="N", help=limit_help)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="texts per forward pass (default: each batch filled up to the device's token budget)")
    parser.add_argument("--truncate", type=int, default=None, metavar="N",
                        help="keep the first N tokens of a text past it (default: a text past the model's context "
                             "is an error); the report counts the texts cut")
    parser.add_argument("--output", default=None, metavar="PREFIX",
                        help="write PREFIX.json and PREFIX.md (default: ./BENCHMARK-MODEL-METHOD-DATE)")
    add_output_options(parser, "PREFIX.json / PREFIX.md")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_options(parser)


def parse_task_list(text: str | None, known: tuple[str, ...], default: tuple[str, ...] | None = None) -> list[str]:
    """--tasks: comma-separated names, each one of `known` (None: `default`, else all of `known`)."""
    from minidecoder.errors import InputError

    if text is None:
        return list(default if default is not None else known)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise InputError(f"--tasks {text!r} names unknown task(s) {', '.join(unknown) or '(none given)'}",
                         "choose from " + ",".join(known))
    return names


def output_prefix(args: argparse.Namespace, benchmark: str) -> Path:
    """--output, else ./BENCHMARK-MODEL-METHOD-DATE; checked free and writable."""
    from minidecoder.evaluation.report import check_report_prefix

    check_sizes(args)
    if args.output:
        prefix = Path(args.output)
    else:
        stem = Path(args.model).name if args.model else "default-model"
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        prefix = Path(re.sub(r"[^A-Za-z0-9._-]+", "_", f"{benchmark}-{stem}-{args.method}-{stamp}"))
    check_report_prefix(prefix, args.overwrite)
    return prefix


def run_family(args: argparse.Namespace, benchmark: str, prefix: Path, extra_stamp: dict,
               score: Callable[[Callable, Path, str], dict], table: Callable[[dict], str],
               markdown: Callable[[dict, dict], str], figures: Sequence[Path] = (),
               draw: Callable[[dict], None] | None = None) -> int:
    """Load the model, embed through a resumable job kept in `.PREFIX.json.partial/`, score, write the report
    (and `draw(results)` the `figures`, claimed with the report). The folder `kept` passed to `score` survives
    an interruption; it is removed once the report is written."""
    import shutil

    from minidecoder.cli.eval_benchmark import embed_kept
    from minidecoder.cli.eval_cmd import _argv
    from minidecoder.evaluation.report import report_paths, work_folder, write_or_rescue, write_report

    method = build_cli_method(args.method, args.opt)
    with claim_cli_outputs(args, [*report_paths(prefix), *figures]):
        model = load_model(args)
        work = work_folder(prefix)
        truncated: list[int] = []

        def encode(texts: list[str]):
            vectors, summary = embed_kept(model, method, texts, work / "job", args, prefix)
            truncated.append(int(summary.get("truncated_rows", 0) or 0))
            return vectors

        # what makes the embeddings: kept work made under another identity is never reused
        identity = json.dumps({**model_stamp(args, model, method), "truncate": args.truncate}, sort_keys=True, default=str)
        results = score(encode, work, identity)
        argv = _argv(args) + (["--truncate", str(args.truncate)] if args.truncate is not None else [])
        metadata = {
            **model_stamp(args, model, method),
            # nothing is cut silently: the policy, and how many texts it cut in this sitting
            "truncation": {"truncate": args.truncate, "texts_truncated": sum(truncated),
                           "policy": "a text past the model's context is an error" if args.truncate is None
                           else f"the first {args.truncate} tokens of a longer text are kept"},
            **extra_stamp,
            "command": shlex.join(["minidecoder", "eval", benchmark, *argv]),
        }
        shown = table(results)
        json_path, md_path = write_or_rescue(
            lambda where: write_report(where, results, metadata, args.overwrite, markdown=markdown), prefix, shown)
        shutil.rmtree(work, ignore_errors=True)
        if draw is not None:
            draw(results)
    print(shown)
    print(f"\nwrote {json_path} and {md_path}" + "".join(f" and {path}" for path in figures))
    return 0
