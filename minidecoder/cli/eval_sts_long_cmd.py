"""`minidecoder eval sts-long`: HTP's long-context STS (HTP Figure 1) for one method.

    minidecoder eval sts-long --method mean --limit 200 --plot --output /tmp/sts-long-smoke

STS-B test pairs sorted by gold (stable); for each length k (default 1,2,4,8,16) k consecutive pairs are
joined into one long pair (first sentences joined by a space, second sentences joined, gold = mean of the
k golds); Spearman x100 of cosine vs gold per k with a 95% bootstrap interval over long pairs
(minidecoder.evaluation.sts_long). --plot also writes PREFIX.png, score against length (needs matplotlib).
A text past the model's context is an error unless --truncate N (HTP: 512); the report counts texts cut.
Resumable like `eval sts`: the same command (same --output) resumes from the kept chunks.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from minidecoder.cli.eval_family import add_family_options, output_prefix, run_family
from minidecoder.errors import InputError


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = benchmarks.add_parser("sts-long", help="HTP's long-context STS (STS-B pairs joined; Figure 1)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default=None, help="comma-separated k values (default: 1,2,4,8,16)")
    parser.add_argument("--plot", action="store_true", help="also write PREFIX.png: score against length (needs matplotlib)")
    add_family_options(parser, "STS data folder holding STSBenchmark/ (default: $MINIDECODER_STS_DATA or ../shared/data/sts)",
                       "build from the first N STS-B test pairs only (a quick look, stamped as such)")
    parser.set_defaults(run=run, tasks=None)


def parse_lengths(text: str | None) -> list[int]:
    from minidecoder.evaluation.sts_long import LENGTHS

    if text is None:
        return list(LENGTHS)
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--lengths {text!r} is not a comma-separated list of integers", "e.g. --lengths 1,2,4,8,16") from None


def run(args: argparse.Namespace) -> int:
    from minidecoder.evaluation.report import report_paths
    from minidecoder.evaluation.sts_long import evaluate_sts_long, load_long_sts, plot_sts_long, sts_long_markdown, sts_long_table

    lengths = parse_lengths(args.lengths)
    prefix = output_prefix(args, "sts-long")
    loaded = load_long_sts(args.data, args.limit, lengths)  # read and built before the model loads
    figures = [report_paths(prefix)[0].with_suffix(".png")] if args.plot else []
    if figures:
        from minidecoder.running.figures import check_figure_path
        check_figure_path(figures[0])  # matplotlib installed: found out now, not after the run
    stamp = {"lengths": lengths, "construction": "see results.construction",
             **({"lengths_option": args.lengths} if args.lengths else {})}

    def score(encode, kept: Path, identity: str) -> dict:  # the embedding job's chunks are its kept work
        return evaluate_sts_long(encode, loaded=loaded, progress=False, chunk_size=1 << 62)

    def draw(results: dict) -> None:
        plot_sts_long({args.method: results["lengths"]}, figures[0], args.model or "default model", args.overwrite)

    return run_family(args, "sts-long", prefix, stamp, score, sts_long_table, sts_long_markdown,
                      figures=figures, draw=draw if figures else None)
