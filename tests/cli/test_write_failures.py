"""A write that fails (a full disk, a folder where a file belongs, a read-only folder) is named with its cause
and the way out, keeps every finished piece of work, and the same command then resumes to the output a clean
run writes. Every writer words the failure through `output_files.write_failure`; docs/reliability.md lists
these tests. Each fails on the code before its fix."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import minidecoder
import minidecoder.output_files as output_files
from minidecoder.errors import MinidecoderError
from minidecoder.running.jobs import embed_resumably, run_embedding_job
from cli_runner import cli
from test_reliability import ENV, lines
from test_reliability_cli import NO_MODEL, sts_data


@pytest.fixture(scope="module")
def model(tiny_llama: Path):
    return minidecoder.load(tiny_llama, progress=False)


def rows(folder: Path, count: int = 10) -> Path:
    return lines(folder / "in.txt", [f"row {i} of the input" for i in range(count)])


def failing(monkeypatch: pytest.MonkeyPatch, module, name: str, fails: str) -> None:
    """`module.name(path, ...)`, a writer, fails as a full disk does for the file named `fails`."""
    real = getattr(module, name)

    def full(path, *args, **kwargs):
        if Path(path).name == fails:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(module, name, full)


# ---- the words: what failed, and the way out ---------------------------------------------------------------
def _folder_replaced(tmp: Path) -> OSError:
    (tmp / "kept.json").mkdir()
    (tmp / "new").write_text("x")
    try:
        os.replace(tmp / "new", tmp / "kept.json")
    except OSError as error:
        return error


def _under_a_file(tmp: Path) -> OSError:
    (tmp / "work").write_text("x")
    try:
        (tmp / "work" / "kept.json").write_text("x")
    except OSError as error:
        return error


@pytest.mark.parametrize(("error", "cause", "way_out"), [
    (_folder_replaced, "a folder stands where a file belongs ({tmp}/kept.json)", "remove the folder {tmp}/kept.json"),
    (_under_a_file, "a file stands where a folder belongs ({tmp}/work)", "remove the file {tmp}/work"),
    (lambda tmp: OSError(errno.ENOSPC, "No space left on device", str(tmp / "a.npy")), "no space left on the device",
     "free space on the disk that holds {tmp}"),
    (lambda tmp: OSError(errno.EACCES, "Permission denied", str(tmp / "a.npy")), "permission denied",
     "make {tmp} writable (e.g. chmod u+w {tmp})"),
    (lambda tmp: OSError(errno.EROFS, "Read-only file system", str(tmp / "a.npy")), "read-only file system",
     "remount the file system that holds {tmp} read-write"),
    (lambda tmp: OSError(errno.ENOSPC, "No space left on device"), "no space left on the device",  # no file named:
     "free space on the disk that holds {tmp}"),  # the folder of what was written
    (lambda tmp: OSError(errno.ENOSPC, "No space left on device", str(tmp / ".m.partial-0123abcd" / "config.json")),
     "no space left on the device", "free space on the disk that holds {tmp}"),  # not the staging folder, gone by then
])
def test_a_failed_write_is_named_by_its_cause_and_way_out(tmp_path: Path, error, cause: str, way_out: str) -> None:
    """Found: each writer had its own fix, "free space or fix permissions" for a folder in the way too."""
    from minidecoder.output_files import write_failure

    said = write_failure(error(tmp_path), tmp_path / "a.npy")
    assert said == (cause.format(tmp=tmp_path), way_out.format(tmp=tmp_path))


# ---- a folder where a kept file (or a lock) belongs --------------------------------------------------------
def _job(model, tmp: Path) -> object:
    return run_embedding_job(model, "mean", rows(tmp), tmp / "out.npy", chunk_size=4)


def _texts(model, tmp: Path) -> object:
    return embed_resumably(model, "mean", ["one", "two"], tmp / "work")


def _kept_task(model, tmp: Path) -> object:
    from minidecoder.evaluation.transfer import KeptWork

    KeptWork(tmp / "work", "model").keep_task("SST2", "key", {"score": 1.0})
    return KeptWork(tmp / "work", "model").kept_task("SST2", "key")


@pytest.mark.parametrize(("in_the_way", "call"), [
    (".out.npy.partial/manifest.json", _job),  # the job's manifest (the example the review found)
    (".out.npy.lock", _job),  # the output's lock: "choose an output in a folder you can write to"
    ("work/texts.jsonl", _texts),  # an eval's texts to embed
    ("work/task-SST2.kept.json", _kept_task),  # transfer's kept probe: a bare IsADirectoryError
])
def test_a_folder_where_a_kept_file_belongs_is_named_as_the_way_out(model, tmp_path: Path, in_the_way: str,
                                                                    call) -> None:
    blocker = tmp_path / in_the_way
    (blocker / "copied").mkdir(parents=True)  # a copy gone wrong: not empty, so nothing may remove it unasked
    with pytest.raises(MinidecoderError) as refused:
        call(model, tmp_path)
    assert f"a folder stands where a file belongs ({blocker})" in refused.value.problem
    assert refused.value.fix.startswith(f"remove the folder {blocker}, then run the same command again")
    assert (blocker / "copied").is_dir()
    shutil.rmtree(blocker)
    assert call(model, tmp_path)


# ---- a full disk before the model loads --------------------------------------------------------------------
# test_reliability's FULL_DISK, the disk full once Python has started (its tempfile writes a probe of its own)
FULL_AFTER_START = """
import resource, signal, sys, tempfile
import torch
from minidecoder.cli import main
tempfile.gettempdir()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(("limit", "said"), [
    (0, "the --output folder {out} is not writable (File too large)"),  # the claim's probe: it stayed behind
    (10, "cannot write the lock file {out}/.v.npy.lock (File too large)"),  # its owner's id: a traceback
])
def test_a_full_disk_at_the_claim_is_named_and_leaves_nothing_behind(tmp_path: Path, limit: int, said: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, "-c", FULL_AFTER_START, str(limit), "embed", "--model", NO_MODEL, "--method",
                          "mean", "--input", str(rows(tmp_path)), "--output", str(out / "v.npy")],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert said.format(out=out) in run.stderr and "fix: put the output on a file system" in run.stderr, run.stderr
    assert NO_MODEL not in run.stderr and list(out.iterdir()) == []


