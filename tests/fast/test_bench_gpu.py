"""tools/bench_gpu.py (the GPU benchmark) runs end to end on a CPU: the tiny shape, 32 sentences, one
run. CI has no GPU, so this is what keeps the tool working between the sessions that are lent one: every
section of its JSON is there, the CUDA-only ones say they were skipped and why, every configuration ran,
and `tools/bench.py --device cuda` hands over to it; tools/bench.py's long-document case runs too, and the two
tools share tools/bench_common.py instead of importing each other. No timing is checked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minidecoder.running.memory import CPU_TOKENS
from repo_paths import REPO

CPU_COMMAND = ["tools/bench_gpu.py", "--device", "cpu", "--shape", "tiny", "--limit", "32", "--repeat", "1"]
MEASURED = ["checkpoint", "fast_paths", "rates", "throughput", "floor", "methods", "reba_batch", "generation"]
CUDA_ONLY = ["gpu_busy", "sync"]


def run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)


def test_cpu_run_fills_every_section(smollm2: Path, tmp_path: Path) -> None:
    # `smollm2`: the default model's folder, whose tokenizer the tool copies beside its random weights
    out = tmp_path / "bench.json"
    result = run(CPU_COMMAND + ["--json", str(out)])
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(out.read_text())
    assert set(data) == {"header", *MEASURED, *CUDA_ONLY, "targets"}
    for name in MEASURED:
        assert "error" not in data[name] and "skipped" not in data[name], (name, data[name])
    for name in CUDA_ONLY:  # skipped, and the output says so
        assert data[name] == {"skipped": "needs CUDA (this run is on the CPU)"}
        assert f"## {name}: skipped (needs CUDA" in result.stdout

    assert data["header"]["sentences"] == 32 and data["header"]["shape"] == "tiny"
    fast = data["fast_paths"]  # the library's own account (fast.options.describe), decided for a CPU
    assert fast["describe"]["device"] == "cpu" and fast["describe"]["buckets"] == fast["describe"]["graphs"] == "off"
    assert fast["token_budget"] == CPU_TOKENS
    configs = data["throughput"]["configs"]
    assert set(configs) == {"minidecoder default", "minidecoder graphs=True", "minidecoder fused=False (plain blocks)",
                            "minidecoder prefix cache off"} | {f"{who} batch {b}" for who in
                                                      ("minidecoder", "reference", "transformers sorted")
                                                      for b in (32, 128, 512)}
    for name, r in configs.items():
        assert "error" not in r and r["sentences_per_s"] > 0, (name, r)
        if name != "minidecoder default":  # the same embeddings, whoever computes them (bfloat16)
            assert r["min_cosine_vs_default"] > 0.98, (name, r["min_cosine_vs_default"])
    floor = data["floor"]
    assert floor["prompt_tokens"] > 32 and floor["floor_seconds"] > 0
    assert set(floor["fraction_of_floor"]) == set(configs)

    methods = data["methods"]["configs"]
    assert list(methods) == ["prompteol", "pretended_cot", "knowledge", "metaeol", "echo", "mean", "tp", "htp",
                             "cp", "cp tp=true", "reba"]
    for name, r in methods.items():
        assert "error" not in r and r["seconds"] > 0 and r["work_ratio"] > 0, (name, r)
    assert methods["prompteol"]["work_ratio"] == 1.0
    # judged on the work each call ran: PromptEOL's template ran once per batch through the prefix cache, so it
    # ran less than every row's template counted in full; mean shares no prefix and ran exactly that
    assert methods["prompteol"]["work"]["flops_as_run"] < methods["prompteol"]["work"]["flops"]
    assert methods["mean"]["work"]["flops_as_run"] == pytest.approx(methods["mean"]["work"]["flops"], rel=1e-9)
    for name, r in methods.items():
        assert r["work_ratio"] == pytest.approx(r["work"]["flops_as_run"] / methods["prompteol"]["work"]["flops_as_run"])
    assert methods["metaeol"]["work"]["passes_per_batch"] == 8  # eight prompts, each its own forward
    assert methods["cp"]["work"]["passes_per_batch"] == 2  # the auxiliary pass, then the steered one

    assert data["reba_batch"]["texts"] == 8 and data["reba_batch"]["batch2_over_batch8"] > 0
    gen = data["generation"]["configs"]
    assert {r["new_tokens"] for r in gen.values()} == {128} and "transformers generate(do_sample=False)" in gen
    # the captured decode step is made in the warm-up and reused by every timed run (not made per call)
    assert gen["minidecoder.generate static=True"]["decode_steps_made"] == 1

    targets = data["targets"]
    assert targets["applies"] is False and len(targets["rows"]) == 6
    assert [r["met"] for r in targets["rows"][-2:]] == [None, None]  # GPU busy and sync need CUDA
    assert "## Targets" in result.stdout


def test_the_benchmarks_do_not_import_each_other() -> None:
    """What both need lives in tools/bench_common.py; bench_gpu never imports bench (which hands `--device cuda`
    over to bench_gpu), and bench_common imports neither: no circle."""
    import ast

    def imported(name: str) -> set[str]:
        tree = ast.parse((REPO / "tools" / f"{name}.py").read_text(encoding="utf-8"))
        return {node.module if isinstance(node, ast.ImportFrom) else alias.name
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} - {None}

    assert "bench" not in imported("bench_gpu") and "bench_common" in imported("bench_gpu")
    assert "bench_common" in imported("bench")
    assert not {"bench", "bench_gpu"} & imported("bench_common")


def test_long_document_case_runs_on_the_cpu(smollm2: Path, tmp_path: Path) -> None:
    """tools/bench.py --case docs on two SciFact documents: the reference and Vanilla Mean each ran on the
    same 512-token cuts, and the table gives each one's time against both (no timing is checked)."""
    sys.path.insert(0, str(REPO / "tools"))
    from bench_common import SCIFACT_CORPUS
    if not SCIFACT_CORPUS.is_file():
        pytest.skip(f"no SciFact corpus at {SCIFACT_CORPUS} (../shared/data/beir)")
    out = tmp_path / "docs.json"
    result = run(["tools/bench.py", "--case", "docs", "--docs", "2", "--repeat", "1", "--threads", "1",
                  "--methods", "docs:ref,docs:mean", "--model", str(smollm2), "--json", str(out)])
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"docs:ref", "docs:mean"}
    for r in results.values():
        assert "error" not in r and r["n"] == 2 and 0 < r["tokens"] / r["n"] <= 512 + 16, r
    assert "| docs:mean |" in result.stdout and "- docs:mean / docs:ref time" in result.stdout


