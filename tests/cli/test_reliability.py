"""The ten first classes of hostile input and faults, each met where a user meets it (the CLI, in
process or in a subprocess, or the public API). docs/reliability.md lists them against these tests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import ContextLengthError, MinidecoderError
from cli_runner import cli
from lock_holder import lock_held
from repo_paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def short(tmp_path_factory, tiny_llama: Path) -> Path:
    """The tiny llama (character tokenizer: one token per character) with a 128-token context."""
    folder = Path(shutil.copytree(tiny_llama, tmp_path_factory.mktemp("ctx") / "m"))
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 128
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def model(short: Path):
    return minidecoder.load(short, progress=False)



def lines(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return path


# ---- 1. inputs past the context ------------------------------------------------------------------------------
def test_1_past_the_context_is_refused_at_every_entry_point_or_truncated_on_request(model, short, tmp_path,
                                                                                    capsys) -> None:
    assert model.max_context == 128
    with pytest.raises(ContextLengthError, match=r"text 1 is 601 tokens, longer than the model's context of 128"):
        minidecoder.embed(model, ["short", "x" * 601], "mean")
    with pytest.raises(ContextLengthError, match=r"(?s)text 0 is 120 tokens; with method prompteol's prompt .* truncate="):
        minidecoder.embed(model, ["y" * 120], "prompteol")  # fits alone, not inside the prompt
    with pytest.raises(ContextLengthError, match="129 tokens is longer than the model's context of 128"):
        model(torch.ones(1, 129, dtype=torch.long))
    with pytest.raises(ContextLengthError, match="past the model's context of 128"):
        minidecoder.generate(model, [5] * 100, max_new_tokens=29)
    with pytest.warns(UserWarning, match="truncate=100: 1 of 2 texts were cut"):
        assert minidecoder.embed(model, ["short", "x" * 601], "mean", truncate=100).shape == (2, 32)
    source = lines(tmp_path / "in.txt", ["fine", "z" * 601])
    code, err = cli(capsys, "embed", "--model", str(short), "--method", "mean", "--input", str(source),
                    "--output", str(tmp_path / "o.npy"), "--no-progress")
    assert code == 2 and f"{source} line 2 is 601 tokens" in err and "--truncate" in err  # the input's line
    assert not (tmp_path / "o.npy").exists() and not list(tmp_path.glob(".o.npy.*"))


def test_1_a_converted_gguf_carries_its_context(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny_gguf
    from minidecoder.sources.convert import convert_gguf

    write_tiny_gguf(tmp_path / "t.gguf")
    folder = convert_gguf(tmp_path / "t.gguf", tmp_path / "out", progress=False)
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == 128
    converted = minidecoder.load(folder, progress=False)
    assert converted.max_context == 128
    with pytest.raises(ContextLengthError, match="tokens, longer than the model's context of 128"):
        minidecoder.embed(converted, ["a" * 601], "mean")


# ---- 2. memory ---------------------------------------------------------------------------------------------
def test_2_batches_are_split_to_fit_and_a_text_that_cannot_fit_is_refused(model, monkeypatch) -> None:
    import minidecoder.running.memory as memory

    texts = [f"sentence number {i} " * (1 + i % 3) for i in range(12)]
    whole = minidecoder.embed(model, texts, "mean", batch_size=12)
    from minidecoder.running.embedding import forward_length

    sizes: list[int] = []
    longest = max(len(model.tokenizer.encode(t, add_special_tokens=False)) for t in texts)
    one_row = memory.forward_bytes(model, 1, int(forward_length(model, minidecoder.methods.build_method("mean"))(longest)))
    monkeypatch.setattr(memory, "available_bytes", lambda device: int(3.5 * one_row / memory.BUDGET_FRACTION))
    original = type(minidecoder.methods.build_method("mean")).embed_batch

    def counting(self, model_, batch, **forward):
        sizes.append(len(batch))
        return original(self, model_, batch, **forward)
    monkeypatch.setattr(type(minidecoder.methods.build_method("mean")), "embed_batch", counting)
    split = minidecoder.embed(model, texts, "mean", batch_size=12)
    assert max(sizes) < 12 and sum(sizes) == 12
    torch.testing.assert_close(split, whole)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(MinidecoderError, match=r"text 0 is \d+ tokens; one forward over it needs about .* GiB"):
        minidecoder.embed(model, ["a long enough text"], "mean")


# ---- 3. write failures -------------------------------------------------------------------------------------
FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)        # the write then fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from minidecoder.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_limited(limit: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FULL_DISK, str(limit), *argv], capture_output=True, text=True,
                          env=ENV, timeout=120)


FULL_DISK_JOB = """
import resource, signal, sys
import minidecoder
from minidecoder.errors import MinidecoderError
from minidecoder.running.jobs import run_embedding_job
model = minidecoder.load(sys.argv[2], progress=False)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
try:
    run_embedding_job(model, "mean", sys.argv[3], sys.argv[4], chunk_size=8, batch_size=4)
