"""STS evaluation: SentEval-exact data loaders, Spearman without scipy, the harness and reports.

- `sts_data`: the seven STS test sets (and STS-B dev) read as SentEval reads them.
- `spearman`: average-rank Spearman correlation in float64.
- `harness`: `evaluate_sts(encode, ...)`, and `StsScorer` to score many embedding sets cheaply.
- `report`: JSON and Markdown output stamped with model, method, data checksums and code version.
"""
from minidecoder.evaluation.family import encode_sentences
from minidecoder.evaluation.sts import StsScorer, evaluate_sts, score_embeddings, unique_sentences
from minidecoder.evaluation.sts import ALL_SEVEN, TASKS, StsSubset, StsTask, load_task, load_tasks

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
