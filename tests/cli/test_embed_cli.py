"""`minidecoder embed`: txt and jsonl in, npy and safetensors out, never a silent overwrite, errors
that name the line, and a --help generated from the registered methods."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from safetensors import safe_open

import minidecoder
import minidecoder.methods
from minidecoder.cli import main
from tiny_models import checkpoint

TEXTS = ["a man is playing a flute", "is it raining ?", 'he said "yes" \u00e9t\u00e9']


@pytest.fixture(scope="module")
def tiny() -> Path:
    return checkpoint("llama")[1]


def embed_cli(tiny: Path, *args: str) -> int:
    return main(["embed", "--model", str(tiny), "--no-progress", *args])


def test_txt_to_npy_equals_the_library(tiny: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")  # the final newline is not a row
    out = tmp_path / "out.npy"
    assert embed_cli(tiny, "--method", "prompteol", "--opt", "layer=-2", "--input", str(source),
                     "--output", str(out), "--batch-size", "2") == 0
    got = np.load(out)
    assert got.dtype == np.float32 and got.shape == (3, 32)
    want = minidecoder.embed(minidecoder.load(tiny, progress=False), TEXTS, "prompteol", layer=-2)
    assert_close(torch.from_numpy(got), want, atol=2e-5, rtol=2e-5)  # the CLI writes embed's vectors


def test_jsonl_to_safetensors_with_metadata(tiny: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t, "id": i}) + "\r\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    out = tmp_path / "sub" / "out.safetensors"  # a missing folder is created
    assert embed_cli(tiny, "--method", "mean", "--opt", "over=all", "--opt", 'template="[{text}]"',
                     "--input", str(source), "--output", str(out)) == 0
    with safe_open(str(out), "pt") as handle:
        got = handle.get_tensor("embeddings")
        metadata = handle.metadata()
    assert json.loads(metadata["method"]) == {"method": "mean", "layer": -1, "template": "[{text}]", "over": "all",
                                              "occurrence": -1, "senteval_text": False, "pieces": False}
    assert json.loads(metadata["rows"]) == 3
    want = minidecoder.embed(minidecoder.load(tiny, progress=False), TEXTS, "mean", over="all", template="[{text}]")
    assert_close(got, want, atol=2e-5, rtol=2e-5)
    assert not list(out.parent.glob(".*partial"))  # the temporary file was renamed away


def test_never_overwrites_without_the_flag(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    out.write_bytes(b"precious")
    assert embed_cli(tiny, "--method", "last", "--input", str(source), "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--overwrite" in err and "Traceback" not in err
    assert out.read_bytes() == b"precious"
    assert embed_cli(tiny, "--method", "last", "--input", str(source), "--output", str(out), "--overwrite") == 0
    assert np.load(out).shape == (2, 32)


@pytest.mark.parametrize("content, suffix, message", [
    (b"fine\nbad \xff byte\n", ".txt", "line 2 is not valid UTF-8"),
    (b"one\n\nthree\n", ".txt", "line 2 is empty"),
    (b"one\n   \n", ".txt", "line 2 is empty"),
    (b'{"text": "ok"}\n{"txt": "no"}\n', ".jsonl", 'line 2 has no string "text"'),
    (b'{"text": "ok"}\nnot json\n', ".jsonl", "line 2 is not JSON"),
    (b"", ".txt", "has no rows"),
])
def test_input_errors_name_the_line(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                    content: bytes, suffix: str, message: str) -> None:
    source = tmp_path / f"in{suffix}"
    source.write_bytes(content)
    out = tmp_path / "out.npy"
    assert embed_cli(tiny, "--method", "prompteol", "--input", str(source), "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert message in err and "fix:" in err and "Traceback" not in err
    assert not out.exists()


def test_option_and_output_errors(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\n", encoding="utf-8")
    cases = [
        (["--method", "prompteol", "--output", str(tmp_path / "out.csv")], "format is chosen by suffix"),
        (["--method", "nope", "--output", str(tmp_path / "out.npy")], "unknown method 'nope'"),
        (["--method", "prompteol", "--opt", "alpha=1", "--output", str(tmp_path / "out.npy")], "no option(s) ['alpha']"),
        (["--method", "prompteol", "--opt", "layer=99", "--output", str(tmp_path / "out.npy")], "output layer 99"),
        (["--method", "prompteol", "--input", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "o.npy")],
         "does not exist"),
    ]
    for args, message in cases:
        if "--input" not in args:
            args = [*args, "--input", str(source)]
        assert embed_cli(tiny, *args) == 2, args
        assert message in capsys.readouterr().err, message


def test_help_lists_every_method_and_option(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["embed", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert len(minidecoder.methods.METHODS) >= 8  # at least this project's pooling/prompt methods
    for name, cls in minidecoder.methods.METHODS.items():  # the other helpers' methods appear too
        assert f"\n  {name}: {cls.summary}" in out
        for field in dataclasses.fields(cls):
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            assert f"{field.name} = {json.dumps(default)}" in out, (name, field.name)
            assert field.metadata["help"] in out


@pytest.mark.parametrize("opts, message", [
    (["last_row=backward"], "ReBA last_row='backward' chooses the row of A that pooling=last reads"),
    (["pooling=last", "first_half_split=true"], "ReBA first_half_split=true changes the rows pooling=mean averages"),
])
def test_a_reba_option_its_pooling_never_reads_is_refused(tmp_path: Path, capsys, opts: list, message: str) -> None:
    """Found: `--opt last_row=backward` under pooling=mean (which aggregates backward anyway) and
    `--opt first_half_split=true` under pooling=last gave the same vectors as without them, and were stamped."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    argv = ["embed", "--model", str(tmp_path / "no-model-here"), "--method", "reba", "--input", str(source),
            "--output", str(tmp_path / "out.npy")]
    assert main([*argv, *(a for opt in opts for a in ("--opt", opt))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minidecoder: error: ") and message in err and "would change nothing" in err, err
    assert "no-model-here" not in err  # refused before the model loads


def test_an_upper_case_suffix_is_refused_before_the_model_loads(tmp_path: Path, capsys) -> None:
    """The writers choose the format by the suffix in lower case; `OUT.NPY` passed the command's check and was
    refused by the job's only after the model loaded."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    assert main(["embed", "--model", str(tmp_path / "no-model-here"), "--method", "mean", "--input", str(source),
                 "--output", str(tmp_path / "OUT.NPY")]) == 2
    assert "--output" in capsys.readouterr().err.split("has suffix '.NPY'")[0]


def test_a_warning_is_one_line_naming_the_command(tiny: Path, tmp_path: Path) -> None:
    """--truncate's cuts are said as `minidecoder: warning: ...`, not as Python's source-line warning (in a
    process of its own: pytest records warnings instead of writing them)."""
    import subprocess
    import sys

    source = tmp_path / "in.txt"
    source.write_text("short\n" + "y" * 40 + "\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "minidecoder", "embed", "--model", str(tiny), "--no-progress",
                          "--method", "mean", "--input", str(source), "--output", str(tmp_path / "o.npy"),
                          "--truncate", "10"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    err = run.stderr
    assert f"minidecoder: warning: truncate=10: 1 of 2 texts were cut to their first 10 tokens ({source} line 2)" in err
    assert "UserWarning" not in err


def test_another_librarys_warning_keeps_its_own_format() -> None:
    """Found: scikit-learn's "The least populated class in y has only 2 members" printed as `minidecoder:
    warning: ...` under eval transfer: every UserWarning took minidecoder's label, whoever raised it."""
    import warnings

    import minidecoder.cli as cli_module

    ours = Path(cli_module.__file__).parent.parent / "running" / "embedding.py"
    assert cli_module._format_warning("cut", UserWarning, str(ours), 1) == "minidecoder: warning: cut\n"
    theirs = "/site-packages/sklearn/model_selection/_split.py"
    said = cli_module._format_warning("least populated", UserWarning, theirs, 776)
    assert said == warnings.formatwarning("least populated", UserWarning, theirs, 776) and said.startswith(theirs)


def test_a_run_without_model_records_the_default_models_name(tiny: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --model the output's metadata (and an eval report's stamp) said "default", which names no model
    once the default changes; they name the model `load(None)` loads."""
    import argparse

    from minidecoder.running import load_model as loading
    from minidecoder.running.command_line import model_stamp
    from minidecoder.sources.registry import DEFAULT_MODEL

    real_load = loading.load
    monkeypatch.setattr(loading, "load", lambda source, **kwargs: real_load(tiny if source is None else source,
                                                                            **kwargs))
    source, out = tmp_path / "in.txt", tmp_path / "out.safetensors"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert main(["embed", "--no-progress", "--method", "mean", "--input", str(source), "--output", str(out)]) == 0
    with safe_open(str(out), "pt") as handle:
        assert json.loads(handle.metadata()["model_name"]) == DEFAULT_MODEL == "smollm2-135m-instruct"
    model = real_load(tiny, progress=False)
    args = argparse.Namespace(model=None, dtype="float32", device="cpu", batch_size=None)
    assert model_stamp(args, model, minidecoder.methods.build_method("mean"))["model"] == DEFAULT_MODEL
