"""tools/reproduce.py: the grid of rows, the generated ranking, and (on a tiny model) a table built
over several sittings: finished rows kept, never recomputed, the file valid after every row."""
from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from test_sts_data import needs_data
from repo_paths import REPO

SPEC = importlib.util.spec_from_file_location("reproduce", REPO / "tools" / "reproduce.py")
reproduce = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(reproduce)


def test_rows_cover_table_one() -> None:
    rows = reproduce.rows_spec(30, [2, 4, 7, 40], [3, 5, 31], [0.5, 1.0])
    keys = [r["key"] for r in rows]
    for prompt in ("prompteol", "pretended_cot", "knowledge", "metaeol"):
        assert {prompt, f"{prompt}+tp", f"{prompt}+cp"} <= set(keys)
    assert {"mean", "echo", "htp", "reba-2"} <= set(keys)
    by_key = {r["key"]: r for r in rows}
    assert by_key["prompteol+tp"]["axes"]["end"] == [2, 4, 7]  # ends past the model dropped
    assert by_key["prompteol+cp"]["axes"]["steer_layer"] == [3, 5]
    assert by_key["metaeol+tp"]["reuse"] == "prompteol+tp"
    assert by_key["prompteol"]["axes"]["layer"] == list(range(1, 31))


def test_ranking_states_what_the_numbers_show() -> None:
    def row(key: str, label: str, avg: float, time: float = 1.0) -> dict:
        return {"key": key, "label": label, "avg": avg, "time": time}
    rows = {r["key"]: r for r in [row("prompteol", "PromptEOL", 60.0), row("prompteol+tp", "PromptEOL + TP", 58.0, 1.1),
                                  row("prompteol+cp", "PromptEOL + CP (NS)", 62.5), row("mean", "Mean pooling", 40.0)]}
    text = "\n".join(reproduce.ranking_lines(rows))
    assert "Ranking by Avg. here: PromptEOL + CP (NS) > PromptEOL > PromptEOL + TP > Mean pooling." in text
    assert "PromptEOL + TP 1.10x (paper 1.04x)" in text
    assert "rankings over these 4 rows: 0.40." in text  # ranks differ by -1, -1, +2, 0: 1 - 6*6/(4*15)


def test_time_divides_each_row_by_its_own_sittings_yardstick() -> None:
    """PromptEOL timed on a slow machine, TP on one 8x faster: the Time column is the ratio of the
    methods' work (1.5x), not of the machines; a row with no yardstick gets no ratio, not a wrong one."""
    def row(key: str, test_seconds: float, yardstick_seconds: float | None) -> dict:
        yardstick = {"seconds": yardstick_seconds, "sentences": 1044} if yardstick_seconds else None
        return {"key": key, "run": {"test_seconds": test_seconds, "yardstick": yardstick}}
    by_key = reproduce.with_time([row("prompteol", 1600.0, 80.0), row("prompteol+tp", 300.0, 10.0),
                                  row("mean", 60.0, None)])
    assert by_key["prompteol"]["time"] == pytest.approx(1.0)
    assert by_key["prompteol+tp"]["time"] == pytest.approx(1.5)  # (300/10) / (1600/80); the raw ratio is 0.19
    assert by_key["mean"]["time"] is None


def test_a_claim_read_at_another_layer_shows_its_base_at_that_layer() -> None:
    def row(label: str, layer: int, dev: float, points: dict[int, float]) -> dict:
        return {"label": label, "chosen": {"layer": layer}, "dev": dev,
                "sweep": {"points": [{"options": {"layer": k}, "score": v} for k, v in points.items()]}}
    mean = row("Mean pooling", 1, 71.5, {1: 71.5, 29: 22.6, 30: 54.7})
    note = reproduce.same_layer_note(row("HTP", 29, 59.6, {29: 59.6, 30: 51.6}), mean)
    assert note == (" Same-layer check (STS-B dev only): HTP 59.60 at layer 29, where Mean pooling scores 22.60 "
                    "(its chosen layer 1: 71.50).")
    assert reproduce.same_layer_note(row("Echo", 1, 72.8, {1: 72.8}), mean) == ""  # same layer: nothing to tell apart


