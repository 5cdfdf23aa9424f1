"""MTEB runs a minidecoder method with one line, and its own STS evaluator agrees with
`minidecoder eval sts`'s harness on STS-B test read from the local files (no Hub).

MTEB reports the cosine Spearman as a fraction; the harness x100."""
from __future__ import annotations

from pathlib import Path

import pytest

import minidecoder

# (model, method, pairs): the first 200 STS-B test pairs on the tiny model (10-35 s here); the first
# 100 on SmolLM2, where the score is a real one (about 45 s on 2 idle cores, minutes on a busy machine,
# hence `slow`; measured: MTEB 0.75268786826769, harness 75.268786826769).
CASES = [
    pytest.param("tiny", "mean", 200, id="tiny-200-pairs"),
    pytest.param(None, "prompteol", 100, marks=pytest.mark.slow, id="smollm2-100-pairs"),
]


def local_stsb_task(rows: list[list[str]]):
    """An MTEB STS task over STS-B test rows read here (columns as SentEval reads them: score 4,
    sentences 5 and 6, whitespace joined as SentEval's word lists are), so nothing is downloaded."""
    from mteb_tasks import local_sts_task

    return local_sts_task("LocalSTSBenchmark", [" ".join(row[5].split()) for row in rows],
                          [" ".join(row[6].split()) for row in rows], [float(row[4]) for row in rows],
                          description="STS-B test, read from the local SentEval files")


def test_model_meta_is_what_mteb_needs(tiny_llama: Path):
    from mteb.models.model_meta import ScoringFunction

    from minidecoder.integrations.mteb import MtebEncoder

    model = minidecoder.load(tiny_llama)
    mean, last = MtebEncoder(model, "mean", layer=2), MtebEncoder(model, "last")
    meta = mean.mteb_model_meta
    assert meta.similarity_fn_name is ScoringFunction.COSINE
    assert meta.embed_dim == 32 and meta.n_parameters == sum(p.numel() for p in model.parameters())
    assert meta.training_datasets == set() and meta.use_instructions is False
    assert meta.name.startswith("minidecoder/") and meta.experiment_kwargs["layer"] == 2
    # two methods on one model are two experiments in MTEB's result cache
    assert meta.experiment_name != last.mteb_model_meta.experiment_name


@pytest.mark.parametrize("model, method, pairs", CASES)
def test_mteb_sts_evaluator_equals_harness(tiny_llama: Path, model, method: str, pairs: int | None):
    import mteb

    from minidecoder.evaluation.sts import evaluate_sts
    from minidecoder.evaluation.sts import resolve_data_dir
    from minidecoder.integrations.mteb import MtebEncoder

    path = resolve_data_dir() / "STSBenchmark" / "sts-test.csv"
    rows = [line.strip().split("\t") for line in path.read_text(encoding="utf-8").splitlines()][:pairs]
    encoder = MtebEncoder(tiny_llama if model == "tiny" else model, method)  # the one line a user writes
    result = mteb.evaluate(encoder, local_stsb_task(rows), cache=None, show_progress_bar=False)
    (scores,) = result.task_results[0].scores["test"]
    ours = evaluate_sts(lambda s: encoder.encoder.encode(s, convert_to_tensor=True), ["STSBenchmark"],
                        limit=pairs, progress=False)
    harness = ours["tasks"]["STSBenchmark"]
    assert harness["pairs"] == len(rows) == pairs
    assert (30 if model is None else 1) < abs(harness["score"]) < 100  # not a degenerate score
    assert abs(100 * scores["cosine_spearman"] - harness["score"]) < 0.01
    assert scores["main_score"] == scores["cosine_spearman"]


