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
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import torch

Job = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]  # fit x, fit y, check x, check y, L2


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


def accuracies(jobs: list[Job], num_classes: int, config, workers: int = 1) -> list[float]:
    """Each job's probe trained on its fit rows (early-stopped on its check rows) and its accuracy on the
    check rows, in the jobs' order."""
    tasks = [(job, num_classes, config) for job in jobs]
    if workers <= 1 or len(jobs) <= 1:
        with one_thread():
            return [_train_and_score(task) for task in tasks]
    pool = _pool(workers)
    try:
        return list(pool.map(_train_and_score, tasks))
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


def _train_and_score(task: tuple[Job, int, object]) -> float:
    from minidecoder.evaluation.senteval_classifier import LogisticRegressionProbe

    (fit_x, fit_y, check_x, check_y, l2), num_classes, config = task
    probe = LogisticRegressionProbe(fit_x.shape[1], num_classes, l2, config)
    probe.fit(fit_x, fit_y, validation=(check_x, check_y))
    return probe.score(check_x, check_y)
