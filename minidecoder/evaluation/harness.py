"""STS evaluation: encode each distinct sentence once, score cosine against gold by Spearman x100.

Encoding and scoring are separate on purpose:

    tasks = load_tasks(ALL_SEVEN)
    sentences = unique_sentences(tasks)              # every distinct sentence, once
    vectors = encode_sentences(encode, sentences)    # (N, D), row i is sentences[i]
    results = StsScorer(tasks, sentences)(vectors)   # cheap; call again per layer / option

A sweep that gets many layers from one forward pass builds one `StsScorer` and calls it once per
embedding set; `evaluate_sts` is the three lines above plus timing.

Conventions (docs/spec.md section 9; the SimCSE-fork SentEval `STSEval.run` vendored by
PromptEOL and TP): similarity is the cosine of the two embeddings, NaN (a zero vector) scored as 0
like SentEval's `np.nan_to_num`; STS12-16 are scored "all" (one Spearman over the concatenation of
every subset of the year) and per subset; STS-B and SICK-R on their test split; "Avg." is the mean
of the seven. SentEval embeds the two sides of every batch separately and repeats sentences; here
each distinct sentence is embedded once, which changes nothing for a method whose embedding of a
sentence does not depend on the rest of its batch (padding-invariance is tested by the methods).
Cosines are computed in float64, and a pair of identical sentences (79 in STS12, 14 elsewhere)
scores exactly 1, so those pairs form one tie. This is a choice, kept on purpose: it makes the score a
property of the embeddings, not of batching noise. SentEval embeds the two sides of a pair in separate
batches (different padding) and takes float32 cosines, so its self-pairs land at 1 minus rounding noise
and are ordered among themselves, and against other near-1 pairs, by that noise. The effect is not
small where self-pairs are many: the SentEval fork of the PromptEOL/TP papers differs from this harness
by 0.10 (x100) on STS12 SMTeuroparl (first 200 pairs), while the other 26 subsets agree within 0.0055;
with a bag-of-words encoder whose two copies are bit-identical it stays within 5e-3
(tests/evaluation/test_sts_harness.py). Compare per-subset numbers with SentEval's with that in mind;
`test_self_pairs_are_exactly_one_and_tied_unlike_senteval` pins the rule.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from minidecoder.errors import NumericsError
from minidecoder.evaluation.spearman import pearson, rankdata
from minidecoder.evaluation.sts import ALL_SEVEN, StsTask, load_tasks

Encoder = Callable[[list[str]], torch.Tensor]  # sentences -> (N, D)


def longest_first(texts: Iterable[str]) -> list[str]:
    """Every distinct text once, longest first (less padding per batch; a batch that does not fit in memory
    fails at once instead of hours in); ties keep first-appearance order. The order must be the same in
    every process: a resumed job refuses texts in another order, and a set's order follows the per-process
    string hash (PYTHONHASHSEED), so with a set an interrupted run could never resume. A (context, text) pair
    counts the characters of both."""
    return sorted(dict.fromkeys(texts), key=lambda t: len(t[0]) + len(t[1]) + 1 if isinstance(t, tuple) else len(t),
                  reverse=True)


def unique_sentences(tasks: Sequence[StsTask]) -> list[str]:
    """Every distinct sentence of the tasks, longest first (`longest_first`)."""
    return longest_first(sentence for task in tasks for sentence in task.sentences())


def encode_sentences(
    encode: Encoder, sentences: Sequence[str], chunk_size: int = 256, progress: bool = True,
    desc: str = "STS sentences",
) -> torch.Tensor:
    """Call `encode` on consecutive chunks of `sentences`; returns (N, D) on the CPU, row i = sentences[i].

    Each chunk must come back as a finite (len(chunk), D) tensor. The progress bar (stderr) counts
    sentences, so its rate is sentences per second.
    """
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


def pair_cosines(first: torch.Tensor, second: torch.Tensor, same: np.ndarray) -> np.ndarray:
    """The cosine of each pair (row i of `first` with row i of `second`), float64. `same` marks pairs of
    one sentence with itself: exactly 1, one tie (a choice; its effect: the module docstring)."""
    a, b = first.double(), second.double()  # (P, D)
    norm_a, norm_b = a.norm(dim=-1), b.norm(dim=-1)  # (P,)
    cosine = (a * b).sum(-1) / (norm_a * norm_b)  # (P,)
    cosine = torch.where(torch.as_tensor(same, device=cosine.device) & (norm_a > 0), torch.ones_like(cosine), cosine)
    return torch.nan_to_num(cosine, nan=0.0).cpu().numpy()  # SentEval: np.nan_to_num


class StsScorer:
    """Scores embedding tables of one fixed sentence list against the gold of fixed tasks.

    Built once (pair indices and gold ranks are precomputed); each call costs one gather and one
    cosine per pair plus a rank per subset, so scoring many layers of one forward pass is cheap.
    """

    def __init__(self, tasks: Sequence[StsTask], sentences: Sequence[str]) -> None:
        index = {sentence: i for i, sentence in enumerate(sentences)}
        self.tasks = list(tasks)
        self.num_sentences = len(sentences)
        # per task: (subset names, first rows (P,), second rows (P,), gold (P,), subset bounds)
        self._pairs: list[tuple[list[str], torch.Tensor, torch.Tensor, np.ndarray, list[int]]] = []
        for task in self.tasks:
            names, rows1, rows2, gold, bounds = [], [], [], [], [0]
            for name, subset in task.subsets.items():
                missing = [s for s in subset.sentences1 + subset.sentences2 if s not in index]
                if missing:
                    raise ValueError(f"{task.name}/{name}: {len(missing)} sentences have no embedding row (first: {missing[0]!r})")
                names.append(name)
                rows1 += [index[s] for s in subset.sentences1]
                rows2 += [index[s] for s in subset.sentences2]
                gold += subset.gold
                bounds.append(len(gold))
            self._pairs.append((names, torch.tensor(rows1), torch.tensor(rows2), np.asarray(gold, np.float64), bounds))
        # gold ranks never change between calls
        self._gold_ranks = [
            (rankdata(gold), [rankdata(gold[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
            for _, _, _, gold, bounds in self._pairs
        ]

    def cosines(self, embeddings: torch.Tensor) -> list[np.ndarray]:
        """Per task, the cosine of every pair in subset order, float64. embeddings: (N, D)."""
        if embeddings.dim() != 2 or embeddings.shape[0] != self.num_sentences:
            raise ValueError(f"embeddings have shape {tuple(embeddings.shape)}; expected ({self.num_sentences}, D)")
        return [pair_cosines(embeddings[rows1.to(embeddings.device)], embeddings[rows2.to(embeddings.device)],
                             (rows1 == rows2).numpy())
                for _, rows1, rows2, _, _ in self._pairs]

    def __call__(self, embeddings: torch.Tensor) -> dict:
        """Scores of every task; see `aggregate` for the layout."""
        return self.score(self.cosines(embeddings))

    def score(self, cosines: Sequence[np.ndarray]) -> dict:
        """Scores of every task from its pairs' cosines (`cosines`' layout, however they were computed)."""
        per_task = {}
        for task, cosine, (names, _, _, gold, bounds), (gold_rank, subset_gold_ranks) in zip(
            self.tasks, cosines, self._pairs, self._gold_ranks
        ):
            subsets = {}
            for name, a, b, subset_gold_rank in zip(names, bounds[:-1], bounds[1:], subset_gold_ranks):
                subsets[name] = {"spearman": 100.0 * pearson(rankdata(cosine[a:b]), subset_gold_rank), "pairs": b - a}
            if task.setting == "all":
                score = 100.0 * pearson(rankdata(cosine), gold_rank)  # one Spearman over all subsets
            else:
                (score,) = (entry["spearman"] for entry in subsets.values())
            per_task[task.name] = {"score": score, "setting": task.setting, "pairs": len(gold), "subsets": subsets}
            if task.setting == "all":
                values = np.array([entry["spearman"] for entry in subsets.values()])
                weights = np.array([entry["pairs"] for entry in subsets.values()], dtype=np.float64)
                # what upstream SentEval calls "mean" and "wmean"; reported by some older papers
                per_task[task.name]["subset_mean"] = float(values.mean())
                per_task[task.name]["subset_wmean"] = float((values * weights).sum() / weights.sum())
        return aggregate(per_task, limit=next((t.limit for t in self.tasks if t.limit is not None), None))  # any cut


def aggregate(per_task: dict, limit: int | None) -> dict:
    """Results layout:

    {"tasks": {name: {"score", "setting", "pairs", "subsets": {subset: {"spearman", "pairs"}}, ...}},
     "avg": mean score of the test tasks given (all but STSBenchmark-dev), "avg_over": their names,
     "avg_is_published_avg": True when those are exactly the seven, "limit": N or None}
    All scores are Spearman x100.
    """
    over = [name for name in per_task if name != "STSBenchmark-dev"]
    avg = float(np.mean([per_task[name]["score"] for name in over])) if over else None
    return {
        "tasks": per_task,
        "avg": avg,
        "avg_over": over,
        "avg_is_published_avg": sorted(over) == sorted(ALL_SEVEN),
        "limit": limit,
    }


def score_embeddings(tasks: Sequence[StsTask], sentences: Sequence[str], embeddings: torch.Tensor) -> dict:
    """One-shot `StsScorer(tasks, sentences)(embeddings)`; build the scorer yourself to score many sets."""
    return StsScorer(tasks, sentences)(embeddings)


def evaluate_sts(
    encode: Encoder,
    tasks: Sequence[str] | Sequence[StsTask] = ALL_SEVEN,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    progress: bool = True,
    chunk_size: int = 256,
) -> dict:
    """Evaluate `encode` on the STS tasks; returns `aggregate`'s dict plus run facts.

    `encode(sentences) -> (N, D)` gets the SentEval sentences (joined word lists; the method adds
    its own prompt handling). Every distinct sentence across the requested tasks is encoded once.
    `limit=N` scores only the first N pairs of each subset (a quick look, stamped as such). `tasks`: names,
    or tasks a caller already read (`load_tasks`; `data_dir` and `limit` are then theirs).
    Added keys: "sentences" (number encoded), "encode_seconds", "sentences_per_second",
    "data_dir", "data_files" (paths relative to data_dir, for checksums).
    """
    loaded = list(tasks) if tasks and all(isinstance(t, StsTask) for t in tasks) else load_tasks(list(tasks), data_dir, limit)
    sentences = unique_sentences(loaded)
    start = time.perf_counter()
    vectors = encode_sentences(encode, sentences, chunk_size=chunk_size, progress=progress)
    seconds = time.perf_counter() - start
    results = StsScorer(loaded, sentences)(vectors)
    results.update(
        sentences=len(sentences),
        encode_seconds=seconds,
        sentences_per_second=len(sentences) / seconds if seconds > 0 else None,
        data_dir=str(loaded[0].data_dir) if loaded else None,
        data_files=[name for task in loaded for name in task.files],
    )
    return results