def test_the_encoders_prompts_are_picked_by_mtebs_rules(tiny_llama: Path):
    """`prompts` changed MTEB's cache key but were never applied: queries and documents got the same vectors."""
    import numpy as np
    from mteb.types import PromptType

    from minidecoder.integrations.mteb import MtebEncoder

    texts = ["what is a cat?", "dogs bark"]
    prompts = {"query": "query: ", "document": "passage: ", "STS": "Same meaning: "}
    wrapped = MtebEncoder(minidecoder.load(tiny_llama), "mean", prompts=prompts)
    batches = [{"text": texts}]
    for prompt_type, name in ((PromptType.query, "query"), (PromptType.document, "document")):
        np.testing.assert_array_equal(wrapped.encode(batches, prompt_type=prompt_type),
                                      wrapped.encoder.encode(texts, prompt_name=name))
    task = local_stsb_task([["", "", "", "", "3", "a b", "c d"]] * 2).metadata
    np.testing.assert_array_equal(wrapped.encode(batches, task_metadata=task),  # the task type's prompt
                                  wrapped.encoder.encode(texts, prompt_name="STS"))
    np.testing.assert_array_equal(MtebEncoder(wrapped.encoder.model, "mean").encode(batches), wrapped.encoder.encode(
        texts, prompt=""))  # no prompts: none


def test_settings_beside_an_encoder_are_refused(tiny_llama: Path):
    """`MtebEncoder(encoder, "tp", layer=2)` ran the encoder's own method and options, silently."""
    from minidecoder.errors import InputError
    from minidecoder.integrations.mteb import MtebEncoder
    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    encoder = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean")
    with pytest.raises(InputError, match=r"MtebEncoder\(encoder, ...\) was given layer, method beside"):
        MtebEncoder(encoder, "tp", layer=2)
    with pytest.raises(InputError, match=r"MinidecoderModule\(encoder, ...\) was given dtype, truncate beside"):
        MinidecoderModule(encoder, dtype="bfloat16", truncate=5)
    assert MtebEncoder(encoder).encoder is encoder and MinidecoderModule(encoder, options={}).encoder is encoder


def test_max_tokens_is_the_context_the_model_enforces(tiny_llama_copy: Path):
    """A tokenizer that declares more than config.json allows: MTEB is told the smaller, the one enforced."""
    import json

    from minidecoder.integrations.mteb import MtebEncoder

    path = tiny_llama_copy / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_max_length": 100_000}))
    model = minidecoder.load(tiny_llama_copy)
    assert model.max_context == 4096
    assert MtebEncoder(model, "mean").mteb_model_meta.max_tokens == 4096


def test_mtebs_encode_kwargs_reach_encode(tiny_llama: Path):
    """`mteb.evaluate(..., encode_kwargs={"precision": "binary"})` filed a binary score of float32 vectors: only
    batch_size and show_progress_bar were passed on, the rest dropped."""
    import numpy as np

    from minidecoder.errors import ArgumentTypeError
    from minidecoder.integrations.mteb import MtebEncoder

    texts = ["a cat", "dogs bark", "rain"]
    wrapped = MtebEncoder(minidecoder.load(tiny_llama), "mean")
    batches = [{"text": texts}]
    np.testing.assert_array_equal(wrapped.encode(batches, precision="binary"),
                                  wrapped.encoder.encode(texts, precision="binary"))  # (3, 32 / 8) packed bits
    assert wrapped.encode(batches, precision="binary").shape == (3, 4)
    np.testing.assert_allclose(np.linalg.norm(wrapped.encode(batches, normalize_embeddings=True), axis=1), 1, atol=1e-6)
    with pytest.raises(ArgumentTypeError, match=r"keyword argument\(s\) \['convert_to_bananas'\]"):
        wrapped.encode(batches, convert_to_bananas=True)


def test_a_batch_size_mteb_would_always_override_is_refused(tiny_llama: Path):
    """`MtebEncoder(..., batch_size=8)` never acted under `mteb.evaluate`, which passes a batch size to every
    encode call (32 where its encode_kwargs name none); called directly, encode now fills batches by tokens."""
    import numpy as np

    from minidecoder.errors import ArgumentTypeError
    from minidecoder.integrations.mteb import MtebEncoder

    model = minidecoder.load(tiny_llama)
    with pytest.raises(ArgumentTypeError, match=r"batch_size=8\) would never act.*\n.*encode_kwargs=\{'batch_size': N\}"):
        MtebEncoder(model, "mean", batch_size=8)
    wrapped, texts = MtebEncoder(model, "mean"), ["a cat", "dogs bark loudly at night", "rain"]
    np.testing.assert_array_equal(wrapped.encode([{"text": texts}]), wrapped.encoder.encode(texts))