# ---- an output that cannot be published --------------------------------------------------------------------
@pytest.mark.parametrize("appears", ["file", "folder"])
def test_an_output_that_cannot_be_published_leaves_no_sidecar_and_the_job_assembles_again(model, tmp_path: Path,
                                                                                          appears: str) -> None:
    """Found: the sidecar was published before its output, and stayed when the output's name was taken: the
    rerun the message asked for was refused ("v.npy.json already exists"). A folder was said to be a file
    another program wrote."""
    source, output = rows(tmp_path), tmp_path / "v.npy"

    def taken(done: int, total: int) -> None:  # another program takes the name once the last chunk is done
        if done == total:
            output.mkdir() if appears == "folder" else output.write_text("theirs")
    with pytest.raises(MinidecoderError) as refused:
        run_embedding_job(model, "mean", source, output, chunk_size=4, progress=taken)
    said = "a folder stands where a file belongs" if appears == "folder" else "appeared while this run was working"
    assert said in refused.value.problem and "all 3 computed chunk(s) are kept" in refused.value.problem
    assert not output.with_name("v.npy.json").exists()
    shutil.rmtree(output) if appears == "folder" else output.unlink()
    assert run_embedding_job(model, "mean", source, output, chunk_size=4)["chunks_reused"] == 3
    run_embedding_job(model, "mean", source, tmp_path / "clean.npy", chunk_size=4)
    assert output.read_bytes() == (tmp_path / "clean.npy").read_bytes()


