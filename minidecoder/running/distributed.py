"""Data-parallel embedding across processes with `torch.distributed`, as a resumable job (and, in memory,
`tools/embed_distributed.py`, which gathers every rank's shard of a text list on rank 0).

    embed_sharded        input file ─ rank r takes a contiguous run of the job's chunks ─ run_embedding_job ─┐
                         (its own kept chunks: a killed rank resumes from them)                           │
                         out-0000r-of-0000W.npy per rank, and out.npy.shards.json (rank 0) naming them ──┘

Each rank holds a whole model and embeds its own shard with the ordinary driver (length-sorted batches,
batches filled to the device's token budget unless a batch size is given, inference_mode). Backend: gloo on
CPU, nccl on GPU (`default_backend`).

`embed_sharded` (what `minidecoder embed` runs under torchrun) is a corpus-scale job:
the input's chunks (running.jobs, `chunk_size` rows each) are split into contiguous runs, one a rank; each
rank runs the ordinary job over its rows, keeping every finished chunk in `.out-0000r-of-0000W.npy.partial/`
and writing its shard `out-0000r-of-0000W.npy` (with the job's metadata) at the end; rank 0 then writes
`out.npy.shards.json`, which lists the shards and their rows (`load_sharded` reads them back as one array).
Run the same command again after a crash or a kill: a finished shard is reused, an unfinished one resumes
from its chunks. Chunks are the single-process job's own (the same rows, the same batches), so the vectors
are those of one process with as many threads (tests/running/test_distributed.py: bit for bit).

Launch with torchrun, e.g. `torchrun --nproc_per_node 2 -m minidecoder embed --method prompteol --input
texts.txt --output out.npy` or `tools/embed_distributed.py`. On one CPU machine, give each process its
share of the cores (`torch.set_num_threads(cores // world)`): two processes fighting over every core are
slower than one.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from minidecoder.errors import InputError, MinidecoderError, OutputError
from minidecoder.output_files import check_free, write_failure, write_whole
from minidecoder.running.jobs import job_manifest, load_metadata, run_embedding_job, scan_input


def default_backend(device: torch.device | str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous shard; shard sizes differ by at most one."""
    return rank * n // world, (rank + 1) * n // world


# ---- a resumable job across ranks ------------------------------------------------------------------------
SHARDS_FORMAT = "minidecoder sharded embeddings"
# A rank that reuses its finished shard waits in the final exchange for the others to compute theirs, which
# may take hours on a corpus: far past torch's default 30 minutes.
EXCHANGE_TIMEOUT = datetime.timedelta(days=7)


def launched_by_torchrun() -> bool:
    """Whether this process is one of several ranks started by torchrun (its environment says so)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def join_process_group(device: str | None) -> str | None:
    """Join the ranks torchrun started (environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); returns the
    device this rank runs on: a bare "cuda" becomes this rank's own GPU, cuda:LOCAL_RANK. On a CPU each rank
    takes its share of the machine's cores (torchrun gives each one thread)."""
    if device is not None and torch.device(device).type == "cuda" and torch.device(device).index is None:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.set_device(torch.device(device))  # nccl's collectives run on the current device
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    if not dist.is_initialized():
        dist.init_process_group(default_backend(device or "cpu"), timeout=EXCHANGE_TIMEOUT)
    return device


def leave_process_group() -> None:
    """Leave together: a rank that tears gloo down while another still writes can abort it (SIGABRT)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def abandon_process_group() -> None:
    """Leave at once after a failure, so the other ranks' next exchange fails now rather than waiting for
    this rank (up to EXCHANGE_TIMEOUT)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def shard_path(output: str | Path, rank: int, world: int) -> Path:
    """Rank `rank`'s shard of `output`: out.npy -> out-00001-of-00004.npy."""
    output = Path(output)
    return output.with_name(f"{output.stem}-{rank:05d}-of-{world:05d}{output.suffix}")


def shards_manifest_path(output: str | Path) -> Path:
    """The file that lists a sharded output's shards: out.npy -> out.npy.shards.json."""
    output = Path(output)
    return output.with_name(output.name + ".shards.json")


