"""Resumes and interrupts at the entry points: graphs asked for on a CPU (4), a resume refusal that names every
difference by its flag (6), a token id past 64 bits (7); Ctrl-C and SIGKILL at points of `eval transfer` and
`eval sts-long`, resumed to identical scores, and two sittings writing one table at once (a red team's areas).
docs/reliability.md rows 43-53 list these tests by their class numbers."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidecoder
from minidecoder.errors import InputError
from cli_runner import cli
from repo_paths import REPO
from test_reliability_cli import ENV, NO_MODEL, ctrl_c, stalled, sts_data

NEVER = Path("/nonexistent/never")  # the stalled runs below stall for good (until signalled)


# ---- 4. graphs on a CPU: said once, and recorded as what ran ----------------------------------------------------
def test_4_graphs_on_a_cpu_warn_and_the_sidecar_records_buffers_not_graphs(tiny_llama, tmp_path, capsys) -> None:
    from minidecoder.running.jobs import run_embedding_job

    with pytest.warns(UserWarning, match="no CUDA graphs run there") as said:
        model = minidecoder.load(tiny_llama, progress=False, graphs=True)
    assert len(said) == 1
    assert model.fast_paths.graphs is True  # the buffer bank still runs on a CPU (tests/fast/test_graph_bank.py)
    source = tmp_path / "in.txt"
    source.write_text("one text\nanother text\n")
    run_embedding_job(model, "mean", source, tmp_path / "api.npy")
    recorded = json.loads((tmp_path / "api.npy.json").read_text())["fast_paths"]
    assert recorded["graphs"] == "buffers only (no CUDA graphs on cpu)" and recorded["graphs"] is not True
    with pytest.warns(UserWarning, match="leave graphs off"):
        code, err = cli(capsys, "embed", "--method", "mean", "--input", str(source), "--output",
                        str(tmp_path / "cli.npy"), "--graphs", "--model", str(tiny_llama))
    assert code == 0, err
    assert json.loads((tmp_path / "cli.npy.json").read_text())["fast_paths"]["graphs"].startswith("buffers only")


# ---- 6. a resume refusal names every difference, by flag --------------------------------------------------------
def test_6_a_resume_with_another_model_and_method_names_both_before_the_model_loads(tiny_llama, tmp_path,
                                                                                    capsys) -> None:
    data = sts_data(tmp_path / "sts", pairs=1100)
    argv = ["eval", "sts", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress", "--batch-size", "64",
            "--output", str(tmp_path / "x")]
    ctrl_c("minidecoder.running.embedding:embed_rows:1", NEVER, *argv, "--method", "mean", "--model", str(tiny_llama))
    code, err = cli(capsys, *argv, "--method", "last", "--limit", "1000", "--model", NO_MODEL)
    assert code == 2, err
    for said in ("--method was 'mean', now 'last'", f"--model was {str(tiny_llama)!r}, now {NO_MODEL!r}",
                 "--limit was None, now 1000"):
        assert said in err, err
    assert "input." not in err and "method." not in err
    assert len(list((tmp_path / ".x.json.partial").rglob("chunk-*.npy"))) == 1


def test_6_a_jobs_own_refusal_speaks_in_flags_not_fields(tmp_path) -> None:
    from minidecoder.running.jobs import KeptChunks

    before = {"version": 3, "model": {"sha256": "a"}, "dtype": "float32", "batch_size": 4, "truncate": None,
              "method": {"method": "mean", "layer": -1}, "input": {"format": "texts", "sha256": "x", "rows": 30}}
    kept = KeptChunks(tmp_path / "job", before, 2)
    kept.save(0, np.zeros((2, 3), np.float32), {"rows": 2})
    after = {**before, "model": {"sha256": "b"}, "batch_size": 8, "method": {"method": "last", "layer": 2},
             "input": {"format": "texts", "sha256": "y", "rows": 31}}
    with pytest.raises(InputError) as refused:
        KeptChunks(tmp_path / "job", after, 2)
    problem = refused.value.problem
    for said in ("the model (--model) differs (sha256 was 'a', now 'b')", "--batch-size was 4, now 8", "--method was 'mean', now 'last'",
                 "--opt layer was -1, now 2", "the texts to embed (the input file, or the flags that choose the data) differs"):
        assert said in problem, problem
    assert "input.rows" not in problem and "method.layer" not in problem and "model.sha256" not in problem, problem


# ---- 7. a token id past 64 bits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ids", [[2**70], [5, -(2**70)], [5, 2**64]])
def test_7_an_id_past_64_bits_is_named_as_outside_the_vocabulary(tiny_llama, ids) -> None:
    model = minidecoder.load(tiny_llama, progress=False)
    with pytest.raises(InputError, match=f"token id {ids[-1]} is outside the model's vocabulary") as error:
        minidecoder.generate(model, ids, 3)
    assert "tokenizer" in error.value.fix


# ---- red team: Ctrl-C and SIGKILL inside eval transfer and eval sts-long, resumed -------------------------------
def senteval_data(root: Path) -> Path:
    """SST2 (train 40 / dev 12 / test 12) and TREC (train 60 / test 12) of short word-signal texts."""
    good, bad = ["great fine lovely", "superb happy"], ["awful poor", "dreadful sad bad"]
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        path = root / "SST" / "binary" / f"sentiment-{split}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{(good if i % 2 else bad)[i % 4 // 2]} item{i} \t{i % 2}\n" for i in range(n)))
    words = {"ABBR": "abbreviation", "DESC": "describe", "ENTY": "thing", "HUM": "who", "LOC": "where", "NUM": "many"}
    (root / "TREC").mkdir()
    for name, n in (("train_5500.label", 60), ("TREC_10.label", 12)):
        (root / "TREC" / name).write_text("".join(f"{c}:x {words[c]} question {i} ?\n"
                                                  for i in range(n) for c in [list(words)[i % 6]]))
    return root


def scores(prefix: Path, family: str) -> dict:
    results = json.loads(prefix.with_suffix(".json").read_text())["results"]
    if family == "transfer":
        return {name: (r["score"], r["ci95"]) for name, r in results["tasks"].items()}
    return {k: (r["score"], r["ci95"]) for k, r in results["lengths"].items()}


def stop(where: str, how: signal.Signals, argv: list[str]) -> None:
    """The CLI run `argv` stopped by `how` at `where` (see test_reliability_cli's STALL)."""
    run = stalled(where, NEVER, *argv)
    run.send_signal(how)
    _, err = run.communicate(timeout=60)
    assert run.returncode == (130 if how == signal.SIGINT else -signal.SIGKILL) and "Traceback" not in err, err


@pytest.mark.parametrize(("family", "where"), [
    ("transfer", "minidecoder.evaluation.transfer:probe_task:1"),  # SST2's probe kept, TREC's under way
    ("transfer", "minidecoder.running.embedding:embed_rows:0"),  # inside the embedding: nothing kept
    ("sts-long", "minidecoder.running.embedding:embed_rows:1"),  # one chunk of two kept
])
def test_red_team_ctrl_c_and_sigkill_inside_a_run_resume_to_identical_scores(tiny_llama, tmp_path, capsys,
                                                                              family, where) -> None:
    if family == "transfer":
        argv = ["eval", "transfer", "--tasks", "SST2,TREC", "--data", str(senteval_data(tmp_path / "data")),
                "--probe-workers", "1"]
    else:  # 1,200 STS-B sentences and 300 two-pair texts: two chunks of 1,024
        argv = ["eval", "sts-long", "--lengths", "1,2", "--data", str(sts_data(tmp_path / "data", pairs=600))]
    argv += ["--method", "mean", "--model", str(tiny_llama), "--no-progress"]
    assert cli(capsys, *argv, "--output", str(tmp_path / "whole"))[0] == 0
    whole = scores(tmp_path / "whole", family)
    for how in (signal.SIGINT, signal.SIGKILL):
        prefix = tmp_path / how.name
        stop(where, how, [*argv, "--output", str(prefix)])
        code, err = cli(capsys, *argv, "--output", str(prefix))
        assert code == 0, err
        assert scores(prefix, family) == whole, how
        assert not (tmp_path / f".{how.name}.json.partial").exists()
        if where.endswith("embed:1"):  # the chunk finished before the stop was read back, not recomputed
            assert json.loads(prefix.with_suffix(".json").read_text())["results"]["embedding"]["chunks_reused"] == 1


def test_red_team_a_second_ctrl_c_on_the_way_out_keeps_the_first_ones_line(tiny_llama, tmp_path, capsys) -> None:
    """Found: a second Ctrl-C landing while the first one's line was on its way up (an `except` or `finally` it
    passes) printed "interrupted while scoring" or "nothing new was kept" though a chunk was kept; the line is
    now the first one's (found in the interrupt's chain), or, where the second Ctrl-C beat the job's own line,
    the chunks counted on disk; and the same command resumes to identical scores."""
    import time

    argv = ["eval", "sts-long", "--lengths", "1,2", "--data", str(sts_data(tmp_path / "data", pairs=600)),
            "--method", "mean", "--model", str(tiny_llama), "--no-progress"]
    assert cli(capsys, *argv, "--output", str(tmp_path / "whole"))[0] == 0
    for number, delay in enumerate((0.0, 0.001, 0.005)):
        prefix = tmp_path / f"twice-{number}"
        run = stalled("minidecoder.running.embedding:embed_rows:1", NEVER, *argv, "--output", str(prefix))
        run.send_signal(signal.SIGINT)
        time.sleep(delay)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
        # -2: the second Ctrl-C came after the line, as the interpreter ended (a shell shows 130 for both)
        assert run.returncode in (130, -signal.SIGINT) and "Traceback" not in err, err
        line = err.strip().splitlines()[-1]  # the job's line, the family's, or (a Ctrl-C beat both) counted on disk
        assert "1 of 2 chunks" in line or "1 chunk of sentences is kept" in line, (delay, err)
        assert cli(capsys, *argv, "--output", str(prefix))[0] == 0
        assert scores(prefix, "sts-long") == scores(tmp_path / "whole", "sts-long")


# ---- red team: two sittings writing one table at once -----------------------------------------------------------
SITTING = """
import importlib.util, json, sys
from pathlib import Path
repo, results, *argv = sys.argv[1:]
spec = importlib.util.spec_from_file_location("reproduce_tasks", Path(repo) / "tools" / "reproduce_tasks.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
tool.REPO = Path(results)  # results/<model>.json: the rows' chosen configurations
raise SystemExit(tool.main(argv))
"""


def test_red_team_two_sittings_on_one_table_at_once_keep_both_rows(tiny_llama, tmp_path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "tiny-llama.json").write_text(json.dumps({"rows": [
        {"key": "prompteol", "method": {"method": "prompteol"}},
        {"key": "pretended_cot", "method": {"method": "pretended_cot"}}]}))
    common = ["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2", "--data",
              str(senteval_data(tmp_path / "data")), "--out", str(tmp_path / "table")]
    runs = [subprocess.Popen([sys.executable, "-c", SITTING, str(REPO), str(tmp_path), *common, "--rows", row],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
            for row in ("prompteol", "pretended_cot")]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0 and "Traceback" not in err, err
    table = json.loads((tmp_path / "table" / "tiny-llama-transfer.json").read_text())
    assert table["rows_done"] == ["prompteol", "pretended_cot"]
    markdown = (tmp_path / "table" / "tiny-llama-transfer.md").read_text()
    assert "| PromptEOL | " in markdown and "| Pretended CoT | " in markdown and "not run" in markdown