def test_a_sharded_jobs_manifest_that_cannot_be_written_keeps_the_shards(model, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: the shards' manifest, written once every rank is done, failed on a full disk with a traceback."""
    import minidecoder.running.distributed as distributed

    source, output = rows(tmp_path), tmp_path / "v.npy"
    with monkeypatch.context() as patch:
        failing(patch, distributed, "write_whole", "v.npy.shards.json")
        with pytest.raises(MinidecoderError) as refused:
            distributed.embed_sharded(model, "mean", source, output, chunk_size=4)
    assert f"writing the shards' manifest {output}.shards.json failed: no space left" in refused.value.problem
    assert refused.value.fix.startswith(f"free space on the disk that holds {tmp_path}, then run the same command")
    assert distributed.embed_sharded(model, "mean", source, output, chunk_size=4)["shard_reused"]
    assert distributed.load_sharded(output).shape == (10, model.config.hidden_size)


# ---- kept work that fails to be written while an eval scores -----------------------------------------------
def test_transfer_keeps_the_embedding_job_until_its_own_copy_is_written(tiny_llama, tmp_path: Path, capsys,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: transfer's job removed its table once read back, then the copy transfer keeps failed on a full
    disk with a traceback, and every embedding was lost with the work folder."""
    import minidecoder.evaluation.transfer as transfer
    import minidecoder.running.embedding as embedding
    from test_resumes_and_interrupts import senteval_data

    argv = ["eval", "transfer", "--tasks", "SST2", "--data", str(senteval_data(tmp_path / "data")), "--probe-workers",
            "1", "--method", "mean", "--model", str(tiny_llama), "--no-progress", "--output"]
    failing(monkeypatch, transfer, "write_streamed", "embeddings.kept.npy")
    work = tmp_path / ".r.json.partial"
    code, err = cli(capsys, *argv, str(tmp_path / "r"))
    assert code == 2 and f"keeping embeddings.kept.npy in {work} failed: no space left on the device" in err, err
    assert f"the embeddings are kept in {work}" in err and f"free space on the disk that holds {work}" in err
    monkeypatch.undo()
    embedded = []
    monkeypatch.setattr(embedding, "embed_rows", lambda *args, **kwargs: embedded.append(1))
    assert cli(capsys, *argv, str(tmp_path / "r"))[0] == 0 and not embedded  # read back, never embedded again
    monkeypatch.undo()
    assert cli(capsys, *argv, str(tmp_path / "clean"))[0] == 0
    scores = [json.loads((tmp_path / f"{name}.json").read_text())["results"]["tasks"] for name in ("r", "clean")]
    assert scores[0] == scores[1] and not work.exists()


# ---- an output of a set that fails: the set is whole or absent ---------------------------------------------
@pytest.mark.parametrize(("command", "fails", "resumed", "scores"), [
    (["eval", "sts", "--tasks", "STSBenchmark"], "r.md", ("results", "resumed_chunks"), ("results", "tasks")),
    (["eval", "sts-long", "--lengths", "1,2", "--plot"], "r.png", ("results", "embedding", "chunks_reused"),
     ("results", "lengths")),
    (["sweep", "--layers", "1,2", "--plot"], "r-layer.png", ("sweep", "cost", "resumed_batches"), ("sweep", "points")),
])
def test_an_output_that_fails_takes_back_the_others_and_the_same_command_resumes(tiny_llama, tmp_path: Path, capsys,
                                                                                  monkeypatch, command: list[str],
                                                                                  fails: str, resumed: tuple,
                                                                                  scores: tuple) -> None:
    """Found: eval's Markdown failing left its JSON, and a figure failing left the report (eval sts-long had
    removed its kept work already; a traceback): the same command was then refused, "r.json already exists"."""
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MINIDECODER_CACHE", str(tmp_path / "cache" / "downloads"))  # where a report is rescued
    argv = [*command, "--method", "mean", "--data", str(sts_data(tmp_path / "sts", pairs=30)), "--model",
            str(tiny_llama), "--no-progress", "--output"]
    failing(monkeypatch, output_files, "_write_then_publish", fails)
    work = tmp_path / ".r.json.partial"
    code, err = cli(capsys, *argv, str(tmp_path / "r"))
    assert code == 2 and ("failed (no space left" in err or f"{tmp_path / fails} failed: no space left" in err), err
    assert f"free space on the disk that holds {tmp_path}" in err and f"(delete {work} to discard them)" in err, err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.md").exists()
    monkeypatch.undo()
    assert cli(capsys, *argv, str(tmp_path / "r"))[0] == 0 and not work.exists()
    assert cli(capsys, *argv, str(tmp_path / "clean"))[0] == 0
    written, clean = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("r", "clean"))

    def at(report: dict, keys: tuple):
        for key in keys:
            report = report[key]
        return report
    assert at(written, resumed) >= 1 and at(written, scores) == at(clean, scores)


# ---- the way to resume -------------------------------------------------------------------------------------
def test_an_eval_that_chose_its_output_names_it_as_the_way_to_resume(tiny_llama, tmp_path: Path, capsys,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: "run the same command again" resumed nothing where --output was left out: the command then
    chooses a new dated prefix, and the kept chunks sit under the old one."""
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "sts", "--tasks", "STSBenchmark", "--data", str(sts_data(tmp_path / "sts", pairs=600)), "--method",
            "mean", "--model", str(tiny_llama), "--no-progress"]  # 1,200 sentences: two chunks
    with monkeypatch.context() as patch:
        failing(patch, output_files, "_write_then_publish", "chunk-000001.npy")
        code, err = cli(capsys, *argv)
    again = re.search(r"run the same command again with --output (\S+): it resumes from them", err)
    assert code == 2 and again and "the 1 finished chunk(s) of 2 are kept" in err, err
    assert cli(capsys, *argv, "--output", again.group(1))[0] == 0
    assert json.loads(Path(again.group(1) + ".json").read_text())["results"]["resumed_chunks"] == 1


