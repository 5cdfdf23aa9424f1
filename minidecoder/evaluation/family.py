"""The one runner of `minidecoder eval transfer|sts-long|retrieval|classification|cmteb`: their shared options,
the order of the checks (everything that can fail cheaply fails before the model loads), the owned kept-work
folder, one resumable embedding job for every text of a run, the stamp and the report.

A family's module gives a `Family`: `read(args)` (its data, read and checked), `texts(loaded, args)`
(every text it may ask for), `evaluate(encode, loaded, args, kept)` (its results dict; `kept` a `Kept` folder
that survives an interruption, for work slower than the embeddings, e.g. transfer's probes), `table(results)`
(what is printed), `markdown(results, stamp)` (PREFIX.md), and `input_flags`, the flags that choose its texts.

Kept work lives in `.PREFIX.json.partial/`, owned through `running.jobs.owned_work_folder` by
"minidecoder eval <family>" with the values of `input_flags`: an interrupted run of another command (eval sts,
sweep, another family) on the same --output is refused before the model loads, never taken over or removed,
and the same command with other input flags is refused by flag. Inside it, every text of the run is embedded
in one job (`running.jobs.embed_resumably`, in `job/`), started on the first `encode` call, so Ctrl-C keeps
every finished chunk and the same command resumes from them; the family reads its vectors from that table, in
any order, as often as it likes. The finished table stays in the folder until the report is written, so a
Ctrl-C while the family scores keeps every embedding too.

The data folders: reading the benchmark folders of `../shared/data` (BEIR, MTEB, C-MTEB): the folder, each
file's lines, and errors that name the file, the line and the way out.

Every reader of the retrieval, classification and C-MTEB families goes through these three calls, so a
missing file, a line that does not parse or text that is not UTF-8 reads the same everywhere:

    folder = resolve_data_folder("--data", "beir", "the folder holding scifact/ and nfcorpus/")
    for number, line in numbered_lines(folder / "scifact" / "queries.jsonl"): ...
    record = json_line(path, number, line)

and every reader of an eval family (these, SentEval's transfer and STS files) ends a file with the same two:
`require_rows` (a file with no rows, empty or a header alone, is an error naming it, never an empty array
handed to scikit-learn) and `limit_that_cut` (the one stamp rule: a run is limited only where its --limit
left items of the data unscored).

The encoding: what every benchmark family's texts go through: each distinct text once, longest first,
encoded in chunks that must come back as finite (N, D) tensors.
"""
from __future__ import annotations

import argparse
import functools
import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from minidecoder.running.command_line import (add_model_options, add_output_options, argv_of, build_cli_method,
                                             check_sizes, claim_cli_outputs, default_prefix, first_interrupted,
                                             load_model, model_stamp, parse_options, resume_settings)
from minidecoder.running.embedding import check_texts_fit
from minidecoder.errors import (ArgumentTypeError, InputError, Interrupted, NumericsError, OutputError,
                                describe_unusable_file, is_whole_number)


# Methods that take a task's instruction (docs/spec.md section 11, HTP Appendix B: Vanilla Mean, Vanilla Last, Echo
# Mean, HTP); the prompt methods (PromptEOL, TP, CP, ...) keep their own prompt on both sides and take none
# unless --instruction names one. By default the instruction is each text's unpooled context, as HTP's code
# puts it in the template (`<s> {instruct} Text: <B-PST>... <PST> sentence 1 ...`, `embed_mask = 0`): read,
# never pooled, never a sentence block; the one embedding job carries each text's own. --instruction-placement
# pooled joins it to the text instead ("{instruct} {text}", pooled with it): the ablation.
INSTRUCT_METHODS = ("mean", "last", "echo", "htp", "reba")


