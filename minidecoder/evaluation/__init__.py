"""Benchmark evaluation: one module per benchmark family, each its data, scorer, table and command.

- `sts`: the seven STS test sets read as SentEval reads them, `evaluate_sts(encode, ...)`, `StsScorer`
  to score many embedding sets cheaply, and `minidecoder eval sts`.
- `transfer` (with `senteval_probe`, SentEval's probe), `sts_long`, `retrieval`, `classification`,
  `cmteb`: the other families, each one module.
- `family`: the `Family` protocol every family's command runs through, and what they share (reading the
  data folders, encoding each distinct text once).
- `bootstrap`: the shared statistics (Spearman without scipy, bootstrap intervals).
- `report`: JSON, Markdown and figures stamped with model, method, data checksums and code version.
- `sweep` (its shared trunks, `fast/forking.py`, lie beneath it with the other fast paths) and `mteb_lookup`
  (embeddings served to mteb's evaluators, for classification and C-MTEB).
"""
from minidecoder.evaluation.family import encode_sentences
from minidecoder.evaluation.sts import (ALL_SEVEN, TASKS, StsScorer, StsSubset, StsTask, evaluate_sts, load_task,
                                        load_tasks, score_embeddings, unique_sentences)

__all__ = [
    "ALL_SEVEN",
    "TASKS",
    "StsScorer",
    "StsSubset",
    "StsTask",
    "encode_sentences",
    "evaluate_sts",
    "load_task",
    "load_tasks",
    "score_embeddings",
    "unique_sentences",
]
