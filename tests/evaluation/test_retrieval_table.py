"""tools/reproduce_retrieval.py on a tiny model and toy data: rows written once and kept on a rerun, the
table's cells equal the rows' reports, and each comparison's paired interval is the bootstrap of the
per-item differences (retrieval) or of the Spearman differences on the same resampled pairs (C-MTEB)."""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path

import numpy as np
import pytest

from minidecoder.evaluation.bootstrap import mean_interval
from test_cmteb import write_cmteb
from family_helpers import shallow_rows
from test_retrieval import write_beir

TOOL = Path(__file__).resolve().parents[2] / "tools" / "reproduce_retrieval.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("reproduce_retrieval", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_retrieval_rows_are_kept_and_the_comparison_is_paired(tiny_llama: Path, tmp_path: Path, capsys) -> None:
    tool, data, out = load_tool(), write_beir(tmp_path / "data"), tmp_path / "table"
    shallow_rows(tool)
    argv = ["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data", str(data), "--out", str(out),
            "--rows", "mean,htp,mean+tp", "--results", str(tmp_path / "results")]
    assert tool.main(argv) == 0
    mean, htp, tp_mean = (json.loads((out / f"{key}.json").read_text()) for key in ("mean", "htp", "mean+tp"))
    table = (out / "table.md").read_text()
    assert f"| Vanilla Mean | {mean['results']['sets']['toy']['metrics']['nDCG@10']['score']:.2f} [" in table
    assert f"| TP w. Mean | {tp_mean['results']['sets']['toy']['metrics']['nDCG@10']['score']:.2f} [" in table
    assert tp_mean["stamp"]["method"]["pooling"] == "mean"
    per_query = {row: 100 * np.array([q["ndcg_cut_10"] for _, q in sorted(r["results"]["sets"]["toy"]["per_query"].items())])
                 for row, r in (("htp", htp), ("mean", mean))}
    lo, hi = mean_interval(per_query["htp"] - per_query["mean"])
    assert f"[{lo:+.2f}, {hi:+.2f}]" in table and "HTP vs Vanilla Mean, toy" in table
    assert "HTP vs TP w. Mean, toy" in table
    stamp_date = mean["stamp"]["date"]
    capsys.readouterr()
    assert tool.main(argv) == 0  # a rerun keeps every written row
    assert "mean: kept" in capsys.readouterr().out
    assert json.loads((out / "mean.json").read_text())["stamp"]["date"] == stamp_date

    # a row kept from a GPU run joins the table with its device named; no time ratio across devices
    mean["stamp"]["device"] = "cuda"
    (out / "mean.json").write_text(json.dumps(mean))
    assert tool.main(argv) == 0
    table = (out / "table.md").read_text()
    vanilla, htp_line = (next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
                         for label in ("Vanilla Mean", "HTP"))
    assert "| cuda |" in vanilla and "| cpu |" in htp_line and htp_line.endswith("| n/a |")
    claims = json.loads((tmp_path / "results" / f"{tiny_llama.name}-retrieval.json").read_text())
    assert claims["settings"]["device"] == "cpu and cuda"

    mean["stamp"]["dtype"] = "bfloat16"  # but a kept row of other settings is refused, not mixed in
    (out / "mean.json").write_text(json.dumps(mean))
    with pytest.raises(SystemExit, match="dtype 'bfloat16'"):
        tool.main(argv)


