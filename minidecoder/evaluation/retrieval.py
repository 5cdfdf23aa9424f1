"""BEIR retrieval (HTP Table 1): exact cosine search over the whole corpus, scored by `pytrec_eval`.

    data = load_beir_set("scifact")
    results = evaluate_retrieval(encode, data, instruction=INSTRUCTIONS["scifact"])

As BEIR's `DenseRetrievalExactSearch` and MTEB's retrieval evaluator do it: every query against every
document by cosine similarity, the top 1,000 per query (a document whose id is the query's own is
dropped first, BEIR's `ignore_identical_ids`), and that run handed to `pytrec_eval.RelevanceEvaluator`
with the measure strings MTEB builds (`ndcg_cut.1,3,5,10,100,1000`, `map_cut...`, `recall...`, `P...`);
each metric x100 is the mean over the judged queries (MTEB's `parse_metrics_from_scores`, without its
rounding to five decimals). nDCG@10 is the headline; MAP@100 and recall@100/1000 beside it.

The search never holds the (queries x documents) matrix: documents are scored in chunks and the top k
kept as it goes (`exact_top_k`). Queries take the task's instruction when the caller passes one (docs/spec.md section
11: Vanilla Mean/Last, Echo Mean, HTP), by default as unpooled context (read by the model, never pooled, as
HTP's code's `embed_mask = 0` piece); `placement="pooled"` joins it to the text instead ("{instruct} {text}",
pooled with it). Documents take none.
A 95% interval over queries comes with each metric (percentile bootstrap, `bootstrap.mean_interval`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from minidecoder.evaluation.bootstrap import mean_interval
from minidecoder.evaluation.harness import encode_sentences
from minidecoder.evaluation.retrieval_data import BeirSet
from minidecoder.running.texts import with_instruction

Encoder = Callable[[list], torch.Tensor]  # texts (or (context, text) pairs) -> (N, E)
K_VALUES = (1, 3, 5, 10, 100, 1000)  # MTEB's AbsTaskRetrieval.k_values
TOP_K = 1000  # BEIR's and MTEB's top_k: the run pytrec_eval scores
HEADLINE = {"ndcg_cut_10": "nDCG@10", "map_cut_100": "MAP@100", "recall_100": "Recall@100",
            "recall_1000": "Recall@1000"}


def query_texts(data: BeirSet, instruction: str | None, placement: str = "context") -> list:
    """The queries as embedded: (instruction, text) pairs (unpooled context), "{instruct} {text}" with placement
    "pooled", or the bare texts (running.texts.with_instruction)."""
    return with_instruction(data.queries, instruction, placement)


def exact_top_k(queries: torch.Tensor, documents: torch.Tensor, query_ids: Sequence[str], doc_ids: Sequence[str],
                k: int = TOP_K, chunk: int = 4096) -> dict[str, dict[str, float]]:
    """{query id: {document id: cosine}} of each query's k most similar documents (its own id excluded).

    queries (Q, E), documents (M, E). Cosines in float64 over documents chunk by chunk: memory is
    Q x (k + chunk), never Q x M. A zero vector has cosine 0 with everything (SentEval's nan_to_num)."""
    q = torch.nn.functional.normalize(queries.double(), dim=-1)  # (Q, E), unit rows
    best_scores = torch.full((len(q), 0), -torch.inf, dtype=torch.float64)  # (Q, <=k)
    best_rows = torch.zeros((len(q), 0), dtype=torch.long)
    doc_index = {did: row for row, did in enumerate(doc_ids)}
    own = [(i, doc_index[qid]) for i, qid in enumerate(query_ids) if qid in doc_index]  # ignore_identical_ids
    for start in range(0, len(documents), chunk):
        d = torch.nn.functional.normalize(documents[start:start + chunk].double(), dim=-1)  # (C, E)
        scores = q @ d.T  # (Q, C)
        for i, row in own:
            if start <= row < start + len(d):
                scores[i, row - start] = -torch.inf
        rows = torch.arange(start, start + len(d)).expand(len(q), -1)  # (Q, C)
        scores, rows = torch.cat([best_scores, scores], 1), torch.cat([best_rows, rows], 1)
        best_scores, picked = scores.topk(min(k, scores.shape[1]), dim=1)  # (Q, <=k)
        best_rows = rows.gather(1, picked)
    return {qid: {doc_ids[r]: float(s) for r, s in zip(rows.tolist(), scores.tolist()) if s != -np.inf}
            for qid, rows, scores in zip(query_ids, best_rows, best_scores)}


def score_run(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]],
              k_values: Sequence[int] = K_VALUES) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query measures of `run`, with the measure strings MTEB's
    `calculate_retrieval_scores` passes (so the numbers are MTEB's and BEIR's)."""
    import pytrec_eval

    cuts = ",".join(str(k) for k in k_values)
    measures = {f"map_cut.{cuts}", f"ndcg_cut.{cuts}", f"recall.{cuts}", f"P.{cuts}"}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


def summarize(per_query: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Each headline metric x100: the mean over queries and its 95% bootstrap interval over queries."""
    out = {}
    for key, label in HEADLINE.items():
        values = 100.0 * np.array([scores[key] for scores in per_query.values()])
        out[label] = {"score": float(values.mean()), "ci95": mean_interval(values)}
    return out


def evaluate_retrieval(encode: Encoder, data: BeirSet, instruction: str | None = None, progress: bool = True,
                       chunk_size: int = 256, top_k: int = TOP_K, placement: str = "context") -> dict:
    """Embed the queries (with `instruction`, placed as `placement` says) and the documents, search, score.
    Returns {"set", "metrics": {"nDCG@10": {"score", "ci95"}, ...}, "per_query": {qid: {measure: value}},
    "queries", "documents", "instruction", "instruction_placement", "encode_seconds", "search_seconds", plus
    the stamp's data facts}."""
    texts = query_texts(data, instruction, placement) + data.documents
    start = time.perf_counter()
    vectors = encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress)  # (Q + M, E)
    encoded = time.perf_counter()
    run = exact_top_k(vectors[:len(data.queries)], vectors[len(data.queries):], data.query_ids, data.doc_ids, top_k)
    per_query = score_run(data.qrels, run)
    searched = time.perf_counter()
    return {
        "set": data.name,
        "metrics": summarize(per_query),
        "main_score": "nDCG@10",
        "per_query": per_query,
        "queries": len(data.queries),
        "documents": len(data.documents),
        "corpus_size": data.corpus_size,
        "instruction": instruction,
        "instruction_placement": placement if instruction else None,
        "encode_seconds": encoded - start,
        "search_seconds": searched - encoded,
        "documents_per_second": len(texts) / (encoded - start) if encoded > start else None,
        "limit": data.limit,
        "corpus_limit": data.corpus_limit,
        "data_dir": str(data.data_dir),
        "data_files": data.files,
    }
