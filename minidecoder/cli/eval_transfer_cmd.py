"""`minidecoder eval transfer`: SentEval's seven transfer tasks (TP Table 5, CP Table 6) for one method.

    minidecoder eval transfer --method prompteol --tasks MR,TREC --limit 200 --output /tmp/transfer-smoke

Accuracy x100 of SentEval's logistic-regression probe (usepytorch=True, kfold=10, nhid 0, adam, batch 64,
tenacity 5, epoch_size 4, seed 1111; minidecoder.evaluation.senteval_classifier), each with a 95% bootstrap
interval over test items, and Avg. of the seven. Data: --data, $MINIDECODER_SENTEVAL_DATA or
../shared/data/senteval. Resumable: the embeddings and every finished task are kept in `.PREFIX.json.partial/`
beside the report; the same command (same --output) resumes from them, to the same scores.
"""
from __future__ import annotations

import argparse

from minidecoder.evaluation.family import Family, Kept, add_family_options, family_parser, parse_names


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "SentEval's seven transfer tasks (TP / CP)", __doc__)
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: MR,CR,SUBJ,MPQA,SST2,TREC,MRPC)")
    parser.add_argument("--probe-workers", type=int, default=None, metavar="N",
                        help="processes that train the probes, one thread each (default: one per CPU; any N gives "
                             "the same scores)")
    add_family_options(parser, "transfer",
                       "SentEval transfer folder (default: $MINIDECODER_SENTEVAL_DATA or ../shared/data/senteval)",
                       "use only the first N rows of each data file (a quick look, stamped as such)")


def read(args: argparse.Namespace) -> list:
    from minidecoder.errors import InputError
    from minidecoder.evaluation.transfer_data import TRANSFER_TASKS, load_transfer_tasks

    if args.probe_workers is not None and args.probe_workers < 1:
        raise InputError(f"--probe-workers {args.probe_workers}: at least one process trains the probes",
                         "pass --probe-workers 1 or more, or leave it out for one per CPU")

    return load_transfer_tasks(parse_names(args.tasks, TRANSFER_TASKS), args.data, args.limit)


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    return [text for task in loaded for text in task.texts()]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:
    from minidecoder.evaluation.probe_pool import default_workers
    from minidecoder.evaluation.transfer import evaluate_transfer

    # the embeddings and each trained probe are kept beside the job: a Ctrl-C in the probes loses neither
    return evaluate_transfer(encode, loaded, progress=not args.no_progress, chunk_size=1 << 62, kept=kept.folder,
                             kept_identity=kept.identity, probe_workers=args.probe_workers or default_workers())


def stamp(loaded: list, args: argparse.Namespace) -> dict:
    from minidecoder.evaluation.transfer import PROTOCOL

    return {"tasks": [task.name for task in loaded], "protocol": PROTOCOL,
            "skipped_blank_lines": {file: lines for task in loaded for file, lines in task.skipped_blank.items()}}


def table(results: dict) -> str:
    from minidecoder.evaluation.transfer import transfer_table

    return transfer_table(results)


def markdown(results: dict, stamp: dict) -> str:
    from minidecoder.evaluation.transfer import transfer_markdown

    return transfer_markdown(results, stamp)


FAMILY = Family("transfer", read, texts, evaluate, table, markdown, ("--tasks", "--limit"), stamp)