def test_the_table_and_claims_are_written_under_the_claims_files_lock(tiny_llama: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sittings (two rows at once) each read every kept row and write the table; the claims file's lock
    (output_files.output_lock, waited for) makes that one step, so the later writer's table has both rows.
    The lock is held from before the rows are read."""
    from lock_holder import lock_holder

    tool, data, results = load_tool(), write_beir(tmp_path / "data"), tmp_path / "results"
    claims = results / f"{tiny_llama.name}-retrieval.json"
    real_load, real_claims, checked = tool.load_rows, tool.write_claims, []

    def load_checking_the_lock(*args):
        assert lock_holder(claims) == os.getpid()
        checked.append("rows read")
        return real_load(*args)

    def claims_checking_the_lock(path: Path, *args) -> None:
        assert path == claims and lock_holder(claims) == os.getpid()
        checked.append("claims written")
        real_claims(path, *args)

    monkeypatch.setattr(tool, "load_rows", load_checking_the_lock)
    monkeypatch.setattr(tool, "write_claims", claims_checking_the_lock)
    assert tool.main(["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data", str(data),
                      "--out", str(tmp_path / "table"), "--rows", "mean", "--results", str(results)]) == 0
    assert checked[-2:] == ["rows read", "claims written"]
    assert json.loads(claims.read_text())["rows_done"] == ["mean"]
    assert sorted(path.name for path in results.iterdir()) == [claims.name, claims.with_suffix(".md").name]


def test_cmteb_rows_and_paired_spearman(tiny_llama: Path, tmp_path: Path) -> None:
    from minidecoder.evaluation.cmteb import load_pair_set, pair_bootstrap

    tool, data, out = load_tool(), write_cmteb(tmp_path / "data"), tmp_path / "table"
    assert tool.main(["--family", "cmteb", "--model", str(tiny_llama), "--tasks", "ATEC,Ocnli", "--data", str(data),
                      "--out", str(out), "--rows", "mean,reba-2", "--results", str(tmp_path / "results")]) == 0
    mean, reba = (json.loads((out / f"{key}.json").read_text())["results"]["sets"]["ATEC"] for key in ("mean", "reba-2"))
    boot = pair_bootstrap(load_pair_set("ATEC", data))
    reps = boot.replicates({"a": {"ATEC": np.asarray(reba["cosines"])}, "b": {"ATEC": np.asarray(mean["cosines"])}})
    lo, hi = boot.interval(reps["a"] - reps["b"])["ATEC"]
    table = (out / "table.md").read_text()
    assert f"ReBA (mean) vs Classical (mean), ATEC: {reba['score'] - mean['score']:+.2f} [{lo:+.2f}, {hi:+.2f}]" in table
    assert "Ocnli" in table and "ReBA (mean) vs Classical (mean), Ocnli" not in table  # no paired Spearman for Ocnli
    ocnli = json.loads((out / "reba-2.json").read_text())["results"]["sets"]["Ocnli"]
    assert f"{ocnli['score']:.2f} [{ocnli['ci95'][0]:.2f}, {ocnli['ci95'][1]:.2f}]" in table
    older = json.loads((out / "mean.json").read_text())  # a row made before Ocnli kept its cosines
    del older["results"]["sets"]["Ocnli"]["ci95"], older["results"]["sets"]["Ocnli"]["cosines"]
    (out / "mean.json").write_text(json.dumps(older))
    assert tool.main(["--family", "cmteb", "--model", str(tiny_llama), "--tasks", "ATEC,Ocnli", "--data", str(data),
                      "--out", str(out), "--rows", "mean,reba-2", "--results", str(tmp_path / "results")]) == 0
    table = (out / "table.md").read_text()
    assert table.count("[no interval]") == 2  # mean's Ocnli cell, and the note under the table


def test_cmteb_table3_rows_are_last_pooled_and_judged_by_paired_pearson(tiny_llama: Path, tmp_path: Path) -> None:
    """ReBA Table 3's rows (last pooling) are compared by cosine Pearson, as Table 3 prints it, on the resamples
    the Spearman's interval draws (each resample's Pearson by scipy here); the rows are the paper's setup, so
    the claim gets a verdict. The earlier mean over the last of three copies stays as a flagged ablation."""
    from scipy.stats import pearsonr

    from reproduce.claims import NOT_PAPER
    from minidecoder.evaluation.cmteb import pair_bootstrap
    from minidecoder.evaluation.cmteb import load_pair_set

    tool, data, out, results = load_tool(), write_cmteb(tmp_path / "data"), tmp_path / "table", tmp_path / "results"
    assert tool.main(["--family", "cmteb", "--model", str(tiny_llama), "--tasks", "ATEC,Ocnli", "--data", str(data),
                      "--out", str(out), "--rows", "last,reba-2-last,reba-3,repeat-3", "--results", str(results)]) == 0
    reports = {key: json.loads((out / f"{key}.json").read_text()) for key in ("last", "reba-2-last")}
    assert "--opt pooling=last" in reports["reba-2-last"]["stamp"]["command"]
    last, reba = (reports[key]["results"]["sets"]["ATEC"] for key in ("last", "reba-2-last"))
    pairs = load_pair_set("ATEC", data)
    boot, gold = pair_bootstrap(pairs), np.asarray(pairs.labels, np.float64)

    def pearson(cosines: list[float], draws: np.ndarray) -> float:
        x, y = np.asarray(cosines, np.float64)[draws], gold[draws]
        return 100.0 * pearsonr(x, y)[0] if np.ptp(y) and np.ptp(x) else np.nan

    diffs = np.array([pearson(reba["cosines"], draws) - pearson(last["cosines"], draws) for draws in boot.indices(0)])
    lo, hi = np.percentile(diffs[np.isfinite(diffs)], [2.5, 97.5])
    table = (out / "table.md").read_text()
    line = (f"ReBA (last) vs Classical (last), ATEC (Pearson): {reba['pearson'] - last['pearson']:+.2f} "
            f"[{lo:+.2f}, {hi:+.2f}]")
    assert line in table
    assert f"| ReBA (last) | {reba['pearson']:.2f} | {reba['pearson']:.2f} |" in table  # the Pearson table, Avg.
    claims = {(c["method"], c["base"]): c for c in json.loads((results / f"{tiny_llama.name}-cmteb.json").read_text())["claims"]}
    assert claims["reba-2-last", "last"]["verdict"] != NOT_PAPER
    assert claims["reba-3", "repeat-3"]["verdict"] == NOT_PAPER  # the ablation row decides nothing


def test_cmteb_table_reads_the_labels_here_not_where_the_rows_ran(tiny_llama: Path, tmp_path: Path) -> None:
    """Rows made on a lent GPU stamp its data folder (/tmp/data/...), absent here: the table reads the pairs
    from --data, and refuses a file whose checksum differs from the one the rows were scored on."""
    import shutil

    tool, data, out = load_tool(), write_cmteb(tmp_path / "there"), tmp_path / "table"
    argv = ["--family", "cmteb", "--model", str(tiny_llama), "--tasks", "ATEC", "--out", str(out),
            "--rows", "mean,reba-2", "--results", str(tmp_path / "results")]
    assert tool.main([*argv, "--data", str(data)]) == 0
    made_there = (out / "table.md").read_text()
    here = tmp_path / "here"
    shutil.move(str(data), str(here))  # the stamp's folder is gone, as on another machine
    (out / "table.md").unlink()
    assert tool.main([*argv, "--data", str(here)]) == 0
    assert (out / "table.md").read_text() == made_there
    atec = here / "ATEC" / "ATEC.test.data"
    atec.write_text(atec.read_text().replace("\t1\n", "\t0\n", 1))  # one label changed
    with pytest.raises(SystemExit, match="not the file the rows were scored on"):
        tool.main([*argv, "--data", str(here)])


def test_a_row_keeps_the_callers_pythonpath(monkeypatch, tmp_path: Path) -> None:
    """A row runs in a child process: it must see this checkout first and still every path the caller added
    (a `pip install --target` folder), else eval retrieval fails on `import pytrec_eval` there."""
    tool = load_tool()
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}{os.pathsep}{tmp_path / 'more'}")
    paths = tool.child_environment()["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(tool.REPO), str(tmp_path / "site"), str(tmp_path / "more")]
    monkeypatch.delenv("PYTHONPATH")
    assert tool.child_environment()["PYTHONPATH"] == str(tool.REPO)


def test_sigterm_to_the_tool_stops_the_row_it_runs(tmp_path: Path) -> None:
    """A row's process must not outlive the tool (it would hold the row's outputs and a CPU): SIGTERM to
    the tool terminates the row's process and the tool exits 143."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "run.py"
    script.write_text(f"""
import importlib.util, subprocess, sys
spec = importlib.util.spec_from_file_location("tool", {str(TOOL)!r})
tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)
real = subprocess.Popen
def sleeper(argv, **kwargs):  # the row's process, stood in for by one that waits
    child = real([sys.executable, "-c", "import time; time.sleep(120)"])
    open({str(tmp_path / 'pid')!r}, "w").write(str(child.pid))
    return child
tool.subprocess.Popen = sleeper
sys.exit(tool.main(["--family", "retrieval", "--model", "m", "--rows", "mean", "--out", {str(tmp_path / 'out')!r},
                    "--results", {str(tmp_path / 'results')!r}]))
""")
    run = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    assert not (tmp_path / "out" / "mean.memory.json").exists()


