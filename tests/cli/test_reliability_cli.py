"""The classes met at the CLI and the text entry points: outputs
claimed and locked (3), Ctrl-C (7), closed pipes (8), inputs validated before any work (9), messages
(10), sentence-transformers' `encode` arguments (11), CR-only line endings (12). docs/reliability.md
lists them against these tests; the numbers in the test names are their classes (docs/reliability.md rows 17-24 give both)."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import InputError, MinidecoderError, OutputError
from cli_runner import cli
from repo_paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
NO_MODEL = "no-such-model-folder"  # a run that names this and fails on something else never loaded a model


def sts_data(folder: Path, pairs: int = 12, gold: str | None = None) -> Path:
    """A SentEval-layout folder with STS-B test and dev of `pairs` short distinct pairs each; `gold`, when
    given, replaces the score of the second test pair."""
    (folder / "STSBenchmark").mkdir(parents=True, exist_ok=True)
    for split in ("test", "dev"):
        rows = []
        for i in range(pairs):
            score = gold if gold is not None and split == "test" and i == 1 else f"{(i * 7) % 11 / 2:.3f}"
            rows.append(f"main-captions\tMSRvid\t2012{split}\t{i:04d}\t{score}\tpair {i} says {split} one {i % 5}"
                        f"\tthe {i}th {'other' if i % 3 else 'same'} text\n")
        (folder / "STSBenchmark" / f"sts-{split}.csv").write_text("".join(rows), encoding="utf-8")
    return folder


# A CLI run in a subprocess whose function `module:name` passes its first N calls through, then prints
# "ready" and stalls (a long computation to interrupt, or a run holding its outputs) until the file
# argv[2] exists (or two minutes passed), then goes on.
STALL = """
import importlib, os, sys, time
module, name, through = sys.argv[1].split(":")
target = importlib.import_module(module)
real, calls = getattr(target, name), []
def stall(*args, **kwargs):
    calls.append(1)
    if len(calls) <= int(through):
        return real(*args, **kwargs)
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return real(*args, **kwargs)
setattr(target, name, stall)
from minidecoder.cli import main
sys.exit(main(sys.argv[3:]))
"""


def stalled(where: str, go: Path, *argv: str) -> subprocess.Popen:
    """The CLI run `argv` in a subprocess, once it has reached its stall (see STALL; `go` ends it)."""
    process = subprocess.Popen([sys.executable, "-c", STALL, where, str(go), *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=ENV)
    line = process.stdout.readline()
    assert line.strip() == "ready", process.communicate()[1]
    return process


def ctrl_c(where: str, go: Path, *argv: str) -> str:
    """Ctrl-C to the CLI run `argv` at its stall (see `stalled`): its stderr, once it ended with status 130
    and no traceback."""
    run = stalled(where, go, *argv)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Traceback" not in err, err
    return err


def interrupted_into_rep(where: str, tmp_path: Path, *argv: str) -> tuple[str, Path]:
    """Ctrl-C (see `ctrl_c`) to `argv --output tmp_path/rep`: the last line it printed, and the folder of work
    it kept."""
    err = ctrl_c(where, tmp_path / "never", *argv, "--output", str(tmp_path / "rep"))
    return err.strip().splitlines()[-1], tmp_path / ".rep.json.partial"


# ---- 3. one locked writer for every output ------------------------------------------------------------------
def test_3_eval_and_embed_on_one_name_are_refused_naming_the_holder_before_loading(tiny_llama, tmp_path,
                                                                                   capsys) -> None:
    data = sts_data(tmp_path / "sts")
    report = ["eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress",
              "--output", str(tmp_path / "r.npy")]  # writes r.npy.json, the sidecar `embed --output r.npy` writes
    holder = stalled("minidecoder.running.jobs:embed_resumably:0", tmp_path / "go", *report, "--model",
                     str(tiny_llama))
    try:
        code, err = cli(capsys, *report, "--model", NO_MODEL)
        assert code == 2 and f"another run (process {holder.pid}) is writing" in err and NO_MODEL not in err, err
        source = tmp_path / "in.txt"
        source.write_text("one\ntwo\n")
        code, err = cli(capsys, "embed", "--method", "mean", "--input", str(source), "--output",
                        str(tmp_path / "r.npy"), "--model", NO_MODEL)
        assert code == 2 and f"process {holder.pid}" in err and "r.npy.json" in err and NO_MODEL not in err, err
    finally:
        (tmp_path / "go").touch()
        out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    assert "results" in json.loads((tmp_path / "r.npy.json").read_text())  # the report, whole and not replaced
    assert not list(tmp_path.glob(".*.lock")) and not list(tmp_path.glob(".r.npy.json.partial"))


def test_3_a_sweep_never_replaces_an_existing_figure_without_overwrite(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    data = sts_data(tmp_path / "sts")
    (tmp_path / "s-layer.png").write_bytes(b"someone's figure")
    code, err = cli(capsys, "sweep", "--method", "mean", "--layers", "1,2", "--plot", "--data", str(data),
                    "--output", str(tmp_path / "s"), "--model", NO_MODEL)
    assert code == 2 and "s-layer.png already exists" in err and "--overwrite" in err and NO_MODEL not in err, err
    assert (tmp_path / "s-layer.png").read_bytes() == b"someone's figure"


def test_3_a_file_that_appears_during_a_run_is_not_replaced(tmp_path) -> None:
    from lock_holder import lock_holder
    from minidecoder.output_files import claim_outputs

    target = tmp_path / "r.json"
    with claim_outputs([target]) as claim:
        assert lock_holder(target) == os.getpid()
        target.write_text("written by another program meanwhile")
        with pytest.raises(OutputError, match="appeared while this run was working"):
            claim.write_text(target, "ours")
    assert target.read_text() == "written by another program meanwhile" and lock_holder(target) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file, no lock file left
    with claim_outputs([target], overwrite=True) as claim:
        claim.write_text(target, "ours")
    assert target.read_text() == "ours"


# ---- 7. Ctrl-C says what was kept and how to resume; eval resumes ---------------------------------------------
def test_7_ctrl_c_in_eval_keeps_finished_chunks_and_the_same_command_resumes(tiny_llama, tmp_path, capsys) -> None:
    data = sts_data(tmp_path / "sts", pairs=1100)  # 2,200 distinct sentences: three chunks of 1,024
    argv = ["eval", "sts", "--model", str(tiny_llama), "--method", "mean", "--tasks", "STSBenchmark", "--data",
            str(data), "--no-progress", "--batch-size", "64"]
    said, work = interrupted_into_rep("minidecoder.running.embedding:embed_rows:2", tmp_path, *argv)  # third chunk
    assert said == (f"minidecoder: interrupted; the embeddings of 2 of 3 chunks of sentences are kept in {work}; "
                    f"run the same command again to resume from them")
    assert len(list(work.glob(".embeddings.npy.partial/chunk-*.npy"))) == 2

    assert cli(capsys, *argv, "--output", str(tmp_path / "rep"))[0] == 0
    assert cli(capsys, *argv, "--output", str(tmp_path / "clean"))[0] == 0
    resumed = json.loads((tmp_path / "rep.json").read_text())["results"]
    clean = json.loads((tmp_path / "clean.json").read_text())["results"]
    assert resumed["resumed_chunks"] == 2 and resumed["tasks"] == clean["tasks"]  # the same embeddings, exactly
    assert not work.exists()


def test_7_ctrl_c_in_a_sweep_keeps_finished_batches_and_the_same_command_resumes(tiny_llama, tmp_path, capsys,
                                                                                  monkeypatch) -> None:
    from minidecoder.evaluation import sweep

    data = sts_data(tmp_path / "sts")  # 24 distinct dev sentences: six batches of 4
    argv = ["sweep", "--model", str(tiny_llama), "--method", "cp", "--layers=-2,-1", "--cp-steer", "1",
            "--cp-alpha", "0.5,2", "--data", str(data), "--no-progress", "--batch-size", "4"]
    said, work = interrupted_into_rep("minidecoder.evaluation.sweep:sweep_points:2", tmp_path, *argv)  # third batch
    assert said == (f"minidecoder: interrupted; 2 of 6 batches of the sweep are kept in {work}; "
                    f"run the same command again to resume from them")
    assert len(list(work.glob("chunk-*.npy"))) == 2

    changed = [*argv[:-2], "--batch-size", "3", "--output", str(tmp_path / "rep")]  # other settings: refused
    code, err = cli(capsys, *changed)
    assert code == 2 and "with other settings" in err and "--batch-size was 4, now 3" in err
    assert len(list(work.glob("chunk-*.npy"))) == 2 and not (tmp_path / "rep.json").exists()

    real, calls = sweep.sweep_points, []
    monkeypatch.setattr(sweep, "sweep_points", lambda *args: calls.append(1) or real(*args))
    assert cli(capsys, *argv, "--output", str(tmp_path / "rep"))[0] == 0
    assert len(calls) == 4  # only the batches not kept
    assert cli(capsys, *argv, "--output", str(tmp_path / "clean"))[0] == 0
    resumed = json.loads((tmp_path / "rep.json").read_text())["sweep"]
    clean = json.loads((tmp_path / "clean.json").read_text())["sweep"]
    assert resumed["points"] == clean["points"]  # the same scores, exactly
    assert resumed["cost"]["resumed_batches"] == 2 and clean["cost"]["resumed_batches"] == 0
    assert resumed["cost"]["blocks_computed"] == clean["cost"]["blocks_computed"]  # counts cover every batch
    assert not work.exists() and not (tmp_path / ".clean.json.partial").exists()


@pytest.mark.parametrize("where, argv, line", [
    ("minidecoder.running.generation:greedy:0", ["generate", "hello"],
     "minidecoder: interrupted; nothing was kept (generate writes nothing until it ends); run the same command again"),
    ("minidecoder.evaluation.sweep:sweep_sts:0", ["sweep", "--method", "mean", "--layers", "1,2", "--no-progress"],
     "minidecoder: interrupted before any batch of the sweep was computed; nothing new was kept; run the same "
     "command again (with the same --output, it resumes from batches an earlier run kept)"),
    ("minidecoder.evaluation.sweep:sweep_points:0", ["sweep", "--method", "mean", "--layers", "1,2", "--no-progress"],
     "minidecoder: interrupted before the first batch of the sweep was finished; nothing was kept; run the same "
     "command again"),
])
def test_7_ctrl_c_anywhere_prints_one_line_of_what_was_kept(tiny_llama, tmp_path, where, argv, line) -> None:
    extra = ["--data", str(sts_data(tmp_path / "sts")), "--output", str(tmp_path / "s")] if argv[0] == "sweep" else []
    err = ctrl_c(where, tmp_path / "never", *argv, *extra, "--model", str(tiny_llama))
    assert err.strip() == line, err


# A CLI run whose command, stalled at `module:name`, holds an object that sends the process a second Ctrl-C from
# its finalizer: as a progress bar's `__del__` can be running, when the command's frames are freed on the way
# out of the first Ctrl-C, just as a second Ctrl-C lands.
SECOND_CTRL_C_IN_A_FINALIZER = """
import importlib, os, signal, sys, time
module, name = sys.argv[1].split(":")
class SecondCtrlC:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # a Python handler for it would run here, inside the finalizer
def stall(*args, **kwargs):
    held = SecondCtrlC()
    print("ready", flush=True)
    time.sleep(120)
