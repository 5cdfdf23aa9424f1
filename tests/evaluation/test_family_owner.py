"""Every eval family's kept work is owned (docs/reliability.md row 30, for every family): an interrupted
`eval sts` and an `eval sts-long` / `eval transfer` on one --output refuse each other's kept work before the
model loads, never remove it, and each resumes its own; the same family with another input flag is refused
by that flag."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import minidecoder.running.embedding as embedding
from cli_runner import cli
from test_transfer import write_folder

NO_MODEL = "no-such-model-folder"  # a run that names this and fails on something else never loaded a model


def stsb(folder: Path, pairs: int) -> Path:
    """STSBenchmark/sts-test.csv (SentEval's layout) of `pairs` distinct pairs: what eval sts and sts-long read."""
    (folder / "STSBenchmark").mkdir(parents=True)
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{(i * 7) % 11 / 2:.3f}\tpair {i} says one {i % 5}"
            f"\tthe {i}th {'other' if i % 3 else 'same'} text\n" for i in range(pairs)]
    (folder / "STSBenchmark" / "sts-test.csv").write_text("".join(rows), encoding="utf-8")
    return folder


def interrupted(capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str], at_call: int) -> None:
    """Run `argv` with Ctrl-C in the `at_call`-th call of `embed_rows` (one a chunk: the earlier chunks are kept)."""
    real, calls = embedding.embed_rows, []

    def embed_then_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == at_call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(embedding, "embed_rows", embed_then_ctrl_c)
    code, err = cli(capsys, *argv)
    monkeypatch.setattr(embedding, "embed_rows", real)
    assert code == 130 and "kept in" in err, err


