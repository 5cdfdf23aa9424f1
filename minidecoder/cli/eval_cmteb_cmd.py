"""`minidecoder eval cmteb`: C-MTEB's pair sets (ReBA Tables 2-3) of one method; PREFIX.json and PREFIX.md.

    minidecoder eval cmteb --method reba --limit 200 --output /tmp/z

ATEC, BQ, LCQMC, PAWSX, STSB, AFQMC, QBQTC (STS: cosine Spearman x100 with Pearson beside it, a 95%
bootstrap interval over pairs) and Ocnli (pair classification: best accuracy over cosine thresholds, AP
beside it), each scored by the installed mteb's own task class on the original files. No instruction
(ReBA encodes sentences as they are). Resumable: the same command (same --output) resumes.
"""
from __future__ import annotations

import argparse

from minidecoder.evaluation.family import (Family, Kept, add_family_options, family_parser, limited_note, markdown_report,
                                            parse_names)


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    from minidecoder.evaluation.cmteb_data import SETS

    parser = family_parser(benchmarks, FAMILY, "C-MTEB pair sets (ATEC ... QBQTC, Ocnli): ReBA Table 3", __doc__)
    parser.add_argument("--tasks", default=",".join(SETS), help="comma-separated sets (default: all eight)")
    add_family_options(parser, "cmteb", "C-MTEB data folder (default: $MINIDECODER_CMTEB_DATA or ../shared/data/cmteb)",
                       "score only the first N pairs of each set", instruction=True)
    parser.set_defaults(instruction="none")


def read(args: argparse.Namespace) -> list:
    from minidecoder.errors import InputError
    from minidecoder.evaluation.cmteb_data import SETS, load_pair_set

    names = parse_names(args.tasks, list(SETS))
    if args.instruction not in ("none", "auto"):
        raise InputError(f"--instruction {args.instruction!r}: the C-MTEB sets take no instruction",
                         "leave --instruction out (ReBA encodes each sentence as it is)")
    return [load_pair_set(name, args.data, args.limit) for name in names]


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    from minidecoder.evaluation.cmteb import texts_needed

    return texts_needed(loaded)


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's chunks are its kept work
    from minidecoder.evaluation.cmteb import evaluate_cmteb

    return evaluate_cmteb(encode, loaded, progress=False)


def table(results: dict) -> str:
    names = list(results["sets"])
    rows = ["| | " + " | ".join(names) + " | Avg. (STS) |", "|---|" + "---:|" * (len(names) + 1)]
    main = [f"{e['score']:.2f}" for e in results["sets"].values()]
    beside = [f"{e['pearson']:.2f}" if e["kind"] == "sts" else f"AP {e['ap']:.2f}" for e in results["sets"].values()]
    ci = [f"[{e['ci95'][0]:.1f}, {e['ci95'][1]:.1f}]" if e.get("ci95") else "" for e in results["sets"].values()]
    avg = f"{results['avg_sts']:.2f}" if results.get("avg_sts") is not None else "n/a"
    rows += ["| Spearman x100 (Ocnli: accuracy) | " + " | ".join(main) + f" | {avg} |",
             "| 95% CI over pairs | " + " | ".join(ci) + " | |",
             "| Pearson x100 (Ocnli: AP) | " + " | ".join(beside) + " | |"]
    if results.get("limit") is not None:
        rows.append(limited_note(f"--limit {results['limit']} pairs a set"))
    return "\n".join(rows)


def markdown(results: dict, stamp: dict) -> str:
    about = ("Scored by the installed mteb's own task classes on the local files: STS sets cosine Spearman x100 "
             "(main) and Pearson x100; Ocnli the best accuracy over cosine thresholds and its AP; splits as C-MTEB "
             "evaluates them (" + ", ".join(f"{n}: {e['split']}" for n, e in results["sets"].items()) + ").")
    return markdown_report("C-MTEB pair sets", about, table(results), stamp)


FAMILY = Family("cmteb", read, texts, evaluate, table, markdown, ("--tasks", "--limit"))