def test_faithful_rows_take_htp_codes_templates_and_table_9s_layer(tiny_llama: Path, tmp_path: Path) -> None:
    """HTP Table 1's rows as HTP's code runs them: per-side templates, the read </s> as {eos}, and the exit layer
    (and HTP's end) by Table 9's rule for the model's family; a kept report of another row never stands in."""
    import argparse

    tool = load_tool()
    rows = {row[0]: tool.Row(*row) for row in tool.ROWS["retrieval"]}
    gemma = tmp_path / "gemma"
    gemma.mkdir()
    (gemma / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))

    def argv(key: str, model: Path) -> list[str]:
        args = argparse.Namespace(model=str(model), dtype="float32", device="cpu", limit=None, corpus_limit=None,
                                  data=None, tasks=None)
        return tool.command("retrieval", rows[key], args, tmp_path / key)

    assert argv("htp", tiny_llama)[-8:] == ["--opt", "start=1", "--opt", "end=7", "--opt", "layer=-3",
                                            "--query-opt", "template=Text: {text}"]  # Llama: Table 9's Mistral
    assert ["--opt", "end=6", "--opt", "layer=-2"] == argv("htp", gemma)[-6:-2]  # Gemma: Table 9's Gemma-2
    tp = argv("prompteol+tp", gemma)
    assert 'prompt=The sentence <PST> "{text}" means in one word: {eos}' in tp and "layer=-2" in tp
    assert "--query-opt" in argv("echo", gemma) and "template={text}{text}" in argv("echo", gemma)
    assert ["--instruction-placement", "pooled"] == [a for a in argv("mean-ours", gemma) if "placement" in a or a == "pooled"]
    (gemma / "config.json").write_text(json.dumps({"model_type": "phi3"}))
    with pytest.raises(SystemExit, match="Table 9 gives no exit layer for model_type 'phi3'"):
        argv("htp", gemma)
    (gemma / "config.json").write_text('{"model_type": "gem')  # cut short: named, not a JSON traceback
    with pytest.raises(SystemExit, match="config.json is not readable JSON .*minidecoder fetch"):
        argv("htp", gemma)
    (gemma / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))

    stamp = {"command": "minidecoder eval retrieval --model m --method mean --instruction auto"}  # the earlier row
    tool.refuse_another_row("mean-ours", stamp, argv("mean-ours", tiny_llama))  # its own key: kept
    with pytest.raises(SystemExit, match="move that report away"):
        tool.refuse_another_row("mean", stamp, argv("mean", tiny_llama))  # never the faithful row
    faithful = {"command": shlex.join(["minidecoder", *argv("mean", tiny_llama)]), "instruction": "auto",
                "instruction_placement": "context"}
    tool.refuse_another_row("mean", faithful, argv("mean", tiny_llama))
    pooled = {**faithful, "instruction_placement": "pooled"}  # the same options, the instruction pooled
    with pytest.raises(SystemExit, match="instruction-placement"):
        tool.refuse_another_row("mean", pooled, argv("mean", tiny_llama))
    tp = {"command": shlex.join(["minidecoder", *argv("prompteol+tp", tiny_llama)]), "instruction": "auto"}
    tool.refuse_another_row("prompteol+tp", tp, argv("prompteol+tp", tiny_llama))  # it reads no instruction


