"""Scoring one method on the test tasks in pieces that survive a kill and a change of machine.

A row of a reproduction table (`tools/reproduce.py`) that encodes 26,083 sentences with eight prompts
takes longer than a sitting on a slow CPU. So its test phase is cut into pieces: a piece is at most
`PIECE_PAIRS` consecutive pairs of one task (its subsets concatenated in file order, as `StsScorer`
lays them out). After each piece the caller keeps the piece's pair cosines (float64, written exactly)
and its timing; a later sitting, on another machine, carries on from the first missing piece. The
cosines of all pieces, concatenated, are what `StsScorer.cosines` computes on one table of embeddings,
so the row's scores are `StsScorer.score` of them. Embeddings are never kept beyond the sitting.

Timing stays comparable with a row encoded in one go: each piece times only the sentences that appear
for the first time in the plan's order (`PiecePlan.first`), so the timed pieces of a row encode every
distinct sentence exactly once. A sentence an earlier piece encoded is taken from memory; after a
resume, where memory is empty, it is encoded again untimed (`catch_up`).

Every statistic of a row's scores is a Spearman, a function of the order of the cosines within one task,
so a finished row is stored as the within-task ranks of its cosines (`order_codes`: integers, lossless for
every Spearman over any subset or resample of that task) and resampled on `layout_of` its tasks.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from minidecoder.evaluation.bootstrap import TaskLayout
from minidecoder.evaluation.family import Encoder, encode_sentences
from minidecoder.evaluation.sts import StsTask, pair_cosines

PIECE_PAIRS = 1000  # SICK-R's 4,927 pairs are five pieces; 22 pieces for the seven full test sets


@dataclass(frozen=True)
class Piece:
    """Pairs start..stop-1 of one task, in the task's pair order."""

    task: str
    start: int
    stop: int

    def label(self) -> str:
        return f"{self.task}[{self.start}:{self.stop}]"


def task_pairs(task: StsTask) -> tuple[list[str], list[str]]:
    """The task's first and second sentences, subsets concatenated in file order (`StsScorer`'s order)."""
    first = [s for subset in task.subsets.values() for s in subset.sentences1]
    second = [s for subset in task.subsets.values() for s in subset.sentences2]
    return first, second