@dataclass(frozen=True)
class Kept:
    """The kept-work folder a family may keep slow results in, and what made the embeddings (model, dtype,
    method and options, truncation): work kept under another identity is never reused. A family that keeps the
    embeddings itself (transfer's KeptWork, with their seconds) calls `embeddings_kept` once its copy is whole:
    the embedding job's table goes then, not before, so a copy that fails to be written loses no embedding."""

    folder: Path
    identity: str
    embeddings_kept: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Family:
    name: str  # the subcommand
    read: Callable[[argparse.Namespace], Any]
    texts: Callable[[Any, argparse.Namespace], list[str]]
    evaluate: Callable[[Callable, Any, argparse.Namespace, Kept], dict]
    table: Callable[[dict], str]
    markdown: Callable[[dict, dict], str]
    input_flags: tuple[str, ...]  # the flags that choose the texts, recorded with the kept work
    stamp: Callable[[Any, argparse.Namespace], dict] = lambda loaded, args: {}  # the family's part of the stamp
    figures: Callable[[Path, argparse.Namespace], list[Path]] = lambda prefix, args: []  # written with the report
    draw: Callable[[dict, list[Path], argparse.Namespace], None] | None = None
    # the texts a `--query-opt` method embeds (retrieval's queries, HTP's code's query templates); the rest
    # take the `--opt` method alone
    queries: Callable[[Any, argparse.Namespace], list] | None = None
    # how to run a method that pools over the text on data that holds the empty text (SentEval's blank lines);
    # None: this family's data never holds one
    empty_text_fix: str | None = None

    @property
    def owner(self) -> str:
        return f"minidecoder eval {self.name}"

    def settings(self, args: argparse.Namespace) -> dict:
        """What the kept work is owned with: `input_flags` and the flags that make the vectors."""
        return resume_settings(args, self.input_flags)