def test_a_cmteb_report_from_before_the_placement_is_kept(tiny_llama: Path, tmp_path: Path) -> None:
    """C-MTEB's eval command takes no instruction by default, so a report stamped before
    --instruction-placement existed is the same row: the placement is never compared where no instruction is
    read. (The tool once read every family's default as retrieval's "auto" and refused all such kept rows.)"""
    import argparse

    tool = load_tool()
    rows = {row[0]: tool.Row(*row) for row in tool.ROWS["cmteb"]}
    args = argparse.Namespace(model=str(tiny_llama), dtype="float32", device="cpu", limit=None, corpus_limit=None,
                              data=None, tasks=None)
    argv = tool.command("cmteb", rows["last"], args, tmp_path / "last")
    assert not tool.reads_instruction(argv)
    before_placement = {"command": shlex.join(["minidecoder", *argv, "--instruction", "none"]), "instruction": "none"}
    tool.refuse_another_row("last", before_placement, argv)
    retrieval = tool.command("retrieval", tool.Row(*next(r for r in tool.ROWS["retrieval"] if r[0] == "mean")),
                             args, tmp_path / "mean")
    assert tool.reads_instruction(retrieval)  # retrieval's default, "auto", gives mean the set's instruction


def test_a_row_whose_report_is_gone_is_kept_from_the_claims_files_digest(tiny_llama: Path, tmp_path: Path,
                                                                        capsys) -> None:
    """The per-row reports are not committed; the claims file keeps a digest of each retrieval row (what the
    table reads), so a fresh clone adds rows to a table without recomputing the ones before, and the table it
    writes is the same."""
    tool, data, out = load_tool(), write_beir(tmp_path / "data"), tmp_path / "table"
    shallow_rows(tool)
    argv = ["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data", str(data), "--out", str(out),
            "--rows", "mean,htp", "--results", str(tmp_path / "results")]
    assert tool.main(argv) == 0
    table = (out / "table.md").read_text()
    claims = json.loads((tmp_path / "results" / f"{tiny_llama.name}-retrieval.json").read_text())
    assert set(claims["rows"]) == {"mean", "htp"}
    for report in out.glob("*.json"):
        report.unlink()  # a fresh clone: no per-row report
    capsys.readouterr()
    assert tool.main(argv) == 0
    assert "htp: kept (its digest in the claims file)" in capsys.readouterr().out
    assert not (out / "htp.json").exists()  # nothing recomputed
    assert (out / "table.md").read_text() == table


