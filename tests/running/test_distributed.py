"""Data-parallel embedding (tools/embed_distributed.py, minidecoder.running.distributed): two CPU processes on gloo give the
single-process output, in input order, on rank 0; and `minidecoder embed` under torchrun writes a sharded
output whose killed rank resumes from its kept chunks.

Launched the way users launch it, `torchrun --nproc_per_node 2 tools/embed_distributed.py`, in a
subprocess, on a tiny model; compared with `minidecoder.embed` in this process. The sharded job's ranks
are started with torchrun's environment on the loopback (so one can be killed at a known point), and
compared with `minidecoder embed` in one process.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.running.distributed import shard_bounds
from tiny_models import tiny_checkpoint
from repo_paths import REPO

ROOT = REPO


def tool():
    """tools/embed_distributed.py as a module (its `embed_distributed` gathers the ranks' shards in memory)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("embed_distributed", ROOT / "tools" / "embed_distributed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

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
    assert_close(tool().embed_distributed(model, TEXTS[:5], "prompteol"),
                 minidecoder.embed(model, TEXTS[:5], "prompteol"))


SHARD_DAMAGE = [  # what a full disk or a hand edit leaves of a finished shard (one process: one shard) or its sidecar
    ("shard cut short", lambda shard: shard.write_bytes(shard.read_bytes()[:200])),
    ("shard one row short", lambda shard: np.save(shard, np.load(shard)[:-1])),
    ("sidecar a list", lambda shard: shard.with_name(shard.name + ".json").write_text("[]")),
]


@pytest.mark.parametrize("damage", [case[1] for case in SHARD_DAMAGE], ids=[case[0] for case in SHARD_DAMAGE])
def test_a_damaged_finished_shard_is_named_not_reused(tmp_path: Path, damage) -> None:
    """A finished shard is reused only whole: before, one cut short was a ValueError traceback from its memory map,
    a sidecar of the wrong shape an AttributeError, and one a row short was taken as finished (load_sharded
    refused it later). Now the job refuses to replace it unasked, naming it and the way out."""
    from minidecoder.running.distributed import embed_sharded

    tiny_checkpoint("llama", tmp_path / "model")
    model = minidecoder.load(tmp_path / "model", progress=False)
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    source.write_text("".join(text + "\n" for text in TEXTS[:7]), encoding="utf-8")
    embed_sharded(model, "prompteol", source, output, chunk_size=3)
    shard = tmp_path / "out-00000-of-00001.npy"
    damage(shard)
    (tmp_path / "out.npy.shards.json").unlink()
    with pytest.raises(minidecoder.MinidecoderError) as refused:
        embed_sharded(model, "prompteol", source, output, chunk_size=3)
    assert str(refused.value) == (f"output {shard} already exists; it is never overwritten silently\n"
                                  "  fix: choose another output path, delete it, or pass overwrite=True (--overwrite)")


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
        command += ["--opt", option]  # minidecoder's own flag, which the error messages name
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    got = torch.load(out, weights_only=True)  # a plain tensor: nothing is unpickled beyond it
    model = minidecoder.load(folder, progress=False)
    options = dict([option.split("=")]) if option else {}
    expected = minidecoder.embed(model, TEXTS, method, batch_size=4, **{k: int(v) for k, v in options.items()})
    assert got.shape == expected.shape == (len(TEXTS), model.config.hidden_size)
    assert_close(got, expected, atol=2e-5, rtol=2e-5)


def test_the_token_budget_is_the_default(monkeypatch, tmp_path: Path) -> None:
    """Like `embed`, batches are filled to the device's token budget unless a batch size is given (a fixed 32
    a batch ran 1,298 sentences/s on an H200 against the budget's 1,568)."""
    distributed = tool()
    asked = []
    monkeypatch.setattr(distributed, "embed", lambda model, texts, method, batch_size, **options:
                        asked.append(batch_size) or torch.zeros(len(texts), 4))
    distributed.embed_distributed(object(), TEXTS[:3], "mean")
    assert asked == [None]
    tools = (ROOT / "tools" / "embed_distributed.py").read_text(encoding="utf-8")
    assert '"--batch-size", type=int, default=None' in tools


# ---- `minidecoder embed` under torchrun: kept chunks, a sharded output, a killed rank resumed ------------
DIE_AFTER_TWO_CHUNKS = """
import os, signal, sys
from minidecoder.running import jobs
save, saved = jobs.KeptChunks.save, []
def save_then_die(self, k, array, info):
    save(self, k, array, info)
    saved.append(k)
    if len(saved) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # a lost node: no finally, no clean-up
jobs.KeptChunks.save = save_then_die
from minidecoder.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _free_port() -> int:
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_ranks(argv: list[str], cwd: Path, die: int | None = None) -> list[subprocess.Popen]:
    """Two ranks as torchrun starts them (its environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), on
    this machine's loopback only; rank `die` dies by SIGKILL after its second kept chunk."""
    port, ranks = _free_port(), []
    for rank in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
        program = ["-c", DIE_AFTER_TWO_CHUNKS] if rank == die else ["-m", "minidecoder"]
        ranks.append(subprocess.Popen([sys.executable, *program, *argv], cwd=cwd, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return ranks


def test_a_killed_rank_resumes_from_its_chunks_and_the_shards_equal_one_process(tmp_path: Path) -> None:
    from minidecoder.running.distributed import load_sharded, shard_path, shards_manifest_path

    folder = tmp_path / "model"
    tiny_checkpoint("llama", folder)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")  # 23 rows: chunks of 4, ranks' runs of 3
    output = tmp_path / "out.npy"
    command = ["embed", "--model", str(folder), "--method", "prompteol", "--input", str(texts), "--chunk-size", "4",
               "--no-progress"]  # no --batch-size: the token budget
    argv = [*command, "--output", str(output)]

    first = _start_ranks(argv, tmp_path, die=1)
    first[1].communicate(timeout=300)
    assert first[1].returncode == -signal.SIGKILL
    # rank 0 finishes its shard, then finds its peer gone in the exchange of summaries, and says what to do
    _, err = first[0].communicate(timeout=120)
    assert first[0].returncode != 0 and "lost" in err and "run the same command again" in err, err[-3000:]
    kept = tmp_path / f".{shard_path(output, 1, 2).name}.partial"
    assert sorted(p.name for p in kept.glob("chunk-*.npy")) == ["chunk-000000.npy", "chunk-000001.npy"]
    assert not shards_manifest_path(output).exists()

    again = _start_ranks(argv, tmp_path)
    said = [rank.communicate(timeout=300) for rank in again]
    for rank, (out, err) in zip(again, said):
        assert rank.returncode == 0, out[-2000:] + err[-3000:]
    assert "reused (finished earlier)" in said[0][0], said[0][0]  # rank 0 had finished before the exchange
    assert "1 chunks computed, 2 reused" in said[1][0], said[1][0]
    assert not kept.exists()  # a finished shard's chunks are removed once it is written

    threads = str(max(1, (os.cpu_count() or 1) // 2))  # a CPU rank's share of the cores: as many here
    one = subprocess.run([sys.executable, "-m", "minidecoder", *command, "--output", str(tmp_path / "one.npy")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": threads, "PYTHONPATH": str(ROOT)})
    assert one.returncode == 0, one.stderr[-3000:]
    listing = json.loads(shards_manifest_path(output).read_text(encoding="utf-8"))
    assert [shard["file"] for shard in listing["shards"]] == [shard_path(output, r, 2).name for r in range(2)]
    assert listing["shards"][0]["rows"] == [0, 12] and listing["shards"][1]["rows"] == [12, 23]
    assert listing["metadata"]["batch_size"] is None
    sharded = load_sharded(output)
    assert sharded.shape == (len(TEXTS), 32)
    assert np.array_equal(sharded, np.load(tmp_path / "one.npy"))  # the same chunks, so the same batches


def test_the_tool_never_replaces_an_output_silently_and_names_a_bad_texts_file(tmp_path: Path) -> None:
    """tools/embed_distributed.py replaced an existing output without asking (torch.save over it, and a kill
    mid-save left half a file), and a texts path that was missing or a folder was a traceback."""
    from minidecoder.errors import InputError, OutputError

    tiny_checkpoint("llama", tmp_path / "model")
    texts, out = tmp_path / "texts.txt", tmp_path / "out.pt"
    texts.write_text("\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    out.write_bytes(b"a kept result")
    command = [str(texts), str(out), "--model", str(tmp_path / "model"), "--batch-size", "4"]
    with pytest.raises(OutputError, match="already exists; it is never overwritten silently"):
        tool().main(command)
    assert out.read_bytes() == b"a kept result"
    tool().main([*command, "--overwrite"])
    assert_close(torch.load(out, weights_only=True), minidecoder.embed(minidecoder.load(tmp_path / "model"), TEXTS[:3], "prompteol"))
    with pytest.raises(InputError, match="the texts file .* is a directory"):
        tool().main([str(tmp_path), str(tmp_path / "other.pt"), "--model", str(tmp_path / "model")])
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "embed_distributed.py"), str(tmp_path / "nonesuch"),
                             str(tmp_path / "other.pt")], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("embed_distributed: error: the texts file") and "does not exist" in result.stderr
