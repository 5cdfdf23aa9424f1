"""tools/reproduce_tasks.py (transfer, sts-long) and tools/reproduce_retrieval.py (retrieval) write the claims
file tools/claims_table.py reads: a small table of each, on a tiny model (--limit or toy data, the limit then
cleared by the test, as a full run would have none), is rendered in its paper's own section, each cell copied
from the record `claims.judge` made."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import minidecoder
from minidecoder.evaluation import transfer
from minidecoder.evaluation.senteval_probe import dev_selected
from reproduce.claims import BENCHMARKS, PAPERS
from repo_paths import REPO
from family_helpers import shallow_rows
from test_retrieval import write_beir
from test_sts_data import DATA, needs_data
from test_transfer import write_folder


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_row(results: Path, file: str, paper: str, benchmark: str, claim: str) -> tuple[str, dict]:
    """The claims file `file` made full (limit cleared), claims_table's rendering, and the line of `claim` in the
    section of `paper` on `benchmark`; with the claim's record."""
    path = results / file
    data = json.loads(path.read_text())
    assert data["settings"]["benchmark"] == benchmark and data["settings"]["limit"] is not None  # stamped limited
    data["settings"]["limit"] = None
    path.write_text(json.dumps(data))
    claims_table = load("claims_table")
    text = claims_table.render(*claims_table.load_tables(results))
    owner = next(p for p in PAPERS if p.key == paper)
    where = dict(owner.benchmarks)[benchmark]
    start = text.index(f"### {BENCHMARKS[benchmark]} ({owner.short}'s {where})", text.index(f"## {owner.title}"))
    end = text.find("\n##", start + 4)
    line = next(line for line in text[start:end].splitlines() if line.startswith(f"| {claim} |"))
    record = next(c for c in data["claims"] if c["claim"] == claim)
    return line, record


def test_reproduce_retrieval_claims_enter_htp_table_1(tiny_llama: Path, tmp_path: Path) -> None:
    tool, results = load("reproduce_retrieval"), tmp_path / "results"
    shallow_rows(tool)
    assert tool.main(["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data",
                      str(write_beir(tmp_path / "data")), "--out", str(tmp_path / "rows"), "--rows", "mean,htp",
                      "--results", str(results)]) == 0
    line, record = rendered_row(results, "tiny-llama-retrieval.json", "htp", "retrieval", "HTP improves on Vanilla Mean")
    avg = record["scores"]["avg"]
    assert record["method"] == "htp" and record["base"] == "mean" and set(record["scores"]) == {"toy", "avg"}
    assert avg["diff"] == pytest.approx(record["scores"]["toy"]["diff"])  # one set: Avg. is that set
    assert f"{avg['diff']:+.2f} [{avg['lo']:+.2f}, {avg['hi']:+.2f}]" in line


def chosen(monkeypatch: pytest.MonkeyPatch, tool) -> None:
    """The rows' dev-chosen configurations a results/<model>.json would give, for the tiny model's 4 blocks."""
    monkeypatch.setattr(tool, "chosen_methods", lambda model: {
        "mean": {"method": "mean"}, "prompteol": {"method": "prompteol"},
        "prompteol+tp": {"method": "tp", "prompt": "prompteol", "start": 1, "end": 3}})


