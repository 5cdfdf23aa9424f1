"""C-MTEB's sentence-pair sets (ReBA Tables 2-3) scored by the installed mteb's own task classes.

    sets = [load_pair_set(name) for name in SETS]
    results = evaluate_cmteb(encode, sets)

Each set runs as mteb's own task (`ATEC`, ..., `QBQTC`: `AbsTaskSTS`; `Ocnli`: `AbsTaskPairClassification`)
fed the local file (`mteb_lookup.local_task`), so the numbers are mteb's: STS: Spearman of cosine
similarity against the label x100 (`cosine_spearman`, the main score) with Pearson beside it (ReBA's
Table 3 reports `cos_sim: pearson`); Ocnli: the best accuracy over cosine thresholds (mteb's main score
`max_ap` is reported beside it, with `cosine_ap`). Every set carries a 95% bootstrap interval over pairs
on the cosines mteb scored: STS by `bootstrap.Bootstrap` (the STS harness's resampling), Ocnli by
resampling pairs and choosing each resample's own best threshold, as the score does. No instruction: ReBA
encodes the sentences as they are.

mteb takes float32 cosines (`1 - paired_cosine_distances` of the float32 embeddings), so pairs whose
cosines tie exactly in float64 may be ordered by rounding; `eval sts` keeps such ties
(`harness.pair_cosines`). Here the numbers are mteb's, rounding included.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from minidecoder.evaluation.bootstrap import Bootstrap, TaskLayout, item_interval
from minidecoder.evaluation.cmteb_data import PairSet
from minidecoder.evaluation.data_files import run_limit
from minidecoder.evaluation.harness import encode_sentences

Encoder = Callable[[list[str]], torch.Tensor]  # texts -> (N, E)


def texts_needed(sets: Sequence[PairSet]) -> list[str]:
    """Every distinct sentence of the sets."""
    return list(dict.fromkeys(text for data in sets for text in data.sentences1 + data.sentences2))


def mteb_task(data: PairSet):
    from minidecoder.evaluation.mteb_lookup import local_task

    if data.kind == "sts":
        columns = {"sentence1": data.sentences1, "sentence2": data.sentences2, "score": data.labels}
    else:
        columns = {"sentence1": data.sentences1, "sentence2": data.sentences2, "labels": [int(x) for x in data.labels]}
    return local_task(data.name, {data.split: columns})


def evaluate_cmteb(encode: Encoder, sets: Sequence[PairSet], progress: bool = True, chunk_size: int = 256) -> dict:
    """Run mteb's evaluator of each set on `encode`'s embeddings. Returns {"sets": {name: {"kind", "split",
    "pairs", "score", "ci95", "pearson" | "ap", "mteb": mteb's scores}}, "avg_sts": mean Spearman of the STS
    sets, plus the stamp's data facts}; scores x100."""
    from minidecoder.evaluation.mteb_lookup import PrecomputedEncoder

    texts = texts_needed(sets)
    encoder = PrecomputedEncoder(texts, encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress))
    out = {}
    for data in sets:
        scores = mteb_task(data).evaluate(encoder, data.split, encode_kwargs={"batch_size": 256})["default"]
        similarity = pair_cosines(encoder, data)
        if data.kind == "sts":
            entry = {"score": 100.0 * scores["cosine_spearman"], "metric": "cosine Spearman",
                     "pearson": 100.0 * scores["cosine_pearson"], "ci95": pair_interval(similarity, data),
                     "cosines": similarity.tolist()}  # for paired intervals between rows
        else:
            entry = {"score": 100.0 * scores["cosine_accuracy"], "metric": "cosine best accuracy",
                     "ap": 100.0 * scores["cosine_ap"], "max_ap": 100.0 * scores["max_ap"],
                     "ci95": best_accuracy_interval(similarity, np.asarray(data.labels)), "cosines": similarity.tolist()}
        out[data.name] = {"kind": data.kind, "split": data.split, "pairs": len(data.labels), "dropped": data.dropped,
                          **entry, "mteb": {k: v for k, v in scores.items() if isinstance(v, float)}}
    sts = [entry["score"] for entry in out.values() if entry["kind"] == "sts"]
    return {
        "sets": out,
        "avg_sts": float(np.mean(sts)) if sts else None,
        "limit": run_limit(data.limit for data in sets),
        "data_dir": str(sets[0].data_dir) if sets else None,
        "data_files": [data.file for data in sets],
    }


def pair_cosines(encoder, data: PairSet) -> np.ndarray:
    """(P,) the cosines mteb's STS and pair-classification evaluators score: `1 - paired_cosine_distances` of
    the float32 embeddings."""
    from sklearn.metrics.pairwise import paired_cosine_distances

    return 1.0 - paired_cosine_distances(encoder.encode([{"text": data.sentences1}]),
                                         encoder.encode([{"text": data.sentences2}]))


def pair_bootstrap(data: PairSet) -> Bootstrap:
    """The STS harness's bootstrap over one set's pairs (the same resamples for every row: paired intervals)."""
    return Bootstrap([TaskLayout(data.name, data.split, np.asarray(data.labels, np.float64), (0, len(data.labels)))])


def pair_interval(cosines: np.ndarray, data: PairSet) -> tuple[float, float]:
    """95% bootstrap interval of the Spearman x100 over the set's pairs."""
    boot = pair_bootstrap(data)
    return boot.interval(boot.replicates({"row": {data.name: cosines}})["row"])[data.name]


def best_accuracy(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Best accuracy x100 over thresholds on the cosines, for each row of (B, P) `scores` and 0/1 `labels`: mteb's
    `AbsTaskPairClassification._find_best_acc_and_threshold` (higher is more similar; a threshold is placed
    between two neighbouring cosines, never between tied ones), vectorised over resamples."""
    scores, labels = np.atleast_2d(scores), np.atleast_2d(labels)
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked, positive = np.take_along_axis(scores, order, 1), np.take_along_axis(labels, order, 1) == 1
    positives_above = np.cumsum(positive, axis=1)[:, :-1]  # pairs ranked 0..i are called similar
    negatives_below = (~positive).sum(axis=1, keepdims=True) - np.cumsum(~positive, axis=1)[:, :-1]
    accuracy = (positives_above + negatives_below) / scores.shape[1]
    splits = ranked[:, :-1] != ranked[:, 1:]  # a cut between tied cosines would leak their order
    return 100.0 * np.where(splits, accuracy, 0.0).max(axis=1, initial=0.0)


def best_accuracy_interval(cosines: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """95% bootstrap interval of the best-threshold accuracy x100 over pairs: each resample draws the pairs
    with replacement and chooses its own best threshold, as the score does (`bootstrap.item_interval`:
    1,000 resamples, seed 0)."""
    cosines, labels = np.asarray(cosines), np.asarray(labels)
    return item_interval(len(labels), lambda draws: best_accuracy(cosines[draws], labels[draws]))
