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

from minidecoder.evaluation.family import Family, Kept, add_family_options, family_parser
from minidecoder.errors import InputError


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "HTP's long-context STS (STS-B pairs joined; Figure 1)",
                           __doc__)
    parser.add_argument("--lengths", default=None, help="comma-separated k values (default: 1,2,4,8,16)")
    parser.add_argument("--plot", action="store_true", help="also write PREFIX.png: score against length (needs matplotlib)")
    add_family_options(parser, "sts-long",
                       "STS data folder holding STSBenchmark/ (default: $MINIDECODER_STS_DATA or ../shared/data/sts)",
                       "build from the first N STS-B test pairs only (a quick look, stamped as such)")


def parse_lengths(text: str | None) -> list[int]:
    from minidecoder.evaluation.sts_long import LENGTHS

    if text is None:
        return list(LENGTHS)
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--lengths {text!r} is not a comma-separated list of integers", "e.g. --lengths 1,2,4,8,16") from None


def read(args: argparse.Namespace):
    from minidecoder.evaluation.sts_long import load_long_sts

    return load_long_sts(args.data, args.limit, parse_lengths(args.lengths))  # read and built before the model loads


def texts(loaded, args: argparse.Namespace) -> list[str]:
    _, sets = loaded
    return [text for pairs in sets for text in pairs.first + pairs.second]


def evaluate(encode, loaded, args: argparse.Namespace, kept: Kept) -> dict:  # the job's chunks are its kept work
    from minidecoder.evaluation.sts_long import evaluate_sts_long

    return evaluate_sts_long(encode, loaded=loaded, progress=False, chunk_size=1 << 62)


def stamp(loaded, args: argparse.Namespace) -> dict:
    return {"lengths": [pairs.k for pairs in loaded[1]], "construction": "see results.construction",
            **({"lengths_option": args.lengths} if args.lengths else {})}


def figures(prefix: Path, args: argparse.Namespace) -> list[Path]:
    if not args.plot:
        return []
    from minidecoder.evaluation.report import report_paths
    from minidecoder.running.figures import check_figure_path

    figure = report_paths(prefix)[0].with_suffix(".png")
    check_figure_path(figure)  # matplotlib installed: found out now, not after the run
    return [figure]


def draw(results: dict, paths: list[Path], args: argparse.Namespace) -> None:
    from minidecoder.evaluation.sts_long import plot_sts_long

    plot_sts_long({args.method: results["lengths"]}, paths[0], args.model or "default model", args.overwrite)


def table(results: dict) -> str:
    from minidecoder.evaluation.sts_long import sts_long_table

    return sts_long_table(results)


def markdown(results: dict, stamp: dict) -> str:
    from minidecoder.evaluation.sts_long import sts_long_markdown

    return sts_long_markdown(results, stamp)


FAMILY = Family("sts-long", read, texts, evaluate, table, markdown, ("--limit", "--lengths"), stamp, figures, draw)
