"""Issue 29 (hardening, round three), the sourcing classes: what a model is (caches keyed by its weights),
whose folders may be replaced, what a config value's type must be, what a failed load is blamed on,
what a killed conversion leaves behind, and weights that are not finite. docs/reliability.md lists
them against these tests (rows 11-17)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import minidecoder
from minidecoder.cli import main
from minidecoder.errors import MinidecoderError
from repo_paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def cli(capsys, *argv: str) -> tuple[int, str]:
    """minidecoder's own entry point in process: (exit status, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


# ---- 11. MTEB's result cache keyed by what determines the score -----------------------------------------
def synthetic_sts_task():
    """A 16-pair MTEB STS task built here (nothing read or downloaded): enough for a rank correlation."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    words = ["a cat sat", "the dog ran", "birds sing", "rain falls", "cars honk", "kids play", "sun sets",
             "waves crash"]
    first = [w for w in words for _ in range(2)]
    second = [w if i % 2 else words[(k + 3) % len(words)] for k, w in enumerate(words) for i in range(2)]

    class SyntheticSTS(AbsTaskSTS):
        metadata = TaskMetadata(
            name="SyntheticSTS", type="STS", main_score="cosine_spearman", category="t2t",
            description="pairs built in the test", reference="https://example.org", eval_splits=["test"],
            dataset={"path": "local/SyntheticSTS", "revision": "local"}, eval_langs=["eng-Latn"],
            date=("2020-01-01", "2020-12-31"), dialect=["Written"], domains=[], task_subtypes=[],
            license="cc-by-sa-4.0", annotations_creators="human-annotated", modalities=["text"],
            sample_creation="found", bibtex_citation="")
        min_score = 0
        max_score = 5

        def load_data(self, num_proc=None, **kwargs) -> None:
            self.dataset = DatasetDict({"test": Dataset.from_dict({
                "sentence1": first, "sentence2": second,
                "score": [5.0 if a == b else float(k % 4) for k, (a, b) in enumerate(zip(first, second))]})})
            self.data_loaded = True

    return SyntheticSTS()


def test_11_mteb_caches_a_score_per_weights_dtype_and_code(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("mteb")
    import mteb
    from mteb.cache import ResultCache
    from tiny_models import tiny_checkpoint

    from minidecoder.integrations.mteb import MtebEncoder

    run_a, run_b = tmp_path / "run-a" / "checkpoint-500", tmp_path / "run-b" / "checkpoint-500"
    tiny_checkpoint("llama", run_a, seed=0)
    tiny_checkpoint("llama", run_b, seed=1)  # another training run: same folder name, other weights
    cache = ResultCache(tmp_path / "mteb-cache")

    def score(encoder: MtebEncoder, cached: bool = True) -> tuple[float, int]:
        """(score, encode calls): zero calls means MTEB took the score from its cache."""
        calls = []
        encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda *a, **k: calls.append(1) or encode(*a, **k))
        result = mteb.evaluate(encoder, synthetic_sts_task(), cache=cache if cached else None,
                               show_progress_bar=False)
        return result.task_results[0].scores["test"][0]["cosine_spearman"], len(calls)

    first, calls = score(MtebEncoder(str(run_a), "mean"))
    assert calls > 0
    assert score(MtebEncoder(str(run_a), "mean"))[1] == 0  # the same model again: the cache serves it
    second, calls = score(MtebEncoder(str(run_b), "mean"))
    assert calls > 0, "another model in a folder of the same name was served the first model's score"
    assert second == score(MtebEncoder(str(run_b), "mean"), cached=False)[0] != first
    assert score(MtebEncoder(str(run_a), "mean", dtype="bfloat16"))[1] > 0  # bfloat16 is scored on its own

    meta = MtebEncoder(str(run_a), "mean", dtype="bfloat16").mteb_model_meta
    assert "-bfloat16-cpu-" in meta.revision and meta.revision != MtebEncoder(str(run_b), "mean").mteb_model_meta.revision
