"""tools/layer_diff.py names the first site where minidecoder and transformers diverge."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import minidecoder
from tiny_models import checkpoint
from repo_paths import REPO

_spec = importlib.util.spec_from_file_location("layer_diff", REPO / "tools" / "layer_diff.py")
layer_diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layer_diff)


def test_agreeing_models_report_no_divergence(capsys) -> None:
    _, folder = checkpoint("gemma2")
    assert layer_diff.main([str(folder), "--prompt", "hello there"]) == 0
    assert "agree" in capsys.readouterr().out


def test_first_divergence_is_named(monkeypatch, capsys) -> None:
    _, folder = checkpoint("llama")
    real_load = minidecoder.load

    def broken_load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        with torch.no_grad():
            model.layers[2].mlp.down_proj.weight.mul_(1.5)  # break block 2's MLP only
        return model

    monkeypatch.setattr(minidecoder, "load", broken_load)
    assert layer_diff.main([str(folder), "--prompt", "hello there"]) == 1
    assert "first site above 0.0001: block 2: mlp_out" in capsys.readouterr().out


@pytest.mark.real
def test_the_default_model_agrees_at_every_site(capsys) -> None:
    """The README's use of the tool, on the default model. It used to run minidecoder's fused attention
    kernel against transformers' eager one, and their float rounding, on SmolLM2's residuals of about 2e4,
    passed the tolerance at block 27: the tool named a divergence that the eager paths do not have."""
    from real_models import DEFAULT, real_files

    _, folder = real_files(DEFAULT)
    assert layer_diff.main([str(folder)]) == 0
    assert "all 92 sites agree within 0.0001" in capsys.readouterr().out