def test_eval_sts_and_sts_long_refuse_each_others_kept_work(tiny_llama, tmp_path: Path, capsys,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data = stsb(tmp_path / "sts", pairs=1100)  # sts: 2,200 sentences; sts-long 1,2: 3,300 texts (1,024 a chunk)
    out, work = tmp_path / "x", tmp_path / ".x.json.partial"
    common = ["--method", "mean", "--data", str(data), "--no-progress", "--output", str(out)]
    sts = ["eval", "sts", "--tasks", "STSBenchmark", *common]
    long = ["eval", "sts-long", "--lengths", "1,2", *common]
    model = ["--model", str(tiny_llama)]

    interrupted(capsys, monkeypatch, [*sts, *model], at_call=2)  # embed runs once a chunk: one chunk kept
    kept = sorted(work.rglob("chunk-*.npy"))
    assert len(kept) == 1
    code, err = cli(capsys, *long, "--model", NO_MODEL)
    assert code == 2 and str(work) in err and "`minidecoder eval sts`" in err and f"delete {work}" in err, err
    assert NO_MODEL not in err and sorted(work.rglob("chunk-*.npy")) == kept  # refused before loading; kept
    assert cli(capsys, *sts, *model)[0] == 0  # eval sts resumes its own chunk
    assert json.loads((tmp_path / "x.json").read_text())["results"]["resumed_chunks"] == 1
    (tmp_path / "x.json").unlink(), (tmp_path / "x.md").unlink()

    interrupted(capsys, monkeypatch, [*long, *model], at_call=2)
    kept = sorted(work.rglob("chunk-*.npy"))
    assert len(kept) == 1 and json.loads((work / "owner.json").read_text())["command"] == "minidecoder eval sts-long"
    code, err = cli(capsys, *sts, "--model", NO_MODEL)
    assert code == 2 and "`minidecoder eval sts-long`" in err and NO_MODEL not in err, err
    assert sorted(work.rglob("chunk-*.npy")) == kept
    code, err = cli(capsys, *long, "--limit", "1000", "--model", NO_MODEL)  # its own, with another input flag
    # every difference named by its flag, before the model loads (a load would fail on NO_MODEL instead)
    assert code == 2 and "--limit was None, now 1000" in err and f"--model was {str(tiny_llama)!r}, now {NO_MODEL!r}" in err, err
    assert cli(capsys, *long, *model)[0] == 0
    assert json.loads((tmp_path / "x.json").read_text())["results"]["embedding"]["chunks_reused"] == 1
    assert not work.exists()  # the kept work goes once the report is written


def test_transfer_keeps_its_probes_owned_and_eval_sts_leaves_them(tiny_llama, tmp_path: Path, capsys,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import minidecoder.evaluation.transfer as transfer

    out, work = tmp_path / "x", tmp_path / ".x.json.partial"
    argv = ["eval", "transfer", "--method", "mean", "--data", str(write_folder(tmp_path / "senteval")), "--tasks",
            "SST2,TREC", "--no-progress", "--output", str(out), "--model", str(tiny_llama)]
    real = transfer.probe_task

    def stop_at_trec(task, *args, **kwargs):  # Ctrl-C in the second task's probe: SST2's result is kept
        if task.name == "TREC":
            raise KeyboardInterrupt
        return real(task, *args, **kwargs)

    monkeypatch.setattr(transfer, "probe_task", stop_at_trec)
    code, err = cli(capsys, *argv)
    assert code == 130  # and the line says what is kept (it said "before any sentence was embedded")
    assert f"interrupted while scoring; the embeddings and the finished tasks (SST2) are kept in {work}" in err, err
    monkeypatch.setattr(transfer, "probe_task", real)
    kept = sorted(path.name for path in work.iterdir())
    assert "task-SST2.kept.json" in kept and "embeddings.kept.npy" in kept  # no chunk, yet kept: not removed
    assert "job" not in kept  # transfer keeps its embeddings itself: no second copy as the job's table
    code, err = cli(capsys, "eval", "sts", "--method", "mean", "--data", str(stsb(tmp_path / "sts", 20)), "--tasks",
                    "STSBenchmark", "--output", str(out), "--model", NO_MODEL)
    assert code == 2 and "`minidecoder eval transfer`" in err and NO_MODEL not in err, err
    assert sorted(path.name for path in work.iterdir()) == kept
    assert cli(capsys, *argv)[0] == 0 and not work.exists()


@pytest.mark.parametrize("family, where", [("sts", "sts:StsScorer.__call__"), ("sts-long", "sts_long:score_long_pairs"),
                                           ("sts", "report:write_report"), ("sts-long", "report:write_report")])
def test_ctrl_c_while_scoring_keeps_the_embeddings_and_the_same_command_scores_without_embedding(
        family: str, where: str, tiny_llama: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: Ctrl-C while `eval sts` scored said "before any sentence was embedded; nothing new was kept", and
    while sts-long, retrieval, classification or C-MTEB scored (one runner) "nothing was kept": the job's folder
    was removed once its table was read back, so the rerun embedded every text again. The table is now kept
    until the report is written (a Ctrl-C while it is written says the same)."""
    import importlib

    module_name, attribute = where.split(":")
    module = importlib.import_module(f"minidecoder.evaluation.{module_name}")
    owner, name = (getattr(module, attribute.split(".")[0]), attribute.split(".")[1]) if "." in attribute \
        else (module, attribute)
    argv = ["eval", family, "--method", "mean", "--data", str(stsb(tmp_path / "sts", pairs=40)), "--no-progress",
            "--model", str(tiny_llama), *(["--tasks", "STSBenchmark"] if family == "sts" else ["--lengths", "1,2"])]
    assert cli(capsys, *argv, "--output", str(tmp_path / "clean"))[0] == 0
    real = getattr(owner, name)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(owner, name, ctrl_c)
    code, err = cli(capsys, *argv, "--output", str(tmp_path / "x"))
    work = tmp_path / ".x.json.partial"
    assert code == 130 and err.strip() == (f"minidecoder: interrupted while scoring; the embeddings are kept in {work}; "
                                           "run the same command again to resume from them"), err
    monkeypatch.setattr(owner, name, real)
    embedded, real_embed = [], embedding.embed_rows
    monkeypatch.setattr(embedding, "embed_rows", lambda *args, **kwargs: embedded.append(1) or real_embed(*args, **kwargs))
    assert cli(capsys, *argv, "--output", str(tmp_path / "x"))[0] == 0
    assert embedded == [] and not work.exists()  # read back, not embedded again; then removed with the report
    resumed, clean = (json.loads((tmp_path / f"{name}.json").read_text())["results"] for name in ("x", "clean"))
    scores = "tasks" if family == "sts" else "lengths"
    assert resumed[scores] == clean[scores]  # the same embeddings, exactly


def test_ctrl_c_in_the_queries_job_says_the_documents_are_kept(tiny_llama: Path, tmp_path: Path, capsys,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With --query-opt a run embeds in two jobs, documents then queries. Found: a Ctrl-C before the queries'
    first chunk said "nothing was kept", though the documents' table was kept, and the rerun reused it."""
    from test_retrieval import write_beir

    argv = ["eval", "retrieval", "--method", "mean", "--sets", "toy", "--data", str(write_beir(tmp_path / "beir")),
            "--query-opt", "template=Query: {text}", "--no-progress", "--truncate", "20", "--model", str(tiny_llama)]
    assert cli(capsys, *argv, "--output", str(tmp_path / "clean"))[0] == 0
    real, calls = embedding.embed_rows, []

    def ctrl_c_in_the_second_job(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # one chunk a job: the documents' job is done, the queries' has begun
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(embedding, "embed_rows", ctrl_c_in_the_second_job)
    code, err = cli(capsys, *argv, "--output", str(tmp_path / "x"))
    work = tmp_path / ".x.json.partial"
    assert code == 130 and err.strip().endswith(f"the other texts' finished embeddings are kept in {work}; run the "
                                                "same command again to resume from them"), err
    calls.clear()
    monkeypatch.setattr(embedding, "embed_rows", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    assert cli(capsys, *argv, "--output", str(tmp_path / "x"))[0] == 0
    assert len(calls) == 1  # the queries alone: the documents were read back
    resumed, clean = (json.loads((tmp_path / f"{name}.json").read_text())["results"] for name in ("x", "clean"))
    assert resumed["sets"]["toy"]["metrics"] == clean["sets"]["toy"]["metrics"]


def test_the_order_of_a_runs_texts_is_the_same_in_every_process():
    """A resumed job refuses texts in another order; a set's order follows the per-process string hash, so
    each new process (a resume is one) must order the run's texts the same way: longest first, ties in
    first-appearance order, whatever PYTHONHASHSEED is."""
    import os
    import subprocess
    import sys

    texts = [f"text {i:03d}" for i in range(60)] + ["a longer text", "text 007", "short"]
    program = ("import json, sys; from minidecoder.evaluation.family import longest_first; "
               "print(json.dumps(longest_first(json.loads(sys.argv[1]))))")
    orders = [json.loads(subprocess.run([sys.executable, "-c", program, json.dumps(texts)], check=True,
                                        capture_output=True, text=True,
                                        env={**os.environ, "PYTHONHASHSEED": seed}).stdout)
              for seed in ("1", "2", "3")]
    assert orders[0] == orders[1] == orders[2]
    assert orders[0] == ["a longer text"] + [f"text {i:03d}" for i in range(60)] + ["short"]


def test_a_run_interrupted_in_one_process_resumes_in_another_to_the_same_scores(tiny_llama, tmp_path: Path):
    """The resume a user makes: Ctrl-C, then the same command in a new process (another string-hash seed).
    It must take the kept chunk (it was refused as 'other settings' while a set ordered the texts) and
    score what an uninterrupted run scores."""
    import os
    import subprocess
    import sys

    data = stsb(tmp_path / "sts", pairs=1100)  # lengths 1, 2: 3,300 texts, 1,024 a chunk
    argv = ["eval", "sts-long", "--lengths", "1,2", "--method", "mean", "--data", str(data), "--no-progress",
            "--model", str(tiny_llama)]
    ctrl_c_at_the_second_chunk = (
        "import sys; import minidecoder.running.embedding as e; from minidecoder.cli import main; real = e.embed_rows\n"
        "calls = []\n"
        "def embed(*a, **k):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 2: raise KeyboardInterrupt\n"
        "    return real(*a, **k)\n"
        "e.embed_rows = embed; sys.exit(main(sys.argv[1:]))")
    plain = "import sys; from minidecoder.cli import main; sys.exit(main(sys.argv[1:]))"

    def run(program: str, seed: str, output: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", program, *argv, "--output", str(output)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"})

    stopped = run(ctrl_c_at_the_second_chunk, "1", tmp_path / "x")
    assert stopped.returncode == 130 and "kept in" in stopped.stderr, stopped.stderr
    resumed = run(plain, "2", tmp_path / "x")
    assert resumed.returncode == 0, resumed.stderr
    whole = run(plain, "3", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    results = [json.loads((tmp_path / f"{name}.json").read_text())["results"] for name in ("x", "whole")]
    assert results[0]["embedding"]["chunks_reused"] == 1
    scores = [{length: (row["score"], row["cosines"]) for length, row in r["lengths"].items()} for r in results]
    assert scores[0] == scores[1]