def family_parser(benchmarks: argparse._SubParsersAction, family: Family, help: str,
                  description: str) -> argparse.ArgumentParser:
    """`minidecoder eval <family.name>`, run by `run_family`; the family module adds its own options to what
    this returns, beside their help, then the shared ones with `add_family_options`."""
    parser = benchmarks.add_parser(family.name, help=help, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(run=functools.partial(run_family, family=family))
    return parser


def add_family_options(parser: argparse.ArgumentParser, family: str, data_help: str, limit_help: str,
                       truncate: int | None = None, instruction: bool = False) -> None:
    """The options every family takes; `truncate` its default --truncate, `instruction` whether it takes one."""
    parser.add_argument("--method", required=True, help="method name, e.g. mean, last, echo, prompteol, tp, htp")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option; repeat for more")
    parser.add_argument("--data", default=None, metavar="DIR", help=data_help)
    parser.add_argument("--limit", type=int, default=None, metavar="N", help=limit_help)
    if instruction:
        parser.add_argument("--instruction", default="auto", metavar="TEXT",
                            help="the task instruction put before each query/text as '{instruct} {text}': 'auto' "
                                 "(default) gives the task's HTP instruction to " + ", ".join(INSTRUCT_METHODS) +
                                 " and tp with pooling=mean (HTP's TP w. Mean), none to the prompt methods; 'none' "
                                 "gives none; any other text is used for "
                                 "every task")
        parser.add_argument("--instruction-placement", default="context", choices=["context", "pooled"],
                            help="context (default): the instruction is read by the model before the text and "
                                 "never pooled (HTP's code); pooled: joined to the text as '{instruct} {text}' "
                                 "and pooled with it (an ablation)")
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
    """The instruction one task's queries/texts take under --instruction (see `add_family_options`)."""
    if args.instruction == "auto":  # HTP section 5: every method but TP w. PromptEOL; TP w. Mean is TP pooled by mean
        mean_tp = args.method == "tp" and parse_options(args.opt).get("pooling") == "mean"
        takes = args.method in INSTRUCT_METHODS or mean_tp
        return task_instruction if takes else None
    return None if args.instruction == "none" else args.instruction


def instructions_line(results: dict) -> str:
    """The reports' words for each task's instruction and where it went (unpooled context, or pooled)."""
    placed = {"context": "read as unpooled context", "pooled": 'joined as "{instruct} {text}" and pooled'}
    return "Instructions: " + "; ".join(
        f"{name}: {r['instruction']!r}" + (f" ({placed[r['instruction_placement']]})" if r.get("instruction") else "")
        for name, r in results.items())


def parse_names(text: str | None, known: Sequence[str], flag: str = "--tasks",
                default: Sequence[str] | None = None) -> list[str]:
    """The comma-separated names of `text`, each one of `known` (None: `default`, else all of `known`), or an
    InputError naming the others."""
    if text is None:
        return list(default if default is not None else known)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise InputError(f"{flag} {text!r} names unknown task(s) {', '.join(unknown) or '(none given)'}",
                         "choose from " + ",".join(known))
    refuse_repeats(names, flag)
    return names


def refuse_repeats(names: list[str], flag: str) -> None:
    """A name given twice would be scored once, in one column, with its data files listed twice."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(f"{flag} names {', '.join(twice)} twice", "list each name once")


def run_family(args: argparse.Namespace, family: Family) -> int:
    from minidecoder.evaluation.report import check_report_prefix, report_paths, work_folder
    from minidecoder.running.jobs import check_work_owner

    check_sizes(args)
    if args.truncate is not None and args.truncate < 1:
        raise InputError(f"--truncate {args.truncate} must be a positive number of tokens", "e.g. --truncate 512")
    if getattr(args, "instruction", None) is not None and not args.instruction.strip():  # not named by a text row
        raise InputError(f"--instruction {args.instruction!r} is empty or whitespace-only",
                         "give the instruction's text, or --instruction none for no instruction")
    if getattr(args, "instruction_placement", None) == "pooled" and instruction_for(args, "an instruction") is None:
        given = "--instruction none" if args.instruction == "none" else \
            f"--instruction auto gives method {args.method!r} none"
        raise InputError(f"--instruction-placement pooled places the task's instruction, and this run gives none "
                         f"({given}): the flag would change nothing", "leave --instruction-placement out, or give "
                         "the instruction with --instruction TEXT")
    prefix = Path(args.output) if args.output else default_prefix(family.name, args.model, args.method)
    check_report_prefix(prefix, args.overwrite)
    check_work_owner(work_folder(prefix), family.owner, family.settings(args))  # never taken over, named by flag
    loaded = family.read(args)  # every data file read and checked before the model loads
    figures = family.figures(prefix, args)
    method = build_cli_method(args.method, args.opt)
    sides = [("job", method, None)]
    if getattr(args, "query_opt", None):  # the queries' own options over --opt's (HTP's code's query templates)
        replaced = {pair.split("=", 1)[0] for pair in args.query_opt}
        kept = [pair for pair in args.opt if pair.split("=", 1)[0] not in replaced]
        sides.append(("queries", build_cli_method(args.method, kept + args.query_opt), set(family.queries(loaded, args))))
    pools = [side[1].name for side in sides if not side[1].reads_empty_text()]
    empty = sum(1 for text in family.texts(loaded, args) if text == "") if family.empty_text_fix and pools else 0
    if empty:  # found before the model loads, not by the embedding job
        raise InputError(f"the {family.name} data holds {empty} empty text(s) and method {pools[0]!r} pools over a "
                         "text's own tokens: an empty text has nothing to pool", family.empty_text_fix)
    with claim_cli_outputs(args, [*report_paths(prefix), *figures]):  # held from before the model loads to the last write
        return _evaluate(args, family, loaded, prefix, sides, figures)


def _evaluate(args: argparse.Namespace, family: Family, loaded: Any, prefix: Path, sides: list, figures: list[Path]
              ) -> int:
    """`sides`: (kept-work name, method, the texts it embeds or None for every other text), the `--opt` method
    first; a second side is the `--query-opt` method of the queries."""
    import torch

    from minidecoder.evaluation.report import work_folder, write_or_rescue, write_report
    from minidecoder.output_files import whole_or_absent
    from minidecoder.running.jobs import owned_work_folder
    from minidecoder.sources.checksums import model_identity

    model = load_model(args)
    stamp = {**model_stamp(args, model, sides[0][1]), "model_identity": model_identity(model),
             **({"query_method": sides[1][1].describe()} if len(sides) > 1 else {})}
    command = shlex.join(["minidecoder", "eval", family.name, *argv_of(args)])

    texts = longest_first(family.texts(loaded, args))  # the same order in every process: resumable
    chosen = set().union(*(side[2] for side in sides[1:]))
    jobs = [(name, method, [text for text in texts if (text in wanted if wanted is not None else text not in chosen)])
            for name, method, wanted in sides]
    for _, method, side in jobs:
        check_texts_fit(model, method, side, lambda row: f"a text of the {family.name} data", args.truncate)
    row = {text: i for i, text in enumerate(text for *_, side in jobs for text in side)}
    job: dict = {}

    def encode(batch: list[str]) -> torch.Tensor:  # (len(batch), E), from the jobs' table
        if not job:  # the first call embeds every text of the run, each side with its method
            start = time.perf_counter()
            parts = []
            for name, method, side in (entry for entry in jobs if entry[2]):  # a later side's line names the earlier's
                parts.append(embed_kept(model, method, side, work / name, args, prefix, others_kept=bool(parts)))
            job["vectors"] = torch.cat([vectors for vectors, _ in parts])
            job["summary"] = {key: sum(summary.get(key, 0) or 0 for _, summary in parts)
                              for key in ("chunks_reused", "truncated_rows")}
            job["seconds"] = time.perf_counter() - start
        return job["vectors"][[row[text] for text in batch]]

    def drop_job_tables() -> None:  # the family has kept its own copy of the embeddings
        for name, *_ in jobs:
            shutil.rmtree(work / name, ignore_errors=True)

    work = work_folder(prefix)
    with owned_work_folder(work, family.owner, f"{command} --output {shlex.quote(str(prefix))}",
                           family.settings(args)):
        identity = json.dumps({**stamp, "truncate": args.truncate}, sort_keys=True, default=str)
        try:  # scoring and the report's write: a Ctrl-C in either keeps the embeddings
            results = family.evaluate(encode, loaded, args, Kept(work, identity, drop_job_tables))
            results["embedding"] = _embedding_summary(job, len(texts), args.truncate)
            metadata = {**stamp, "truncate": args.truncate, "truncation": results["embedding"]["truncation"],
                        **({"instruction": args.instruction, "instruction_placement": args.instruction_placement}
                           if hasattr(args, "instruction") else {}),
                        **family.stamp(loaded, args), "command": command}
            table = family.table(results)
            with whole_or_absent(args.overwrite) as written:  # a failed figure takes the report back
                written += write_or_rescue(
                    lambda where: write_report(where, results, metadata, args.overwrite, markdown=family.markdown),
                    prefix, table)
                if family.draw is not None and figures:
                    family.draw(results, figures, args)
            json_path, md_path = written
        except KeyboardInterrupt as stop:
            raise past_the_job(stop, work, args, prefix, embedded=bool(job))
        except OutputError as error:
            raise failed_past_the_job(error, work, args, prefix, embedded=bool(job)) from None
        shutil.rmtree(work, ignore_errors=True)  # the report and its figures hold it all now
    print(table)
    print(f"\nwrote {json_path} and {md_path}" + "".join(f" and {path}" for path in figures))
    return 0


def run_again(args: argparse.Namespace, prefix: Path) -> str:
    """How to resume: the same command, with the --output it wrote to when it chose the prefix itself."""
    return "run the same command again" + ("" if args.output else f" with --output {prefix}")


def past_the_job(stop: KeyboardInterrupt, work: Path, args: argparse.Namespace, prefix: Path,
                 embedded: bool) -> KeyboardInterrupt:
    """What a Ctrl-C past the embedding job's own line raises (raised inside the `except`, so a SIGTERM stays
    in its chain: status 143): that line as it is, if it is in the chain (a second Ctrl-C on its way up keeps
    it); else an `Interrupted` line of what `work` holds, counted on disk."""
    if first_interrupted(stop) is not None:
        return stop
    return Interrupted(_scoring_interrupted(work, args, prefix) if embedded else
                       _embedding_interrupted(work, args, prefix))


def failed_past_the_job(error: OutputError, work: Path, args: argparse.Namespace, prefix: Path,
                        embedded: bool) -> OutputError:
    """A write that failed while the command scored or wrote its report (a kept task, the report): `error` with
    what `work` still keeps, counted on disk, and how to resume from it. One that failed inside the embedding
    job already says which chunks it kept: it only learns how to resume (`resumable`)."""
    if not embedded:
        return resumable(error, args, prefix)
    kept = _kept_past_the_job(work)
    if kept is None:
        return resumable(OutputError(f"{error.problem}; nothing was kept", error.fix), args, prefix)
    return resumable(OutputError(f"{error.problem}; {kept}",
                                 f"{error.fix}: it resumes from them (delete {work} to discard them)"), args, prefix)


def resumable(error: OutputError, args: argparse.Namespace, prefix: Path) -> OutputError:
    """`error`, whose way out is to run the same command again, saying how (`run_again`): a command that chose
    its dated --output itself resumes only under that --output."""
    if args.output or not error.fix:
        return error
    return OutputError(error.problem, error.fix.replace("run the same command again", run_again(args, prefix)))


def _kept_past_the_job(work: Path) -> str | None:
    """What `work` keeps once the embeddings are made (the embeddings; transfer: and each finished task's probe),
    or None where it keeps nothing (the folder was removed meanwhile)."""
    from minidecoder.running.jobs import holds_kept_work

    if not (work.is_dir() and holds_kept_work(work)):
        return None
    tasks = sorted(path.name.split(".")[0].removeprefix("task-") for path in work.glob("task-*.kept.json"))
    finished = f" and the finished tasks ({', '.join(tasks)})" if tasks else ""
    return f"the embeddings{finished} are kept in {work}"


def _scoring_interrupted(work: Path, args: argparse.Namespace, prefix: Path) -> str:
    """The line for Ctrl-C after the embeddings: what is kept or, where the folder was removed meanwhile, that
    nothing is, and how to go on."""
    again = run_again(args, prefix)
    kept = _kept_past_the_job(work)
    if kept:
        return f"interrupted while scoring; {kept}; {again} to resume from them"
    return f"interrupted while scoring; nothing was kept, so {again} (it embeds the texts again)"


def _embedding_interrupted(work: Path, args: argparse.Namespace, prefix: Path) -> str:
    """The line for a Ctrl-C inside the embedding job that its own line did not reach (a second Ctrl-C landed
    while the job was saying what it kept): the chunks kept, and the tables of the jobs that finished (with
    --query-opt, a run has two), counted on disk."""
    from minidecoder.running.jobs import FINISHED_TABLE

    again = run_again(args, prefix)
    chunks = len(list(work.rglob("chunk-*.npy"))) if work.is_dir() else 0
    finished = " and the finished embeddings" if work.is_dir() and any(work.rglob(FINISHED_TABLE)) else ""
    if chunks:
        return (f"interrupted while embedding; {chunks} chunk{'s' if chunks > 1 else ''} of sentences{finished} "
                f"{'are' if chunks > 1 or finished else 'is'} kept in {work}; {again} to resume from them")
    if finished:
        return f"interrupted while embedding; the finished embeddings are kept in {work}; {again} to resume from them"
    return f"interrupted while embedding; nothing was kept; {again}"


def _embedding_summary(job: dict, texts: int, truncate: int | None) -> dict:
    """results["embedding"]: the job's size, its time in this sitting and the texts it cut (nothing silently)."""
    summary = job.get("summary", {})
    reused = summary.get("chunks_reused", 0)
    seconds = job.get("seconds")
    return {"texts": texts, "embedded_now": bool(job), "chunks_reused": reused,
            # this sitting's time only: a rate over all texts would be wrong after a resume
            "seconds": None if reused or seconds is None else seconds,
            "texts_per_second": None if reused or not seconds else texts / seconds,
            "truncation": {"truncate": truncate, "max_tokens": truncate,
                           "texts_cut": int(summary.get("truncated_rows", 0) or 0),
                           "policy": "a text past the model's context is an error" if truncate is None
                           else f"the first {truncate} tokens of a longer text are kept"}}


def embed_kept(model, method, texts: list[str], work: Path, args: argparse.Namespace, prefix: Path,
               others_kept: bool = False):
    """`running.jobs.embed_resumably` for an eval command (with its --truncate where it has one), its finished
    table kept in `work` until the report is written (or the family has kept a copy: `Kept.embeddings_kept`);
    Ctrl-C says which chunks are kept (and, `others_kept`, that an earlier job's finished table is kept beside
    them: --query-opt's queries) and the command that resumes them."""
    from minidecoder.running.jobs import JobInterrupted, embed_resumably

    truncate = {"truncate": args.truncate} if getattr(args, "truncate", None) is not None else {}  # eval sts has none
    try:  # kept: Ctrl-C while the command scores loses no embedding; it removes `work` once its report is written
        return embed_resumably(model, method, texts, work, batch_size=args.batch_size,
                               progress=not args.no_progress, keep=True, **truncate)
    except JobInterrupted as stop:
        again = run_again(args, prefix)
        beside = f"the other texts' finished embeddings are kept in {work.parent}" if others_kept else ""
        if stop.saved == 0:
            raise Interrupted("interrupted before the first chunk of sentences was embedded; "
                              + (f"{beside}; {again} to resume from them" if beside else f"nothing was kept; {again}")
                              ) from None
        raise Interrupted(f"interrupted; the embeddings of {stop.saved} of {stop.chunks} chunks of sentences are "
                          f"kept in {work}" + (f", and {beside}" if beside else "") + f"; {again} to resume from them"
                          ) from None


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


def resolve_data_folder(data_dir: str | Path | None, folder: str, holds: str, label: str | None = None) -> Path:
    """`data_dir` if given, else `$MINIDECODER_<FOLDER>_DATA` or ../shared/data/<folder> (`sources.paths.shared_data_dir`);
    it must be a folder. `label` names it in an error (default: `folder`)."""
    from minidecoder.sources.paths import shared_data_dir

    if data_dir is not None:
        path: Path | None = Path(data_dir).expanduser()
    else:
        path = shared_data_dir(folder, f"MINIDECODER_{folder.upper()}_DATA")
    if path is None or not path.is_dir():
        why = "(none found)" if path is None else f"{path} {describe_unusable_file(path, 'folder')}"
        if path is not None and path.is_file():
            why = f"{path} is a file, not a folder"
        raise InputError(f"{label or folder} data folder {why}",
                         f"pass --data DIR (or set MINIDECODER_{folder.upper()}_DATA) to {holds}")
    return path


def require_file(path: Path, what: str) -> Path:
    """`path` if it is a readable file, else an InputError naming it and what it should hold."""
    if not path.is_file():
        raise InputError(f"{what} {path} {describe_unusable_file(path)}",
                         "point --data at a complete copy of the data (the folder's README lists its files)")
    return path


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its end) of a UTF-8 text file; a UTF-8 byte order mark is dropped.
    Line ends are \\n or \\r\\n (SciFact's qrels use CRLF)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise InputError(f"{path} line {line} is not valid UTF-8", "re-encode the file as UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    for number, line in enumerate(text.split("\n"), start=1):
        line = line[:-1] if line.endswith("\r") else line
        if line.strip():
            yield number, line


def json_line(path: Path, number: int, line: str) -> dict:
    """One JSON Lines record (an object), or an InputError naming the file and line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{path} line {number} is not JSON ({error.msg} at column {error.colno})",
                         "fix or remove that line (one JSON object a line)") from None
    if not isinstance(record, dict):
        raise InputError(f"{path} line {number} is not a JSON object", "write one JSON object a line")
    return record


def field(path: Path, number: int, record: dict, key: str) -> str:
    """record[key] as a string (a number is taken as its text: BEIR ids are sometimes written as numbers)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{path} line {number} has no string {key!r} field (got {value!r})",
                         f"give every line a {key!r} string")
    return str(value)


