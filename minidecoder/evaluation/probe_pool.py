"""Train SentEval's grid probes in worker processes: the same accuracies as one after another, faster.

An inner k-fold task trains 410 probes (senteval_classifier.py), each a few seconds of small steps that
one CPU thread runs best, so a task takes tens of minutes on one core. The probes of one L2 grid do not
depend on each other: each is seeded alone (`LogisticRegressionProbe` seeds its own weights and its own
shuffles), so where it runs does not change it. Here they run in `workers` spawned processes, each on
one thread; with `workers=1`, in this process, also on one thread (`one_thread`), so both give the same
probes bit for bit (tests/evaluation/test_transfer.py checks it).

A task's rows are written once to a temporary folder that every worker memory-maps (`shared_rows`), and a
job names its rows by index: an inner k-fold task would otherwise pickle its training rows into each of
its 400 grid jobs (about 20 MB each for MR), which on 16 CPUs kept the workers waiting on the parent.
"""
from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from minidecoder.errors import OutputError

T = TypeVar("T")
R = TypeVar("R")


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


def train_all(train: Callable[[T], R], jobs: list[T], workers: int = 1,
              finished: Callable[[int], None] | None = None) -> list[R]:
    """`train(job)` for every job, in the jobs' order: here on one thread, or in `workers` processes
    (`train` must be a module-level function, so a spawned worker can import it). `finished(n)` is called
    as job n's result arrives, in the jobs' order (for a progress bar)."""
    if workers <= 1 or len(jobs) <= 1:
        with one_thread():
            return [_reported(n, train(job), finished) for n, job in enumerate(jobs)]
    pool = _pool(workers)
    try:
        return [_reported(n, result, finished) for n, result in enumerate(pool.map(train, jobs))]
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


def _reported(n: int, result: R, finished: Callable[[int], None] | None) -> R:
    if finished is not None:
        finished(n)
    return result


@dataclass(frozen=True)
class SharedRows:
    """A task's rows (x: (N, E) features, y: (N,) labels) in a folder of .npy files that each process maps
    once; a job carries this (a path) and row indices, and `take` gives the very values indexing the
    arrays would."""

    folder: str

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, y = _mapped(self.folder)
        return np.asarray(x[rows]), np.asarray(y[rows])


_MAPPED: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # this process's maps: the current task's alone


def _mapped(folder: str) -> tuple[np.ndarray, np.ndarray]:
    if folder not in _MAPPED:
        _MAPPED.clear()  # an earlier task's folder is gone; let its pages go
        _MAPPED[folder] = (np.load(Path(folder) / "x.npy", mmap_mode="r"), np.load(Path(folder) / "y.npy", mmap_mode="r"))
    return _MAPPED[folder]


@contextlib.contextmanager
def shared_rows(x: np.ndarray, y: np.ndarray) -> Iterator[SharedRows]:
    """x and y written once to a temporary folder (removed after) for the jobs of one task."""
    with tempfile.TemporaryDirectory(prefix="minidecoder-probe-rows-") as folder:
        try:
            np.save(Path(folder) / "x.npy", np.ascontiguousarray(x))
            np.save(Path(folder) / "y.npy", np.ascontiguousarray(y))
        except OSError as error:
            raise OutputError(f"could not write the probes' rows ({x.nbytes / 2**20:.0f} MB) to {folder}: {error}",
                              "free space there, or point TMPDIR at a folder with room") from None
        try:
            yield SharedRows(folder)
        finally:
            _MAPPED.pop(folder, None)