setattr(importlib.import_module(module), name, stall)
from minidecoder.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_7_a_second_ctrl_c_while_the_stopped_command_is_freed_prints_no_traceback(tiny_llama) -> None:
    run = subprocess.Popen([sys.executable, "-c", SECOND_CTRL_C_IN_A_FINALIZER, "minidecoder.running.generation:greedy",
                            "generate", "hello", "--model", str(tiny_llama)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert run.stdout.readline().strip() == "ready", run.communicate()[1]
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Exception ignored" not in err and "Traceback" not in err, err
    assert err.strip() == ("minidecoder: interrupted; nothing was kept (generate writes nothing until it ends); run "
                           "the same command again"), err


# ---- 8. a closed stdout ends quietly ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["fetch", "--list"],
    ["generate", "hello", "--max-new-tokens", "4"],
    ["logits", "hello", "--top-k", "128"],
    ["explain", "A man plays a guitar.", "--method", "tp", "--opt", "end=3", "--json"],
], ids=lambda argv: argv[0])
def test_8_a_closed_stdout_ends_quietly_with_status_141(tiny_llama, argv) -> None:
    model = [] if argv[0] == "fetch" else ["--model", str(tiny_llama)]
    process = subprocess.Popen([sys.executable, "-m", "minidecoder", *argv, *model], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=ENV)
    process.stdout.close()  # the reader is gone before anything is written, as `| head -1` after its line
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and err == "", err