def require_rows(path: Path, rows: int, what: str = "rows", why: str = "it is empty or a header alone") -> int:
    """`rows` if the file gave any, else an InputError naming the file, what it lacks and `why`."""
    if rows == 0:
        raise InputError(f"{path} holds no {what} ({why})",
                         "restore the file, or point --data at a complete copy of the data (the folder's README "
                         "lists its files)")
    return rows


def refuse_reading_options(function: str, reader: str, **given: Any) -> None:
    """Options that say how to read the data, given beside data the caller has read already, would be ignored:
    refused, naming them (None: not given)."""
    named = sorted(key for key, value in given.items() if value is not None)
    if named:
        raise InputError(f"{function} was given data read already and {', '.join(named)}, which only say how "
                         "to read it: they would be ignored",
                         f"pass them to {reader}, or pass the names and let {function} read the data")


def checked_count(value: Any, name: str, unit: str, example: int) -> int:
    """A positive whole number given from Python (a NumPy integer is one): `range(0, N, 0)` or a float would
    otherwise fail deep inside, and a negative step would encode nothing."""
    if not is_whole_number(value, 1):
        raise ArgumentTypeError(f"{name}={value!r} must be a positive whole number of {unit}",
                                f"e.g. {name}={example} (the default)")
    return int(value)


