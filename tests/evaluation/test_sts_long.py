"""`eval sts-long`: the long pairs built as docs/spec.md section 11 states (by hand), Spearman against scipy, the
bootstrap interval, errors, and the command with a fake model (plot included)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from minidecoder.errors import InputError
from minidecoder.evaluation import sts_long
from minidecoder.evaluation.sts import StsSubset, StsTask
from test_sts_cli import FakeMethod, FakeModel, fake_embed, fakes, run_cli  # noqa: F401
from test_sts_data import DATA, needs_data


def small_task() -> StsTask:
    # golds with ties (2.0 three times): the stable sort keeps file order among them
    gold = [3.0, 2.0, 5.0, 2.0, 0.5, 2.0, 4.0, 1.0, 6.0]
    first = [f"a{i}" for i in range(9)]
    second = [f"b{i}" for i in range(9)]
    return StsTask("STSBenchmark", "test", {"test": StsSubset("test", first, second, gold)}, Path("."), ["x"])


def test_long_pairs_are_built_as_the_spec_states() -> None:
    one, two, four = sts_long.build_long_pairs(small_task(), (1, 2, 4))
    # sorted by gold, stable: 0.5 a4, 1.0 a7, 2.0 (a1, a3, a5 in file order), 3.0 a0, 4.0 a6, 5.0 a2, 6.0 a8
    assert one.first == ["a4", "a7", "a1", "a3", "a5", "a0", "a6", "a2", "a8"]
    assert one.gold.tolist() == [0.5, 1, 2, 2, 2, 3, 4, 5, 6]
    assert two.first == ["a4 a7", "a1 a3", "a5 a0", "a6 a2"] and two.second == ["b4 b7", "b1 b3", "b5 b0", "b6 b2"]
    assert two.gold.tolist() == [0.75, 2.0, 2.5, 4.5]  # mean of the golds; a8 makes no full group
    assert four.first == ["a4 a7 a1 a3", "a5 a0 a6 a2"] and four.gold.tolist() == [1.375, 3.5]


def test_a_length_with_one_long_pair_is_refused() -> None:
    with pytest.raises(InputError, match="length 8 leaves 1 long pair"):
        sts_long.build_long_pairs(small_task(), (1, 8))


def test_score_is_scipy_spearman_x100_with_its_interval() -> None:
    from scipy.stats import spearmanr

    (two,) = sts_long.build_long_pairs(small_task(), (1,))
    texts = sorted(set(two.first + two.second))
    vectors = torch.from_numpy(np.random.default_rng(0).normal(size=(len(texts), 8)))
    index = {t: i for i, t in enumerate(texts)}
    scored = sts_long.score_long_pairs([two], vectors, index)["1"]
    a = vectors[[index[t] for t in two.first]].numpy()
    b = vectors[[index[t] for t in two.second]].numpy()
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert scored["score"] == pytest.approx(100 * spearmanr(cosines, two.gold)[0], abs=1e-9)
    assert scored["pairs"] == 9 and scored["ci95"][0] <= scored["ci95"][1]


@pytest.mark.parametrize(("lengths", "limit", "problem"), [
    ((1, 0), None, "distinct positive"),
    ((2, 2), None, "distinct positive"),
    ((1,), 1, "too small"),
])
def test_bad_lengths_and_limits(lengths: tuple, limit: int | None, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        sts_long.load_long_sts(DATA, limit, lengths)


@needs_data
def test_full_construction_counts() -> None:
    task, sets = sts_long.load_long_sts(DATA)
    assert [len(s) for s in sets] == [1379, 689, 344, 172, 86]
    assert all(np.all(np.diff(s.gold) >= 0) for s in sets)  # groups of a gold-sorted list stay sorted


@needs_data
def test_eval_sts_long_command(fakes: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    pytest.importorskip("matplotlib")
    prefix = tmp_path / "run"
    status = run_cli(["eval", "sts-long", "--model", "tiny", "--method", "mean", "--data", str(DATA), "--limit", "64",
                      "--lengths", "1,4,16", "--plot", "--output", str(prefix), "--no-progress"])
    assert status == 0
    saved = json.loads(prefix.with_suffix(".json").read_text())
    expected = sts_long.evaluate_sts_long(lambda t: fake_embed(FakeModel(), t, FakeMethod("x")), DATA, 64, (1, 4, 16),
                                          progress=False)
    assert saved["results"]["lengths"] == expected["lengths"]
    assert [entry["pairs"] for entry in saved["results"]["lengths"].values()] == [64, 16, 4]
    assert saved["stamp"]["limit"] == 64 and saved["stamp"]["lengths"] == [1, 4, 16]
    assert saved["stamp"]["truncation"]["policy"] == "a text past the model's context is an error"
    assert prefix.with_suffix(".png").stat().st_size > 1000
    assert "Limited run" in capsys.readouterr().out


@needs_data
def test_ctrl_c_keeps_chunks_and_the_same_command_resumes_to_identical_scores(tiny_llama, tmp_path: Path, capsys,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import minidecoder.running.embedding as embedding
    from cli_runner import cli

    argv = ["eval", "sts-long", "--model", str(tiny_llama), "--method", "mean", "--data", str(DATA), "--lengths", "1,2",
            "--no-progress", "--batch-size", "256"]  # over 3,072 distinct texts: four chunks of 1,024
    real, calls = embedding.embed_rows, []

    def embed_then_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the job embeds chunk by chunk: Ctrl-C in the 3rd
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(embedding, "embed_rows", embed_then_ctrl_c)
    code, err = cli(capsys, *argv, "--output", str(tmp_path / "rep"))
    assert code == 130 and "2 of 4 chunks of sentences are kept" in err and "run the same command again" in err
    monkeypatch.setattr(embedding, "embed_rows", real)
    assert cli(capsys, *argv, "--output", str(tmp_path / "rep"))[0] == 0
    assert cli(capsys, *argv, "--output", str(tmp_path / "clean"))[0] == 0
    resumed = json.loads((tmp_path / "rep.json").read_text())["results"]["lengths"]
    clean = json.loads((tmp_path / "clean.json").read_text())["results"]["lengths"]
    assert resumed == clean and not (tmp_path / ".rep.json.partial").exists()
