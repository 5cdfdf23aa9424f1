"""Where a task's instruction goes: by default each query's (text's) unpooled context, as HTP's code puts it
(`embed_mask = 0`); `placement="pooled"` keeps the earlier "{instruct} {text}", pooled with the text. Both are
recorded in the results, and the CLI reaches both (`--instruction-placement`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import minidecoder
from family_helpers import bag_of_words, run_cli
from minidecoder.errors import InputError
from minidecoder.evaluation.classification import INSTRUCTIONS, evaluate_classification, load_classification_set, texts_needed
from minidecoder.evaluation.retrieval import evaluate_retrieval, load_beir_set, query_texts
from test_classification import write_emotion
from test_retrieval import write_beir

INSTRUCT = "Given a query, retrieve documents"


class Recording:
    """An encoder (bag of words) that keeps every input it was asked for."""

    def __init__(self) -> None:
        self.seen: list = []

    def __call__(self, texts: list) -> torch.Tensor:
        self.seen += texts
        return bag_of_words(texts)


def test_queries_carry_the_instruction_as_context_unless_pooled(tmp_path: Path) -> None:
    data = load_beir_set("toy", write_beir(tmp_path))
    assert query_texts(data, INSTRUCT) == [(INSTRUCT, q) for q in data.queries]
    assert query_texts(data, INSTRUCT, "pooled") == [f"{INSTRUCT} {q}" for q in data.queries]
    assert query_texts(data, None) == data.queries
    encode = Recording()
    result = evaluate_retrieval(encode, data, INSTRUCT, progress=False)
    assert result["instruction_placement"] == "context" and encode.seen[:len(data.queries)] == query_texts(data, INSTRUCT)
    assert encode.seen[len(data.queries):] == data.documents  # documents take none
    pooled = evaluate_retrieval(Recording(), data, INSTRUCT, progress=False, placement="pooled")
    assert pooled["instruction_placement"] == "pooled"
    with pytest.raises(InputError, match="placement 'joined' is unknown"):
        evaluate_retrieval(Recording(), data, INSTRUCT, progress=False, placement="joined")


def test_classification_embeds_pairs_and_mteb_asks_for_the_bare_texts(tmp_path: Path) -> None:
    data = load_classification_set("Emotion", write_emotion(tmp_path), limit=12)
    instruction = INSTRUCTIONS["Emotion"]
    pairs = texts_needed(data, instruction)
    assert all(isinstance(t, tuple) and t[0] == instruction for t in pairs)
    assert texts_needed(data, instruction, "pooled") == [f"{instruction} {t}" for _, t in pairs]
    encode = Recording()
    result = evaluate_classification(encode, data, instruction, progress=False)  # mteb finds every text's vector
    assert encode.seen == pairs and result["instruction_placement"] == "context"
    assert evaluate_classification(Recording(), data, instruction, progress=False,
                                   placement="pooled")["instruction_placement"] == "pooled"


def test_a_pooled_placement_without_an_instruction_is_refused_from_python(tmp_path: Path) -> None:
    """Found: `evaluate_retrieval(encode, data, placement="pooled")` (and evaluate_classification's) took the
    placement, embedded the bare texts and changed nothing: with no instruction there is nothing to place (the CLI
    refuses `--instruction-placement pooled` without one already)."""
    beir = load_beir_set("toy", write_beir(tmp_path / "beir"))
    with pytest.raises(InputError, match=r"evaluate_retrieval\(placement='pooled'\) places the instruction, and "
                                         r"instruction=None gives none: the placement would change nothing"):
        evaluate_retrieval(Recording(), beir, progress=False, placement="pooled")
    emotion = load_classification_set("Emotion", write_emotion(tmp_path / "mteb"), limit=12)
    with pytest.raises(InputError, match=r"evaluate_classification\(placement='pooled'\) places the instruction"):
        evaluate_classification(Recording(), emotion, "", progress=False, placement="pooled")


def test_a_set_with_no_instruction_of_its_own_runs_under_a_pooled_placement(tiny_llama: Path, tmp_path: Path) -> None:
    """The CLI's placement is the run's; under --instruction auto a set with no instruction of its own ("toy")
    has none to place, so the set runs as it would without the flag, and is not refused as the API call is."""
    prefix = tmp_path / "run"
    assert run_cli("eval", "retrieval", "--model", str(tiny_llama), "--method", "mean", "--sets", "toy",
                   "--data", str(write_beir(tmp_path / "data")), "--instruction-placement", "pooled",
                   "--output", str(prefix), "--no-progress") == 0
    assert json.loads(prefix.with_suffix(".json").read_text())["results"]["sets"]["toy"]["instruction_placement"] is None


def test_cli_placements_differ_and_are_recorded(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "data")
    runs = {}
    for placement in ("context", "pooled"):
        prefix = tmp_path / placement
        assert run_cli("eval", "retrieval", "--model", str(tiny_llama), "--method", "mean", "--sets", "toy",
                       "--data", str(folder), "--instruction", INSTRUCT, "--instruction-placement", placement,
                       "--output", str(prefix), "--no-progress") == 0
        runs[placement] = json.loads(prefix.with_suffix(".json").read_text())
        assert runs[placement]["results"]["sets"]["toy"]["instruction_placement"] == placement
        assert runs[placement]["stamp"]["instruction_placement"] == placement
        assert ("unpooled context" if placement == "context" else "and pooled") in prefix.with_suffix(".md").read_text()
    per_query = [runs[p]["results"]["sets"]["toy"]["per_query"] for p in ("context", "pooled")]
    assert per_query[0] != per_query[1]
    # each run's scores are those of `minidecoder.embed` on its own inputs: pairs, or the joined strings
    model, data = minidecoder.load(tiny_llama), load_beir_set("toy", folder)
    for placement, run in zip(("context", "pooled"), per_query):
        direct = evaluate_retrieval(lambda texts: minidecoder.embed(model, texts, "mean", truncate=512), data,
                                    INSTRUCT, progress=False, placement=placement)["per_query"]
        assert {q: m["ndcg_cut_10"] for q, m in direct.items()} == pytest.approx(
            {q: m["ndcg_cut_10"] for q, m in run.items()}, abs=1e-9)
