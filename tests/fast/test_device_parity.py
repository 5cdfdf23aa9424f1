"""tools/device_parity.py: the CPU-vs-GPU comparison catches a wrong number, and on a machine with a
CUDA GPU every family's logits and every method's embeddings agree with the CPU's (skipped without
one: CI has no GPU; a session that is lent one runs this file there)."""
from __future__ import annotations

import sys

import pytest
import torch

import minidecoder
from repo_paths import REPO
from tiny_models import FAMILIES, checkpoint

sys.path.insert(0, str(REPO / "tools"))
import device_parity  # noqa: E402

TOLERANCE = 1e-4


def test_a_wrong_weight_on_the_other_side_is_reported():
    _, folder = checkpoint("llama")
    same = device_parity.compare_checkpoint(str(folder), "cpu", cases=[("prompteol", {})])
    assert [r.what for r in same] == ["logits", "prompteol"]
    assert all(r.ok(TOLERANCE) and r.relative == 0.0 for r in same)

    planted = minidecoder.load(folder, progress=False)
    with torch.no_grad():
        planted.layers[1].mlp.down_proj.weight.mul_(1.01)  # a 1% error in one block: far above rounding
    wrong = device_parity.compare_checkpoint(str(folder), "cpu", cases=[("prompteol", {})], other_model=planted)
    assert [r.ok(TOLERANCE) for r in wrong] == [False, False]
    assert wrong[1].cosine < 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_on_cuda_equals_the_cpu(family):
    results = device_parity.compare_checkpoint(str(checkpoint(family)[1]), "cuda")
    assert len(results) == 1 + len(device_parity.CASES)
    bad = [(r.what, r.relative) for r in results if not r.ok(TOLERANCE)]
    assert not bad, bad


def test_default_block_indices_past_a_shallow_model_move_to_its_last_block():
    assert device_parity.fitted("tp", {}, num_layers=4) == {"end": 3}
    assert device_parity.fitted("cp", {}, num_layers=4) == {"steer_layer": 3}  # CP's end is unused without tp
    assert device_parity.fitted("cp", {"tp": True}, num_layers=4) == {"tp": True, "end": 3, "steer_layer": 3}
    assert device_parity.fitted("tp", {}, num_layers=30) == {}  # deep enough: the defaults stay


def test_every_case_runs_on_a_four_block_model():
    _, folder = checkpoint("llama")
    results = device_parity.compare_checkpoint(str(folder), "cpu")
    assert len(results) == 1 + len(device_parity.CASES)  # none skipped: the CUDA test relies on it
