"""What `minidecoder eval retrieval|classification|cmteb` share: their options, the order of the checks
(everything that can fail cheaply fails before the model loads), one resumable embedding job for every
text the run needs, the stamp, and the report.

A family gives three functions: `read(args)` (its data, read and checked), `texts(loaded, args)` (every
text it will ask for) and `evaluate(encode, loaded, args)` (its results dict);
and two for the report: `table(results)` (what is printed) and `markdown(results, stamp)` (PREFIX.md).

All texts of a run are embedded in one job (`running.jobs.embed_resumably`) in `.PREFIX.json.partial/`,
so Ctrl-C or a kill keeps every finished chunk and the same command resumes from them; the family then
reads its vectors from that table, in any order, as often as it likes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minidecoder.cli.common import (add_model_options, add_output_options, build_cli_method, check_sizes,
                                    claim_cli_outputs, load_model)

# Methods that take a task's instruction as "{instruct} {text}" (spec section 11, HTP Appendix B: Vanilla
# Mean, Vanilla Last, Echo Mean, HTP); the prompt methods (PromptEOL, TP, CP, ...) keep their own prompt
# on both sides and take none unless --instruction names one. The instruction is joined to the text, as the
# spec writes it, so it is part of what mean and Echo pool and of HTP's first sentence block; HTP's reference
# code puts it in the template instead (`<s> {instruct} Text: <B-PST>... <PST> sentence 1 ...`), outside the
# blocks and the pooled rows. Doing that here needs one method per task (a template per instruction), which
# the one embedding job of a run does not allow; the difference is stated in the reports' instruction line.
INSTRUCT_METHODS = ("mean", "last", "echo", "htp", "reba")


@dataclass(frozen=True)
class Family:
    name: str  # the subcommand
    read: Callable[[argparse.Namespace], Any]
    texts: Callable[[Any, Any], list[str]]
    evaluate: Callable[[Callable, Any, Any], dict]
    table: Callable[[dict], str]
    markdown: Callable[[dict, dict], str]
    default_truncate: int | None = None


def add_benchmark_options(parser: argparse.ArgumentParser, family: str, truncate: int | None) -> None:
    parser.add_argument("--method", required=True, help="method name, e.g. mean, last, echo, prompteol, tp, htp")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option; repeat for more")
    parser.add_argument("--data", default=None, metavar="DIR",
                        help=f"data folder (default: $MINIDECODER_{family.upper()}_DATA or ../shared/data/{family})")
    parser.add_argument("--instruction", default="auto", metavar="TEXT",
                        help="the task instruction put before each query/text as '{instruct} {text}': 'auto' (default) "
                             "gives the task's HTP instruction to " + ", ".join(INSTRUCT_METHODS) + " and none to the "
                             "prompt methods; 'none' gives none; any other text is used for every task")
    parser.add_argument("--truncate", type=int, default=truncate, metavar="N",
                        help="keep the first N tokens of each text before the method's prompt "
                             + (f"(default {truncate}, as HTP did; every cut is counted in the report)" if truncate
                                else "(default: none; a text over the context is an error naming it)"))
    parser.add_argument("--batch-size", type=int, default=None,
                        help="texts per forward pass (default: each batch filled up to the device's token budget)")
    parser.add_argument("--output", default=None, metavar="PREFIX",
                        help=f"write PREFIX.json and PREFIX.md (default: ./{family}-MODEL-METHOD-DATE)")
    add_output_options(parser, "PREFIX.json / PREFIX.md")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_options(parser)


def instruction_for(args: argparse.Namespace, task_instruction: str | None) -> str | None:
    """The instruction one task's queries/texts take under --instruction (see `add_benchmark_options`)."""
    if args.instruction == "auto":
        return task_instruction if args.method in INSTRUCT_METHODS else None
    return None if args.instruction == "none" else args.instruction


def run_benchmark(args: argparse.Namespace, family: Family) -> int:
    from minidecoder.errors import InputError
    from minidecoder.evaluation.report import check_report_prefix, report_paths

    check_sizes(args)
    if args.truncate is not None and args.truncate < 1:
        raise InputError(f"--truncate {args.truncate} must be a positive number of tokens", "e.g. --truncate 512")
    prefix = Path(args.output) if args.output else default_prefix(family.name, args.model, args.method)
    check_report_prefix(prefix, args.overwrite)
    loaded = family.read(args)  # every data file read and checked before the model loads
    method = build_cli_method(args.method, args.opt)
    with claim_cli_outputs(args, list(report_paths(prefix))):  # held from before the model loads to the last write
        return _evaluate(args, family, loaded, prefix, method)