def test_8_a_closed_stdout_in_a_shell_pipe(tiny_llama) -> None:
    shell = f"set -o pipefail; {sys.executable} -m minidecoder logits hello --top-k 128 --model {tiny_llama} | head -1"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.stdout.startswith("next token after") and "Error" not in done.stderr, done.stderr
    assert done.returncode in (0, 141)  # 0 when everything fit in the pipe before head left


# ---- 9. inputs checked before any work ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv, problem", [
    (["embed", "--method", "htp", "--opt", f"seed={2**64}", "--input", "x.txt", "--output", "v.npy"],
     f"--opt seed={2**64} is past 64 bits"),
    (["embed", "--method", "htp", "--opt", "seed=" + "9" * 5000, "--input", "x.txt", "--output", "v.npy"],
     "is past 64 bits"),
    (["explain", "hi", "--method", "htp", "--opt", f"seed=-{2**63 + 1}"], "is past 64 bits"),
    (["sweep", "--method", "htp", "--grid", f"seed=1,{2**70}", "--output", "s"], f"--grid seed={2**70} is past 64"),
    (["explain", "hi", "--method", "mean", "--plot", "out.txt"], "matplotlib cannot write a .txt figure"),
])
def test_9_option_values_and_figure_names_are_checked_before_the_model_loads(tmp_path, capsys, monkeypatch, argv,
                                                                           problem) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, err = cli(capsys, *argv, "--model", NO_MODEL)
    assert code == 2 and problem in err and NO_MODEL not in err and "Traceback" not in err, err


