"""PromptEOL on the real SmolLM2 (float32, output layer -1) scores on STS-B test what an independent
transformers computation of the same prompt gives, to 0.01 (Spearman x100).

The independent side is written here from the papers' recipe: SentEval text handling, the PromptEOL
template, left-padded batches, the last position of the final hidden state, cosine, scipy's
Spearman. It reads sts-test.csv itself and calls no minidecoder code. About 5 minutes on 2 cores
(2,758 sentences through both implementations), so it runs in the `slow` target.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from real_models import DEFAULT, transformers_from_folder
from repo_paths import SHARED

pytestmark = pytest.mark.slow

TEMPLATE = 'This sentence : "*sent 0*" means in one word:"'


def _data_dir() -> Path:
    env = os.environ.get("MINIDECODER_STS_DATA")
    path = Path(env) if env else SHARED / "data" / "sts"
    if not (path / "STSBenchmark" / "sts-test.csv").is_file():
        pytest.skip(f"STS data not found at {path} (set MINIDECODER_STS_DATA)")
    return path


def _reference_score(data_dir: Path) -> float:
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer

    from real_models import real_files

    model = transformers_from_folder(DEFAULT)
    tokenizer = AutoTokenizer.from_pretrained(str(real_files(DEFAULT)[1]))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    pairs = []
    for line in (data_dir / "STSBenchmark" / "sts-test.csv").read_text(encoding="utf-8").splitlines():
        columns = line.strip().split("\t")
        pairs.append((" ".join(columns[5].split()), " ".join(columns[6].split()), float(columns[4])))

    def prompt(sentence: str) -> str:  # PromptEOL's SentEval batcher
        if sentence and sentence[-1] not in ".?\"'":
            sentence += "."
        sentence = sentence.replace('"', "'")
        if sentence and sentence[-1] == "?":
            sentence = sentence[:-1] + "."
        return TEMPLATE.replace("*sent 0*", sentence).strip()

    unique = sorted({s for a, b, _ in pairs for s in (a, b)})
    vectors = {}
    with torch.no_grad():
        for start in range(0, len(unique), 32):
            chunk = unique[start:start + 32]
            batch = tokenizer([prompt(s) for s in chunk], return_tensors="pt", padding=True)
            out = model(**batch, output_hidden_states=True)
            for sentence, vector in zip(chunk, out.hidden_states[-1][:, -1].float()):
                vectors[sentence] = vector
    cosines = [torch.nn.functional.cosine_similarity(vectors[a], vectors[b], dim=0).item() for a, b, _ in pairs]
    return 100 * spearmanr(cosines, [gold for _, _, gold in pairs]).correlation


def test_prompteol_stsb_test_score_equals_independent_transformers_computation() -> None:
    import minidecoder
    from minidecoder.evaluation.sts import evaluate_sts

    data_dir = _data_dir()
    model = minidecoder.load(DEFAULT, progress=False)
    ours = evaluate_sts(lambda sentences: minidecoder.embed(model, sentences, "prompteol", layer=-1),
                        tasks=["STSBenchmark"], data_dir=data_dir, progress=False)
    our_score = ours["tasks"]["STSBenchmark"]["score"]
    reference = _reference_score(data_dir)
    print(f"STS-B test PromptEOL: minidecoder {our_score:.4f}, transformers {reference:.4f}")
    assert abs(our_score - reference) <= 0.01
