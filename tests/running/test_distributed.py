"""Data-parallel embedding (minidecoder.running.distributed): two CPU processes on gloo give the
single-process output, in input order, on rank 0.

Launched the way users launch it, `torchrun --nproc_per_node 2 tools/embed_distributed.py`, in a
subprocess, on a tiny model; compared with `minidecoder.embed` in this process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.running.distributed import embed_distributed, shard_bounds
from tiny_models import tiny_checkpoint
from repo_paths import REPO

ROOT = REPO
TEXTS = [f"sentence number {i} " + "word " * (i % 7) for i in range(23)]  # 23: shards of 12 and 11


def test_shards_are_contiguous_and_cover_every_text() -> None:
    for n in (0, 1, 5, 23, 100):
        for world in (1, 2, 3, 8):
            bounds = [shard_bounds(n, r, world) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert max(e - s for s, e in bounds) - min(e - s for s, e in bounds) <= 1


def test_without_a_process_group_it_is_plain_embed(tmp_path: Path) -> None:
    tiny_checkpoint("llama", tmp_path)
    model = minidecoder.load(tmp_path, progress=False)
    assert_close(embed_distributed(model, TEXTS[:5], "prompteol"), minidecoder.embed(model, TEXTS[:5], "prompteol"))


@pytest.mark.parametrize("method,option", [("prompteol", None), ("mean", "layer=2")])
def test_two_gloo_processes_equal_one_process(tmp_path: Path, method: str, option: str | None) -> None:
    folder = tmp_path / "model"
    tiny_checkpoint("llama", folder)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(ROOT / "tools" / "embed_distributed.py"), str(texts), str(out), "--model", str(folder),
               "--method", method, "--batch-size", "4"]
    if option:
        command += ["--option", option]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    got = torch.load(out, weights_only=True)  # a plain tensor: nothing is unpickled beyond it
    model = minidecoder.load(folder, progress=False)
    options = dict([option.split("=")]) if option else {}
    expected = minidecoder.embed(model, TEXTS, method, batch_size=4, **{k: int(v) for k, v in options.items()})
    assert got.shape == expected.shape == (len(TEXTS), model.config.hidden_size)
    assert_close(got, expected, atol=2e-5, rtol=2e-5)