except MinidecoderError as error:
    sys.exit(f"minidecoder: error: {error}")
"""


def test_3_a_full_disk_keeps_every_chunk_and_the_same_command_resumes(tiny_llama, tmp_path) -> None:
    source = lines(tmp_path / "in.txt", [f"row {i} of the input" for i in range(40)])
    output = tmp_path / "out" / "v.npy"
    # Files up to 3000 bytes: each chunk (8 x 32 floats, 1.2 kB) fits, the assembled output (5.2 kB) does not.
    failed = subprocess.run([sys.executable, "-c", FULL_DISK_JOB, "3000", str(tiny_llama), str(source), str(output)],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert f"writing {output} failed: File too large; all 5 computed chunk(s) are kept" in failed.stderr
    work = output.parent / ".v.npy.partial"
    assert len(list(work.glob("chunk-*.npy"))) == 5 and not list(work.glob("assembled*")) and not output.exists()
    # The CLI on the same limit: the first chunk (1024 rows, 5.2 kB) cannot be written; said so, exit 2.
    argv = ["embed", "--model", str(tiny_llama), "--method", "mean", "--input", str(source), "--no-progress",
            "--batch-size", "4", "--output"]
    cli_failed = run_limited(3000, *argv, str(tmp_path / "cli.npy"))
    assert cli_failed.returncode == 2 and "Traceback" not in cli_failed.stderr
    assert "writing chunk 0 into" in cli_failed.stderr and "are kept there" in cli_failed.stderr, cli_failed.stderr
    # Space freed: the same job resumes from the kept chunks, byte-identical to a clean run (same threads).
    for target in (output, tmp_path / "clean.npy"):
        done = subprocess.run([sys.executable, "-c", FULL_DISK_JOB, str(10**9), str(tiny_llama), str(source),
                               str(target)], capture_output=True, text=True, env=ENV, timeout=120)
        assert done.returncode == 0, done.stderr
    assert not work.exists() and output.read_bytes() == (tmp_path / "clean.npy").read_bytes()
    assert np.load(output).shape == (40, 32)


def test_3_an_unwritable_output_folder_is_named_before_the_model_loads(tmp_path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    source = lines(tmp_path / "in.txt", ["one"])
    code, err = cli(capsys, "embed", "--model", str(tmp_path / "no-such-model"), "--method", "mean", "--input",
                    str(source), "--output", str(blocker / "sub" / "v.npy"))
    assert code == 2 and "not writable" in err and "no-such-model" not in err


def test_3_convert_into_a_full_disk_is_a_message_and_leaves_nothing(tmp_path) -> None:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny_gguf

    write_tiny_gguf(tmp_path / "t.gguf")
    result = run_limited(4096, "convert", str(tmp_path / "t.gguf"), str(tmp_path / "out"), "--quiet")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "writing the converted model" in result.stderr and "nothing of it was kept" in result.stderr
    assert "raise the file size limit (ulimit -f)" in result.stderr and "[Errno" not in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.gguf"]


# ---- 4. two runs on one output -----------------------------------------------------------------------------
def test_4_a_second_run_on_the_same_output_is_told_who_holds_it_or_waits(tiny_llama, tmp_path, capsys) -> None:
    source = lines(tmp_path / "in.txt", ["one", "two"])
    output = tmp_path / "v.npy"
    with lock_held(output, 2) as holder:
        argv = ["embed", "--model", str(tiny_llama), "--method", "mean", "--input", str(source), "--output",
                str(output), "--no-progress"]
        code, err = cli(capsys, *argv)
        assert code == 2 and f"another run (process {holder.pid}) is writing" in err and "--wait" in err
        code, err = cli(capsys, *argv, "--wait")  # waits for the holder (2 s), then runs
        assert code == 0 and "waiting for process" in err and output.exists()


# ---- 5. a resume across changed weights --------------------------------------------------------------------
def test_5_a_resume_after_the_weights_changed_is_refused_naming_them(tiny_llama, tmp_path) -> None:
    from tiny_models import build_hf_model, save_hf_model
    from minidecoder.running.jobs import run_embedding_job

    folder = Path(shutil.copytree(tiny_llama, tmp_path / "m"))
    source = lines(tmp_path / "in.txt", [f"text {i}" for i in range(6)])
    calls = []

    def stop_after_one(done, total):
        calls.append(done)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt, match="1 of 3 chunks are saved"):
        run_embedding_job(minidecoder.load(folder, progress=False), "mean", source, tmp_path / "v.npy", chunk_size=2,
                          progress=stop_after_one)
    save_hf_model(build_hf_model("llama", seed=7), folder)  # same config and tokenizer, other weights
    with pytest.raises(MinidecoderError, match=r"the model \(--model\) differs \(weights\.model\.safetensors\.sha256 was"):
        run_embedding_job(minidecoder.load(folder, progress=False), "mean", source, tmp_path / "v.npy", chunk_size=2)


# ---- 6. results never overwritten or lost ------------------------------------------------------------------
def test_6_existing_reports_and_sidecars_are_never_overwritten(tiny_llama, tmp_path, capsys) -> None:
    (tmp_path / "r.json").write_text("{}")
    for command in (["eval", "sts"], ["sweep", "--layers", "1"]):
        code, err = cli(capsys, *command, "--method", "mean", "--model", str(tmp_path / "no-such-model"),
                        "--output", str(tmp_path / "r"))
        assert code == 2 and "r.json already exists" in err and "--overwrite" in err and "no-such-model" not in err
    code, err = cli(capsys, "eval", "sts", "--method", "mean", "--output", str(tmp_path))
    assert code == 2 and "is a folder" in err
    (tmp_path / "v.npy.json").write_text("{}")
    code, err = cli(capsys, "embed", "--model", str(tiny_llama), "--method", "mean", "--input",
                    str(lines(tmp_path / "in.txt", ["one"])), "--output", str(tmp_path / "v.npy"))
    assert code == 2 and "v.npy.json already exists" in err and (tmp_path / "v.npy.json").read_text() == "{}"


def test_6_a_failed_final_write_prints_the_table_and_saves_it_beside_the_cache(tiny_llama, tmp_path, capsys,
                                                                               monkeypatch) -> None:
    import minidecoder.evaluation.sts as sts

    monkeypatch.setenv("MINIDECODER_CACHE", str(tmp_path / "cache" / "downloads"))
    out = tmp_path / "results"
    out.mkdir()

    def evaluate(encode, tasks, progress, chunk_size):  # an hour of work, then a lost folder
        encode(["a sentence", "another one"])
        shutil.rmtree(out)  # with the report's lock files in it
        out.write_text("now a file")
        return {"tasks": {"STSBenchmark": {"setting": "test", "pairs": 2, "score": 61.25,
                                           "subsets": {"test": {"pairs": 2, "spearman": 61.25}}}},
                "avg": 61.25, "avg_over": ["STSBenchmark"], "avg_is_published_avg": False, "limit": None}
    monkeypatch.setattr(sts, "evaluate_sts", evaluate)
    monkeypatch.setattr("minidecoder.evaluation.sts.resolve_data_dir", lambda data=None: tmp_path)
    monkeypatch.setattr("minidecoder.evaluation.sts.load_tasks", lambda *args: [])  # the data check: no data
    monkeypatch.setattr("minidecoder.evaluation.report.summary_table", lambda results: "TABLE Avg. 61.25")
    code, err = cli(capsys, "eval", "sts", "--method", "mean", "--model", str(tiny_llama), "--output",
                    str(out / "run"), "--no-progress", "--tasks", "STSBenchmark")
    printed = capsys.readouterr
    assert code == 2 and "Traceback" not in err and "saved to" in err, err
    saved = list((tmp_path / "cache" / "unsaved-results").glob("run-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["results"]["avg"] == 61.25
    del printed


# ---- 7. CLI tracebacks and silent nonsense -----------------------------------------------------------------
@pytest.fixture(scope="module")
def nan_model(tmp_path_factory, tiny_llama: Path) -> Path:
    from safetensors.torch import load_file, save_file

    folder = Path(shutil.copytree(tiny_llama, tmp_path_factory.mktemp("nan") / "m"))
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("argv, problem", [
    (["logits", ""], "the prompt is empty"),
    (["generate", ""], "the prompt is empty"),
    (["logits", "hi", "--top-k", "0"], "--top-k 0 must be at least 1"),
    (["logits", "hi", "--top-k", "100000"], "between 1 and the vocabulary size 128"),
    (["generate", "hi", "--max-new-tokens", "-1"], "must be 0 or more"),
    (["generate", "hello", "--max-new-tokens", "200"], "past the model's context of 128"),
])
def test_7_cli_nonsense_is_a_clear_error(short, capsys, argv, problem) -> None:
    code, err = cli(capsys, *argv, "--model", str(short))
    assert code == 2 and problem in err and "Traceback" not in err


def test_7_nan_weights_make_logits_fail_naming_the_weights(nan_model, capsys) -> None:
    code, err = cli(capsys, "logits", "hello", "--model", str(nan_model))
    assert code == 2 and "NaN" in err and "model.layers.1.mlp.up_proj.weight" in err and "corrupt" in err


def test_7_sts_data_that_is_not_utf8_is_named(tmp_path) -> None:
    from minidecoder.errors import InputError
    from minidecoder.evaluation.sts import load_task

    folder = tmp_path / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-test.csv").write_bytes(b"main-captions\tMSRvid\t2012test\t0001\t5.000\tA caf\xe9.\tA cafe.\n")
    with pytest.raises(InputError, match=r"sts-test.csv is not valid UTF-8 \(byte 46, line 1\)"):
        load_task("STSBenchmark", tmp_path)


def test_7_property_any_cli_arguments_exit_0_or_2_without_a_traceback(short, capsys) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    prompts = st.sampled_from(["", " ", "hi", "The capital of", "\u00e9\u4e2d", "x" * 140])
    numbers = st.sampled_from(["-5", "-1", "0", "1", "3", "127", "128", "129", "1000000", "nan", "1.5"])

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(st.sampled_from(["logits", "generate"]), prompts,
                      st.sampled_from(["--top-k", "--max-new-tokens", "--dtype", None]), numbers)
    def check(command, prompt, flag, value) -> None:
        argv = [command, prompt, "--model", str(short)]
        if flag == "--dtype":
            argv += ["--dtype", value]
        elif flag is not None and (flag == "--top-k") == (command == "logits"):
            argv += [flag, value]
        code, err = cli(capsys, *argv)
        assert code in (0, 2) and "Traceback" not in err, (argv, err)
    check()


# ---- 8. messages that point the right way ------------------------------------------------------------------
def test_8_messages_point_the_right_way(tiny_llama, nan_model, tmp_path, capsys) -> None:
    nan = minidecoder.load(nan_model, progress=False, check_finite=False)  # past the load-time check (row 16)
    with pytest.raises(MinidecoderError) as error:
        minidecoder.embed(nan, ["hello there"], "mean")
    assert "float16" not in error.value.fix and "corrupt" in error.value.fix

    odd = Path(shutil.copytree(tiny_llama, tmp_path / "odd"))
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "my_inert_key": 1}))
    code, err = cli(capsys, "logits", "hi", "--model", str(odd))
    assert code == 2 and "--ignore-config-key" in err
    assert cli(capsys, "logits", "hi", "--model", str(odd), "--ignore-config-key", "my_inert_key")[0] == 0

    code, err = cli(capsys, "sweep", "--method", "tp", "--grid", "no_such=1,2", "--model", str(tiny_llama),
                    "--output", str(tmp_path / "s"))
    assert code == 2 and "has no option 'no_such'" in err
    code, err = cli(capsys, "embed", "--method", "tp", "--opt", "prompt=true", "--input", "x.txt", "--output",
                    str(tmp_path / "v.npy"))
    assert code == 2 and "gives a boolean" in err and "takes a text" in err

    loop = tmp_path / "loop.txt"
    os.symlink(loop, loop)
    for given, words in ((tmp_path, "is a directory"), (loop, "symbolic link loop")):
        code, err = cli(capsys, "embed", "--method", "mean", "--input", str(given), "--output", str(tmp_path / "w.npy"))
        assert code == 2 and words in err, err
    code, err = cli(capsys, "eval", "sts", "--method", "mean", "--data", str(loop), "--output", str(tmp_path / "e"))
    assert code == 2 and "symbolic link loop" in err
    code, err = cli(capsys, "convert", str(tmp_path), str(tmp_path / "c"))
    assert code == 2 and "is a directory" in err


def test_8_the_interrupt_line_is_printed_once(tiny_llama, tmp_path, capsys, monkeypatch) -> None:
    import minidecoder.running.embedding as embedding

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(embedding, "embed_rows", interrupted)
    code, err = cli(capsys, "embed", "--model", str(tiny_llama), "--method", "mean", "--input",
                    str(lines(tmp_path / "in.txt", ["one"])), "--output", str(tmp_path / "v.npy"), "--no-progress")
    assert code == 130 and err.count("interrupted") == 1, err


def test_8_a_second_ctrl_c_landing_as_the_first_is_being_said_is_no_traceback(tiny_llama, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    """Found (a fresh-clone CI run): a second Ctrl-C that landed after the first one's `except` began but before
    Ctrl-C was ignored escaped `main` as a traceback. The second one now raises inside a retry: the first one's
    line, once, and the caller's Ctrl-C handler put back."""
    import signal

    import minidecoder.cli as cli_module
    import minidecoder.running.embedding as embedding

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    real_signal, landed = signal.signal, []

    def second_ctrl_c_lands(number, handler):  # as the handler is about to ignore Ctrl-C, once
        if number == signal.SIGINT and handler == signal.SIG_IGN and not landed:
            landed.append(True)
            raise KeyboardInterrupt
        return real_signal(number, handler)
    monkeypatch.setattr(embedding, "embed_rows", interrupted)
    monkeypatch.setattr(cli_module.signal, "signal", second_ctrl_c_lands)
    before = signal.getsignal(signal.SIGINT)
    try:
        code, err = cli(capsys, "embed", "--model", str(tiny_llama), "--method", "mean", "--input",
                        str(lines(tmp_path / "in.txt", ["one"])), "--output", str(tmp_path / "v.npy"), "--no-progress")
    except KeyboardInterrupt:  # pytest would take it for the user's own and stop the whole run
        pytest.fail("the second Ctrl-C escaped main (a traceback on the command line)")
    assert landed and code == 130 and err.count("interrupted") == 1, err
    assert signal.getsignal(signal.SIGINT) is before


