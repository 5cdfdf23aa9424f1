"""`minidecoder eval sts`: score one method on the STS tasks and write PREFIX.json and PREFIX.md.

    minidecoder eval sts --model smollm2-135m --method prompteol --opt layer=-1 \\
        --tasks STS12,STSBenchmark --limit 50 --output results/tmp/smoke

Scores are Spearman x100 of cosine vs gold (STS12-16 "all", STS-B and SICK-R test, Avg. of the
seven); see `minidecoder.evaluation`. `--opt key=value` values are read as JSON when they parse
(`3`, `0.5`, `true`, `[1, 7]`, `"text"`) and as plain strings otherwise.

The sentences are embedded as a resumable job (minidecoder.running.jobs) in `.PREFIX.json.partial/`
beside the report: Ctrl-C or a kill keeps every finished chunk of 1024 sentences, and the same command
(same --output) resumes from them. PREFIX.json and PREFIX.md are locked from before the model loads
until they are written: a second run on them is told which process holds them (or waits, --wait).
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from minidecoder.cli.common import (add_model_options, add_output_options, build_cli_method, check_sizes,
                                    claim_cli_outputs, load_model, model_stamp)

# Ctrl-C before the embedding job started (run() says more once it has)
OWNER = "minidecoder eval sts"  # of the kept-work folder `.PREFIX.json.partial/` (running.jobs.owned_work_folder)
INTERRUPTED = ("interrupted before any sentence was embedded; nothing new was kept; run the same command again "
               "(with the same --output, it resumes from chunks an earlier run kept)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a method on a benchmark (sts, transfer, sts-long, retrieval, classification, cmteb)", description=__doc__.splitlines()[0])
    benchmarks = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    sts = benchmarks.add_parser("sts", help="the seven STS tasks of PromptEOL / TP / CP", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sts.add_argument("--method", required=True, help="method name, e.g. prompteol, tp, cp, mean")
    sts.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option; repeat for more")
    sts.add_argument("--tasks", default=None, help="comma-separated tasks (default: the seven; also STSBenchmark-dev)")
    sts.add_argument("--data", default=None, metavar="DIR", help="STS data folder (default: $MINIDECODER_STS_DATA or ../shared/data/sts)")
    sts.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N pairs of each subset (quick look)")
    sts.add_argument("--batch-size", type=int, default=None,
                        help="sentences per forward pass (default: each batch filled up to the device's token budget)")
    sts.add_argument("--output", default=None, metavar="PREFIX", help="write PREFIX.json and PREFIX.md (a PREFIX ending in .json or .md names that file; default: ./sts-MODEL-METHOD-DATE)")
    add_output_options(sts, "PREFIX.json / PREFIX.md")
    sts.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_options(sts)
    sts.set_defaults(run=run)
    from minidecoder.evaluation import classification, cmteb, retrieval, sts_long, transfer
    # each benchmark family lives in its own module, loader to command; all run through evaluation.family
    for family in (transfer, sts_long, retrieval, classification, cmteb):
        family.add_parser(benchmarks)


def parse_tasks(text: str | None) -> list[str]:
    from minidecoder.evaluation.family import parse_names
    from minidecoder.evaluation.sts import ALL_SEVEN, TASKS

    return parse_names(text, list(TASKS), default=ALL_SEVEN)


def run(args: argparse.Namespace) -> int:
    from minidecoder.evaluation.report import check_report_prefix, report_paths, work_folder
    from minidecoder.evaluation.sts import load_tasks, resolve_data_dir
    from minidecoder.running.jobs import check_work_owner

    from minidecoder.evaluation.family import default_prefix

    check_sizes(args)
    tasks = parse_tasks(args.tasks)
    # everything that can fail cheaply fails before the model loads and the long run starts
    prefix = Path(args.output) if args.output else default_prefix("sts", args.model, args.method)
    check_report_prefix(prefix, args.overwrite)
    check_work_owner(work_folder(prefix), OWNER, kept_settings(args))  # never taken over, named by flag
    resolve_data_dir(args.data)
    loaded = load_tasks(tasks, args.data, args.limit)  # every data file read and checked (a gold score "abc", --limit 1)
    method = build_cli_method(args.method, args.opt)
    with claim_cli_outputs(args, list(report_paths(prefix))):  # held from before the model loads to the last write
        return _evaluate(args, tasks, loaded, prefix, method)


def _evaluate(args: argparse.Namespace, tasks: list[str], loaded: list, prefix: Path, method) -> int:
    from minidecoder.evaluation.family import argv_of, embed_kept
    from minidecoder.evaluation.sts import evaluate_sts
    from minidecoder.evaluation.report import summary_table, work_folder, write_or_rescue, write_report
    from minidecoder.running.jobs import owned_work_folder

    model = load_model(args)
    metadata = {
        **model_stamp(args, model, method),
        "tasks": tasks,
        "command": shlex.join(["minidecoder", "eval", "sts", *argv_of(args)]),
    }

    work = work_folder(prefix)
    kept: dict = {}

    def encode(sentences: list[str]):  # every distinct sentence at once, as a resumable job in `work`
        vectors, kept["summary"] = embed_kept(model, method, sentences, work, args, prefix)
        return vectors

    # one call of `encode` with every sentence (the job draws its own progress bar)
    with owned_work_folder(work, OWNER, f"{metadata['command']} --output {shlex.quote(str(prefix))}",
                           kept_settings(args)):
        results = evaluate_sts(encode, tasks=loaded, progress=False, chunk_size=1 << 62)  # the tasks read above
    summary = kept.get("summary")
    if summary is not None and summary["chunks_reused"]:
        # the time measured is this sitting's only: a rate over all sentences would be wrong
        results.update(resumed_chunks=summary["chunks_reused"], sentences_per_second=None)
    table = summary_table(results)
    json_path, md_path = write_or_rescue(lambda where: write_report(where, results, metadata, args.overwrite),
                                         prefix, table)
    print(table)
    print(f"\nwrote {json_path} and {md_path}")
    return 0


def kept_settings(args: argparse.Namespace) -> dict:
    """The flags that choose the sentences a kept job embeds and those that make their vectors, so that a
    resume with others is refused by flag (`--limit was 300, now 30`, `--method was 'mean', now 'last'`),
    all at once and before the model loads, never by the job's fields (`input.rows`)."""
    from minidecoder.cli.common import resume_settings

    return resume_settings(args, ("--tasks", "--limit"))
