"""`minidecoder eval classification`: MTEB classification (HTP Table 12) of one method; PREFIX.json and .md.

    minidecoder eval classification --method mean --tasks Emotion --limit 100 --output /tmp/c

Banking77 and Emotion from their original files, scored by the installed mteb's own task classes and
evaluator (logistic regression on per-label train samples, n_experiments repeats, mteb's seed): accuracy
x100, mean over the experiments, with a 95% bootstrap interval over test items. Texts take HTP Table 11's
instruction for mean, last, echo, htp and reba (--instruction), read as unpooled context (--instruction-placement
pooled joins it as "{instruct} {text}"). Resumable: the same
command (same --output) resumes from the chunks an interrupted run kept.
"""
from __future__ import annotations

import argparse

from minidecoder.evaluation.family import (Family, Kept, add_family_options, family_parser, instruction_for,
                                            instructions_line, limited_note,
                                            markdown_report, parse_names)


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "MTEB classification (Banking77, Emotion): HTP Table 12", __doc__)
    parser.add_argument("--tasks", default="Banking77,Emotion", help="comma-separated tasks (default: both)")
    add_family_options(parser, "classification",
                       "MTEB data folder (default: $MINIDECODER_MTEB_DATA or ../shared/data/mteb)",
                       "score only the first N test items", instruction=True)


def read(args: argparse.Namespace) -> list:
    from minidecoder.evaluation.classification_data import TASKS, load_classification_set

    return [load_classification_set(name, args.data, args.limit) for name in parse_names(args.tasks, TASKS)]


def _instruction(args: argparse.Namespace, data) -> str | None:
    from minidecoder.evaluation.classification_data import INSTRUCTIONS

    return instruction_for(args, INSTRUCTIONS[data.name])


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    from minidecoder.evaluation.classification import texts_needed

    return [text for data in loaded
            for text in texts_needed(data, _instruction(args, data), args.instruction_placement)]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's chunks are its kept work
    from minidecoder.evaluation.classification import evaluate_classification
    from minidecoder.evaluation.data_files import run_limit

    tasks = {data.name: evaluate_classification(encode, data, _instruction(args, data), progress=False,
                                                placement=args.instruction_placement) for data in loaded}
    for result in tasks.values():
        result.pop("data_dir"), result.pop("data_files")
    return {"tasks": tasks, "limit": run_limit(data.limit for data in loaded), "data_dir": str(loaded[0].data_dir),
            "data_files": [f for data in loaded for f in data.files]}


def table(results: dict) -> str:
    lines = ["| task | test items | experiments x samples/label | accuracy x100 [95% CI] | macro F1 x100 |",
             "|---|---:|---:|---:|---:|"]
    for name, r in results["tasks"].items():
        acc = r["accuracy"]
        lines.append(f"| {name} | {r['test_items']} | {r['n_experiments']} x {r['samples_per_label']} | "
                     f"{acc['score']:.2f} [{acc['ci95'][0]:.2f}, {acc['ci95'][1]:.2f}] | {r['f1']['score']:.2f} |")
    if results.get("limit") is not None:
        lines.append(limited_note(f"--limit {results['limit']} test items"))
    return "\n".join(lines)


def markdown(results: dict, stamp: dict) -> str:
    about = ("Accuracy x100 by the installed mteb's classification evaluator (its task classes and defaults; "
             "classifier " + ", ".join(sorted({r['classifier'] for r in results['tasks'].values()})) + "), mean over "
             "the experiments; [95% bootstrap interval over test items]. "
             + instructions_line(results["tasks"]) + ".")
    return markdown_report("Classification (MTEB)", about, table(results), stamp)


FAMILY = Family("classification", read, texts, evaluate, table, markdown, ("--tasks", "--limit", "--instruction",
                                                                           "--instruction-placement"))