# ---- a table over several sittings, on the tiny model ------------------------------------------------

ROWS = "mean,prompteol,prompteol+tp"


def run(folder: Path, out: Path, *extra: str) -> None:
    assert reproduce.main(["--model", str(folder), "--limit", "2", "--dev-limit", "8", "--output-dir", str(out),
                           "--no-progress", "--rows", ROWS, *extra]) == 0


def counting(monkeypatch, fail_on: str | None = None) -> list[str]:
    """Record the rows run_row computes; raise KeyboardInterrupt (a kill) when it reaches `fail_on`."""
    calls: list[str] = []
    real = reproduce.run_row

    def wrapper(model, row, *args, **kwargs):
        if row["key"] == fail_on:
            raise KeyboardInterrupt
        calls.append(row["key"])
        return real(model, row, *args, **kwargs)
    monkeypatch.setattr(reproduce, "run_row", wrapper)
    return calls


def without_sittings(report: dict) -> dict:
    """The file minus what depends on the sitting (timings, dates, code version, argv)."""
    report = copy.deepcopy(report)
    report.pop("sittings")
    for row in report["rows"]:
        for key in reproduce.SITTING_KEYS:
            row.pop(key)
    return report


@needs_data
def test_resumed_table_equals_uninterrupted(tiny_llama: Path, tmp_path: Path, monkeypatch) -> None:
    name = tiny_llama.name  # the files are named after the model folder
    calls = counting(monkeypatch)
    run(tiny_llama, tmp_path / "straight")
    assert calls == ROWS.split(",")
    straight = json.loads((tmp_path / "straight" / f"{name}.json").read_text())
    assert straight["rows_done"] == ROWS.split(",")
    yardstick = straight["sittings"][-1]["yardstick"]  # timed once, carried by every row of the sitting
    assert yardstick["seconds"] > 0 and yardstick["machine"]["device"] == "cpu"
    assert all(r["run"]["yardstick"] == yardstick for r in straight["rows"])

    # sitting 1 is killed when it reaches the second row
    monkeypatch.undo()
    calls = counting(monkeypatch, fail_on="prompteol")
    with pytest.raises(KeyboardInterrupt):
        run(tiny_llama, tmp_path / "resumed")
    partial = json.loads((tmp_path / "resumed" / f"{name}.json").read_text())  # valid JSON after the kill
    assert calls == ["mean"] and partial["rows_done"] == ["mean"] and not partial["complete"]
    assert "prompteol" in partial["rows_pending"]
    md = (tmp_path / "resumed" / f"{name}.md").read_text()
    assert "Rows done: 1 of 16" in md and "`prompteol`" in md

    # sitting 2: the same command computes only the missing rows and keeps the finished one as it was
    monkeypatch.undo()
    calls = counting(monkeypatch)
    run(tiny_llama, tmp_path / "resumed")
    assert calls == ["prompteol", "prompteol+tp"]
    resumed = json.loads((tmp_path / "resumed" / f"{name}.json").read_text())
    assert resumed["rows"][0]["run"] == partial["rows"][0]["run"]  # kept, not recomputed
    assert without_sittings(resumed) == without_sittings(straight)
    for key in ROWS.split(","):
        assert (tmp_path / "resumed" / f"{name}-pairs" / f"{key}.txt").read_bytes() == \
            (tmp_path / "straight" / f"{name}-pairs" / f"{key}.txt").read_bytes()
    assert [c["method"] for c in resumed["claims"]] == ["prompteol+tp"]

    # sitting 3: nothing left to do, nothing recomputed; --redo recomputes the rows named, to the same numbers
    monkeypatch.undo()
    calls = counting(monkeypatch)
    run(tiny_llama, tmp_path / "resumed")
    assert calls == []
    reproduce.main(["--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--output-dir",
                    str(tmp_path / "resumed"), "--no-progress", "--rows", "mean", "--redo"])
    assert calls == ["mean"]
    assert without_sittings(json.loads((tmp_path / "resumed" / f"{name}.json").read_text())) == without_sittings(straight)
    assert straight["rows"][0]["command"].endswith("--limit 2 --dev-limit 8 --rows mean --redo")


