"""config.json as transformers reads it: keys that fill in or override other keys, and keys a file may leave
out. Each case edits a saved tiny checkpoint's config.json (a key transformers honors that the tiny models do
not set), loads the folder with transformers and with minidecoder, and compares the logits in float32; each
failed on the code before its fix (red team: config keys transformers honors).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from test_parity import ATOL, RTOL
from tiny_models import checkpoint, random_ids


def _set(**keys) -> Callable[[dict], None]:
    return lambda config: config.update(keys)


# case -> (variant, edit of its config.json). The edits keep each variant's weights valid.
CASES: dict[str, tuple[str, Callable[[dict], None]]] = {
    # transformers fills a theta rope_parameters lacks from the top-level rope_theta (minidecoder took 10,000)
    "rope_theta_beside_rope_parameters": ("llama", _set(rope_parameters={"rope_type": "linear", "factor": 2.0},
                                                         rope_theta=500.0)),
    # transformers takes rope_scaling over rope_parameters (minidecoder took rope_parameters)
    "rope_scaling_beside_rope_parameters": ("llama", _set(rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                                          rope_scaling={"rope_type": "linear", "factor": 4.0})),
    # Gemma3: top-level thetas fill the layer types' dicts; rope_scaling updates the global layers' dict
    "gemma3_thetas_beside_rope_parameters": ("gemma3", _set(
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0},
                         "sliding_attention": {"rope_type": "default"}}, rope_theta=500.0, rope_local_base_freq=50.0)),
    "gemma3_rope_scaling_beside_rope_parameters": ("gemma3", _set(rope_scaling={"rope_type": "linear", "factor": 8.0})),
}


def _edited_copy(name: str, edit: Callable[[dict], None], folder: Path) -> Path:
    shutil.copytree(checkpoint(name)[1], folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_edited_config_gives_transformers_logits(case: str, tmp_path: Path) -> None:
    import transformers

    folder = _edited_copy(*CASES[case], tmp_path / "model")
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                  attn_implementation="eager").eval()
    ids = random_ids()
    with torch.no_grad():
        assert_close(minidecoder.load(folder)(ids).logits, reference(ids).logits, atol=ATOL, rtol=RTOL)


def test_a_flat_gemma3_rope_parameters_is_refused(tmp_path: Path) -> None:
    """transformers ignores a Gemma3 rope_parameters not keyed by layer type (both layer types get plain RoPE);
    minidecoder applied it to the global layers."""
    folder = _edited_copy("gemma3", _set(rope_parameters={"rope_type": "linear", "factor": 8.0}), tmp_path / "model")
    with pytest.raises(minidecoder.errors.ConfigError, match="keyed by layer type.*full_attention"):
        minidecoder.load(folder)