# ---- a read-only work folder -------------------------------------------------------------------------------
JOB = """
import sys
import minidecoder
import minidecoder.output_files as output_files
from minidecoder.errors import MinidecoderError
from minidecoder.running.jobs import run_embedding_job
try:
    run_embedding_job(minidecoder.load(sys.argv[1], progress=False), "mean", sys.argv[2], sys.argv[3], chunk_size=4)
except MinidecoderError as error:
    sys.exit(f"minidecoder: error: {error}")
"""


def unprivileged(argv: list[str]) -> list[str]:
    """`argv` run where a folder's mode bits apply: root ignores them, so root runs it without that power."""
    if os.geteuid() != 0:
        return argv
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*drop, "true"], capture_output=True).returncode:
        pytest.skip("root, and no setpriv to run without its power over modes")
    return [*drop, *argv]


def test_a_read_only_work_folder_asks_for_write_permission_and_the_job_resumes(model, tiny_llama, tmp_path) -> None:
    """Found: a chunk that could not be written for want of permission was told to "free space"."""
    source, output, work = rows(tmp_path), tmp_path / "v.npy", tmp_path / ".v.npy.partial"

    def ctrl_c(done: int, total: int) -> None:
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_embedding_job(model, "mean", source, output, chunk_size=4, progress=ctrl_c)  # one chunk of three kept
    work.chmod(0o555)
    try:
        run = subprocess.run(unprivileged([sys.executable, "-c", JOB, str(tiny_llama), str(source), str(output)]),
                             capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        work.chmod(0o755)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"writing chunk 1 into {work} failed: permission denied; the 1 finished chunk(s) of 3 are kept" in run.stderr
    assert f"fix: make {work} writable (e.g. chmod u+w {work}), then run the same command again" in run.stderr
    assert run_embedding_job(model, "mean", source, output, chunk_size=4)["chunks_reused"] == 1
    run_embedding_job(model, "mean", source, tmp_path / "clean.npy", chunk_size=4)
    assert output.read_bytes() == (tmp_path / "clean.npy").read_bytes()
