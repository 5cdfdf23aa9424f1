"""`minidecoder eval BENCHMARK`: score one method on a benchmark family and write PREFIX.json and PREFIX.md.

Each family lives in one module of `minidecoder.evaluation`, its data, scorer, table and command together;
this lists them. Adding a benchmark adds its module to FAMILIES.
"""
from __future__ import annotations

import argparse
import importlib

# the benchmark families, in the order of `minidecoder eval --help`
FAMILIES = ("sts", "transfer", "sts_long", "retrieval", "classification", "cmteb")
# Ctrl-C before the embedding job started (run() says more once it has)
INTERRUPTED = ("interrupted before any sentence was embedded; nothing new was kept; run the same command again "
               "(with the same --output, it resumes from chunks an earlier run kept)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a method on a benchmark (sts, transfer, sts-long, retrieval, classification, cmteb)", description=__doc__.splitlines()[0])
    benchmarks = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for family in FAMILIES:
        importlib.import_module(f"minidecoder.evaluation.{family}").add_parser(benchmarks)