# ---- 9. API argument types ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, named", [
    (dict(texts=None), "texts must be a list of strings"),
    (dict(method=None), "method=None"),
    (dict(method=42), "method=42"),
    (dict(batch_size=True), "batch_size=True"),
])
def test_9_api_type_errors_are_the_librarys_and_name_the_argument(model, kwargs, named) -> None:
    call = {"texts": ["a text"], "method": "mean", **kwargs}
    with pytest.raises(MinidecoderError, match=named) as error:
        minidecoder.embed(model, call.pop("texts"), call.pop("method"), **call)
    assert isinstance(error.value, TypeError)


def test_9_a_generator_of_texts_is_accepted(model) -> None:
    texts = ["one text", "two texts"]
    torch.testing.assert_close(minidecoder.embed(model, (t for t in texts), "mean"),
                               minidecoder.embed(model, texts, "mean"))


# ---- 10. a job that never ran leaves nothing behind --------------------------------------------------------
def test_10_a_refused_job_does_not_block_its_corrected_rerun(tiny_llama, model, tmp_path, capsys) -> None:
    from minidecoder.running.jobs import run_embedding_job

    source = lines(tmp_path / "in.txt", ["one", "two " * 40])
    argv = ["embed", "--model", str(tiny_llama), "--method", "mean", "--input", str(source), "--output",
            str(tmp_path / "v.npy"), "--no-progress"]
    code, err = cli(capsys, *argv, "--truncate", "0")
    assert code == 2 and "--truncate 0" in err
    assert cli(capsys, *argv, "--truncate", "64")[0] == 0
    with pytest.raises(MinidecoderError, match="must be a positive number"):
        run_embedding_job(model, "mean", source, tmp_path / "w.npy", truncate=0)
    with pytest.raises(ContextLengthError):  # fails inside its first chunk: 161 tokens > 128
        run_embedding_job(model, "mean", source, tmp_path / "w.npy")
    assert not list(tmp_path.glob(".w.npy*"))
    with pytest.warns(UserWarning):
        assert run_embedding_job(model, "mean", source, tmp_path / "w.npy", truncate=64)["rows"] == 2