def test_reproduce_tasks_transfer_claims_enter_tp_table_5(tiny_llama: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    assert tool.main(["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2,TREC", "--data",
                      str(write_folder(tmp_path / "senteval")), "--limit", "59", "--rows",
                      "prompteol,prompteol+tp-transfer", "--out", str(tmp_path)]) == 0  # 59: TREC's 60 training rows cut
    line, record = rendered_row(tmp_path, "tiny-llama-transfer.json", "tp", "transfer", "TP improves PromptEOL")
    avg = record["scores"]["avg"]
    assert set(record["scores"]) == {"SST2", "TREC", "avg", "avg without SST2", "avg without TREC"}
    assert f"[{avg['lo']:+.2f}, {avg['hi']:+.2f}]" in line
    assert record["scores"]["avg without SST2"]["diff"] == pytest.approx(record["scores"]["TREC"]["diff"])
    saved = json.loads((tmp_path / "tiny-llama-transfer.json").read_text())
    assert saved["rows_done"] == ["prompteol", "prompteol+tp-transfer"] and "knowledge+tp" in saved["rows_planned"]
    # TP's end for transfer: TP section 5.8's layers 14-21 of 32 scaled to the tiny model's 4 blocks, 2..3, chosen
    # by each end's SST2 dev accuracy, recomputed here from embeddings of SST2 train and dev alone
    choice = saved["rows"]["prompteol+tp-transfer"]["tp_end_choice"]
    assert choice["range"] == [2, 3] and set(choice["sst2_dev_accuracy"]) == {"2", "3"}
    sst2 = transfer.load_transfer_tasks(["SST2"], tmp_path / "senteval", 59)[0]
    model = minidecoder.load(tiny_llama)
    for end, accuracy in choice["sst2_dev_accuracy"].items():
        options = {"prompt": "prompteol", "start": 1, "end": int(end)}
        x, dev = (np.asarray(minidecoder.embed(model, sst2.splits[split].texts, method="tp", progress=False, **options))
                  for split in ("train", "dev"))
        probe = dev_selected(x, sst2.splits["train"].labels, dev, sst2.splits["dev"].labels, dev,
                             sst2.splits["dev"].labels, len(sst2.classes))
        assert probe.dev_accuracy == pytest.approx(accuracy, abs=1e-9)
    best = max((accuracy, -int(end)) for end, accuracy in choice["sst2_dev_accuracy"].items())
    assert saved["rows"]["prompteol+tp-transfer"]["method"]["end"] == choice["end"] == -best[1]
    # what the choice cost, kept with it so the table (not a progress bar) says it: one piece of both ends here
    assert list(choice["pieces"]) == ["2-3"] and choice["pieces"]["2-3"]["device"] == "cpu"
    assert choice["pieces"]["2-3"]["encode_seconds"] > 0 and choice["pieces"]["2-3"]["probe_seconds"] > 0
    assert "## TP's end for transfer" in (tmp_path / "tiny-llama-transfer.md").read_text()
    assert "Cost by piece: ends 2-3: " in (tmp_path / "tiny-llama-transfer.md").read_text()
    # each task's validation accuracy sits beside its test accuracy, with the items it scores: TREC's 10 folds
    # cross-validate its training set, SST2 scores its dev split
    tasks = saved["rows"]["prompteol"]["tasks"]
    assert tasks["TREC"]["dev_items"] == tasks["TREC"]["train_items"] and tasks["SST2"]["dev_items"] == 12
    table = (tmp_path / "tiny-llama-transfer.md").read_text()
    validation = table[table.index("## Validation accuracy on the training data"):table.index("## The papers'")]
    line = next(line for line in validation.splitlines() if line.startswith("| PromptEOL |"))
    assert f"| {tasks['SST2']['dev']:.2f} [" in line and f"| {tasks['TREC']['dev']:.2f} [" in line
    assert "no interval" not in line
    # --render judges the claims again from the rows the file holds, with no model: the same records
    path = tmp_path / "tiny-llama-transfer.json"
    before = json.loads(path.read_text())
    assert tool.main(["--render", str(path)]) == 0
    assert json.loads(path.read_text())["claims"] == before["claims"]



def test_the_transfer_end_choice_resumes_a_stopped_grid_and_probes_only_the_ends_not_scored(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate ends are embedded as one grid whose batches are kept until every end is scored: a grid
    stopped in its second batch resumes from the first, a choice stopped in its probes resumes without embedding
    again, and an end whose accuracy is kept is not probed again; each way, the same choice."""
    from minidecoder.evaluation import sweep
    from minidecoder.running.jobs import JobInterrupted

    tool = load("reproduce_tasks")
    sst2 = transfer.load_transfer_tasks(["SST2"], write_folder(tmp_path / "senteval"), 59)[0]
    model = minidecoder.load(tiny_llama)
    spec = {"method": "tp", "prompt": "prompteol", "start": 1, "end": 3}
    whole = tool.choose_transfer_end(model, spec, sst2, tmp_path / "whole", batch_size=8)
    assert whole["range"] == [2, 3] and not (tmp_path / "whole" / "grid-2-3").exists()  # removed once scored
    assert 0 < whole["grid_blocks_ratio"] < 1  # the two ends' forwards share their first blocks

    batches, probed, real_points, real_probe = [], [], sweep.sweep_points, transfer.probe_task
    stop = {"batch": 2, "probe": None}

    def points(method, model, texts, grid):
        batches.append(len(texts))
        if len(batches) == stop["batch"]:
            raise KeyboardInterrupt
        return real_points(method, model, texts, grid)

    def probe(task, rows, **options):
        probed.append(task)
        if len(probed) == stop["probe"]:
            raise KeyboardInterrupt
        return real_probe(task, rows, **options)

    monkeypatch.setattr(sweep, "sweep_points", points)
    monkeypatch.setattr(transfer, "probe_task", probe)
    work = tmp_path / "stopped"
    with pytest.raises(JobInterrupted):  # Ctrl-C in the grid's second batch
        tool.choose_transfer_end(model, spec, sst2, work, batch_size=8)
    stop.update(batch=None, probe=2)
    with pytest.raises(KeyboardInterrupt):  # the grid resumed from its first batch; Ctrl-C in the second probe
        tool.choose_transfer_end(model, spec, sst2, work, batch_size=8)
    texts = len({*sst2.splits["train"].texts, *sst2.splits["dev"].texts})
    assert sum(batches) - batches[1] == texts and json.loads((work / "end-choice.json").read_text())["sst2_dev_accuracy"].keys() == {"2"}
    embedded = len(batches)
    resumed = tool.choose_transfer_end(model, spec, sst2, work, batch_size=8)
    assert resumed.pop("pieces").keys() == whole.pop("pieces").keys() == {"2-3"}  # seconds differ run to run
    assert resumed == whole
    assert len(batches) == embedded and len(probed) == 3  # nothing embedded again; end 2's probe not run again


def test_the_transfer_end_choice_keeps_each_piece_for_a_sitting_on_another_machine(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Ends embedded a piece at a time: each piece's accuracies (and blocks) are kept in end-choice.json alone, the
    file a sitting commits; a fresh machine with that file, its model converted into another folder, embeds only
    the ends it lacks, to the same choice; and a file kept for another TP configuration is refused, not mixed in."""
    from minidecoder.evaluation import sweep

    tool = load("reproduce_tasks")
    sst2 = transfer.load_transfer_tasks(["SST2"], write_folder(tmp_path / "senteval"), 59)[0]
    model = minidecoder.load(tiny_llama)
    spec = {"method": "tp", "prompt": "prompteol", "start": 1, "end": 3}
    whole = tool.choose_transfer_end(model, spec, sst2, tmp_path / "whole", batch_size=8)
    real_points, real_probe, probed, grids = sweep.sweep_points, transfer.probe_task, [], []

    def probe(task, rows, **options):
        probed.append(task)
        if len(probed) == 2:
            raise KeyboardInterrupt  # the second piece's end, once its grid is embedded
        return real_probe(task, rows, **options)

    monkeypatch.setattr(transfer, "probe_task", probe)
    monkeypatch.setattr(sweep, "sweep_points", lambda method, model, texts, points: grids.append(
        [point["end"] for point in points]) or real_points(method, model, texts, points))
    work = tmp_path / "pieces"
    with pytest.raises(KeyboardInterrupt):
        tool.choose_transfer_end(model, spec, sst2, work, batch_size=8, ends_per_piece=1)
    kept = json.loads((work / "end-choice.json").read_text())
    assert kept["sst2_dev_accuracy"] == {"2": whole["sst2_dev_accuracy"]["2"]} and kept["device"] == {"2": "cpu"}
    assert kept["blocks"]["computed"] == kept["blocks"]["one_run_per_end"] > 0  # one end a piece shares nothing
    assert list(kept["pieces"]) == ["2-2"] and kept["pieces"]["2-2"]["encode_seconds"] > 0  # its cost, kept with it
    for grid in work.glob("grid-*"):
        shutil.rmtree(grid)  # a fresh machine: the committed end-choice.json alone
    model = minidecoder.load(shutil.copytree(tiny_llama, tmp_path / "another-checkout" / "weights"))
    embedded = len(grids)
    again = tool.choose_transfer_end(model, spec, sst2, work, batch_size=8, ends_per_piece=1)
    assert again["end"] == whole["end"] and again["sst2_dev_accuracy"] == whole["sst2_dev_accuracy"]
    assert again["grid_blocks_ratio"] == 1.0 and 0 < whole["grid_blocks_ratio"] < 1
    assert list(again["pieces"]) == ["2-2", "3-3"] and again["pieces"]["2-2"] == kept["pieces"]["2-2"]
    texts = len({*sst2.splits["train"].texts, *sst2.splits["dev"].texts})
    assert grids[embedded:] == [[3]] * -(-texts // 8)  # end 3's piece alone, each batch once
    with pytest.raises(SystemExit, match="another model, TP configuration"):
        tool.choose_transfer_end(model, {**spec, "start": 2}, sst2, work, batch_size=8, ends_per_piece=1)
    with pytest.raises(SystemExit) as stop:  # a piece of no ends is refused before the model loads
        tool.main(["--model", str(tiny_llama), "--family", "transfer", "--rows", "prompteol+tp-transfer",
                   "--ends-per-piece", "0", "--out", str(tmp_path / "none")])
    assert stop.value.code == 2 and "--ends-per-piece 0 must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()

@needs_data
def test_reproduce_tasks_sts_long_claims_enter_htp_figure_1_on_16(tiny_llama: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    monkeypatch.setattr(tool, "TP_WITH_MEAN", {**tool.TP_WITH_MEAN, "end": 3})
    assert tool.main(["--model", str(tiny_llama), "--family", "sts-long", "--data", str(DATA), "--limit", "96",
                      "--rows", "last,mean-final,mean+tp", "--out", str(tmp_path)]) == 0
    line, record = rendered_row(tmp_path, "tiny-llama-sts-long.json", "htp", "sts-long",
                                "Mean pooling beats last-token readout at 16 sentences")
    decisive = record["scores"]["16"]
    assert record["score"] == "16" and f"{decisive['diff']:+.2f} [{decisive['lo']:+.2f}" in line
    saved = json.loads((tmp_path / "tiny-llama-sts-long.json").read_text())
    assert saved["rows"]["mean+tp"]["method"]["pooling"] == "mean"
    assert "TP w. Mean" in (tmp_path / "tiny-llama-sts-long.md").read_text()


def test_a_transfer_row_from_another_device_joins_the_table_under_its_own_device(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row run on a lent GPU joins the CPU's rows, each naming where it ran (a file written before rows named
    their device gives its rows the one its settings named); another dtype is still refused."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    common = ["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2,TREC", "--data",
              str(write_folder(tmp_path / "senteval")), "--limit", "1000", "--out", str(tmp_path)]
    assert tool.main(common + ["--rows", "prompteol"]) == 0
    path = tmp_path / "tiny-llama-transfer.json"
    earlier = json.loads(path.read_text())
    assert earlier["rows"]["prompteol"]["stamp"]["device"] == "cpu" and earlier["settings"]["device"] == "cpu"
    # as a GPU sitting's file from before this change reads: the device in the settings, none in the rows
    earlier["settings"]["device"] = "cuda"
    del earlier["rows"]["prompteol"]["stamp"]["device"]
    path.write_text(json.dumps(earlier))
    assert tool.main(common + ["--rows", "prompteol+tp"]) == 0
    saved = json.loads(path.read_text())
    assert {key: row["stamp"]["device"] for key, row in saved["rows"].items()} == {"prompteol": "cuda",
                                                                                 "prompteol+tp": "cpu"}
    assert saved["settings"]["device"] == "cpu and cuda" and saved["rows_done"] == ["prompteol", "prompteol+tp"]
    assert any(claim["claim"] == "TP improves PromptEOL (STS end, ablation)" for claim in saved["claims"])
    table = (tmp_path / "tiny-llama-transfer.md").read_text()
    assert "| Device |" in table and "| cuda |" in table and "| cpu |" in table
    with pytest.raises(SystemExit, match="other settings"):
        tool.main(common + ["--rows", "knowledge", "--dtype", "bfloat16"])


def test_a_transfer_row_begun_on_another_device_is_left_to_it_unless_redone(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A row's kept tasks resume only on the device that began it. A sitting on another device (a lent GPU
    running every row still to do) skips that row, says where it resumes, and leaves its kept tasks as they
    are, rather than starting it over and writing over them; `--rows KEY --redo` starts it over there."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    common = ["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2,TREC", "--data",
              str(write_folder(tmp_path / "senteval")), "--limit", "1000", "--out", str(tmp_path),
              "--rows", "prompteol"]
    real_probe = transfer.probe_task

    def probe_then_stop(task, *args, **kwargs):
        if task.name == "TREC":
            raise KeyboardInterrupt  # the CPU sitting ends in TREC's probe: SST2 is kept
        return real_probe(task, *args, **kwargs)

    monkeypatch.setattr(transfer, "probe_task", probe_then_stop)
    with pytest.raises(KeyboardInterrupt):
        tool.main(common)
    monkeypatch.setattr(transfer, "probe_task", real_probe)
    kept = tmp_path / "tiny-llama-transfer-work" / "prompteol" / "task-SST2.kept.json"
    before = kept.read_bytes()

    real_load = tool.minidecoder.load  # "cuda" here: the model stays on the CPU, the row's settings say cuda
    monkeypatch.setattr(tool.minidecoder, "load",
                        lambda *args, **kwargs: real_load(*args, **{**kwargs, "device": "cpu"}))
    capsys.readouterr()
    assert tool.main(common + ["--device", "cuda"]) == 0
    said = capsys.readouterr().err
    assert "PromptEOL skipped: a sitting on cpu began it (SST2 kept in" in said and "--device cpu" in said
    assert "--rows prompteol --redo" in said
    assert kept.read_bytes() == before
    report = tmp_path / "tiny-llama-transfer.json"
    assert not report.exists() or "prompteol" not in json.loads(report.read_text())["rows"]

    assert tool.main(common + ["--device", "cuda", "--redo"]) == 0  # started over on cuda, as asked
    saved = json.loads(report.read_text())
    assert saved["rows"]["prompteol"]["stamp"]["device"] == "cuda"
    assert sorted(saved["rows"]["prompteol"]["tasks"]) == ["SST2", "TREC"]


def test_a_transfer_row_s_kept_task_resumes_in_another_checkout(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept task is committed and resumed by the next sitting, in whatever folder its clone and converted model
    sit: the kept work names the model's files, not their folder, so the task is not embedded again."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    common = ["--family", "transfer", "--tasks", "SST2,TREC", "--data", str(write_folder(tmp_path / "senteval")),
              "--limit", "1000", "--out", str(tmp_path), "--rows", "prompteol"]
    real_probe = transfer.probe_task

    def probe_then_stop(task, *args, **kwargs):
        if task.name == "TREC":
            raise KeyboardInterrupt  # the sitting ends in TREC's probe: SST2 is kept
        return real_probe(task, *args, **kwargs)

    monkeypatch.setattr(transfer, "probe_task", probe_then_stop)
    with pytest.raises(KeyboardInterrupt):
        tool.main(["--model", str(tiny_llama), *common])
    monkeypatch.setattr(transfer, "probe_task", real_probe)
    elsewhere = shutil.copytree(tiny_llama, tmp_path / "another-checkout" / "tiny-llama")
    probed = []
    monkeypatch.setattr(transfer, "probe_task", lambda task, *a, **k: probed.append(task.name) or real_probe(task, *a, **k))
    assert tool.main(["--model", str(elsewhere), *common]) == 0
    assert probed == ["TREC"]  # SST2 came from the kept task
    assert sorted(json.loads((tmp_path / "tiny-llama-transfer.json").read_text())["rows"]["prompteol"]["tasks"]) \
        == ["SST2", "TREC"]


def test_a_transfer_table_keeps_rows_another_sitting_wrote_and_merges_a_gpu_sitting_s(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Two sittings write one table: a CPU run that began before a lent GPU's rows were merged still writes
    them back with its own (it re-reads the file before writing), and `--merge FILE` adds another sitting's
    rows, their claims judged, keeping this table's own row where both have one."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    data = str(write_folder(tmp_path / "senteval"))

    def run(out: Path, *more: str) -> int:
        return tool.main(["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2,TREC", "--data",
                          data, "--limit", "1000", "--out", str(out), *more])

    gpu, cpu = tmp_path / "gpu", tmp_path / "cpu"
    assert run(gpu, "--rows", "prompteol") == 0  # the GPU sitting's table, unpacked from res.tgz
    gpu_table = json.loads((gpu / "tiny-llama-transfer.json").read_text())
    real_evaluate = tool.evaluate_transfer

    def merged_meanwhile(*args, **kwargs):  # while the CPU row runs, the GPU's table is put in place
        (cpu / "tiny-llama-transfer.json").write_text((gpu / "tiny-llama-transfer.json").read_text())
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(tool, "evaluate_transfer", merged_meanwhile)
    assert run(cpu, "--rows", "prompteol+tp") == 0
    monkeypatch.setattr(tool, "evaluate_transfer", real_evaluate)
    saved = json.loads((cpu / "tiny-llama-transfer.json").read_text())
    assert saved["rows_done"] == ["prompteol", "prompteol+tp"]  # neither sitting's row lost
    assert saved["rows"]["prompteol"] == gpu_table["rows"]["prompteol"]
    assert any(claim["claim"] == "TP improves PromptEOL (STS end, ablation)" for claim in saved["claims"])

    # --merge: the other way round, into a table that has one row of its own and one the other also has
    (gpu / "tiny-llama-transfer-work" / "prompteol+tp").mkdir(parents=True)  # a row the GPU had begun
    own = saved["rows"]["prompteol+tp"]
    gpu_table["rows"]["prompteol"]["marker"] = "the GPU's copy"
    (gpu / "tiny-llama-transfer.json").write_text(json.dumps(gpu_table))
    cpu_only = json.loads((cpu / "tiny-llama-transfer.json").read_text())
    cpu_only["rows"].pop("prompteol")
    other = tmp_path / "other.json"
    other.write_text(json.dumps(cpu_only))  # only prompteol+tp, as a second sitting's file
    assert run(gpu, "--merge", str(other)) == 0  # merges, runs no row
    merged = json.loads((gpu / "tiny-llama-transfer.json").read_text())
    assert merged["rows_done"] == ["prompteol", "prompteol+tp"] and merged["rows"]["prompteol+tp"] == own
    assert merged["rows"]["prompteol"]["marker"] == "the GPU's copy"  # this table's own row is kept
    assert any(claim["claim"] == "TP improves PromptEOL (STS end, ablation)" for claim in merged["claims"])
    assert "PromptEOL + TP" in (gpu / "tiny-llama-transfer.md").read_text()
    assert not (gpu / "tiny-llama-transfer-work" / "prompteol+tp").exists()  # finished elsewhere: kept work gone

    other.write_text(json.dumps({**cpu_only, "settings": {**cpu_only["settings"], "dtype": "bfloat16"}}))
    with pytest.raises(SystemExit, match="other settings") as refused:  # not "remove it": it is another run's
        run(gpu, "--merge", str(other))
    assert "leave it out of --merge" in str(refused.value) and "remove it" not in str(refused.value)
    with pytest.raises(SystemExit):
        run(gpu, "--rows", "prompteol,nonesuch")  # a row no table has: refused, naming it, before any work
    assert "--rows nonesuch: not a row of transfer (its rows: prompteol, prompteol+tp" in capsys.readouterr().err


def test_a_transfer_table_is_written_under_its_lock(tiny_llama: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sittings at once (two CPU rows, or a merge while a row runs) each re-read the table and write it back;
    the table's lock (`output_files.output_lock`) makes that one step, so the later writer sees the earlier
    one's row. The lock is already held when the write begins (taken before the re-read)."""
    import os

    from lock_holder import lock_holder

    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    real_write, checked = tool.write, []

    def write_checking_the_lock(path: Path, *args) -> None:
        assert lock_holder(path) == os.getpid()
        checked.append(path.name)
        real_write(path, *args)

    monkeypatch.setattr(tool, "write", write_checking_the_lock)
    assert tool.main(["--model", str(tiny_llama), "--family", "transfer", "--tasks", "TREC", "--data",
                      str(write_folder(tmp_path / "senteval")), "--limit", "1000", "--rows", "prompteol",
                      "--out", str(tmp_path)]) == 0
    assert checked == ["tiny-llama-transfer.json"]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.lock"))  # nothing left beside it


@needs_data
def test_sts_long_has_the_final_layer_mean_and_the_per_length_control(tiny_llama: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The final-layer mean row reads layer -1 (HTP's vanilla mean), and each row's control per length is the
    Spearman of the mean of the k sub-pairs' cosines, each sub-pair embedded alone: here embedded again with
    minidecoder.embed and scored by scipy. The table says from those numbers whether Figure 1's degradation
    appears, and --render adds the control to a table made before it."""
    import numpy as np
    from scipy.stats import spearmanr

    import minidecoder
    from minidecoder.evaluation.sts_long import load_long_sts

    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    assert tool.main(["--model", str(tiny_llama), "--family", "sts-long", "--data", str(DATA), "--limit", "96",
                      "--rows", "last,mean-final", "--out", str(tmp_path)]) == 0
    path = tmp_path / "tiny-llama-sts-long.json"
    saved = json.loads(path.read_text())
    assert saved["rows"]["mean-final"]["method"]["layer"] == -1 and saved["rows"]["mean-final"]["method"]["method"] == "mean"
    sets = load_long_sts(DATA, 96)[1]
    model = minidecoder.load(tiny_llama)
    alone = sets[0]  # k = 1: every sub-pair on its own, in gold order

    def cosines(first: list[str], second: list[str]) -> np.ndarray:
        a, b = (np.asarray(minidecoder.embed(model, texts, method="last", progress=False), np.float64)
                for texts in (first, second))
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    each = cosines(alone.first, alone.second)
    table = path.with_suffix(".md").read_text()
    control = table[table.index("## Per-length control"):]
    line = next(line for line in control.splitlines() if line.startswith("| Last token |"))
    for pairs in sets:
        want = 100.0 * spearmanr(each[:len(pairs) * pairs.k].reshape(len(pairs), pairs.k).mean(1), pairs.gold)[0]
        assert f" {want:.2f} [" in line, (pairs.k, want, line)
    assert "Figure 1's degradation" in control
    appears = "appears here" in control
    hurts = {label: f"{label}: length hurts the readout" in control for label in ("Last token", "Mean pooling (final layer)")}
    assert appears == (hurts["Last token"] and not hurts["Mean pooling (final layer)"])
    path.with_suffix(".md").write_text(table[:table.index("## Per-length control")])  # a table made before it
    assert tool.main(["--render", str(path), "--data", str(DATA)]) == 0
    assert path.with_suffix(".md").read_text() == table


def test_a_table_that_skipped_blank_lines_keeps_them_skipped_until_every_row_rereads_them(
        tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transfer table written before blank lines were read (no `blank_lines` setting: they were skipped) goes
    on skipping them for a new row, whose CR items must pair with its rows'. `--reread-blank-lines` re-runs CR row
    by row with them read; the table takes the new cells only once every row has them, and they are the cells a
    new table computes reading them from the start."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    cr = {"CR__custrev.pos": "".join(f"good {i} fine\n" for i in range(11)) + "\n" + "".join(f"fine {i}\n" for i in range(10)),
          "CR__custrev.neg": "".join(f"bad {i} poor\n" for i in range(10)) + "\n\n" + "".join(f"poor {i}\n" for i in range(11))}
    data = write_folder(tmp_path / "senteval", **cr)
    common = ["--model", str(tiny_llama), "--family", "transfer", "--tasks", "CR", "--data", str(data)]
    old, new = tmp_path / "old", tmp_path / "new"
    monkeypatch.setattr(tool, "table_blank_lines", lambda path: "skip")  # as the tool wrote tables before
    assert tool.main(common + ["--out", str(old), "--rows", "prompteol"]) == 0
    monkeypatch.undo()
    chosen(monkeypatch, tool)
    path = old / "tiny-llama-transfer.json"
    report = json.loads(path.read_text())
    del report["settings"]["blank_lines"]  # a file from before the setting
    path.write_text(json.dumps(report))
    assert report["rows"]["prompteol"]["tasks"]["CR"]["test_items"] == 42
    assert report["rows"]["prompteol"]["skipped_blank"] == {"CR/custrev.pos": [12], "CR/custrev.neg": [11, 12]}

    assert tool.main(common + ["--out", str(old), "--rows", "prompteol+tp"]) == 0  # a new row: skipped alike
    saved = json.loads(path.read_text())
    assert saved["settings"]["blank_lines"] == "skip"
    assert saved["rows"]["prompteol+tp"]["tasks"]["CR"]["test_items"] == 42
    assert "blank lines skipped (minidecoder's earlier choice" in path.with_suffix(".md").read_text()

    assert tool.main(common + ["--out", str(old), "--rows", "prompteol", "--reread-blank-lines"]) == 0  # one row
    saved = json.loads(path.read_text())
    assert saved["settings"]["blank_lines"] == "skip" and saved["rows"]["prompteol"]["tasks"]["CR"]["test_items"] == 42
    assert saved["rows"]["prompteol"]["blank_lines_reread"]["tasks"]["CR"]["test_items"] == 45
    assert "blank_lines_reread" not in saved["rows"]["prompteol+tp"]

    assert tool.main(common + ["--out", str(old), "--reread-blank-lines"]) == 0  # the rest: the table swaps
    swapped = json.loads(path.read_text())
    assert swapped["settings"]["blank_lines"] == "read" and not (old / "tiny-llama-transfer-work").exists()
    assert tool.main(common + ["--out", str(new), "--rows", "prompteol,prompteol+tp"]) == 0  # read from the start
    fresh = json.loads((new / "tiny-llama-transfer.json").read_text())
    for key in ("prompteol", "prompteol+tp"):
        row, want = swapped["rows"][key], fresh["rows"][key]
        assert row["tasks"]["CR"] == want["tasks"]["CR"] and row["tasks"]["CR"]["test_items"] == 45
        assert row["blank_lines_read"] == want["blank_lines_read"] and row["skipped_blank"] == {}
        assert row["texts"] == want["texts"] and "command" in row["blank_lines_reread"]
    assert [c["scores"] for c in swapped["claims"]] == [c["scores"] for c in fresh["claims"]]
    assert "blank lines read as the empty text" in path.with_suffix(".md").read_text()


def test_a_committed_row_s_method_rebuilds_as_itself_and_a_retired_option_only_where_it_was_inert() -> None:
    """--reread-blank-lines re-runs a committed row's CR and MPQA with the method the row records. A CP row made
    when CP still carried TP's options (tp=false, so start, end and the <PST> row went unread) rebuilds as
    today's CP; one made with tp=true (today's method cp+tp) or with a changed option is refused, not guessed."""
    tool = load("reproduce_tasks")
    cp = {"method": "cp", "prompt": "prompteol", "aux_prompt": "irrelevant", "layer": 28, "steer_layer": 3,
          "alpha": 0.5, "mode": "ns", "site": "head", "senteval_text": True}
    old = {**cp, "tp": False, "start": 1, "end": 7, "pst_init": "gaussian", "seed": 0, "tp_aux": True, "steer": True}
    assert tool.method_of_row({"method": old}).describe() == cp
    for changed in ({**old, "tp": True}, {**old, "steer": False}):
        with pytest.raises(SystemExit, match="retired since"):
            tool.method_of_row({"method": changed})
    with pytest.raises(SystemExit, match="does not rebuild as itself"):
        tool.method_of_row({"method": {**cp, "alpha_typo": 1}})
    prompteol = minidecoder.methods.build_method("prompteol").describe()
    before = {name: value for name, value in prompteol.items() if name != "pieces"}  # a row from before `pieces`
    assert tool.method_of_row({"method": before}).describe() == prompteol
    tp = minidecoder.methods.build_method("tp", end=3).describe()  # pst_init_detail is written, not an option
    assert tool.method_of_row({"method": tp}).describe() == tp


def test_a_transfer_table_keeps_each_item_s_label_as_a_digit() -> None:
    """The committed transfer tables hold every row's per-item predictions and gold labels (the paired intervals
    read them): as digit strings, a byte an item, read back to the same labels and the same intervals as the
    lists earlier files hold; a label past 9 keeps its list."""
    tool = load("reproduce_tasks")
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 6, 300).tolist()

    def row(flip: float) -> dict:
        predictions = [label if rng.random() > flip else (label + 1) % 6 for label in gold]
        accuracy = 100 * float(np.mean(np.asarray(predictions) == gold))
        return {"tasks": {task: {"score": accuracy, "predictions": predictions, "gold": gold}
                          for task in tool.TRANSFER_TASKS}}

    rows = {"a": row(0.1), "b": row(0.3)}
    rows["a"]["blank_lines_reread"] = {"tasks": {"CR": dict(rows["a"]["tasks"]["CR"])}}
    packed = tool.packed_items({"rows": rows})["rows"]
    assert packed["a"]["tasks"]["TREC"]["gold"] == "".join(map(str, gold))
    assert isinstance(packed["a"]["blank_lines_reread"]["tasks"]["CR"]["predictions"], str)
    assert rows["a"]["tasks"]["TREC"]["gold"] == gold  # the report in memory is left as it was
    for task in ("TREC", "MR"):
        assert np.array_equal(tool.item_labels(packed["b"]["tasks"][task]["predictions"]),
                              rows["b"]["tasks"][task]["predictions"])
    listed, digits = tool.transfer_differences(rows)("a", "b"), tool.transfer_differences(packed)("a", "b")
    assert listed[0] == digits[0] and all(np.array_equal(listed[1][k], digits[1][k]) for k in listed[1])
    wide = {"rows": {"a": {"tasks": {"X": {"predictions": [10, 1], "gold": [10, 2]}}}}}
    assert tool.packed_items(wide) == wide


def test_a_merge_or_render_of_a_file_not_there_or_not_whole_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """`--merge FILE` with a typo merged nothing and said nothing (exit 0); a table file cut short was a JSON
    traceback. Each is refused naming the file, before a model loads."""
    tool = load("reproduce_tasks")
    chosen(monkeypatch, tool)
    monkeypatch.setattr(tool.minidecoder, "load", lambda *a, **k: pytest.fail("a model loaded for a refused run"))
    command = ["--family", "transfer", "--out", str(tmp_path / "out")]
    for flag in ("--merge", "--render"):
        with pytest.raises(SystemExit):
            tool.main([*command, flag, str(tmp_path / "typo.json")])
        assert f"{flag} {tmp_path / 'typo.json'} does not exist; name a table file" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            tool.main([*command, flag, str(tmp_path)])
        assert f"{flag} {tmp_path} is not a file" in capsys.readouterr().err
    cut = tmp_path / "cut.json"
    cut.write_text('{"settings": {"benchmark": "transfer", "mod')
    for flag in ("--merge", "--render"):
        with pytest.raises(SystemExit, match=f"{cut} is not readable JSON .*git checkout"):
            tool.main([*command, flag, str(cut)])
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "tiny-llama-transfer.json").write_text("")  # this run's own table, emptied
    with pytest.raises(SystemExit, match="tiny-llama-transfer.json is not readable JSON"):
        tool.main([*command, "--model", "tiny-llama", "--rows", "prompteol"])
    sts_table = tmp_path / "tiny-llama.json"  # tools/reproduce.py's table: not this tool's
    sts_table.write_text(json.dumps({"settings": {"model": "tiny-llama"}, "rows": [{"key": "mean"}]}))
    with pytest.raises(SystemExit, match="is not a transfer or sts-long table file"):
        tool.main(["--render", str(sts_table)])


def test_an_input_error_of_reproduce_tasks_is_one_message_not_a_traceback(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    table = tmp_path / "tiny-llama-sts-long.json"
    table.write_text(json.dumps({"settings": {"benchmark": "sts-long", "model": "tiny-llama", "limit": None,
                                              "lengths": [1, 16]}, "rows": {}, "rows_planned": []}))
    result = subprocess.run([sys.executable, str(REPO / "tools" / "reproduce_tasks.py"), "--render", str(table),
                             "--data", str(tmp_path / "nonesuch")], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("reproduce_tasks: error: STS data folder") and "Traceback" not in result.stderr


def test_a_kept_end_choice_cut_short_is_named(tmp_path: Path) -> None:
    """The SST2 dev accuracies kept while TP's transfer end is chosen: a file cut short (a full disk, a kill while
    copying it in) failed as a JSON traceback, and a JSON list as an AttributeError. Each is named with its way out."""
    tool = load("reproduce_tasks")
    kept = tmp_path / "end-choice.json"
    assert tool.read_end_choice(kept, "this row")["sst2_dev_accuracy"] == {}  # none yet: a fresh record
    kept.write_text('{"identity": "this row", "sst2_dev_acc')
    with pytest.raises(SystemExit, match=f"{kept} .*is not readable JSON .*move it away"):
        tool.read_end_choice(kept, "this row")
    kept.write_text("[]")
    with pytest.raises(SystemExit, match="holds the SST2 dev accuracies of another"):
        tool.read_end_choice(kept, "this row")