def test_a_time_ratio_is_taken_within_one_sitting_only() -> None:
    """Time / Vanilla Mean compares rows timed on the same device the same day: "cuda" on another day was
    another machine (or one shared with other jobs), and a CPU's time is never a GPU's."""
    tool = load_tool()

    def row(device: str, date: str) -> dict:
        return {"stamp": {"device": device, "date": date}}

    base = row("cuda", "2026-11-28T05:56:31+00:00")
    assert tool.same_sitting(base, row("cuda", "2026-11-28T06:01:00+00:00"))
    assert not tool.same_sitting(base, row("cuda", "2026-11-27T17:40:00+00:00"))
    assert not tool.same_sitting(base, row("cpu", "2026-11-28T06:01:00+00:00"))
    assert not tool.same_sitting(base, {"stamp": {"device": "cuda"}})  # undated: no ratio

    def timed(date: str, seconds: float | None) -> dict:
        return {"stamp": {"device": "cuda", "date": date}, "results": {"embedding": {"seconds": seconds}}}

    faithful, ablation = timed("2026-11-28T05:56", 50.0), timed("2026-11-26T16:52", 32.0)
    assert tool.time_ratio(timed("2026-11-28T06:01", 100.0), [faithful, ablation]) == "2.00x"
    assert tool.time_ratio(timed("2026-11-26T17:30", 96.0), [faithful, ablation]) == "3.00x"  # its own sitting's
    assert tool.time_ratio(timed("2026-11-27T09:00", 96.0), [faithful, ablation]) == "n/a"
    assert tool.time_ratio(timed("2026-11-28T06:01", None), [faithful]) == "n/a"  # resumed: no time