def checked_limit(limit: Any, name: str = "limit", minimum: int = 1) -> int | None:
    """A limit given from Python, checked as the CLI checks its flag: None, or a whole number of at least
    `minimum` (a NumPy integer is one, and is stamped as a Python int). A float, a text or a negative number
    would slice the data silently wrong (`rows[:-1]` drops the last row)."""
    flag = "--" + name.replace("_", "-")
    if limit is None:
        return None
    if not is_whole_number(limit):
        raise InputError(f"{name}={limit!r} is not a whole number", f"e.g. {name}=100 ({flag} 100), or None for all")
    if limit < minimum:
        raise InputError(f"{name}={limit} ({flag} {limit}) must be at least {minimum}",
                         f"e.g. {name}=100 ({flag} 100), or None for all")
    return int(limit)


def limit_that_cut(limit: int | None, sizes: Iterable[int]) -> int | None:
    """The limit a run is stamped with: `limit` where it left some of the data unscored (a file, set or split of
    `sizes` holds more items than it), else None. A --limit at least the size of everything scores every item:
    a full run, comparable to published results, and the claims tools count it."""
    return limit if limit is not None and any(size > limit for size in sizes) else None


def run_limit(limits: Iterable[int | None]) -> int | None:
    """The stamp's limit of a run over several sets: the limit where any set was cut, else None."""
    return next((limit for limit in limits if limit is not None), None)