class PiecePlan:
    """The pieces of some tasks, in task order, and for each the sentences it is the first to need."""

    def __init__(self, tasks: Sequence[StsTask], size: int = PIECE_PAIRS) -> None:
        self.tasks = list(tasks)
        self.pieces: list[Piece] = [Piece(task.name, start, min(start + size, task.pairs))
                                    for task in self.tasks for start in range(0, task.pairs, size)]
        self._pairs = {task.name: task_pairs(task) for task in self.tasks}
        self.first: list[list[str]] = []  # per piece: its sentences no earlier piece needs, longest first
        seen: set[str] = set()
        for piece in self.pieces:
            new = dict.fromkeys(s for s in self.sentences(piece) if s not in seen)
            seen.update(new)
            self.first.append(sorted(new, key=len, reverse=True))  # as unique_sentences: less padding

    def sentences(self, piece: Piece) -> list[str]:
        """The piece's distinct sentences, in first-appearance order."""
        first, second = self._pairs[piece.task]
        return list(dict.fromkeys(s for pair in zip(first[piece.start:piece.stop], second[piece.start:piece.stop])
                                  for s in pair))

    def pairs(self, piece: Piece) -> tuple[list[str], list[str]]:
        first, second = self._pairs[piece.task]
        return first[piece.start:piece.stop], second[piece.start:piece.stop]

    def by_task(self, cosines: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every piece's cosines (plan order) -> one array per task, `StsScorer.cosines`' layout."""
        if len(cosines) != len(self.pieces):
            raise ValueError(f"{len(cosines)} pieces of cosines for a plan of {len(self.pieces)}")
        return [np.concatenate([c for piece, c in zip(self.pieces, cosines) if piece.task == task.name])
                for task in self.tasks]


class PieceEncoder:
    """Encodes the plan's pieces, one at a time, with one method; keeps this sitting's vectors in memory."""

    def __init__(self, plan: PiecePlan, encode: Encoder, chunk_size: int, progress: bool = False) -> None:
        self.plan, self.encode, self.chunk_size, self.progress = plan, encode, chunk_size, progress
        self.vectors: dict[str, torch.Tensor] = {}  # sentence -> (D,), encoded in this sitting

    def _encode_into_memory(self, sentences: list[str]) -> None:
        if sentences:
            table = encode_sentences(self.encode, sentences, chunk_size=self.chunk_size, progress=self.progress)
            self.vectors.update(zip(sentences, table))

    def run(self, index: int) -> tuple[np.ndarray, dict]:
        """Piece `index`'s pair cosines and its timing: {"seconds" (timed: its first-time sentences only),
        "sentences" (how many those are), "catch_up" (sentences re-encoded untimed after a resume)}."""
        piece = self.plan.pieces[index]
        start = time.perf_counter()
        self._encode_into_memory(self.plan.first[index])
        seconds = time.perf_counter() - start
        catch_up = [s for s in self.plan.sentences(piece) if s not in self.vectors]
        self._encode_into_memory(sorted(catch_up, key=len, reverse=True))
        first, second = self.plan.pairs(piece)
        cosines = pair_cosines(torch.stack([self.vectors[s] for s in first]), torch.stack([self.vectors[s] for s in second]),
                               np.array([a == b for a, b in zip(first, second)]))
        return cosines, {"seconds": seconds, "sentences": len(self.plan.first[index]), "catch_up": len(catch_up)}


def cosines_text(plan: PiecePlan, cosines: Sequence[np.ndarray]) -> bytes:
    """The finished pieces' cosines, one line per piece: its label, then float64 values written exactly
    (`repr` round-trips), so a resumed row ranks exactly what an uninterrupted one would."""
    return "".join(f"{piece.label()} {' '.join(repr(float(v)) for v in c)}\n"
                   for piece, c in zip(plan.pieces, cosines)).encode()


def parse_cosines(text: str, plan: PiecePlan) -> list[np.ndarray]:
    """`cosines_text` read back; the pieces must be the plan's first ones, each with its number of pairs."""
    out = []
    for piece, line in zip(plan.pieces, text.splitlines()):
        label, *values = line.split(" ")
        if label != piece.label() or len(values) != piece.stop - piece.start:
            raise ValueError(f"line {len(out) + 1} is {label} with {len(values)} values; the plan's piece is "
                             f"{piece.label()} with {piece.stop - piece.start}")
        out.append(np.array([float(v) for v in values], dtype=np.float64))
    if len(out) != len(text.splitlines()):
        raise ValueError(f"{len(text.splitlines())} lines for a plan of {len(plan.pieces)} pieces")
    return out


def layout_of(tasks: Sequence[StsTask]) -> list[TaskLayout]:
    """The bootstrap's layout of each task (evaluation.bootstrap.Bootstrap), pairs in the order
    `StsScorer.cosines` returns them."""
    out = []
    for task in tasks:
        gold, bounds = [], [0]
        for subset in task.subsets.values():
            gold += subset.gold
            bounds.append(len(gold))
        out.append(TaskLayout(task.name, task.setting, np.asarray(gold, np.float64), tuple(bounds)))
    return out


def order_codes(similarities: np.ndarray) -> np.ndarray:
    """The similarities' order as small integers: the 'min' rank minus one (ties share a code), uint16
    when the task has fewer than 65,536 pairs. Any Spearman computed from the codes equals the one from
    the similarities, for every subset and resample, since ranking is invariant to a strictly
    increasing map that keeps ties."""
    x = np.asarray(similarities, dtype=np.float64)
    s = np.sort(x)
    codes = np.searchsorted(s, x, side="left")  # number of values strictly below each
    return codes.astype(np.uint16 if x.size < 65536 else np.uint32)