@needs_data
def test_other_settings_are_refused_not_mixed(tiny_llama: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    counting(monkeypatch)
    assert reproduce.main(["--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--output-dir",
                           str(tmp_path), "--no-progress", "--rows", "mean"]) == 0
    with pytest.raises(SystemExit):
        reproduce.main(["--model", str(tiny_llama), "--limit", "3", "--dev-limit", "8", "--output-dir",
                        str(tmp_path), "--no-progress", "--rows", "mean"])
    assert "other settings" in capsys.readouterr().err


def killing_piece(monkeypatch, at: int | None = None) -> tuple[list[int], list[str]]:
    """Record the test pieces encoded and the sweeps run; a kill (KeyboardInterrupt) when piece `at` starts."""
    pieces, sweeps = [], []
    real_run, real_sweep = reproduce.PieceEncoder.run, reproduce.sweep_sts

    def run(self, index):
        if index == at:
            raise KeyboardInterrupt
        pieces.append(index)
        return real_run(self, index)

    def sweep(model, method, *args, **kwargs):
        sweeps.append(method.name)
        return real_sweep(model, method, *args, **kwargs)
    monkeypatch.setattr(reproduce.PieceEncoder, "run", run)
    monkeypatch.setattr(reproduce, "sweep_sts", sweep)
    return pieces, sweeps


@needs_data
def test_a_row_killed_between_test_pieces_resumes_from_the_next_piece(tiny_llama: Path, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """A row longer than a sitting: its sweep and finished test pieces are kept, the next sitting (a fresh
    process: nothing in memory) encodes only the rest, and the file equals an uninterrupted one's."""
    name = tiny_llama.name
    command = ["--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--no-progress", "--rows", "prompteol"]
    assert reproduce.main([*command, "--output-dir", str(tmp_path / "straight")]) == 0
    straight = json.loads((tmp_path / "straight" / f"{name}.json").read_text())
    assert [t["pieces"] for t in straight["rows"][0]["run"]["test_sittings"]] == [7]  # one per task at --limit 2

    pieces, sweeps = killing_piece(monkeypatch, at=3)
    with pytest.raises(KeyboardInterrupt):
        reproduce.main([*command, "--output-dir", str(tmp_path / "resumed")])
    partial = json.loads((tmp_path / "resumed" / f"{name}.json").read_text())
    assert pieces == [0, 1, 2] and partial["rows_done"] == []
    kept = partial["in_progress"]["prompteol"]
    assert kept["cosines"]["pieces"] == 3 and kept["sweep"]["options"] == straight["rows"][0]["chosen"]
    assert (tmp_path / "resumed" / kept["cosines"]["file"]).read_text().count("\n") == 3
    md = (tmp_path / "resumed" / f"{name}.md").read_text()
    assert "`prompteol`: sweep done, 3 of 7 test pieces" in md
    assert partial["sittings"][-1]["rows_part_run"] == ["prompteol"] and "| part of prompteol |" in md

    monkeypatch.undo()
    pieces, sweeps = killing_piece(monkeypatch)
    assert reproduce.main([*command, "--output-dir", str(tmp_path / "resumed")]) == 0
    assert sweeps == [] and pieces == [3, 4, 5, 6]  # neither the sweep nor a finished piece again
    resumed = json.loads((tmp_path / "resumed" / f"{name}.json").read_text())
    assert resumed["in_progress"] == {} and not (tmp_path / "resumed" / kept["cosines"]["file"]).exists()
    assert without_sittings(resumed) == without_sittings(straight)
    assert (tmp_path / "resumed" / f"{name}-pairs" / "prompteol.txt").read_bytes() == \
        (tmp_path / "straight" / f"{name}-pairs" / "prompteol.txt").read_bytes()
    split = resumed["rows"][0]["run"]["test_sittings"]
    assert [t["pieces"] for t in split] == [3, 4]
    assert sum(t["sentences"] for t in split) == straight["settings"]["test_sentences"]  # each timed once
    assert resumed["rows"][0]["run"]["test_seconds"] == pytest.approx(sum(t["seconds"] for t in split))


@needs_data
def test_altered_kept_pieces_are_refused_with_the_way_out(tiny_llama: Path, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    command = ["--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--no-progress", "--rows", "mean",
               "--output-dir", str(tmp_path)]
    killing_piece(monkeypatch, at=2)
    with pytest.raises(KeyboardInterrupt):
        reproduce.main(command)
    partial = json.loads((tmp_path / f"{tiny_llama.name}.json").read_text())
    kept = tmp_path / partial["in_progress"]["mean"]["cosines"]["file"]
    kept.write_text(kept.read_text().replace("0.", "0.5", 1))
    monkeypatch.undo()
    with pytest.raises(SystemExit, match="does not match the sha256.*--rows mean --redo"):
        reproduce.main(command)
    assert reproduce.main([*command, "--redo"]) == 0  # the way out named: the row afresh
    assert json.loads((tmp_path / f"{tiny_llama.name}.json").read_text())["rows_done"] == ["mean"]


def test_time_sums_each_sittings_share_over_its_own_yardstick() -> None:
    """A row whose test pieces ran in two sittings, on machines 4x apart in speed."""
    def sitting(seconds: float, yardstick: float) -> dict:
        return {"seconds": seconds, "yardstick": {"seconds": yardstick}}
    prompteol = {"key": "prompteol", "run": {"test_seconds": 400.0, "yardstick": {"seconds": 20.0}}}
    metaeol = {"key": "metaeol", "run": {"test_seconds": 2000.0, "test_sittings": [sitting(1600.0, 80.0), sitting(400.0, 20.0)]}}
    assert reproduce.with_time([prompteol, metaeol])["metaeol"]["time"] == pytest.approx((1600 / 80 + 400 / 20) / (400 / 20))


def test_a_kill_during_a_write_leaves_the_old_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "table.json"
    reproduce.publish(path, b'{"rows": []}\n')

    def killed(*args):
        raise KeyboardInterrupt
    import minidecoder.output_files
    monkeypatch.setattr(minidecoder.output_files.os, "replace", killed)  # the one writer's publish
    with pytest.raises(KeyboardInterrupt):
        reproduce.publish(path, b'{"rows": [1, 2, 3]}\n')
    assert json.loads(path.read_text()) == {"rows": []}


@needs_data
def test_a_rows_code_is_the_code_its_sitting_loaded(tiny_llama: Path, tmp_path: Path, monkeypatch) -> None:
    """Commits made while a sitting runs do not relabel its rows: the version is taken once, at start."""
    versions = iter(["as-loaded"])
    monkeypatch.setattr(reproduce, "code_version", lambda: {"git": next(versions, "committed-meanwhile")})
    run(tiny_llama, tmp_path)
    report = json.loads((tmp_path / f"{tiny_llama.name}.json").read_text())
    assert [r["run"]["code"] for r in report["rows"]] == ["as-loaded"] * 3
    assert report["sittings"][-1]["code"] == "as-loaded"


def test_rows_code_is_repaired_from_the_sittings_that_ran_them() -> None:
    report = {"rows": [{"key": "mean", "run": {"code": "tree-later"}}, {"key": "prompteol", "run": {"code": "x"}}],
              "sittings": [{"code": "a", "rows_run": ["mean", "prompteol"]}, {"code": "b", "rows_run": ["prompteol"]}]}
    reproduce.rows_code_from_sittings(report)
    assert [r["run"]["code"] for r in report["rows"]] == ["a", "b"]  # a redone row: its last sitting's code


def test_order_codes_round_trip_through_text() -> None:
    from types import SimpleNamespace
    import numpy as np
    layout = [SimpleNamespace(name="STS12", pairs=3), SimpleNamespace(name="SICKRelatedness", pairs=2)]
    codes = np.array([2, 0, 1, 65535, 0], dtype=np.uint32)
    text = reproduce.codes_text(codes, layout)
    assert text == b"STS12 2 0 1\nSICKRelatedness 65535 0\n"
    parsed = reproduce.parse_codes(text.decode(), layout)
    assert {name: part.tolist() for name, part in parsed.items()} == {"STS12": [2, 0, 1], "SICKRelatedness": [65535, 0]}
    with pytest.raises(ValueError, match="has 2 codes for 3 pairs"):
        reproduce.parse_codes("STS12 2 0\nSICKRelatedness 1 0\n", layout)
    with pytest.raises(ValueError, match="are not"):
        reproduce.parse_codes("STS13 2 0 1\nSICKRelatedness 1 0\n", layout)


def test_a_gpu_sittings_machine_names_the_gpu_and_its_kernels_not_the_host_cpus(monkeypatch):
    import types

    import torch
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    gpu = reproduce.machine(types.SimpleNamespace(device=torch.device("cuda")))
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["device"] == "cuda"
    assert gpu["kernels"] == "sm_90, CUDA 13.0"
    cpu = reproduce.machine(types.SimpleNamespace(device=torch.device("cpu")))
    assert cpu["device"] == "cpu" and cpu["kernels"] == torch.backends.cpu.get_cpu_capability()


@needs_data
def test_retest_keeps_the_sweep_and_times_every_test_piece_again(tiny_llama: Path, tmp_path: Path, monkeypatch,
                                                                 capsys) -> None:
    """A sitting whose timing was disturbed: --retest encodes the test set again under the next sitting's
    yardstick without repeating the sweep, and the scores are the uninterrupted run's."""
    name = tiny_llama.name
    command = ["--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--no-progress", "--rows", "prompteol",
               "--output-dir", str(tmp_path)]
    with pytest.raises(SystemExit):  # nothing in progress yet: nothing to retest
        reproduce.main([*command, "--retest"])
    assert "--retest applies to rows in progress with a finished sweep; prompteol is not" in capsys.readouterr().err

    killing_piece(monkeypatch, at=3)
    with pytest.raises(KeyboardInterrupt):
        reproduce.main(command)
    disturbed = json.loads((tmp_path / f"{name}.json").read_text())["in_progress"]["prompteol"]
    assert disturbed["cosines"]["pieces"] == 3

    monkeypatch.undo()
    pieces, sweeps = killing_piece(monkeypatch)
    assert reproduce.main([*command, "--retest"]) == 0
    assert sweeps == [] and pieces == list(range(7))  # the kept sweep; every piece encoded and timed again
    report = json.loads((tmp_path / f"{name}.json").read_text())
    row = report["rows"][0]
    assert row["chosen"] == disturbed["sweep"]["options"] and row["run"]["sweep_seconds"] == disturbed["sweep"]["seconds"]
    assert [t["pieces"] for t in row["run"]["test_sittings"]] == [7]  # the disturbed sitting's share is gone
    assert row["run"]["test_sittings"][0]["yardstick"] == report["sittings"][-1]["yardstick"]
    assert sum(t["sentences"] for t in row["run"]["test_sittings"]) == report["settings"]["test_sentences"]

    monkeypatch.undo()
    straight = tmp_path / "straight"
    assert reproduce.main([*command[:-1], str(straight)]) == 0
    assert (tmp_path / f"{name}-pairs" / "prompteol.txt").read_bytes() == \
        (straight / f"{name}-pairs" / "prompteol.txt").read_bytes()
    with pytest.raises(SystemExit):  # finished now: --retest is for a row in progress; --redo redoes a finished one
        reproduce.main([*command, "--retest"])
    assert "a finished row is redone with --redo" in capsys.readouterr().err


# ---- a careless or hostile sitting: each refused before a model loads, naming the problem and the way out ----

def no_model(monkeypatch) -> None:
    def load(*args, **kwargs):
        raise AssertionError("a model was loaded for a sitting that had to be refused first")
    monkeypatch.setattr(reproduce.minidecoder, "load", load)


def refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        reproduce.main(list(argv))
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_a_second_sitting_on_a_table_another_is_writing_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    """Two sittings on one table: each reads it at its start and writes it whole after every row, so the later
    writer dropped the rows the other finished meanwhile (their pairs files left unnamed). The table's lock is
    held for the whole sitting; a second one is told who holds it, before its model loads."""
    import threading
    from minidecoder.output_files import output_lock

    no_model(monkeypatch)
    held, release = threading.Event(), threading.Event()

    def first_sitting() -> None:  # another holder of the lock (another process's is refused alike)
        with output_lock(tmp_path / "tiny.json"):
            held.set()
            release.wait(30)
    thread = threading.Thread(target=first_sitting)
    thread.start()
    try:
        held.wait(30)
        err = refused(capsys, "--model", str(tmp_path / "tiny"), "--output-dir", str(tmp_path), "--rows", "mean")
        assert f"is writing {tmp_path / 'tiny.json'} right now" in err and "--output-dir elsewhere" in err
        (tmp_path / "tiny.json").write_text("{}")
        err = refused(capsys, "--render", str(tmp_path / "tiny.json"))  # --render rewrites the table too
        assert f"is writing {tmp_path / 'tiny.json'} right now" in err
    finally:
        release.set()
        thread.join()


def test_a_table_cut_short_or_hand_edited_is_named_with_the_way_out(tmp_path: Path, monkeypatch, capsys) -> None:
    no_model(monkeypatch)
    table = tmp_path / "tiny.json"
    command = ["--model", str(tmp_path / "tiny"), "--output-dir", str(tmp_path), "--rows", "mean"]
    for text, problem in (("", "is not readable JSON"), ('{"format": "minidecoder-reproduce/2", "settings', "is not "
                          "readable JSON"), ("[]", "is not a results table"),
                          (json.dumps({"format": reproduce.FORMAT, "settings": {}, "rows": []}),
                           "lacks command, rows_planned, sittings (hand-edited?)")):
        table.write_text(text)
        err = refused(capsys, *command)
        assert f"{table} {problem}" in err and f"git checkout -- {table}" in err and "--replace" in err
        err = refused(capsys, "--render", str(table))
        assert f"--render {table} {problem}" in err
    assert "does not exist" in refused(capsys, "--render", str(tmp_path / "nonesuch.json"))
    assert "is not a file" in refused(capsys, "--render", str(tmp_path))
    table.unlink()
    table.mkdir()
    assert f"{table} is not a file; move it away" in refused(capsys, *command, "--replace")


def test_each_bad_flag_is_named_by_its_own_name_before_the_model_loads(tmp_path: Path, monkeypatch, capsys) -> None:
    """--dev-limit 0 was reported as "--limit 0" (the loader names one flag), after the model loaded; a grid
    that is not numbers was a ValueError traceback; --rows naming no row ran nothing and wrote a table."""
    no_model(monkeypatch)
    command = ["--model", str(tmp_path / "tiny"), "--output-dir", str(tmp_path)]
    assert "--dev-limit 0 is too small" in refused(capsys, *command, "--limit", "3", "--dev-limit", "0")
    assert "--limit -1 is too small" in refused(capsys, *command, "--limit", "-1")
    assert "--batch-size 0 must be at least 1" in refused(capsys, *command, "--batch-size", "0")
    assert "--tp-ends 'a,b' is not a comma-separated list of whole numbers" in \
        refused(capsys, *command, "--tp-ends", "a,b")
    assert "--cp-alphas '' is not a comma-separated list of numbers" in refused(capsys, *command, "--cp-alphas", "")
    assert "--rows ',' names no row" in refused(capsys, *command, "--rows", ",")
    assert not list(tmp_path.glob("*.json"))


@needs_data
def test_a_grid_that_leaves_a_row_nothing_to_sweep_is_named(tiny_llama: Path, tmp_path: Path, capsys) -> None:
    """--tp-ends past the model's blocks left TP's end axis empty: the sweep failed with an IndexError."""
    err = refused(capsys, "--model", str(tiny_llama), "--limit", "2", "--dev-limit", "8", "--output-dir",
                  str(tmp_path), "--no-progress", "--rows", "prompteol+tp", "--tp-ends", "99")
    assert "row prompteol+tp: --tp-ends 99 leaves no end to sweep on this model's 4 blocks" in err


def test_an_input_error_is_one_message_not_a_traceback(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(REPO / "tools" / "reproduce.py"), "--model", "nonesuch-model-xyz",
                             "--device", "nonsense", "--output-dir", str(tmp_path)],
                            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("reproduce: error: ") and "Traceback" not in result.stderr