def _evaluate(args: argparse.Namespace, family: Family, loaded: Any, prefix: Path, method) -> int:
    import torch

    from minidecoder.evaluation.report import work_folder, write_or_rescue, write_report
    from minidecoder.sources.checksums import model_identity

    model = load_model(args)
    texts = sorted(set(family.texts(loaded, args)), key=len, reverse=True)  # longest first: less padding
    start = time.perf_counter()
    vectors, summary = embed_kept(model, method, texts, work_folder(prefix), args, prefix)
    seconds = time.perf_counter() - start
    row = {text: i for i, text in enumerate(texts)}

    def encode(batch: list[str]) -> torch.Tensor:  # (len(batch), E), from the job's table
        return vectors[[row[text] for text in batch]]

    results = family.evaluate(encode, loaded, args)
    reused = summary.get("chunks_reused", 0)
    results["embedding"] = {"texts": len(texts), "chunks_reused": reused,
                            # this sitting's time only: a rate over all texts would be wrong after a resume
                            "seconds": None if reused else seconds,
                            "texts_per_second": None if reused or seconds <= 0 else len(texts) / seconds,
                            "truncation": {"policy": "truncate" if args.truncate else "none (longer is an error)",
                                           "max_tokens": args.truncate,
                                           "texts_cut": summary.get("truncated_rows", 0)}}
    metadata = {
        "model": args.model if args.model is not None else "default",
        "model_source": str(getattr(model, "source", args.model)),
        "model_identity": model_identity(model),
        "dtype": args.dtype,
        "device": args.device,
        "method": method.describe(),
        "instruction": args.instruction,
        "truncate": args.truncate,
        "batch_size": args.batch_size,
        "command": shlex.join(["minidecoder", "eval", family.name, *argv_of(args)]),
    }
    table = family.table(results)
    json_path, md_path = write_or_rescue(
        lambda where: write_report(where, results, metadata, args.overwrite, markdown=family.markdown), prefix, table)
    print(table)
    print(f"\nwrote {json_path} and {md_path}")
    return 0


def embed_kept(model, method, texts: list[str], work: Path, args: argparse.Namespace, prefix: Path):
    """`running.jobs.embed_resumably` for an eval command (with its --truncate where it has one); Ctrl-C says
    which chunks are kept and the command that resumes them."""
    from minidecoder.errors import Interrupted
    from minidecoder.running.jobs import JobInterrupted, embed_resumably

    truncate = {"truncate": args.truncate} if getattr(args, "truncate", None) is not None else {}  # eval sts has none
    try:
        return embed_resumably(model, method, texts, work, batch_size=args.batch_size,
                               progress=not args.no_progress, **truncate)
    except JobInterrupted as stop:
        again = "run the same command again" + ("" if args.output else f" with --output {prefix}")
        if stop.saved == 0:
            raise Interrupted(f"interrupted before the first chunk of sentences was embedded; nothing was kept; "
                              f"{again}") from None
        raise Interrupted(f"interrupted; the embeddings of {stop.saved} of {stop.chunks} chunks of sentences are "
                          f"kept in {work}; {again} to resume from them") from None


def default_prefix(family: str, model: str | None, method: str) -> Path:
    stem = Path(model).name if model else "default-model"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(re.sub(r"[^A-Za-z0-9._-]+", "_", f"{family}-{stem}-{method}-{stamp}"))


def argv_of(args: argparse.Namespace, flags: Sequence[str] = ("model", "method", "tasks", "sets", "data", "limit",
                                                            "corpus_limit", "instruction", "truncate", "dtype",
                                                            "device", "batch_size")) -> list[str]:
    """The options as given, for the stamp (re-runnable)."""
    out = []
    for name in flags:
        value = getattr(args, name, None)
        if value is not None:
            out += ["--" + name.replace("_", "-"), str(value)]
    for pair in args.opt:
        out += ["--opt", pair]
    return out


def parse_names(text: str, known: Sequence[str], flag: str = "--tasks") -> list[str]:
    """The comma-separated names of `text`, each one of `known`, or an InputError naming the others."""
    from minidecoder.errors import InputError

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise InputError(f"{flag} {text!r} names unknown task(s) {', '.join(unknown) or '(none given)'}",
                         "choose from " + ",".join(known))
    return names


def markdown_report(family: str, about: str, table: str, stamp: dict, more: str = "") -> str:
    """PREFIX.md of a benchmark: title (family, method, model), what the numbers are, the table, more
    sections, the stamp."""
    from minidecoder.evaluation.report import stamp_table

    method = stamp.get("method", "?")
    method = method.get("method", "?") if isinstance(method, dict) else method  # Method.describe()
    title = f"{family}: {method} on {stamp.get('model', '?')}"
    return f"# {title}\n\n{about}\n\n{table}\n\n{more}## Run\n\n{stamp_table(stamp)}\n"


def limited_note(what: str) -> str:
    return f"\n**Limited run** ({what}): a quick look, not comparable to published results."