def read_only_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root ignores the mode bits: take a read-only mount instead
        folder = Path("/sys/kernel")
        if not folder.is_dir() or os.access(folder, os.W_OK) and _writable(folder):
            pytest.skip("no read-only folder to test with")
    return folder


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").write_bytes(b"")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_9_explain_plot_into_a_read_only_folder_is_refused_before_the_model_loads(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    folder = read_only_folder(tmp_path)
    code, err = cli(capsys, "explain", "hi", "--method", "mean", "--plot", str(folder / "out.png"), "--model", NO_MODEL)
    assert code == 2 and "is not writable" in err and NO_MODEL not in err, err


@pytest.mark.parametrize("gold, shown", [("abc", "'abc'"), ("nan", "'nan'"), ("inf", "'inf'")])
def test_9_an_sts_gold_score_that_is_not_a_finite_number_is_named_before_any_work(tmp_path, capsys, gold,
                                                                                  shown) -> None:
    from minidecoder.evaluation.sts import load_task

    data = sts_data(tmp_path / "sts", gold=gold)
    with pytest.raises(InputError, match=rf"sts-test.csv line 2: the gold score {shown} is not a finite number"):
        load_task("STSBenchmark", data)
    code, err = cli(capsys, "eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data),
                    "--output", str(tmp_path / "r"), "--model", NO_MODEL)
    assert code == 2 and "line 2: the gold score" in err and NO_MODEL not in err, err