def test_bench_dispatches_cuda_to_bench_gpu() -> None:
    handed_over = run(["tools/bench.py", "--device", "cuda", "--help"], timeout=120)
    assert handed_over.returncode == 0 and "--shape" in handed_over.stdout and "--tokenizer" in handed_over.stdout
    cpu = run(["tools/bench.py", "--device", "cpu", "--help"], timeout=120)
    assert cpu.returncode == 0 and "--shape" not in cpu.stdout and "--worker" not in cpu.stdout


@pytest.mark.parametrize(("argv", "measured"), [
    (["--case", "docs", "--methods", "docs:ref,docs:mean"], ["float32"]),  # float32 configurations only
    (["--case", "sts", "--dtype", "float32", "--methods", "md:prompteol,md:prompteol@bf16"], ["float32"]),
    (["--case", "sts", "--methods", "md:prompteol,md:prompteol@bf16"], ["bfloat16", "float32"]),
])
def test_bench_measures_the_matmul_peak_of_the_dtypes_it_runs_only(monkeypatch: pytest.MonkeyPatch, capsys,
                                                                   argv: list[str], measured: list[str]) -> None:
    """A bfloat16 matmul on a CPU without AVX-512 BF16 takes over a minute a measurement: a float32 benchmark never
    makes one (tools/bench.py measures the peak at the start and the end of a run)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", REPO / "tools" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    peaks: list[str] = []
    monkeypatch.setattr(bench, "matmul_peak", lambda dtype, *a, **k: peaks.append(str(dtype).removeprefix("torch.")) or 100.0)
    monkeypatch.setattr(bench, "run_config", lambda name, *a: {  # a worker's record, without the worker
        "seconds": 1.0, "n": 2, "tokens": 20, "flops": 1e9, "effective_flops": 1e9, "dtype": bench.CONFIGS[name][1],
        "peak_delta_mb": 1.0, "maxrss_mb": 2.0, "spearman": 50.0, "blocks": 1})
    bench.main([*argv, "--repeat", "1", "--model", "unused"])
    assert peaks == measured * 2  # at the start and at the end of the run
    assert "matmul 2048^2 GFLOP/s" in capsys.readouterr().out
