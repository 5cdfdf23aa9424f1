"""Train SentEval's grid probes in worker processes: the same accuracies as one after another, faster.

An inner k-fold task trains 410 probes (senteval_classifier.py), each a few seconds of small steps that
one CPU thread runs best, so a task takes tens of minutes on one core. The probes of one L2 grid do not
depend on each other: each is seeded alone (`LogisticRegressionProbe` seeds its own weights and its own
shuffles), so where it runs does not change it. Here they run in `workers` spawned processes, each on
one thread; with `workers=1`, in this process, also on one thread (`one_thread`), so both give the same
probes bit for bit (tests/evaluation/test_transfer.py checks it).
"""
from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import TypeVar

import torch

T = TypeVar("T")


def default_workers() -> int:
    """The CPUs this process may use: the probes run after the embeddings, so the cores are free."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread while probes train here, as in a worker; the earlier count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_all(train: Callable[[T], float], jobs: list[T], workers: int = 1) -> list[float]:
    """`train(job)` for every job, in the jobs' order: here on one thread, or in `workers` processes
    (`train` must be a module-level function, so a spawned worker can import it)."""
    if workers <= 1 or len(jobs) <= 1:
        with one_thread():
            return [train(job) for job in jobs]
    pool = _pool(workers)
    try:
        return list(pool.map(train, jobs))
    except BaseException:  # Ctrl-C, SIGTERM or a failed probe: stop at once, not after the queued probes
        _POOLS.pop(workers, None)
        processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise


_POOLS: dict[int, ProcessPoolExecutor] = {}  # kept for the process's life: an inner k-fold task asks 10 times


def _pool(workers: int) -> ProcessPoolExecutor:
    """The worker processes, started once (each imports torch, seconds) and started again if one died."""
    pool = _POOLS.get(workers)
    if pool is None or getattr(pool, "_broken", False):
        # spawn, not fork: a forked copy of a process whose torch already ran threads can hang
        pool = _POOLS[workers] = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                                     initializer=_start_worker)
    return pool


def _start_worker() -> None:
    """One thread, as `one_thread` here; Ctrl-C is the parent's to handle (a worker's would print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
