"""`eval retrieval`: the search, the pytrec_eval scores (equal to MTEB's own `calculate_retrieval_scores` on
the same run), the BEIR reader's errors, and the command end to end with resumption on a tiny model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from family_helpers import assert_input_error, bag_of_words, run_cli
from minidecoder.evaluation.retrieval import INSTRUCTIONS, evaluate_retrieval, exact_top_k, load_beir_set, query_texts, score_run
from minidecoder.sources.paths import shared_data_dir

BEIR = shared_data_dir("beir", "MINIDECODER_BEIR_DATA")
needs_beir = pytest.mark.skipif(BEIR is None or not (BEIR / "scifact").is_dir(), reason="../shared/data/beir absent")


def write_beir(folder: Path, corpus=None, queries=None, qrels=None) -> Path:
    """A small BEIR set `folder/toy` (ASCII, short): ten documents, three judged queries."""
    toy = folder / "toy"
    (toy / "qrels").mkdir(parents=True)
    corpus = corpus if corpus is not None else [
        {"_id": f"d{i}", "title": f"title {i}", "text": f"document {i} about topic {i % 3} and word {i * 7 % 5}"}
        for i in range(10)]
    queries = queries if queries is not None else [{"_id": f"q{i}", "text": f"topic {i} word {i}"} for i in range(4)]
    qrels = qrels if qrels is not None else ["query-id\tcorpus-id\tscore", "q0\td0\t1", "q0\td3\t2", "q1\td1\t1",
                                             "q2\td5\t1"]
    (toy / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (toy / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (toy / "qrels" / "test.tsv").write_text("\r\n".join(qrels) + "\r\n")  # CRLF, as SciFact's
    return folder


def test_chunked_top_k_equals_the_whole_matrix() -> None:
    torch.manual_seed(0)
    queries, documents = torch.randn(5, 8), torch.randn(53, 8)
    doc_ids = [f"d{i}" for i in range(53)]
    run = exact_top_k(queries, documents, ["q0", "d7", "q2", "q3", "d50"], doc_ids, k=10, chunk=7)
    cosine = torch.nn.functional.normalize(queries.double(), dim=-1) @ torch.nn.functional.normalize(documents.double(), dim=-1).T
    cosine[1, 7] = cosine[4, 50] = -torch.inf  # a query's own id is never retrieved
    for qid, row in zip(["q0", "d7", "q2", "q3", "d50"], cosine):
        scores, index = row.topk(10)
        # the same documents in the same order; the cosines to float64 rounding (a 7-row chunk's matrix
        # product may round the last bit differently from the 53-row one's, as on an AMD EPYC's BLAS)
        assert list(run[qid]) == [doc_ids[i] for i in index.tolist()]
        assert list(run[qid].values()) == pytest.approx(scores.tolist(), rel=1e-12, abs=1e-15)
    assert "d7" not in run["d7"] and "d50" not in run["d50"] and len(run["d7"]) == 10


@needs_beir
@pytest.mark.parametrize("name", ["scifact", "nfcorpus"])
def test_scores_equal_mteb_and_pytrec_eval_on_the_same_embeddings(name: str) -> None:
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

    data = load_beir_set(name, BEIR)
    results = evaluate_retrieval(bag_of_words, data, INSTRUCTIONS[name], progress=False)
    texts = query_texts(data, INSTRUCTIONS[name])
    vectors = bag_of_words(texts + data.documents)
    run = exact_top_k(vectors[:len(texts)], vectors[len(texts):], data.query_ids, data.doc_ids)
    mteb = calculate_retrieval_scores(run, data.qrels, [1, 3, 5, 10, 100, 1000])
    # MTEB rounds to five decimals of a fraction: 1e-3 of a score x100
    assert results["metrics"]["nDCG@10"]["score"] == pytest.approx(100 * mteb.ndcg["NDCG@10"], abs=1e-3)
    assert results["metrics"]["MAP@100"]["score"] == pytest.approx(100 * mteb.map["MAP@100"], abs=1e-3)
    assert results["metrics"]["Recall@100"]["score"] == pytest.approx(100 * mteb.recall["Recall@100"], abs=1e-3)
    assert results["metrics"]["Recall@1000"]["score"] == pytest.approx(100 * mteb.recall["Recall@1000"], abs=1e-3)
    assert results["queries"] == {"scifact": 300, "nfcorpus": 323}[name]
    assert results["documents"] == {"scifact": 5183, "nfcorpus": 3633}[name]
    assert 2.0 < results["metrics"]["nDCG@10"]["score"] < 80.0  # far above chance (about 0.2 here)
    lo, hi = results["metrics"]["nDCG@10"]["ci95"]
    assert lo < results["metrics"]["nDCG@10"]["score"] < hi and hi - lo < 15


def test_pytrec_eval_ndcg_by_hand() -> None:
    """nDCG@10 of a known run, written out: d3 (grade 2) at rank 1, d0 (grade 1) at rank 3. trec_eval's
    gain is the grade itself (not 2^grade - 1), which matters on NFCorpus's graded qrels."""
    per_query = score_run({"q": {"d0": 1, "d3": 2}}, {"q": {"d3": 0.9, "d9": 0.8, "d0": 0.7}})
    dcg = 2 / np.log2(2) + 1 / np.log2(4)
    ideal = 2 / np.log2(2) + 1 / np.log2(3)
    assert per_query["q"]["ndcg_cut_10"] == pytest.approx(dcg / ideal, abs=1e-12)
    assert per_query["q"]["recall_100"] == 1.0 and per_query["q"]["map_cut_100"] == pytest.approx((1 + 2 / 3) / 2)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda f: (f / "toy" / "queries.jsonl").unlink(), "queries file"),
    (lambda f: (f / "toy" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tnowhere\t1\n"),
     "'nowhere', which is not in"),
    (lambda f: (f / "toy" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\tone\n"),
     "test.tsv line 2"),
    (lambda f: (f / "toy" / "corpus.jsonl").write_text('{"_id": "d0", "title": "", "text": " "}\n'),
     "corpus.jsonl line 1: 'd0' has no text"),
    (lambda f: (f / "toy" / "corpus.jsonl").write_text('{"_id": "d0", "title": "", "text": "x"}\n{"_id": "d1",\n'),
     "corpus.jsonl line 2 is not JSON"),
    (lambda f: (f / "toy" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq9\td0\t1\n"),
     "queries absent"),
])
def test_bad_data_is_an_error_naming_file_line_and_fix(tmp_path: Path, change, problem: str) -> None:
    folder = write_beir(tmp_path)
    change(folder)
    assert_input_error(lambda: load_beir_set("toy", folder), problem)


def test_limits_keep_the_judged_documents(tmp_path: Path) -> None:
    data = load_beir_set("toy", write_beir(tmp_path), limit=2, corpus_limit=1)
    assert data.query_ids == ["q0", "q1"] and data.doc_ids == ["d0", "d1", "d3"]
    assert data.documents[0] == "title 0 document 0 about topic 0 and word 0"  # title + " " + text


def test_a_corpus_limit_that_cut_is_stamped_beside_the_limit(tiny_llama: Path, tmp_path: Path) -> None:
    """Found: `--corpus-limit` was in the results and the command only, never in the stamp, where the claims
    tools read a run's limits (tools/reproduce_retrieval.family_claims): a corpus-limited table counted as full."""
    folder = write_beir(tmp_path / "data")
    argv = ["eval", "retrieval", "--model", str(tiny_llama), "--method", "mean", "--sets", "toy", "--data", str(folder),
            "--no-progress", "--truncate", "20"]
    assert run_cli(*argv, "--corpus-limit", "2", "--output", str(tmp_path / "cut")) == 0
    assert run_cli(*argv, "--corpus-limit", "50", "--output", str(tmp_path / "whole")) == 0  # cuts nothing: full
    cut, whole = (json.loads((tmp_path / f"{name}.json").read_text())["stamp"] for name in ("cut", "whole"))
    assert cut["corpus_limit"] == 2 and whole["corpus_limit"] is None and cut["limit"] is None
    assert "| corpus_limit | `2` |" in (tmp_path / "cut.md").read_text()


def test_cli_end_to_end_and_resumed_to_identical_scores(tiny_llama: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    import minidecoder.running.embedding
    import minidecoder.running.jobs

    folder = write_beir(tmp_path / "data")
    argv = ["eval", "retrieval", "--model", str(tiny_llama), "--method", "mean", "--sets", "toy", "--data", str(folder),
            "--no-progress", "--truncate", "20"]
    assert run_cli(*argv, "--output", str(tmp_path / "whole")) == 0
    whole = json.loads((tmp_path / "whole.json").read_text())

    original_job, original_embed = minidecoder.running.jobs.embed_resumably, minidecoder.running.embedding.embed_rows
    monkeypatch.setattr(minidecoder.running.jobs, "embed_resumably",
                        lambda *a, **k: original_job(*a, **{**k, "chunk_size": 4}))  # 13 texts: four chunks
    calls = []

    def embed_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original_embed(*args, **kwargs)

    monkeypatch.setattr(minidecoder.running.embedding, "embed_rows", embed_then_stop)
    capsys.readouterr()
    assert run_cli(*argv, "--output", str(tmp_path / "resumed")) != 0
    assert "2 of 4 chunks" in capsys.readouterr().err  # the CLI says what is kept and how to resume
    assert not (tmp_path / "resumed.json").exists()
    monkeypatch.setattr(minidecoder.running.embedding, "embed_rows", original_embed)
    assert run_cli(*argv, "--output", str(tmp_path / "resumed")) == 0
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["results"]["embedding"]["chunks_reused"] == 2
    assert resumed["results"]["sets"]["toy"]["per_query"] == whole["results"]["sets"]["toy"]["per_query"]
    assert resumed["results"]["sets"]["toy"]["metrics"] == whole["results"]["sets"]["toy"]["metrics"]

    stamp = whole["stamp"]
    assert stamp["method"]["method"] == "mean" and stamp["truncate"] == 20 and stamp["limit"] is None
    assert set(stamp["data_sha256"]) == {"toy/corpus.jsonl", "toy/queries.jsonl", "toy/qrels/test.tsv"}
    assert stamp["model_identity"]["weights"] and stamp["code"]["git"]
    assert whole["results"]["embedding"]["truncation"]["texts_cut"] == 10  # every document is over 20 characters
    assert whole["results"]["sets"]["toy"]["instruction"] == INSTRUCTIONS.get("toy")  # no Table 10 entry: none
    markdown = (tmp_path / "whole.md").read_text()
    assert "nDCG@10" in markdown and f"{whole['results']['sets']['toy']['metrics']['nDCG@10']['score']:.2f}" in markdown
