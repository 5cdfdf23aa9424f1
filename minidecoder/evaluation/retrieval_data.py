"""A BEIR retrieval set read from its own layout (SciFact, NFCorpus, or any BEIR folder).

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

from dataclasses import dataclass, field as dataclass_field
from pathlib import Path

from minidecoder.errors import InputError
from minidecoder.evaluation.data_files import field, json_line, limit_that_cut, numbered_lines, require_file, resolve_data_folder

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
    root = resolve_beir_dir(data_dir)
    folder = root / name
    if not folder.is_dir():
        found = sorted(p.name for p in root.iterdir() if (p / "corpus.jsonl").is_file())
        raise InputError(f"no BEIR set {name!r} in {root}", f"choose one of {', '.join(found) or '(none there)'}, "
                         "or point --data at the folder that holds it")
    paths = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl",
             "qrels": folder / "qrels" / f"{split}.tsv"}
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