def chunk_aligned_shard(total: int, chunk_size: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) input rows of rank's shard: a contiguous run of whole chunks, so that every chunk (and
    so every batch) is the one a single process computes; runs differ by at most one chunk."""
    chunks = -(-total // chunk_size)
    first, last = shard_bounds(chunks, rank, world)
    return min(first * chunk_size, total), min(last * chunk_size, total)


def check_sharded_output(output: str | Path, overwrite: bool) -> None:
    """Refuse a finished sharded output (its shards manifest) unless `overwrite`; checked before a model loads.
    Shards themselves are not refused: a rerun after a crash reuses the finished ones."""
    output = Path(output)
    if output.suffix not in (".npy", ".safetensors"):
        raise InputError(f"output {output} must end in .npy or .safetensors", "e.g. --output vectors.npy")
    check_free(shards_manifest_path(output), overwrite, "the sharded output's manifest")


def embed_sharded(model, method, input_path: str | Path, output_path: str | Path, chunk_size: int = 1024,
                  overwrite: bool = False, batch_size: int | None = None, progress: bool = False,
                  truncate: int | None = None, extra_metadata: dict[str, Any] | None = None,
                  wait: bool = False) -> dict[str, Any]:
    """This rank's part of a job across the process group (see the module docstring); every rank passes the
    same arguments. Returns this rank's summary (`run_embedding_job`'s, plus "shard", "rows_range" and
    "shard_reused"); rank 0's also names the shards manifest it wrote. Without a process group: one shard."""
    from minidecoder.methods import build_method

    if isinstance(method, str):
        method = build_method(method)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    input_path, output_path = Path(input_path), Path(output_path)
    check_sharded_output(output_path, overwrite)
    scanned = scan_input(input_path)
    total = scanned[2]
    start, end = chunk_aligned_shard(total, chunk_size, rank, world)
    shard = shard_path(output_path, rank, world)
    summary: dict[str, Any] = {"shard": shard.name, "rows_range": [start, end], "rows": end - start,
                               "dim": model.config.hidden_size, "chunks_computed": 0, "chunks_reused": 0,
                               "shard_reused": False}
    if end > start:  # (more ranks than chunks: a rank may have none)
        expected = job_manifest(model, method, batch_size, truncate, chunk_size, scanned, (start, end))
        if _finished_shard(shard, expected, (end - start, model.config.hidden_size)):
            summary.update(shard_reused=True, chunks_reused=-(-(end - start) // chunk_size))
        else:
            summary.update(run_embedding_job(model, method, input_path, shard, chunk_size=chunk_size,
                                             overwrite=overwrite, batch_size=batch_size, progress=progress,
                                             truncate=truncate, extra_metadata=extra_metadata, wait=wait,
                                             rows=(start, end)))
    summaries = [summary]
    if world > 1:
        summaries = [None] * world
        try:
            dist.all_gather_object(summaries, summary)
        except RuntimeError as error:  # a peer crashed or was killed (gloo: "Connection closed by peer")
            raise MinidecoderError(
                f"rank {rank} finished its shard ({shard.name}), but another rank was lost before the shards "
                f"manifest could be written ({str(error).splitlines()[0][:200]})",
                "run the same command again: a finished shard is reused and every other rank resumes from its "
                "kept chunks") from None
    if rank == 0:
        job = job_manifest(model, method, batch_size, truncate, chunk_size, scanned)  # every shard's, less its rows
        dim = next((s["dim"] for s in summaries if s["rows"]), summary["dim"])
        listing = {"format": SHARDS_FORMAT, "version": 1, "rows": total, "dim": dim, "world": world,
                   "shards": [{"file": s["shard"], "rows": s["rows_range"]} for s in summaries if s["rows"]],
                   "metadata": {**(extra_metadata or {}), **job}}
        path = shards_manifest_path(output_path)
        try:
            write_whole(path, json.dumps(listing, indent=2, sort_keys=True).encode("utf-8"), overwrite, wait)
        except OSError as error:
            cause, way_out = write_failure(error, path)
            raise OutputError(f"writing the shards' manifest {path} failed: {cause}; every rank's shard is written "
                              f"beside it", f"{way_out}, then run the same command again: it reuses the shards") \
                from None
        summary["manifest"] = str(path)
    return summary


def _finished_shard(shard: Path, expected: dict[str, Any], shape: tuple[int, int]) -> bool:
    """Whether `shard` is a finished shard of this very job (its metadata holds `expected`), whole (an array of
    `shape`). One damaged since (cut short, edited) is not: the job then names it, never replacing it unasked."""
    if not shard.is_file():
        return False
    try:
        metadata = load_metadata(shard)
    except (OSError, ValueError):
        return False
    return (isinstance(metadata, dict) and all(metadata.get(key) == value for key, value in expected.items())
            and _shape(shard) == shape)


def load_sharded(output: str | Path) -> np.ndarray:
    """The (N, E) float32 array of a sharded output (`embed_sharded`), its shards in row order; each shard's
    rows are checked against the manifest."""
    path = shards_manifest_path(output)
    try:
        listing = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read the sharded output's manifest {path} ({error})",
                         "give the --output the job was run with; the manifest is written when every rank is done") \
            from None
    parts = []
    for entry in listing["shards"]:
        part = _load_array(path.parent / entry["file"])
        start, end = entry["rows"]
        if part.shape != (end - start, listing["dim"]):
            raise MinidecoderError(f"shard {entry['file']} holds {part.shape}, the manifest says rows [{start}, {end}) "
                                   f"of dimension {listing['dim']}", "rerun the job with --overwrite")
        parts.append(part)
    return np.concatenate(parts) if parts else np.empty((0, listing["dim"]), dtype=np.float32)


def _shape(path: Path) -> tuple[int, ...] | None:
    """A shard's array shape, read from its header (the rows are not read), where the file is as long as the
    header says; None where it is not (cut short, not an array)."""
    from safetensors import SafetensorError, safe_open
    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="np") as handle:
                return tuple(handle.get_slice("embeddings").get_shape())
        return np.load(path, mmap_mode="r").shape  # a map longer than the file is refused: a ValueError
    except (OSError, ValueError, EOFError, KeyError, SafetensorError):
        return None


def _load_array(path: Path) -> np.ndarray:
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file
        return load_file(str(path))["embeddings"]
    return np.load(path)
