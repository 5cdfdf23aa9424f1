"""`minidecoder eval retrieval`: BEIR retrieval (HTP Table 1) of one method; PREFIX.json and PREFIX.md.

    minidecoder eval retrieval --method mean --sets scifact --limit 20 --corpus-limit 200 --output /tmp/r

nDCG@10 x100 (headline), MAP@100 and recall@100/1000 by pytrec_eval over the judged test queries, exact
cosine search over the whole corpus (minidecoder.evaluation.retrieval), each with a 95% bootstrap interval
over queries. Queries take the set's HTP instruction for mean, last, echo, htp and reba (--instruction),
read as unpooled context (--instruction-placement pooled joins it as "{instruct} {text}"); documents are title + " " + text, cut to their first 512 tokens (--truncate) as HTP did.
Resumable: the same command (same --output) resumes from the chunks an interrupted run kept.
"""
from __future__ import annotations

import argparse

from minidecoder.evaluation.family import (Family, Kept, add_family_options, family_parser, instruction_for,
                                            instructions_line, limited_note, markdown_report)


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "BEIR retrieval (SciFact, NFCorpus): HTP Table 1", __doc__)
    parser.add_argument("--sets", default="scifact,nfcorpus", help="comma-separated BEIR sets under --data")
    parser.add_argument("--split", default="test", help="the qrels split to score (default: test)")
    parser.add_argument("--corpus-limit", type=int, default=None, metavar="M",
                        help="search only the first M documents plus those judged for the kept queries (quick look)")
    add_family_options(parser, "retrieval", "BEIR data folder (default: $MINIDECODER_BEIR_DATA or ../shared/data/beir)",
                       "score only the first N judged queries", truncate=512, instruction=True)


def read(args: argparse.Namespace) -> list:
    from minidecoder.errors import InputError
    from minidecoder.evaluation.retrieval_data import load_beir_set

    if args.corpus_limit is not None and args.corpus_limit < 0:
        raise InputError(f"--corpus-limit {args.corpus_limit} must be 0 or more", "e.g. --corpus-limit 200")
    names = [name.strip() for name in args.sets.split(",") if name.strip()]
    if not names:
        raise InputError(f"--sets {args.sets!r} names no set", "e.g. --sets scifact,nfcorpus")
    return [load_beir_set(name, args.data, args.split, args.limit, args.corpus_limit) for name in names]


def _instruction(args: argparse.Namespace, data) -> str | None:
    from minidecoder.evaluation.retrieval_data import INSTRUCTIONS

    return instruction_for(args, INSTRUCTIONS.get(data.name))


def texts(loaded: list, args: argparse.Namespace) -> list[str]:
    from minidecoder.evaluation.retrieval import query_texts

    return [text for data in loaded
            for text in query_texts(data, _instruction(args, data), args.instruction_placement) + data.documents]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's chunks are its kept work
    from minidecoder.evaluation.data_files import run_limit
    from minidecoder.evaluation.retrieval import evaluate_retrieval

    sets = {data.name: evaluate_retrieval(encode, data, _instruction(args, data), progress=False,
                                          placement=args.instruction_placement) for data in loaded}
    for result in sets.values():
        for key in ("data_dir", "data_files", "encode_seconds", "documents_per_second"):
            result.pop(key)  # the stamp has the data; the job's own time is results["embedding"]
    # the limits that cut some set (`data_files.limit_that_cut`): one that scored everything is a full run
    return {"sets": sets, "limit": run_limit(data.limit for data in loaded),
            "corpus_limit": run_limit(data.corpus_limit for data in loaded),
            "data_dir": str(loaded[0].data_dir), "data_files": [f for data in loaded for f in data.files]}


def table(results: dict) -> str:
    from minidecoder.evaluation.retrieval import HEADLINE

    labels = list(HEADLINE.values())
    lines = ["| set | queries | documents | " + " | ".join(labels) + " |", "|---|---:|---:|" + "---:|" * len(labels)]
    for name, result in results["sets"].items():
        cells = [f"{m['score']:.2f} [{m['ci95'][0]:.2f}, {m['ci95'][1]:.2f}]" for m in result["metrics"].values()]
        lines.append(f"| {name} | {result['queries']} | {result['documents']} | " + " | ".join(cells) + " |")
    if results.get("limit") is not None or results.get("corpus_limit") is not None:
        lines.append(limited_note(f"--limit {results.get('limit')}, --corpus-limit {results.get('corpus_limit')}"))
    return "\n".join(lines)


def markdown(results: dict, stamp: dict) -> str:
    about = ("x100, mean over the judged queries, by pytrec_eval (as BEIR and MTEB call it) on each query's top "
             "1,000 documents by cosine over the corpus searched; [95% bootstrap interval over queries]. "
             + instructions_line(results["sets"])
             + f". Truncation: {results['embedding']['truncation']}.")
    job = results["embedding"]
    timing = (f"- embedding: {job['texts']} distinct texts"
              + (f" in {job['seconds']:.1f} s ({job['texts_per_second']:.1f} texts/s)\n" if job["seconds"] else
                 f" (resumed from {job['chunks_reused']} kept chunks: this sitting's time is not a rate)\n")
              + "".join(f"- {name}: exact search and scoring {r['search_seconds']:.1f} s\n"
                        for name, r in results["sets"].items()))
    return markdown_report("Retrieval (BEIR)", about, table(results), stamp,
                           f"## Timing\n\n{timing}\n")


FAMILY = Family("retrieval", read, texts, evaluate, table, markdown, ("--sets", "--split", "--limit", "--corpus-limit", "--instruction",
                                                                      "--instruction-placement"))
