"""The CLI answers bad input with `minidecoder: error: <problem>` and its fix on stderr, exit status 2,
and never a bare traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

import minidecoder.cli as cli


@pytest.fixture
def folder(tiny_llama_copy: Path) -> Path:
    return tiny_llama_copy


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


@pytest.mark.parametrize("breakage, words", [
    ("no config", "no config.json in"),
    ("no weights", "no model.safetensors or model.safetensors.index.json"),
    ("truncated weights", "is not a readable safetensors file"),
    ("pickle only", "never loads"),
    ("bad model_type", "unsupported model_type 'bert'"),
])
def test_checkpoint_problems_exit_2_with_the_message(capsys, folder: Path, breakage: str, words: str) -> None:
    if breakage == "no config":
        (folder / "config.json").unlink()
    elif breakage == "no weights":
        (folder / "model.safetensors").unlink()
    elif breakage == "truncated weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    elif breakage == "pickle only":
        (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    else:
        text = (folder / "config.json").read_text().replace('"model_type": "llama"', '"model_type": "bert"')
        (folder / "config.json").write_text(text)
    code, err = run_cli(capsys, "logits", "hello", "--model", str(folder))
    assert code == 2
    assert err.startswith("minidecoder: error: ") and words in err and "fix:" in err


def test_a_working_command_exits_0(capsys, folder: Path) -> None:
    assert cli.main(["logits", "hello", "--model", str(folder), "--top-k", "2"]) == 0


# ---- minidecoder embed ------------------------------------------------------------------------------------
def test_embed_cli_bad_input_file(capsys, folder: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"good line\nbad \xff line\n")
    code, err = run_cli(capsys, "embed", "--model", str(folder), "--method", "mean", "--input", str(source),
                        "--output", str(tmp_path / "out.npy"))
    assert code == 2 and "line 2 is not valid UTF-8" in err


def test_embed_cli_refuses_to_overwrite(capsys, folder: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    output = tmp_path / "out.npy"
    output.write_bytes(b"keep me")
    code, err = run_cli(capsys, "embed", "--model", str(folder), "--method", "mean", "--input", str(source),
                        "--output", str(output))
    assert code == 2 and "already exists" in err and output.read_bytes() == b"keep me"


def test_embed_cli_out_of_range_layer(capsys, folder: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\n")
    code, err = run_cli(capsys, "embed", "--model", str(folder), "--method", "mean", "--opt", "layer=9",
                        "--input", str(source), "--output", str(tmp_path / "out.npy"))
    assert code == 2 and "output layer 9 is outside" in err


# ---- minidecoder fetch ------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, given", [(["nosuchmodel"], "given: nosuchmodel"), (["--all"], "given: --all"),
                                          (["smollm2-135m-instruct", "--all"], "given: smollm2-135m-instruct --all"),
                                          (["--quiet"], "given: --quiet")])
def test_fetch_list_with_names_or_all_is_refused_naming_both(capsys, extra: list, given: str) -> None:
    """`fetch --list NAME` printed the registry and ignored NAME (a typo too) and --all; nothing is fetched.
    `--list --quiet` too: listing downloads nothing, so there is no progress bar for --quiet to hide."""
    code, err = run_cli(capsys, "fetch", "--list", *extra)
    assert code == 2 and "--list only lists the known models" in err and given in err, err
    assert "drop --list" in err


# ---- minidecoder eval transfer ----------------------------------------------------------------------------
def test_transfer_blank_lines_skip_without_a_task_that_reads_blank_lines_is_refused(capsys, tmp_path: Path) -> None:
    """Found: `eval transfer --tasks TREC --blank-lines skip` ran, skipped nothing (only MR, CR, SUBJ and MPQA's
    loader reads blank lines) and stamped the report `blank_lines: skip`."""
    code, err = run_cli(capsys, "eval", "transfer", "--method", "prompteol", "--tasks", "SST2,TREC",
                        "--blank-lines", "skip", "--model", "no-such-model-folder", "--output", str(tmp_path / "r"))
    assert code == 2 and "--blank-lines skip leaves out the blank lines" in err and "--tasks SST2,TREC" in err, err
    assert "leave --blank-lines out" in err and "no-such-model-folder" not in err  # before the model loads


# ---- minidecoder demo -------------------------------------------------------------------------------------
def test_demo_with_an_unknown_method_is_refused_before_the_model_loads(capsys) -> None:
    """`demo --method nosuch` loaded the model and printed next tokens and a continuation before failing."""
    code = cli.main(["demo", "--method", "nosuch", "--model", "no-such-model-folder"])
    said = capsys.readouterr()
    assert code == 2 and "unknown method 'nosuch'" in said.err and "no-such-model-folder" not in said.err, said.err
    assert said.out == ""  # no next tokens, no continuation


def test_demo_runs_with_a_method_by_name(capsys, folder: Path) -> None:
    assert cli.main(["demo", "--method", "mean", "--model", str(folder)]) == 0
    assert "cosine similarities (mean):" in capsys.readouterr().out


@pytest.mark.parametrize("argv, switch", [(["logits", "hello"], "--compile"), (["logits", "hello"], "--graphs"),
                                          (["generate", "hello"], "--compile"), (["generate", "hello"], "--graphs"),
                                          (["explain", "hello", "--method", "tp"], "--graphs")])
def test_a_fast_path_switch_a_command_never_takes_is_not_offered(capsys, argv: list, switch: str) -> None:
    """Found: `logits --compile` and `generate --compile` compiled nothing (logits and generation run plain),
    `logits --graphs` warned about bucket shapes it never padded to, and `explain --graphs` recorded the same
    passes as without it (its watcher turns graphs off): each flag was taken and did nothing."""
    with pytest.raises(SystemExit) as ended:  # argparse's own refusal, as for any unknown flag
        cli.main([*argv, switch, "--model", "no-such-model-folder"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and f"unrecognized arguments: {switch}" in err, err
    subcommands = next(action for action in cli.build_parser()._actions if action.dest == "command").choices
    assert switch not in subcommands[argv[0]]._option_string_actions  # nor listed by --help
