"""HTP's long-context STS (HTP Figure 1, section 3.1): STS-B test pairs made long, Spearman x100 per length;
the construction, the scorer, the figure and `minidecoder eval sts-long`.

The HTP paper defers the construction to an appendix it does not print; this is the construction the spec
fixes (docs/spec.md section 11), seed-free and deterministic so any reader rebuilds it:

1. read the STS-B test pairs (sts.py, as SentEval reads them; 1,379 pairs);
2. sort them by gold score, a **stable** sort (ties keep file order);
3. for each length k in {1, 2, 4, 8, 16}: cut the sorted list into consecutive groups of k pairs (the last
   `P mod k` pairs, which make no full group, are left out: 1,379 -> 1,379 / 689 / 344 / 172 / 86 long
   pairs); a group is one long pair, its k first sentences joined by one space against its k second
   sentences joined by one space, gold = the mean of its k golds;
4. score each k as the STS harness scores a task: cosine of the two embeddings (float64; sts.pair_cosines),
   Spearman x100 against gold (bootstrap.py).

k = 1 is STS-B test itself, in gold order (Spearman does not depend on the order of pairs). Each score has
a 95% percentile bootstrap interval over the long pairs of its length (bootstrap.py, 1,000 resamples,
seed 0). Long texts go through the token budget like any other; a text past the model's context is an
error unless a `truncate` is given, and the report counts every text it cut.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minidecoder.errors import InputError, is_whole_number
from minidecoder.evaluation.bootstrap import Bootstrap, TaskLayout, spearman
from minidecoder.evaluation.family import (Encoder, Family, Kept, add_family_options, encode_sentences, family_parser,
                                           longest_first, markdown_report, refuse_reading_options)
from minidecoder.evaluation.sts import StsTask, check_pair_limit, load_sts_benchmark, pair_cosines, resolve_data_dir

LENGTHS: tuple[int, ...] = (1, 2, 4, 8, 16)


@dataclass
class LongPairs:
    """The long pairs of one length k: `first[i]` against `second[i]`, gold `gold[i]`."""

    k: int
    first: list[str]
    second: list[str]
    gold: np.ndarray  # (P_k,) float64

    def __len__(self) -> int:
        return len(self.first)


def build_long_pairs(task: StsTask, lengths: Sequence[int] = LENGTHS) -> list[LongPairs]:
    """Steps 2-3 of the module docstring, for one STS task of a single split (STS-B test)."""
    subset = next(iter(task.subsets.values()))
    order = np.argsort(np.asarray(subset.gold, dtype=np.float64), kind="stable")  # ties keep file order
    first = [subset.sentences1[i] for i in order]
    second = [subset.sentences2[i] for i in order]
    gold = np.asarray(subset.gold, dtype=np.float64)[order]
    out = []
    for k in lengths:
        groups = len(order) // k  # the last len % k pairs make no full group
        if groups < 2:
            raise InputError(f"length {k} leaves {groups} long pair(s) of {len(order)} pairs; a correlation needs two",
                             "use more pairs (a larger --limit, or none) or shorter --lengths")
        out.append(LongPairs(k, [" ".join(first[g * k:(g + 1) * k]) for g in range(groups)],
                             [" ".join(second[g * k:(g + 1) * k]) for g in range(groups)],
                             gold[:groups * k].reshape(groups, k).mean(axis=1)))  # gold = mean of the k golds
    return out


def load_long_sts(data_dir: str | Path | None = None, limit: int | None = None,
                  lengths: Sequence[int] = LENGTHS) -> tuple[StsTask, list[LongPairs]]:
    """STS-B test (its first `limit` pairs for a quick look) and its long pairs per length."""
    lengths = list(lengths)  # a NumPy array too, whose truth value is ambiguous
    if not lengths or not all(is_whole_number(k, 1) for k in lengths) or len(set(lengths)) != len(lengths):
        raise InputError(f"lengths {lengths} must be distinct positive integers", "e.g. --lengths 1,2,4,8,16")
    lengths = [int(k) for k in lengths]  # a NumPy integer is one too; the report's keys are their texts
    limit = check_pair_limit(limit)
    task = load_sts_benchmark("test", resolve_data_dir(data_dir), limit)
    return task, build_long_pairs(task, lengths)


def score_long_pairs(sets: Sequence[LongPairs], vectors, index: dict[str, int]) -> dict:
    """{str(k): {"score", "pairs", "ci95", "mean_words", "cosines"}} from embeddings `vectors` (N, E), row
    index[text]; "cosines" (the long pairs' cosines, gold order) let two rows' paired interval be computed."""
    cosines = {}
    for pairs in sets:
        a, b = vectors[[index[t] for t in pairs.first]], vectors[[index[t] for t in pairs.second]]
        same = np.asarray([x == y for x, y in zip(pairs.first, pairs.second)])
        cosines[str(pairs.k)] = pair_cosines(a, b, same)
    layout = [TaskLayout(str(p.k), "test", p.gold, (0, len(p))) for p in sets]
    boot = Bootstrap(layout)
    intervals = boot.interval(boot.replicates({"row": cosines})["row"])
    return {str(p.k): {"score": 100.0 * spearman(cosines[str(p.k)], p.gold), "pairs": len(p),
                       "ci95": list(intervals[str(p.k)]),
                       "mean_words": float(np.mean([len(t.split()) for t in p.first + p.second])),
                       "cosines": [float(c) for c in cosines[str(p.k)]]}
            for p in sets}


def evaluate_sts_long(encode: Encoder, data_dir: str | Path | None = None, limit: int | None = None,
                      lengths: Sequence[int] = LENGTHS, loaded: tuple[StsTask, list[LongPairs]] | None = None,
                      progress: bool = True, chunk_size: int = 256) -> dict:
    """Score `encode` on long-context STS; every distinct text of every length is encoded once (longest
    first). Returns {"lengths": score_long_pairs' dict, "construction", "limit", "texts", "encode_seconds",
    "data_dir", "data_files"}. `loaded`: `load_long_sts`'s result, read already (`data_dir`, `limit` and
    `lengths` are then refused)."""
    if loaded is not None:
        refuse_reading_options("evaluate_sts_long", "load_long_sts(data_dir, limit, lengths)", data_dir=data_dir,
                               limit=limit, lengths=None if tuple(lengths) == tuple(LENGTHS) else lengths)
    task, sets = loaded if loaded is not None else load_long_sts(data_dir, limit, lengths)
    texts = longest_first(t for p in sets for t in p.first + p.second)
    start = time.perf_counter()
    vectors = encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress, desc="long STS texts")  # (N, E)
    seconds = time.perf_counter() - start
    return {
        "lengths": score_long_pairs(sets, vectors, {t: i for i, t in enumerate(texts)}),
        "construction": ("STS-B test sorted by gold (stable); k consecutive pairs joined by one space per side, "
                         "gold = mean of the k golds; the last P mod k pairs dropped"),
        "limit": task.limit,
        "texts": len(texts),
        "encode_seconds": seconds,
        "data_dir": str(task.data_dir),
        "data_files": list(task.files),
    }


def sts_long_table(results: dict) -> str:
    """One row per length: long pairs, mean words per text, Spearman x100 and its interval."""
    lines = ["| k (pairs joined) | long pairs | mean words per text | Spearman x100 | 95% interval |",
             "|---:|---:|---:|---:|---|"]
    for k, entry in results["lengths"].items():
        lines.append(f"| {k} | {entry['pairs']} | {entry['mean_words']:.1f} | {entry['score']:.2f} | "
                     f"[{entry['ci95'][0]:.2f}, {entry['ci95'][1]:.2f}] |")
    if results.get("limit") is not None:
        lines.append(f"\n**Limited run:** built from the first {results['limit']} STS-B test pairs only; a quick look.")
    return "\n".join(lines)


def sts_long_markdown(results: dict, stamp: dict) -> str:
    about = (f"HTP Figure 1's test: {results['construction']}. Spearman x100 of cosine vs gold per length, 95% "
             "bootstrap interval over long pairs.")
    more = f"Encoded {results['texts']} distinct texts in {results['encode_seconds']:.1f} s.\n\n"
    return markdown_report("Long-context STS", about, sts_long_table(results), stamp, more)


def plot_sts_long(curves: dict[str, dict], path: str | Path, model: str = "?", overwrite: bool = False) -> Path:
    """Score against length, one line per method (HTP Figure 1); curves: {label: results["lengths"]}."""
    from minidecoder.evaluation.report import plot_curves

    return plot_curves({label: ([int(k) for k in lengths], [entry["score"] for entry in lengths.values()])
                        for label, lengths in curves.items()}, path, "STS-B pairs joined per long pair (k)",
                       f"long-context STS on {model}", ylabel="Spearman x100", overwrite=overwrite)


# ---- the command ---------------------------------------------------------------------------------------
# what `minidecoder eval ... --help` prints
COMMAND_HELP = """`minidecoder eval sts-long`: HTP's long-context STS (HTP Figure 1) for one method.

    minidecoder eval sts-long --method mean --limit 200 --plot --output /tmp/sts-long-smoke