Encoder = Callable[[list[str]], torch.Tensor]  # sentences -> (N, D)


def longest_first(texts: Iterable[str]) -> list[str]:
    """Every distinct text once, longest first (less padding per batch; a batch that does not fit in memory
    fails at once instead of hours in); ties keep first-appearance order. The order must be the same in
    every process: a resumed job refuses texts in another order, and a set's order follows the per-process
    string hash (PYTHONHASHSEED), so with a set an interrupted run could never resume. A (context, text) pair
    counts the characters of both."""
    return sorted(dict.fromkeys(texts), key=lambda t: len(t[0]) + len(t[1]) + 1 if isinstance(t, tuple) else len(t),
                  reverse=True)


def encode_sentences(
    encode: Encoder, sentences: Sequence[str], chunk_size: int = 256, progress: bool = True,
    desc: str = "STS sentences",
) -> torch.Tensor:
    """Call `encode` on consecutive chunks of `sentences`; returns (N, D) on the CPU, row i = sentences[i].

    Each chunk must come back as a finite (len(chunk), D) tensor. The progress bar (stderr) counts
    sentences, so its rate is sentences per second.
    """
    chunk_size = checked_count(chunk_size, "chunk_size", "sentences", 256)
    parts: list[torch.Tensor] = []
    with tqdm(total=len(sentences), unit="sent", desc=desc, file=sys.stderr, disable=not progress,
              dynamic_ncols=True) as bar:
        for start in range(0, len(sentences), chunk_size):
            chunk = list(sentences[start:start + chunk_size])
            vectors = encode(chunk)
            if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or vectors.shape[0] != len(chunk):
                shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
                raise RuntimeError(f"encode returned {shape} for {len(chunk)} sentences; expected a ({len(chunk)}, D) tensor")
            vectors = vectors.detach().cpu()
            bad = ~torch.isfinite(vectors).all(dim=1)
            if bad.any():
                first = chunk[int(bad.nonzero()[0])]
                raise NumericsError(
                    f"{int(bad.sum())} of {len(chunk)} STS embeddings contain NaN or inf (first: {first!r})",
                    "run in float32 (--dtype float32); half precision can overflow in long prompts",
                )
            parts.append(vectors)
            bar.update(len(chunk))
    if not parts:
        return torch.empty(0, 0)
    if len({part.shape[1] for part in parts}) != 1:
        raise RuntimeError(f"encode returned different widths across chunks: {sorted({p.shape[1] for p in parts})}")
    return torch.cat(parts)  # (N, D)
