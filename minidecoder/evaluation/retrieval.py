"""BEIR retrieval (HTP Table 1): exact cosine search over the whole corpus, scored by `pytrec_eval`: the
data, the search, the scorer and `minidecoder eval retrieval`.

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

The data: A BEIR retrieval set read from its own layout (SciFact, NFCorpus, or any BEIR folder).

    <set>/corpus.jsonl      {"_id", "title", "text", ...} a line; a document's text is title + " " + text
    <set>/queries.jsonl     {"_id", "text", ...} a line
    <set>/qrels/<split>.tsv header `query-id corpus-id score`, then one judgement a line

Only the queries the split's qrels name are evaluated (BEIR's `GenericDataLoader`). Every id the qrels
name must exist (a judged document absent from the corpus would silently score as never retrieved), and
every document must hold text (an empty one would be embedded as a prompt alone). `limit` keeps the
first N judged queries; `corpus_limit` keeps the judged documents of the kept queries plus the first M
other documents (a quick look; stamped as such, unless it kept every query and document).
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path

import numpy as np
import torch

from minidecoder.errors import InputError
from minidecoder.evaluation.bootstrap import mean_interval
from minidecoder.evaluation.family import (Family, Kept, add_family_options, checked_count, checked_limit,
                                           encode_sentences, family_parser, field, instruction_for, instructions_line,
                                           json_line, limit_that_cut, limited_note, markdown_report, numbered_lines,
                                           refuse_repeats, require_file, resolve_data_folder)
from minidecoder.running.texts import refuse_placement_without_instruction, with_instruction


# HTP Table 10: each set's query instruction (docs/spec.md section 11)
INSTRUCTIONS = {
    "scifact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "nfcorpus": "Given a question, retrieve relevant documents that answer the question",
}
SETS = tuple(INSTRUCTIONS)


@dataclass
class BeirSet:
    name: str
    data_dir: Path  # the folder above the set (the stamp's data_dir)
    doc_ids: list[str]
    documents: list[str]  # title + " " + text, BEIR's and MTEB's join
    query_ids: list[str]
    queries: list[str]  # without instruction
    qrels: dict[str, dict[str, int]]  # {query id: {document id: relevance}}, pytrec_eval's input
    files: list[str]  # relative to data_dir, for the stamp's checksums
    limit: int | None = None
    corpus_limit: int | None = None
    corpus_size: int = 0  # documents in corpus.jsonl before corpus_limit
    notes: list[str] = dataclass_field(default_factory=list)


def resolve_beir_dir(data_dir: str | Path | None) -> Path:
    return resolve_data_folder(data_dir, "beir", "the folder holding BEIR sets (scifact/, nfcorpus/, ...)")


def load_beir_set(name: str, data_dir: str | Path | None = None, split: str = "test", limit: int | None = None,
                  corpus_limit: int | None = None) -> BeirSet:
    """Read and check one BEIR set (`data_dir/name/`)."""
    limit, corpus_limit = checked_limit(limit), checked_limit(corpus_limit, "corpus_limit", minimum=0)
    root = resolve_beir_dir(data_dir)
    folder = root / name
    if not folder.is_dir():
        found = sorted(p.name for p in root.iterdir() if (p / "corpus.jsonl").is_file())
        raise InputError(f"no BEIR set {name!r} in {root}", f"choose one of {', '.join(found) or '(none there)'}, "
                         "or point --data at the folder that holds it")
    paths = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl",
             "qrels": folder / "qrels" / f"{split}.tsv"}
    if not paths["qrels"].exists() and (folder / "qrels").is_dir():  # a split this set does not have: name --split
        splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        raise InputError(f"BEIR set {name!r} has no {split!r} split (no {paths['qrels']})",
                         f"choose --split {' or '.join(splits) or '(none there)'}")
    for what, path in paths.items():
        require_file(path, f"BEIR {what} file")
    qrels = read_qrels(paths["qrels"])
    query_text = read_records(paths["queries"], ("text",))
    judged = [qid for qid in qrels if qid in query_text]
    missing = [qid for qid in qrels if qid not in query_text]
    if missing:
        raise InputError(f"{paths['qrels']} names {len(missing)} queries absent from {paths['queries']} "
                         f"(first: {missing[0]!r})", "use the qrels and queries of the same BEIR set")
    limit = limit_that_cut(limit, [len(judged)])  # a limit that keeps every query is no limit
    if limit is not None:
        judged = judged[:limit]
        qrels = {qid: qrels[qid] for qid in judged}
    corpus = read_records(paths["corpus"], ("title", "text"), optional=("title",))
    absent = [(qid, did) for qid, docs in qrels.items() for did in docs if did not in corpus]
    if absent:
        raise InputError(f"{paths['qrels']}: query {absent[0][0]!r} is judged against document {absent[0][1]!r}, "
                         f"which is not in {paths['corpus']} ({len(absent)} such judgements)",
                         "use the qrels and corpus of the same BEIR set (a judged document that cannot be "
                         "retrieved would silently lower every score)")
    doc_ids = list(corpus)
    corpus_limit = limit_that_cut(corpus_limit, [len(doc_ids)])
    if corpus_limit is not None:
        wanted = {did for docs in qrels.values() for did in docs}
        head = set(doc_ids[:corpus_limit])
        doc_ids = [did for did in doc_ids if did in head or did in wanted]
    return BeirSet(name=name, data_dir=root, doc_ids=doc_ids, documents=[corpus[did] for did in doc_ids],
                   query_ids=judged, queries=[query_text[qid] for qid in judged], qrels=qrels,
                   files=[str(p.relative_to(root)) for p in paths.values()], limit=limit,
                   corpus_limit=corpus_limit, corpus_size=len(corpus))


def read_records(path: Path, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, str]:
    """{_id: the `keys` fields joined by a space} of a BEIR JSON Lines file; a blank text, a repeated id
    or a line that does not parse is an error naming the line."""
    out: dict[str, str] = {}
    for number, line in numbered_lines(path):
        record = json_line(path, number, line)
        rid = field(path, number, record, "_id")
        parts = [field(path, number, record, key) if key not in optional or key in record else "" for key in keys]
        text = " ".join(parts).strip() if optional else " ".join(parts)  # BEIR: (title + " " + text).strip()
        if not text.strip():
            raise InputError(f"{path} line {number}: {rid!r} has no text (an empty document or query)",
                             "remove that line or give it text; an empty text would be embedded as a prompt alone")
        if rid in out:
            raise InputError(f"{path} line {number} repeats the id {rid!r}", "give every line its own _id")
        out[rid] = text
    return out


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """{query id: {document id: relevance}} of a BEIR qrels TSV (header, then `qid<TAB>did<TAB>score`)."""
    qrels: dict[str, dict[str, int]] = {}
    for number, line in numbered_lines(path):
        cells = line.split("\t")
        if number == 1 and cells[0] == "query-id":
            continue
        try:
            qid, did, score = cells
            relevance = int(score)
        except ValueError:
            raise InputError(f"{path} line {number} is not `query-id<TAB>corpus-id<TAB>score` with an integer "
                             f"score: {line!r}", "fix or remove that line") from None
        qrels.setdefault(qid, {})[did] = relevance
    if not qrels:
        raise InputError(f"{path} holds no judgements", "use the qrels file of a BEIR split")
    return qrels


Encoder = Callable[[list], torch.Tensor]  # texts (or (context, text) pairs) -> (N, E)
K_VALUES = (1, 3, 5, 10, 100, 1000)  # MTEB's AbsTaskRetrieval.k_values
TOP_K = 1000  # BEIR's and MTEB's top_k: the run pytrec_eval scores
HEADLINE = {"ndcg_cut_10": "nDCG@10", "map_cut_100": "MAP@100", "recall_100": "Recall@100",
            "recall_1000": "Recall@1000"}


def query_texts(data: BeirSet, instruction: str | None, placement: str = "context", own_method: bool = False) -> list:
    """The queries as embedded: (instruction, text) pairs (unpooled context), "{instruct} {text}" with placement
    "pooled", or the bare texts (running.texts.with_instruction). `own_method` (queries embedded by their own
    method, --query-opt): always a (context, text) pair, "" for none, so no query is taken for a document."""
    texts = with_instruction(data.queries, instruction, placement)
    return [text if isinstance(text, tuple) else ("", text) for text in texts] if own_method else texts


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
                       chunk_size: int = 256, top_k: int = TOP_K, placement: str = "context",
                       own_method: bool = False) -> dict:
    """Embed the queries (with `instruction`, placed as `placement` says: "context", the default, or "pooled",
    refused without an instruction) and the documents, search, score.
    Returns {"set", "metrics": {"nDCG@10": {"score", "ci95"}, ...}, "per_query": {qid: {measure: value}},
    "queries", "documents", "instruction", "instruction_placement", "encode_seconds", "search_seconds", plus
    the stamp's data facts}."""
    top_k = checked_count(top_k, "top_k", "documents a query keeps", TOP_K)  # 0 would score every query 0
    refuse_placement_without_instruction("evaluate_retrieval", instruction, placement)
    texts = query_texts(data, instruction, placement, own_method) + data.documents
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


# what `minidecoder eval ... --help` prints
COMMAND_HELP = """`minidecoder eval retrieval`: BEIR retrieval (HTP Table 1) of one method; PREFIX.json and PREFIX.md.

    minidecoder eval retrieval --method mean --sets scifact --limit 20 --corpus-limit 200 --output /tmp/r

nDCG@10 x100 (headline), MAP@100 and recall@100/1000 by pytrec_eval over the judged test queries, exact
cosine search over the whole corpus (minidecoder.evaluation.retrieval), each with a 95% bootstrap interval
over queries. Queries take the set's HTP instruction for mean, last, echo, htp, reba and tp with pooling=mean
(--instruction), read as unpooled context (--instruction-placement pooled joins it as "{instruct} {text}");
documents are title + " " + text, cut to their first 512 tokens (--truncate) as HTP did.
--query-opt gives the queries options of their own over --opt (HTP's code's query and document templates).
Resumable: the same command (same --output) resumes from the chunks an interrupted run kept.
"""


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = family_parser(benchmarks, FAMILY, "BEIR retrieval (SciFact, NFCorpus): HTP Table 1", COMMAND_HELP)
    parser.add_argument("--sets", default="scifact,nfcorpus", help="comma-separated BEIR sets under --data")
    parser.add_argument("--split", default="test", help="the qrels split to score (default: test)")
    parser.add_argument("--corpus-limit", type=int, default=None, metavar="M",
                        help="search only the first M documents plus those judged for the kept queries (quick look)")
    parser.add_argument("--query-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a method option for the queries alone, over --opt (HTP's code gives queries and "
                             "documents their own templates, e.g. --query-opt 'template=Query: {text} Query again: "
                             "{text}' with --opt 'template={text}{text}' for Echo); repeat for more")
    add_family_options(parser, "retrieval", "BEIR data folder (default: $MINIDECODER_BEIR_DATA or ../shared/data/beir)",
                       "score only the first N judged queries", truncate=512, instruction=True)


def read(args: argparse.Namespace) -> list:
    from minidecoder.errors import InputError

    if args.corpus_limit is not None and args.corpus_limit < 0:
        raise InputError(f"--corpus-limit {args.corpus_limit} must be 0 or more", "e.g. --corpus-limit 200")
    names = [name.strip() for name in args.sets.split(",") if name.strip()]
    if not names:
        raise InputError(f"--sets {args.sets!r} names no set", "e.g. --sets scifact,nfcorpus")
    refuse_repeats(names, "--sets")
    return [load_beir_set(name, args.data, args.split, args.limit, args.corpus_limit) for name in names]


def _instruction(args: argparse.Namespace, data) -> str | None:
    return instruction_for(args, INSTRUCTIONS.get(data.name))


def queries(loaded: list, args: argparse.Namespace) -> list:
    return [text for data in loaded for text in query_texts(data, _instruction(args, data), args.instruction_placement,
                                                             own_method=bool(args.query_opt))]


def texts(loaded: list, args: argparse.Namespace) -> list:
    return queries(loaded, args) + [text for data in loaded for text in data.documents]


def evaluate(encode, loaded: list, args: argparse.Namespace, kept: Kept) -> dict:  # the job's table is its kept work
    from minidecoder.evaluation.family import run_limit

    sets = {}
    for data in loaded:
        instruction = _instruction(args, data)  # a set with none of its own (under --instruction auto) places none
        sets[data.name] = evaluate_retrieval(encode, data, instruction, progress=False, own_method=bool(args.query_opt),
                                             placement=args.instruction_placement if instruction else "context")
    for result in sets.values():
        for key in ("data_dir", "data_files", "encode_seconds", "documents_per_second"):
            result.pop(key)  # the stamp has the data; the job's own time is results["embedding"]
    # the limits that cut some set (`family.limit_that_cut`): one that scored everything is a full run
    return {"sets": sets, "limit": run_limit(data.limit for data in loaded),
            "corpus_limit": run_limit(data.corpus_limit for data in loaded),
            "data_dir": str(loaded[0].data_dir), "data_files": [f for data in loaded for f in data.files]}


def table(results: dict) -> str:
    labels = list(HEADLINE.values())
    lines = ["| set | queries | documents | " + " | ".join(labels) + " |", "|---|---:|---:|" + "---:|" * len(labels)]
    for name, result in results["sets"].items():
        cells = [f"{m['score']:.2f} [{m['ci95'][0]:.2f}, {m['ci95'][1]:.2f}]" for m in result["metrics"].values()]
        lines.append(f"| {name} | {result['queries']} | {result['documents']} | " + " | ".join(cells) + " |")
    if results.get("limit") is not None or results.get("corpus_limit") is not None:
        lines.append(limited_note(f"--limit {results.get('limit')}, --corpus-limit {results.get('corpus_limit')}"))
    return "\n".join(lines)


def markdown(results: dict, stamp: dict) -> str:
    about = ("x100, mean over the judged queries, by pytrec_eval (as BEIR and MTEB call it) on each query's top "
             "1,000 documents by cosine over the corpus searched; [95% bootstrap interval over queries]. "
             + instructions_line(results["sets"])
             + f". Truncation: {results['embedding']['truncation']}.")
    job = results["embedding"]
    timing = (f"- embedding: {job['texts']} distinct texts"
              + (f" in {job['seconds']:.1f} s ({job['texts_per_second']:.1f} texts/s)\n" if job["seconds"] else
                 f" (resumed from {job['chunks_reused']} kept chunks: this sitting's time is not a rate)\n")
              + "".join(f"- {name}: exact search and scoring {r['search_seconds']:.1f} s\n"
                        for name, r in results["sets"].items()))
    return markdown_report("Retrieval (BEIR)", about, table(results), stamp,
                           f"## Timing\n\n{timing}\n")


FAMILY = Family("retrieval", read, texts, evaluate, table, markdown,
                ("--sets", "--split", "--limit", "--corpus-limit", "--instruction", "--instruction-placement", "--query-opt"),
                queries=queries)