STS-B test pairs sorted by gold (stable); for each length k (default 1,2,4,8,16) k consecutive pairs are
joined into one long pair (first sentences joined by a space, second sentences joined, gold = mean of the
k golds); Spearman x100 of cosine vs gold per k with a 95% bootstrap interval over long pairs
(minidecoder.evaluation.sts_long). --plot also writes PREFIX.png, score against length (needs matplotlib).
A text past the model's context is an error unless --truncate N (HTP: 512); the report counts texts cut.
Resumable like `eval sts`: the same command (same --output) resumes from the kept chunks.
"""


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "HTP's long-context STS (STS-B pairs joined; Figure 1)",
                           COMMAND_HELP)
    parser.add_argument("--lengths", default=None, help="comma-separated k values (default: 1,2,4,8,16)")
    parser.add_argument("--plot", action="store_true", help="also write PREFIX.png: score against length (needs matplotlib)")
    add_family_options(parser, "sts-long",
                       "STS data folder holding STSBenchmark/ (default: $MINIDECODER_STS_DATA or ../shared/data/sts)",
                       "build from the first N STS-B test pairs only (a quick look, stamped as such)")


def parse_lengths(text: str | None) -> list[int]:
    if text is None:
        return list(LENGTHS)
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--lengths {text!r} is not a comma-separated list of integers", "e.g. --lengths 1,2,4,8,16") from None


def read(args: argparse.Namespace):
    return load_long_sts(args.data, args.limit, parse_lengths(args.lengths))  # read and built before the model loads


def texts(loaded, args: argparse.Namespace) -> list[str]:
    _, sets = loaded
    return [text for pairs in sets for text in pairs.first + pairs.second]


def evaluate(encode, loaded, args: argparse.Namespace, kept: Kept) -> dict:  # the job's table is its kept work

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
    plot_sts_long({args.method: results["lengths"]}, paths[0], args.model or "default model", args.overwrite)


FAMILY = Family("sts-long", read, texts, evaluate, sts_long_table, sts_long_markdown, ("--limit", "--lengths"), stamp,
                figures, draw)
