"""`minidecoder embed`: embed every line of a file with one method and write an array.

    minidecoder embed --model smollm2-135m-instruct --method prompteol \\
        --input sentences.txt --output sentences.npy
    minidecoder embed --method mean --opt layer=12 --opt over=all --input rows.jsonl --output rows.safetensors

Input: a text file with one sentence per line (UTF-8; lines end at \\n, \\r\\n or \\r; a final line end is
not a row), or JSON Lines (`.jsonl` / `.ndjson`) with `{"text": ...}` per line, and optionally `"context": ...`: text the
model reads before the row's text but no pooling touches (an instruction; `--context` gives every row one). Output by suffix: `.npy`
(float32 (N, E), with its metadata in NAME.npy.json) or `.safetensors` (tensor `embeddings`, plus the
method, model and options as metadata). The output (and sidecar) is locked from before the model loads
until it is written, and never replaced without `--overwrite`. `--opt key=value` values are read as JSON
when they parse (`-2`, `true`, `[0, 4]`, `"text"`) and as plain strings otherwise.

Under torchrun (`torchrun --nproc_per_node 4 -m minidecoder embed ... --output out.npy`) each rank embeds a
contiguous run of the input's chunks and writes its shard, out-0000r-of-00004.npy, keeping its finished
chunks as it goes; rank 0 then writes out.npy.shards.json listing them (minidecoder.running.distributed).
After a crash or a killed rank, run the same command again: each rank resumes from what it kept.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
from pathlib import Path

from minidecoder.errors import InputError
from minidecoder.sources.registry import DEFAULT_MODEL

OUTPUT_SUFFIXES = (".npy", ".safetensors")
EMBED_FLAGS = ("model", "method", "input", "output", "dtype", "device", "batch_size", "chunk_size", "truncate",
               "context")  # the stamp's command line, in this order
# Ctrl-C before the job started (the job's own line says which chunks it kept)
INTERRUPTED = ("interrupted before the job started; chunks an earlier run finished (if any) stay in the hidden "
               ".NAME.partial folder beside the output; run the same command again to resume")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from minidecoder.running.command_line import add_model_options, add_output_options

    parser = subparsers.add_parser(
        "embed", help="embed a file of sentences (txt or jsonl) into .npy or .safetensors",
        description=__doc__, epilog=methods_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser)
    parser.add_argument("--method", required=True, help="method name (listed below)")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a method option (listed below); repeat for more")
    parser.add_argument("--input", required=True, metavar="FILE", help="one sentence per line, or .jsonl with {\"text\": ...}")
    parser.add_argument("--output", required=True, metavar="FILE", help=".npy or .safetensors")
    parser.add_argument("--context", default=None, metavar="TEXT",
                        help="read by the model before every text, never pooled (an instruction); a .jsonl row's "
                             "own \"context\" field does the same for that row")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sentences per forward pass (default: each batch filled up to the device's token budget)")
    parser.add_argument("--chunk-size", type=int, default=None, metavar="ROWS",
                        help="rows per kept chunk, the unit a rerun resumes from (default 1024)")
    parser.add_argument("--truncate", type=int, default=None, metavar="N",
                        help="keep the first N tokens of each text (default: a text longer than the model's context is an error)")
    add_output_options(parser, "the output file (and its .npy.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(run=run)


def methods_help() -> str:
    """Every registered method, its summary and its options with help and default (from the dataclasses)."""
    import minidecoder.methods

    lines = ["methods (--method NAME) and their options (--opt KEY=VALUE):"]
    for name in sorted(minidecoder.methods.METHODS):
        cls = minidecoder.methods.METHODS[name]
        lines.append(f"\n  {name}: {cls.summary}")
        for field in dataclasses.fields(cls):
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            lines.append(f"      {field.name} = {json.dumps(default)}")
            lines.append(f"          {field.metadata.get('help', '')}")
    return "\n".join(lines)


# ---- output checks (the writing itself is minidecoder.running.jobs) -------------------------------------
def check_output(path: Path, overwrite: bool) -> None:
    from minidecoder.output_files import check_writable_folder

    if path.suffix not in OUTPUT_SUFFIXES:  # the writers choose the format by this suffix, in lower case
        raise InputError(f"--output {path} has suffix {path.suffix or '(none)'!r}; the format is chosen by suffix",
                         "name the output FILE.npy or FILE.safetensors (in lower case)")
    if path.exists() and path.is_dir():
        raise InputError(f"--output {path} is a directory", "give a file name ending in .npy or .safetensors")
    sidecar = path.with_name(path.name + ".json")
    for taken in (path, sidecar) if path.suffix == ".npy" else (path,):
        if taken.exists() and not overwrite:
            raise InputError(f"--output {path}: {taken} already exists",
                             "pass --overwrite to replace it, or choose another name")
    check_writable_folder(path.parent, "the --output folder")


# ---- the command -----------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    from minidecoder.running.command_line import build_cli_method, check_sizes, claim_cli_outputs

    # everything that can fail cheaply fails before the model loads
    from minidecoder.output_files import check_not_inputs
    from minidecoder.running.jobs import job_outputs, scan_input
    from minidecoder.running.texts import check_context

    check_sizes(args)
    if args.chunk_size is not None and args.chunk_size < 1:
        raise InputError(f"--chunk-size {args.chunk_size} must be at least 1", "e.g. --chunk-size 1024")
    output = Path(args.output)
    from minidecoder.running.distributed import launched_by_torchrun
    if launched_by_torchrun():
        return _embed_sharded(args, output)
    check_not_inputs(job_outputs(output), [Path(args.input)])  # before "exists, pass --overwrite"
    check_output(output, args.overwrite)
    method = build_cli_method(args.method, args.opt)
    if args.context is not None:
        check_context(args.context, "every text (--context)")
        if not method.takes_context:
            raise InputError(f"--context: method {method.name!r} takes no context", "leave --context out")
    scan_input(Path(args.input), args.context)  # every line checked, streamed, before the model loads
    with claim_cli_outputs(args, job_outputs(output), [Path(args.input)]):  # another run on them: named now
        return _embed(args, method, output)


def _embed(args: argparse.Namespace, method, output: Path) -> int:
    from minidecoder.running.command_line import load_model
    from minidecoder.running.jobs import run_embedding_job

    model = load_model(args)
    # Streamed in chunks beside the output; an interrupted run resumes when the same command is rerun.
    summary = run_embedding_job(
        model, method, args.input, output, overwrite=args.overwrite, batch_size=args.batch_size,
        progress=not args.no_progress, truncate=args.truncate, wait=args.wait, context=args.context,
        **_chunking(args), extra_metadata=_command_metadata(args))
    print(f"wrote {summary['rows']} x {summary['dim']} float32 embeddings ({method.name}) to {output}"
          + (f" (resumed: {summary['chunks_reused']} chunks reused)" if summary["chunks_reused"] else ""))
    return 0


def _embed_sharded(args: argparse.Namespace, output: Path) -> int:
    """Under torchrun: this rank's shard of the job, its chunks kept, and (rank 0) the shards manifest
    (running.distributed.embed_sharded). Rerun the same command after a crash: every rank resumes."""
    from minidecoder.running.command_line import build_cli_method, load_model
    from minidecoder.output_files import check_not_inputs, output_lock
    from minidecoder.running import distributed
    from minidecoder.running.jobs import job_outputs, scan_input

    if args.context is not None:  # the shards' manifests do not record one yet: refused, never dropped
        raise InputError("--context is not taken under torchrun yet",
                         "give each row its context in a .jsonl input's \"context\" field, which every rank reads")
    distributed.check_sharded_output(output, args.overwrite)
    method = build_cli_method(args.method, args.opt)
    scan_input(Path(args.input))
    metadata = _command_metadata(args)  # the command as given (before "cuda" becomes this rank's own GPU)
    args.device = distributed.join_process_group(args.device)
    rank, world = distributed.dist.get_rank(), distributed.dist.get_world_size()
    shard_files = job_outputs(distributed.shard_path(output, rank, world))
    check_not_inputs([*shard_files, distributed.shards_manifest_path(output)], [Path(args.input)])
    try:
        with contextlib.ExitStack() as locks:  # another run on this rank's shard is named before the model loads
            for path in shard_files:
                locks.enter_context(output_lock(path, wait=args.wait))
            model = load_model(args)
            summary = distributed.embed_sharded(
                model, method, args.input, output, overwrite=args.overwrite, batch_size=args.batch_size,
                progress=not args.no_progress, truncate=args.truncate, wait=args.wait,
                extra_metadata=metadata, **_chunking(args))
    except BaseException:
        distributed.abandon_process_group()
        raise
    done = ("reused (finished earlier)" if summary["shard_reused"] else
            f"{summary['chunks_computed']} chunks computed, {summary['chunks_reused']} reused")
    print(f"rank {rank} of {world}: rows {summary['rows_range'][0]}..{summary['rows_range'][1]} of {args.input} "
          f"in {summary['shard']}: {done}")
    if rank == 0:
        print(f"wrote {summary['manifest']}, listing the {world} shards ({method.name}); "
              "read them with minidecoder.running.distributed.load_sharded")
    distributed.leave_process_group()
    return 0


def _chunking(args: argparse.Namespace) -> dict:
    return {} if args.chunk_size is None else {"chunk_size": args.chunk_size}


def _command_metadata(args: argparse.Namespace) -> dict:
    from minidecoder.running.command_line import argv_of

    return {"model_name": args.model if args.model is not None else DEFAULT_MODEL,  # what load(None) loads
            "command": shlex.join(["minidecoder", "embed", *argv_of(args, EMBED_FLAGS)])}
