"""Embed a text file (one text per line) across processes; rank 0 writes the (N, E) tensor in input order.

    torchrun --nproc_per_node 2 tools/embed_distributed.py texts.txt out.pt --model smollm2-135m-instruct
    torchrun --nproc_per_node 4 tools/embed_distributed.py texts.txt out.pt --device cuda   # nccl, one GPU per rank

Everything is gathered in memory on rank 0 and nothing survives a lost rank: for a corpus, run
`torchrun --nproc_per_node 4 -m minidecoder embed ...` instead (sharded output, each rank resumable).
Backend: gloo on CPU, nccl on CUDA (minidecoder.running.distributed.default_backend). On CPU each process gets
cores // world threads. Method options are `--opt KEY=VALUE` (values parsed as JSON, else strings), as in
minidecoder's commands; `--option` is taken too.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import minidecoder  # noqa: E402
from minidecoder.errors import InputError, MinidecoderError, describe_unusable_file  # noqa: E402
from minidecoder.output_files import check_free, write_whole  # noqa: E402
from minidecoder.running.command_line import parse_options  # noqa: E402
from minidecoder.running.distributed import default_backend, shard_bounds  # noqa: E402
from minidecoder.running.embedding import embed  # noqa: E402


def embed_distributed(model, texts: list[str], method="prompteol", batch_size: int | None = None,
                      **options) -> torch.Tensor | None:
    """(N, E) float32 embeddings on rank 0 (None on the other ranks), equal to `embed(model, texts, ...)`
    up to float rounding. Without an initialized process group it is simply `embed`. batch_size: None (the
    default) fills each batch to the device's token budget, as `embed` does.

    Every rank must pass the same `texts` (read the same file); only its shard is embedded."""
    if not (dist.is_available() and dist.is_initialized()):
        return embed(model, texts, method, batch_size, **options)
    rank, world = dist.get_rank(), dist.get_world_size()
    start, end = shard_bounds(len(texts), rank, world)
    E = model.config.hidden_size
    if end > start:
        mine = embed(model, texts[start:end], method, batch_size, **options)  # (n_r, E) float32, CPU
    else:  # more ranks than texts
        mine = torch.empty(0, E, dtype=torch.float32)
    # gather needs equal shapes: pad every shard to the largest, cut after.
    largest = -(-len(texts) // world)
    device = model.device if dist.get_backend() == "nccl" else torch.device("cpu")
    padded = torch.zeros(largest, E, dtype=torch.float32, device=device)
    padded[:len(mine)] = mine.to(device)
    gathered = [torch.empty_like(padded) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, gathered, dst=0)
    if rank != 0:
        return None
    parts = []
    for r, part in enumerate(gathered):
        s, e = shard_bounds(len(texts), r, world)
        parts.append(part[:e - s].cpu())
    return torch.cat(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", type=Path, help="UTF-8 file, one text per line (empty lines are skipped)")
    parser.add_argument("output", type=Path, help="where rank 0 saves the (N, E) float32 tensor (torch.save)")
    parser.add_argument("--model", default=None, help="model name, folder or Hub id (default: minidecoder's default)")
    parser.add_argument("--method", default="prompteol")
    parser.add_argument("--opt", "--option", dest="option", action="append", default=[], metavar="KEY=VALUE",
                        help="method option KEY=VALUE (JSON when it parses), as minidecoder's --opt; once per option")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sentences a batch (default: each batch filled to the device's token budget)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = parser.parse_args(argv)
    # every rank checks (the same paths), before the process group and the model: a rank that stopped alone
    # would leave the others waiting in the gather
    if not args.texts.is_file():
        raise InputError(f"the texts file {args.texts} {describe_unusable_file(args.texts)}",
                         "give a UTF-8 file, one text per line")
    check_free(args.output, args.overwrite)  # never replaced silently (the embed command's rule)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = args.device
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    if world > 1:
        dist.init_process_group(default_backend(device))
    texts = [line for line in args.texts.read_text(encoding="utf-8").splitlines() if line.strip()]
    model = minidecoder.load(args.model, dtype=args.dtype, device=device, progress=False)
    vectors = embed_distributed(model, texts, args.method, args.batch_size, **parse_options(args.option))
    if vectors is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        saved = io.BytesIO()
        torch.save(vectors, saved)
        write_whole(args.output, saved.getvalue(), overwrite=args.overwrite)  # whole or not at all
        print(f"wrote {tuple(vectors.shape)} embeddings of {args.texts} to {args.output}")
    if world > 1:
        # Leave together: a rank that tears gloo down while rank 0 still writes can abort (SIGABRT).
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except MinidecoderError as error:  # the user's input, named with its fix: no traceback (as the CLI prints it)
        print(f"embed_distributed: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Under load, gloo's background threads can still be closing sockets to a peer that already
        # exited when the interpreter's static destructors run, which aborts the process
        # ("terminate called without an active exception") after all work is done and written.
        # Everything is flushed; leave without running those destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
