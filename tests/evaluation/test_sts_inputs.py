"""What `eval sts` and `sweep` say of STS data they cannot score: an empty sentence is named by its file and
line before the model loads (it was named by the job's own temporary file, or by "text 0"), and a sentence
past a model's context gets a way out these commands have (they advised a --truncate they do not take)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_runner import cli
from test_sts_data import DATA, needs_data

pytestmark = needs_data


def _sts_b(tmp_path: Path, extra: str, pairs: int = 20) -> Path:
    """An STS-B folder holding the first `pairs` pairs of test and dev, then the row `extra` in each."""
    root = tmp_path / "sts"
    (root / "STSBenchmark").mkdir(parents=True)
    for split in ("test", "dev"):
        lines = (DATA / "STSBenchmark" / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines()[:pairs]
        (root / "STSBenchmark" / f"sts-{split}.csv").write_text("\n".join(lines + [extra]) + "\n", encoding="utf-8")
    return root


EMPTY = "main-captions\tMSRvid\t2012test\t0001\t2.5\t \tA man."


@pytest.mark.parametrize("command, split", [(["eval", "sts", "--tasks", "STSBenchmark"], "test"),
                                            (["sweep", "--layers", "1,2"], "dev")])
def test_an_empty_sentence_is_named_by_its_file_and_line_before_the_model_loads(capsys, tmp_path: Path, command,
                                                                              split: str) -> None:
    data = _sts_b(tmp_path, EMPTY)
    code, err = cli(capsys, *command, "--model", str(tmp_path / "no-model-here"), "--method", "mean", "--data", str(data),
                    "--output", str(tmp_path / "r"), "--no-progress")
    assert code == 2
    assert f"sts-{split}.csv line 21 holds an empty sentence, and method 'mean' pools over" in err  # not the model's error
    assert "e.g. prompteol" in err


def test_a_prompt_method_still_embeds_the_empty_sentence(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    data = _sts_b(tmp_path, EMPTY)
    code, err = cli(capsys, "eval", "sts", "--tasks", "STSBenchmark", "--model", str(tiny_llama), "--method",
                    "prompteol", "--data", str(data), "--output", str(tmp_path / "r"), "--no-progress")
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["results"]["tasks"]["STSBenchmark"]["pairs"] == 21


@pytest.mark.parametrize("command", [["eval", "sts", "--tasks", "STSBenchmark"], ["sweep", "--layers", "1,2"]])
def test_a_sentence_past_the_context_is_named_with_a_way_out_the_command_has(capsys, tmp_path: Path,
                                                                            tiny_llama: Path, command) -> None:
    short = Path(shutil.copytree(tiny_llama, tmp_path / "short"))
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    long = "a long sentence " * 8  # 128 characters: the tiny tokenizer's 128 tokens
    data = _sts_b(tmp_path, f"main-captions\tMSRvid\t2012test\t0001\t2.5\t{long}\tA man.")
    code, err = cli(capsys, *command, "--model", str(short), "--method", "mean", "--data", str(data),
                    "--output", str(tmp_path / "r"), "--no-progress")
    assert code == 2
    assert "an STS sentence is 127 tokens, longer than the model's context of 64 tokens: 'a long sentence" in err
    assert "has no --truncate" in err and "CLI --truncate" not in err