def test_a_row_the_eval_command_refuses_is_not_called_resumable(tiny_llama: Path, tmp_path: Path, capsys) -> None:
    """The row's eval command refusing its input (status 2: here HTP's end 7 past the tiny model's 4 blocks) was
    reported as "stopped; run the same command again to resume it", which only refuses it again. A kept report
    or claims file cut short was a JSON traceback; an --out that is a file, a FileExistsError."""
    tool, data, out = load_tool(), write_beir(tmp_path / "data"), tmp_path / "table"
    argv = ["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data", str(data),
            "--results", str(tmp_path / "results")]
    with pytest.raises(SystemExit, match=r"htp: the eval command refused its input \(status 2.*fix what it names"):
        tool.main([*argv, "--out", str(out), "--rows", "htp"])
    out.mkdir(exist_ok=True)
    (out / "mean.json").write_text('{"stamp": {"model"')  # a report cut short
    with pytest.raises(SystemExit, match=f"{out / 'mean.json'} \\(row mean's report\\) is not readable JSON"):
        tool.main([*argv, "--out", str(out), "--rows", "mean"])
    (out / "mean.json").unlink()
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / f"{tiny_llama.name}-retrieval.json").write_text("")
    with pytest.raises(SystemExit, match="the claims file\\) is not readable JSON"):
        tool.main([*argv, "--out", str(out), "--rows", "mean"])
    with pytest.raises(SystemExit):
        tool.main([*argv, "--out", str(tmp_path / "data" / "toy" / "queries.jsonl"), "--rows", "mean"])
    assert "queries.jsonl is a file, not a folder" in capsys.readouterr().err


def test_rows_htps_code_opens_with_s_put_the_bos_first_where_the_tokenizer_adds_none(tiny_llama: Path,
                                                                                      tmp_path: Path) -> None:
    """HTP's code writes a literal <s> before every baseline template but tp-mean-pool's. On a model whose
    tokenizer adds no BOS those rows open with `{bos}`; a row kept from a run without it is the same row (no other
    setting differs) and joins the table, but its comparisons with HTP get no verdict until `--redo` recomputes
    it; on a tokenizer that adds the BOS the commands are as they were."""
    import shutil

    from tiny_models import save_tiny_tokenizer

    tool, data, out = load_tool(), write_beir(tmp_path / "data"), tmp_path / "table"
    shallow_rows(tool)
    no_bos = shutil.copytree(tiny_llama, tmp_path / "no-bos")
    save_tiny_tokenizer(no_bos, add_bos=False)
    assert tool.tokenizer_adds_bos(str(tiny_llama)) is True and tool.tokenizer_adds_bos(str(no_bos)) is False
    rows = {row[0]: tool.Row(*row) for row in tool.ROWS["retrieval"]}

    def argv(key: str, model: Path) -> list[str]:
        args = tool.argparse.Namespace(model=str(model), dtype="float32", device="cpu", limit=None, corpus_limit=None,
                                       data=None, tasks=None)
        return tool.command("retrieval", rows[key], args, tmp_path / key)

    assert ["--opt", "template={bos}{text}", "--query-opt", "template={bos}Text:{text}"] == argv("mean", no_bos)[-4:]
    assert 'prompt={bos}The sentence <PST> "{text}" means in one word: {eos}' in argv("prompteol+tp", no_bos)
    assert not any("{bos}" in part for key in ("mean+tp", "htp") for part in argv(key, no_bos))
    assert not any("{bos}" in part for key in rows for part in argv(key, tiny_llama))

    results = tmp_path / "results"
    command = ["--family", "retrieval", "--model", str(no_bos), "--tasks", "toy", "--data", str(data), "--out",
               str(out), "--rows", "mean,htp", "--results", str(results)]
    assert tool.main(command) == 0
    claims = json.loads((results / "no-bos-retrieval.json").read_text())
    [verdict] = [c["verdict"] for c in claims["claims"]]
    assert claims["settings"]["rows_without_bos"] == [] and verdict != "not the paper's setup"
    report = json.loads((out / "mean.json").read_text())  # as a row run before {bos} existed
    ran = shlex.split(report["stamp"]["command"])
    cut = ran.index("template={bos}{text}") - 1
    report["stamp"]["command"] = shlex.join([part.replace("{bos}", "") for part in ran[:cut] + ran[cut + 2:]])
    (out / "mean.json").write_text(json.dumps(report))
    assert tool.main(command) == 0
    claims = json.loads((results / "no-bos-retrieval.json").read_text())
    assert claims["settings"]["rows_without_bos"] == ["mean"]
    assert claims["claims"][0]["verdict"] == "not the paper's setup" and "ran without the BOS" in claims["claims"][0]["not_paper"]
    assert "ran without the BOS HTP's code writes first" in (out / "table.md").read_text()
    assert tool.main([*command, "--redo", "mean"]) == 0  # recomputed with the BOS, the earlier report replaced
    assert json.loads((results / "no-bos-retrieval.json").read_text())["settings"]["rows_without_bos"] == []


