"""Data-parallel embedding of a large list of texts across processes with `torch.distributed`.

    texts (N) ─ rank r takes the contiguous shard [r*N//W, (r+1)*N//W) ─ minidecoder.embed ─┐
                                                                                           ├─ gather on rank 0, in order
Each rank holds a whole model and embeds its own shard with the ordinary driver (length-sorted
batches, inference_mode); rank 0 receives every shard and concatenates them in rank order, which is
input order because the shards are contiguous. Backend: gloo on CPU, nccl on GPU (`default_backend`).

Launch with torchrun, e.g. `torchrun --nproc_per_node 2 tools/embed_distributed.py texts.txt out.pt`
(tools/embed_distributed.py). On one CPU machine, give each process its share of the cores
(`torch.set_num_threads(cores // world)`): two processes fighting over every core are slower than one.

Only the batches inside a shard differ from a single-process run (rows are padded against other
neighbours), which changes an embedding by float rounding only (tests/running/test_distributed.py).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from minidecoder.running.embedding import embed


def default_backend(device: torch.device | str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous shard; shard sizes differ by at most one."""
    return rank * n // world, (rank + 1) * n // world


def embed_distributed(model, texts: list[str], method="prompteol", batch_size: int = 32,
                      **options) -> torch.Tensor | None:
    """(N, E) float32 embeddings on rank 0 (None on the other ranks), equal to `embed(model, texts, ...)`
    up to float rounding. Without an initialized process group it is simply `embed`.

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
