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

from minidecoder.cli.eval_family import add_family_options, output_prefix, parse_task_list, run_family


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = benchmarks.add_parser("transfer", help="SentEval's seven transfer tasks (TP / CP)", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: MR,CR,SUBJ,MPQA,SST2,TREC,MRPC)")
    add_family_options(parser, "SentEval transfer folder (default: $MINIDECODER_SENTEVAL_DATA or ../shared/data/senteval)",
                       "use only the first N rows of each data file (a quick look, stamped as such)")
    parser.set_defaults(run=run)


def parse_tasks(text: str | None) -> list[str]:
    from minidecoder.evaluation.transfer_data import TRANSFER_TASKS

    return parse_task_list(text, TRANSFER_TASKS)


def run(args: argparse.Namespace) -> int:
    from minidecoder.evaluation.transfer import PROTOCOL, evaluate_transfer, transfer_markdown, transfer_table
    from minidecoder.evaluation.transfer_data import load_transfer_tasks

    tasks = parse_tasks(args.tasks)
    prefix = output_prefix(args, "transfer")
    loaded = load_transfer_tasks(tasks, args.data, args.limit)  # every file read and checked before the model loads
    skipped = {file: lines for task in loaded for file, lines in task.skipped_blank.items()}
    stamp = {"tasks": tasks, "protocol": PROTOCOL, "skipped_blank_lines": skipped}

    def score(encode, kept, identity):
        return evaluate_transfer(encode, loaded, progress=not args.no_progress, chunk_size=1 << 62, kept=kept,
                                 kept_identity=identity)

    return run_family(args, "transfer", prefix, stamp, score, transfer_table, transfer_markdown)
