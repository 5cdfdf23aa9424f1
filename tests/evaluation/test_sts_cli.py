"""`minidecoder eval sts` and the report writer, with a fake model and method (no weights needed).

The fake method prepares text exactly as the prompt methods do (SentEval batcher step + template)
and embeds it with a hashed bag of words, so the command is exercised end to end on real STS files.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
import minidecoder.methods
import minidecoder.running.jobs
from minidecoder.cli import eval_cmd
from minidecoder.running import command_line as common
from minidecoder.running import load_model
from minidecoder.errors import InputError
from minidecoder.evaluation import evaluate_sts
from minidecoder.evaluation.report import (build_stamp, code_version, describe_checkout, summary_table, to_markdown,
                                          write_report)
from minidecoder.methods.text import fill_template, senteval_sentence
from test_sts_data import DATA, needs_data

TEMPLATE = 'This sentence : "{text}" means in one word:"'


class FakeTokenizer:
    checksum = "f" * 64


class FakeModel:
    tokenizer = FakeTokenizer()
    source = "/fake/folder"
    config = {"fake": True}  # what the families' stamp hashes (model_identity) where the folder has no config.json


class FakeMethod:
    def __init__(self, name: str, **options) -> None:
        self.name, self.options = name, options

    def describe(self) -> dict:
        return {"method": self.name, **self.options}

    def reads_empty_text(self) -> bool:  # as the method of that name, with its default options
        from minidecoder.methods import METHODS  # not build_method: the fixture below replaces it with this class
        return METHODS[self.name]().reads_empty_text()


def fake_embed(model, texts, method, batch_size=32, progress=False) -> torch.Tensor:
    assert isinstance(model, FakeModel) and isinstance(method, FakeMethod) and not progress
    out = torch.zeros(len(texts), 16)
    for row, text in enumerate(texts):
        for word in fill_template(TEMPLATE, senteval_sentence(text)).split():
            out[row, zlib.crc32(word.encode()) % 16] += 1.0
    return out


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict:
    seen: dict = {}

    def load(model, dtype="float32", device="cpu", compile=False, pack_weights=False, graphs=False):
        seen["load"] = (model, dtype, device)
        seen["compile"] = compile
        return FakeModel()

    def build_method(name, **options):
        seen["build"] = (name, options)
        return FakeMethod(name, **options)

    def embed_resumably(model, method, sentences, work, batch_size=32, progress=False, keep=False):  # eval's job
        # the job's folder is the CLI's owned folder (eval sts) or its `job/` (the families, whose slower
        # results are kept beside it): it holds only its owner record with the fake (and goes at the end)
        owned = work.parent if work.name == "job" else work
        assert sorted(path.name for path in owned.iterdir()) == ["owner.json"]
        assert json.loads((owned / "owner.json").read_text())["command"].startswith("minidecoder eval ")
        return fake_embed(model, sentences, method), {"chunks_reused": 0}

    monkeypatch.setattr(load_model, "load", load)  # what every command's model loading calls
    monkeypatch.setattr(minidecoder, "embed", fake_embed)
    monkeypatch.setattr(minidecoder.running.jobs, "embed_resumably", embed_resumably)
    monkeypatch.setattr(minidecoder.methods, "build_method", build_method)
    return seen


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minidecoder")
    eval_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.run(args)


@needs_data
def test_eval_sts_end_to_end(fakes: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    prefix = tmp_path / "out" / "run"
    status = run_cli(["eval", "sts", "--model", "tiny", "--method", "prompteol", "--opt", "layer=-2",
                      "--opt", "alpha=0.5", "--opt", "prompt=cot", "--opt", 'span=[1, 7]', "--data", str(DATA),
                      "--tasks", "STS13,STSBenchmark,SICKRelatedness", "--limit", "40", "--batch-size", "8",
                      "--output", str(prefix), "--no-progress"])
    assert status == 0
    assert not (tmp_path / "out" / ".run.json.partial").exists()  # nothing kept: nothing left
    assert fakes["load"] == ("tiny", "float32", "cpu")
    assert fakes["build"] == ("prompteol", {"layer": -2, "alpha": 0.5, "prompt": "cot", "span": [1, 7]})

    saved = json.loads((tmp_path / "out" / "run.json").read_text())
    expected = evaluate_sts(lambda s: fake_embed(FakeModel(), s, FakeMethod("x")), tasks=["STS13", "STSBenchmark", "SICKRelatedness"],
                            data_dir=DATA, limit=40, progress=False)
    for name in ["STS13", "STSBenchmark", "SICKRelatedness"]:
        assert saved["results"]["tasks"][name]["score"] == pytest.approx(expected["tasks"][name]["score"], abs=1e-12)
    stamp = saved["stamp"]
    assert stamp["tokenizer_sha256"] == "f" * 64 and stamp["model"] == "tiny" and stamp["limit"] == 40
    assert stamp["method"] == {"method": "prompteol", "layer": -2, "alpha": 0.5, "prompt": "cot", "span": [1, 7]}
    sick = "SICK/SICK_test_annotated.txt"
    assert stamp["data_sha256"][sick] == hashlib.sha256((DATA / sick).read_bytes()).hexdigest()
    assert len(stamp["data_sha256"]) == 2 * 3 + 2  # STS13: 3 subsets x (input, gold); STS-B; SICK
    assert set(stamp["code"]) == {"version", "git"} and stamp["code"]["version"] == minidecoder.__version__
    assert "--opt alpha=0.5" in stamp["command"] and stamp["date"].endswith("+00:00")

    markdown = (tmp_path / "out" / "run.md").read_text()
    printed = capsys.readouterr().out
    assert "Limited run" in markdown and "Limited run" in printed
    assert "| STS13 | STSBenchmark | SICKRelatedness | Avg. (3 tasks) |" in printed
    assert f"{saved['results']['tasks']['STS13']['score']:.2f}" in markdown
    assert "| STS13 | headlines | 40 |" in markdown


@pytest.mark.parametrize(("argv", "problem"), [
    (["--opt", "alpha"], "KEY=VALUE"),
    (["--opt", "a=1", "--opt", "a=2"], "twice"),
    (["--tasks", "STS12,STS99"], "STS99"),
    (["--batch-size", "0"], "batch-size"),
])
def test_bad_arguments_are_input_errors(fakes: dict, argv: list[str], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        run_cli(["eval", "sts", "--method", "prompteol", *argv])
    assert "load" not in fakes  # fails before the model loads


def test_option_values_are_json_when_they_parse() -> None:
    got = common.parse_options(["a=3", "b=0.25", "c=true", "d=null", "e=word", "f=\"quoted\"", "g=a=b", "h="])
    assert got == {"a": 3, "b": 0.25, "c": True, "d": None, "e": "word", "f": "quoted", "g": "a=b", "h": ""}


def test_through_the_dispatcher_exit_status(fakes: dict) -> None:
    from minidecoder import cli

    assert cli.main(["eval", "sts", "--method", "prompteol", "--opt", "oops"]) == 2


def test_report_json_is_strict_and_markdown_marks_nan(tmp_path: Path) -> None:
    results = {"tasks": {"STSBenchmark-dev": {"score": math.nan, "setting": "dev", "pairs": 3,
                                             "subsets": {"dev": {"spearman": math.nan, "pairs": 3}}}},
               "avg": None, "avg_over": [], "avg_is_published_avg": False, "limit": None,
               "data_dir": None, "data_files": []}
    json_path, md_path = write_report(tmp_path / "r", results, {"model": "m", "method": {"method": "mean", "layer": np.int64(3)}})
    saved = json.loads(json_path.read_text())  # strict JSON: NaN written as null
    assert saved["results"]["tasks"]["STSBenchmark-dev"]["score"] is None
    assert "| n/a |" in md_path.read_text() and "# STS evaluation: mean on m" in md_path.read_text()


def test_code_version_names_this_checkout() -> None:
    version = code_version()
    assert version["version"] == minidecoder.__version__
    if (Path(minidecoder.__file__).resolve().parent.parent / ".git").exists():
        assert version["git"] != "unknown"


def test_describe_checkout_is_dirty_for_changed_code_but_not_for_changed_results(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    clean = describe_checkout(tmp_path)
    assert clean != "unknown" and not clean.endswith("-dirty")
    (tmp_path / "results" / "table.json").write_text('{"rows": []}')  # a sitting's own output
    assert describe_checkout(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2")
    assert describe_checkout(tmp_path) == clean + "-dirty"


@needs_data
def test_stamp_combined_digest_is_sha256sum_of_sha256sum(tmp_path: Path) -> None:
    results = {"data_dir": str(DATA), "data_files": ["STSBenchmark/sts-dev.csv", "SICK/SICK_test_annotated.txt"], "limit": None}
    stamp = build_stamp({"model": "m"}, results)
    listing = "".join(f"{hashlib.sha256((DATA / n).read_bytes()).hexdigest()}  {n}\n" for n in sorted(results["data_files"]))
    assert stamp["data_sha256_combined"] == hashlib.sha256(listing.encode()).hexdigest()
    markdown = to_markdown({"tasks": {}, "avg": None, "avg_over": [], "limit": None}, stamp)
    assert "2 files, see the JSON" in markdown
    assert summary_table({"tasks": {}, "avg": None, "limit": 5}).count("Limited run") == 1


@pytest.mark.parametrize("given, written", [
    ("r.json", ("r.json", "r.md")), ("r.md", ("r.json", "r.md")), ("r", ("r.json", "r.md")),
    ("run.v2", ("run.v2.json", "run.v2.md")),  # any other dot is part of the prefix
])
def test_output_names_are_taken_as_given(tmp_path: Path, given: str, written: tuple[str, str]) -> None:
    results = {"tasks": {}, "avg": None, "avg_over": [], "avg_is_published_avg": False, "limit": None,
               "data_dir": None, "data_files": []}
    paths = write_report(tmp_path / given, results, {"model": "m", "method": "mean"})
    assert [p.name for p in paths] == list(written)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(written)  # and nothing named r.json.json


@pytest.mark.parametrize("command", [["eval", "sts", "--tasks", "STSBenchmark"], ["eval", "sts-long"],
                                     ["sweep", "--layers", "1,2"]], ids=["eval-sts", "eval-sts-long", "sweep"])
def test_a_limit_of_one_pair_is_refused_naming_the_flag_and_the_argument(tmp_path: Path, capsys, command) -> None:
    """`--limit 1` was refused as "limit 1 is too small", naming neither the CLI's flag nor the API's argument."""
    from cli_runner import cli
    from minidecoder.evaluation.sts import load_task
    from minidecoder.evaluation.sts_long import load_long_sts

    code, err = cli(capsys, *command, "--method", "mean", "--limit", "1", "--output", str(tmp_path / "r"),
                    "--model", "no-such-model-folder", "--no-progress")
    assert code == 2 and "--limit (limit=) 1 is too small: a correlation needs at least 2 pairs" in err, err
    assert "no-such-model-folder" not in err and "--limit 2 or more (limit=2 from Python)" in err
    for load in (lambda: load_task("STSBenchmark", limit=1), lambda: load_long_sts(limit=1)):
        with pytest.raises(InputError, match=r"^--limit \(limit=\) 1 is too small"):
            load()
    for limit in (True, 2.5):  # from Python: True was a limit of 1 pair, 2.5 failed inside a slice
        with pytest.raises(InputError, match=f"limit={limit!r} is not a whole number of pairs"):
            load_task("STSBenchmark", limit=limit)