def test_rows_htps_code_tokenizes_by_pieces_run_so_and_a_row_run_as_one_string_gets_no_verdict(
        tiny_llama: Path, tmp_path: Path) -> None:
    """HTP's code tokenizes each template piece on its own (provenance.HTP_CODE_PIECES_ROWS): those rows run with
    `pieces=true`, Vanilla Mean and HTP's own options without it; a row kept from a run that tokenized its
    template as one string is the same row and joins the table, with no verdict until `--redo` recomputes it."""
    tool, data, out = load_tool(), write_beir(tmp_path / "data"), tmp_path / "table"
    shallow_rows(tool)
    rows = {row[0]: tool.Row(*row) for row in tool.ROWS["retrieval"]}
    args = tool.argparse.Namespace(model=str(tiny_llama), dtype="float32", device="cpu", limit=None,
                                   corpus_limit=None, data=None, tasks=None)
    pieced = {key for key in rows if "pieces=true" in tool.command("retrieval", rows[key], args, tmp_path / key)}
    assert pieced == {"last", "echo", "prompteol+tp", "mean+tp"}

    results = tmp_path / "results"
    command = ["--family", "retrieval", "--model", str(tiny_llama), "--tasks", "toy", "--data", str(data), "--out",
               str(out), "--rows", "mean+tp,htp", "--results", str(results)]
    assert tool.main(command) == 0
    claims = json.loads((results / "tiny-llama-retrieval.json").read_text())
    assert claims["settings"]["rows_as_one_string"] == [] and claims["claims"][0]["verdict"] != "not the paper's setup"
    report = json.loads((out / "mean+tp.json").read_text())  # as a row run before pieces existed
    ran = shlex.split(report["stamp"]["command"])
    cut = ran.index("pieces=true") - 1
    report["stamp"]["command"] = shlex.join(ran[:cut] + ran[cut + 2:])
    (out / "mean+tp.json").write_text(json.dumps(report))
    assert tool.main(command) == 0
    claims = json.loads((results / "tiny-llama-retrieval.json").read_text())
    assert claims["settings"]["rows_as_one_string"] == ["mean+tp"]
    assert claims["claims"][0]["verdict"] == "not the paper's setup"
    assert "tokenized as one string" in claims["claims"][0]["not_paper"]
    assert "its template tokenized as one string, where HTP's code" in (out / "table.md").read_text()
    assert tool.main([*command, "--redo", "mean+tp"]) == 0  # recomputed by pieces, the earlier report replaced
    assert json.loads((results / "tiny-llama-retrieval.json").read_text())["settings"]["rows_as_one_string"] == []