# ---- 10. messages that name the way out ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def short(tmp_path_factory, tiny_llama: Path) -> Path:
    """The tiny llama (one token per character) with a 128-token context."""
    import shutil
    folder = Path(shutil.copytree(tiny_llama, tmp_path_factory.mktemp("ctx") / "m"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    return folder


def test_10_explain_past_the_context_names_its_own_truncate(short, capsys) -> None:
    text = "word " * 40  # 200 tokens
    code, err = cli(capsys, "explain", text, "--method", "prompteol", "--model", str(short))
    assert code == 2 and "explain --truncate" in err, err
    fits = int(err.split("explain --truncate ")[1].split(")")[0])
    with pytest.warns(UserWarning, match="were cut"):
        assert cli(capsys, "explain", text, "--method", "prompteol", "--model", str(short), "--truncate",
                   str(fits))[0] == 0


def test_10_a_lone_surrogate_is_named_by_its_row_at_every_text_entry_point(tiny_llama, tmp_path) -> None:
    from minidecoder.running.jobs import run_embedding_job

    model = minidecoder.load(tiny_llama, progress=False)
    with pytest.raises(InputError, match=r"text 1 holds a lone surrogate '\\ud800' at character 1"):
        minidecoder.embed(model, ["fine", "a\ud800b"], "mean")
    with pytest.raises(InputError, match="text 2 holds a lone surrogate"):
        minidecoder.SentenceEncoder(model, "mean").encode(["fine", "also fine", "\udfff"])
    with pytest.raises(InputError, match="the text holds a lone surrogate"):
        minidecoder.explain(model, "x\ud800", "mean")
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "fine"}\n{"text": "bad \\ud800"}\n')  # valid JSON, not Unicode text
    with pytest.raises(InputError, match=r"in.jsonl line 2 holds a lone surrogate"):
        run_embedding_job(model, "mean", source, tmp_path / "v.npy")


def test_10_a_lone_surrogate_in_a_prompt_or_a_template_is_named_not_a_traceback(tiny_llama, capsys) -> None:
    model = minidecoder.load(tiny_llama, progress=False)
    for call in (lambda: model.tokenizer.encode("a\udcff"), lambda: model.tokenizer.encode_batch(["ok", "\ud800"]),
                 lambda: model.tokenizer.encode_with_offsets("\ud800"),
                 lambda: minidecoder.embed(model, ["fine"], "mean", template="\udcff {text}")):
        with pytest.raises(InputError, match="lone surrogate"):  # was tokenizers' bare TypeError
            call()
    # A byte that is not UTF-8 in argv arrives as a lone surrogate (surrogateescape): named before the model loads.
    for argv in (["generate", "a\udcff"], ["generate", "--chat", "hi", "--system", "\udcff"], ["logits", "\udcff"],
                 ["demo", "--prompt", "\udcff"]):
        code, err = cli(capsys, *argv, "--model", NO_MODEL)
        assert code == 2 and "holds the byte 0xff at character" in err and "not UTF-8" in err, (argv, err)
        assert "Traceback" not in err and "in UTF-8 (a UTF-8 locale, or convert it with iconv)" in err, (argv, err)


# ---- 11. sentence-transformers 6.2's encode, argument for argument --------------------------------------------
@pytest.fixture(scope="module")
def encoders(tiny_llama: Path):
    """(our SentenceEncoder, a real SentenceTransformer around the same method), with the same prompts."""
    from sentence_transformers import SentenceTransformer

    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    prompts = {"query": "query: ", "passage": "passage: "}
    ours = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean", prompts=prompts)
    return ours, SentenceTransformer(modules=[MinidecoderModule(ours)], device="cpu", prompts=prompts)


TEXTS = ["A man plays a guitar.", "Someone plays music.", "Stocks fell.", "A chef cooks pasta in a kitchen."]


@pytest.mark.parametrize("options", [
    {"prompt": "Represent this: "}, {"prompt_name": "query"}, {"prompt_name": "passage", "prompt": "p: "},
    {"truncate_dim": 8}, {"truncate_dim": 8, "normalize_embeddings": True},
    {"precision": "int8"}, {"precision": "uint8"}, {"precision": "binary"}, {"precision": "ubinary"},
    {"precision": "int8", "convert_to_tensor": True}, {"precision": "binary", "convert_to_numpy": False},
    {"inputs": TEXTS}, {"sentences": TEXTS},
], ids=lambda o: ",".join(f"{k}={v if k not in ('inputs', 'sentences') else '...'}" for k, v in o.items()))
def test_11_encode_takes_sentence_transformers_arguments_and_equals_it(encoders, options) -> None:
    ours, theirs = encoders
    positional = [] if {"inputs", "sentences"} & set(options) else [TEXTS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sentences= is deprecated there
        expected = theirs.encode(*positional, show_progress_bar=False, **options)
    got = ours.encode(*positional, show_progress_bar=False, **options)
    assert type(got) is type(expected)
    for a, b in zip(got if isinstance(got, list) else [got], expected if isinstance(expected, list) else [expected]):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=1e-5)


@pytest.mark.parametrize("options, named", [
    ({"output_value": "token_embeddings"}, "encode(output_value='token_embeddings') is not supported"),
    ({"pool": {}}, "pool="), ({"chunk_size": 8}, "chunk_size="), ({"device": ["cpu", "cpu"]}, "a list of devices"),
    ({"precision": "float16"}, "encode(precision='float16') is not one of"),
    ({"prompt_name": "nope"}, "encode(prompt_name='nope') is not one of this encoder's prompts"),
    ({"truncate_dim": 0}, "encode(truncate_dim=0) must be a positive"),
    ({"task": "query"}, "keyword argument(s) ['task']"),
])
def test_11_what_encode_cannot_honour_is_refused_naming_the_argument(encoders, options, named) -> None:
    with pytest.raises(MinidecoderError) as error:
        encoders[0].encode(TEXTS, **options)
    assert named in str(error.value)


def test_11_quantizing_a_single_embedding_is_refused_with_the_way_out(encoders) -> None:
    with pytest.raises(MinidecoderError, match=r"encode\(precision='int8'\): Cannot compute int8 quantization"):
        encoders[0].encode("one text", precision="int8")  # sentence-transformers raises a bare ValueError here
    assert encoders[0].encode("one text", precision="ubinary").shape == (4,)  # 32 dimensions, 4 bytes of bits


# ---- 12. CR-only line endings are line ends ------------------------------------------------------------------------
def test_12_cr_only_line_endings_give_one_row_per_line(tiny_llama, tmp_path, capsys) -> None:
    from minidecoder.running.jobs import read_lines

    data = b"a\rb\r\nc\nd\r"
    for block in (1, 2, 3, 1 << 20):  # every cut between blocks, a \r\n split between two included
        assert list(read_lines(io.BytesIO(data), block=block)) == [b"a", b"b", b"c", b"d"], block
    assert list(read_lines(io.BytesIO(b"x\r\r\ny"), block=2)) == [b"x", b"", b"y"]
    source = tmp_path / "mac.txt"
    source.write_bytes(b"first text\rsecond text\rthird text\r")
    output = tmp_path / "v.npy"
    code, err = cli(capsys, "embed", "--model", str(tiny_llama), "--method", "mean", "--input", str(source),
                    "--output", str(output), "--no-progress")
    assert code == 0, err
    expected = minidecoder.embed(minidecoder.load(tiny_llama), ["first text", "second text", "third text"], "mean")
    torch.testing.assert_close(torch.from_numpy(np.load(output)), expected)


# ---- 14. --compile compiles a few variants, not one per layer ----------------------------------------------------
def test_14_compiled_blocks_compile_a_few_variants_not_one_per_layer(tiny_llama) -> None:
    from torch._dynamo.utils import counters

    from minidecoder.fast import compiled

    torch._dynamo.reset()
    compiled._shared_compiled_forward.cache_clear()
    model = minidecoder.load(tiny_llama, compile=True, progress=False)
    before = counters["frames"]["ok"]
    texts = ["A man plays a guitar.", "Someone plays music.", "Stocks fell sharply today."]
    minidecoder.embed(model, texts, "prompteol")  # through the prefix cache: was one compile per layer and state
    minidecoder.embed(model, texts, "mean")  # the plain loop: compiled once
    minidecoder.embed(model, texts[:2], "mean")  # another batch shape: no recompile (dynamic=True)
    assert 1 <= counters["frames"]["ok"] - before <= 2 < model.num_layers
