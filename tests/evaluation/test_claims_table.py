"""tools/claims_table.py: the claims of every full results table side by side, copied from the tables'
own records (no statistic computed, no number typed), and results/claims.md kept in step with them."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from repo_paths import REPO
from reproduce.claims import ALL_CLAIMS, BENCHMARK_CLAIMS, CLAIMS, HOLDS, NOT_PAPER, UNDECIDED, judge

SPEC = importlib.util.spec_from_file_location("claims_table", REPO / "tools" / "claims_table.py")
claims_table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(claims_table)
SPEC = importlib.util.spec_from_file_location("family_claims", REPO / "tools" / "family_claims.py")
family_claims = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(family_claims)


def record(claim, lo: float, hi: float) -> dict:
    """A claim's record as reproduce.py writes it, from the real judge(), with a chosen Avg. interval."""
    return judge(claim, {"avg": (lo + hi) / 2}, {"avg": (lo, hi)})


def write_table(folder: Path, model: str, intervals: dict, limit: int | None = None) -> None:
    """A reproduce.py-shaped JSON holding the claims given as {claim text: (lo, hi)}."""
    claims = [record(c, *intervals[c.text]) for c in CLAIMS if c.text in intervals]
    bootstrap = {"resamples": 1000, "seed": 0, "level": 0.95, "interval": "percentile"}
    data = {"settings": {"model": model, "limit": limit, "dev_limit": None, "device": "cpu", "dtype": "float32",
                         "bootstrap": bootstrap},
            "rows_planned": ["a", "b"], "rows_done": ["a", "b"], "claims": claims}
    (folder / f"{model}.json").write_text(json.dumps(data))


def test_cells_counts_and_groups_follow_the_records(tmp_path: Path) -> None:
    tp, echo, htp, cp = "TP improves PromptEOL", "Echo improves on mean pooling", "HTP improves on mean pooling", \
        "CP (NS) improves PromptEOL"
    write_table(tmp_path, "model-a", {tp: (0.2, 0.9), echo: (5.0, 6.0), htp: (-3.0, -1.0), cp: (0.1, 0.3)})
    write_table(tmp_path, "model-b", {tp: (0.1, 0.4), echo: (1.0, 2.0), htp: (-0.5, 0.5), cp: (-0.4, -0.1)})
    write_table(tmp_path, "model-c", {tp: (9.0, 9.9)}, limit=5)  # limited: must not be counted
    text = claims_table.render(*claims_table.load_tables(tmp_path))

    assert "left out: `model-c.json`: a limited run (limit 5" in text
    assert "bootstrap 1,000 resamples within each subset, seed 0, 95% percentile" in text  # from the settings
    assert "model-c |" not in text and "+9.45" not in text
    row = next(line for line in text.splitlines() if line.startswith(f"| {tp} |"))
    assert "**holds** +0.55 [+0.20, +0.90]" in row and "**holds** +0.25 [+0.10, +0.40]" in row
    assert row.endswith("| 2 / 0 / 0 |")
    htp_row = next(line for line in text.splitlines() if line.startswith(f"| {htp} |"))
    assert "**reversed** -2.00 [-3.00, -1.00]" in htp_row and "**n.s.** +0.00 [-0.50, +0.50]" in htp_row
    assert htp_row.endswith("| 0 / 1 / 1 |")
    assert f"**Holds on every model judged**: {tp} (sts); {echo} (sts)." in text
    assert f"**Depends on the model (holds on some, not on others)**: {cp} (sts)." in text
    # HTP claims its gain off STS: its STS verdict stands under "outside its paper's claims", never grouped.
    outside = text.index("### Outside its paper's claims", text.index("## Hierarchical Token Prepending"))
    assert outside < text.index(htp_row) < text.index("## ReBA")
    assert "HTP's paper claims no gain on this benchmark" in text
    assert htp not in text[text.index("## Grouped"):]
    # A claim whose rows are not done in a table reads "not yet run" and is not grouped as judged.
    meta = next(line for line in text.splitlines() if line.startswith("| MetaEOL improves on PromptEOL |"))
    assert meta.count(claims_table.NOT_RUN) == 3  # two cells and the tally
    assert "**Not yet judged on every model (rows not run)**" in text


def write_benchmark_table(folder: Path, model: str, benchmark: str, intervals: dict) -> None:
    """A family table's JSON: settings.benchmark names it; claims judged on their own score, as if their rows
    were the paper's configuration (not_paper "")."""
    claims = []
    for claim in ALL_CLAIMS:
        if claim.benchmark == benchmark and claim.text in intervals:
            lo, hi = intervals[claim.text]
            claims.append(judge(claim, {claim.score: (lo + hi) / 2}, {claim.score: (lo, hi)}, not_paper=""))
    bootstrap = {"resamples": 1000, "seed": 0, "level": 0.95, "interval": "percentile"}
    data = {"settings": {"model": model, "benchmark": benchmark, "limit": None, "dev_limit": None,
                         "bootstrap": bootstrap}, "rows_planned": ["a"], "rows_done": ["a"], "claims": claims}
    (folder / f"{model}-{benchmark}.json").write_text(json.dumps(data))


def test_each_paper_is_judged_on_its_own_benchmark(tmp_path: Path) -> None:
    """A retrieval table fills HTP's retrieval section (and no STS cell); a classification claim that the
    paper states as a loss (direction -1) holds when the interval is below zero, judged on its named set."""
    write_table(tmp_path, "m", {"HTP improves on mean pooling": (-3.0, -1.0)})
    write_benchmark_table(tmp_path, "m", "retrieval", {"HTP improves on Vanilla Mean": (0.5, 2.0)})
    write_benchmark_table(tmp_path, "m", "classification", {"HTP below Echo Mean on Banking77": (-9.0, -4.0)})
    text = claims_table.render(*claims_table.load_tables(tmp_path))
    section = text[text.index("### BEIR retrieval"):text.index("### MTEB classification")]
    assert "| HTP improves on Vanilla Mean | +1.33 | **holds** +1.25 [+0.50, +2.00] | 1 / 0 / 0 |" in section
    banking = next(line for line in text.splitlines() if line.startswith("| HTP below Echo Mean on Banking77 |"))
    assert "**holds** -6.50 [-9.00, -4.00]" in banking and "| -8.62 |" in banking
    assert "HTP below Echo Mean on Banking77 (classification)" in text[text.index("**Holds on every model judged**"):]
    # Benchmarks with no table say so, naming the claims that wait.
    assert "Not yet run: no full table of this benchmark in results/ yet (waiting: ReBA improves" in text


def test_a_reversed_interval_changes_the_verdict(tmp_path: Path) -> None:
    """The verdict text follows the interval: flip one model's interval and the cell and group flip."""
    tp = "TP improves PromptEOL"
    write_table(tmp_path, "m", {tp: (0.2, 0.9)})
    assert "**Holds on every model judged**: TP improves PromptEOL (sts)." in claims_table.render(
        *claims_table.load_tables(tmp_path))
    write_table(tmp_path, "m", {tp: (-0.9, -0.2)})
    text = claims_table.render(*claims_table.load_tables(tmp_path))
    assert "**reversed** -0.55 [-0.90, -0.20]" in text
    assert "**Reversed on every model judged**: TP improves PromptEOL (sts)." in text


def test_check_reports_a_stale_file(tmp_path: Path, capsys) -> None:
    write_table(tmp_path, "m", {"TP improves PromptEOL": (0.2, 0.9)})
    assert claims_table.main(["--results", str(tmp_path), "--check"]) == 1  # missing
    assert claims_table.main(["--results", str(tmp_path)]) == 0
    assert claims_table.main(["--results", str(tmp_path), "--check"]) == 0
    write_table(tmp_path, "m", {"TP improves PromptEOL": (-0.9, -0.2)})
    assert claims_table.main(["--results", str(tmp_path), "--check"]) == 1
    assert "stale or missing" in capsys.readouterr().err


def test_committed_claims_file_matches_the_committed_tables() -> None:
    """results/claims.md is what the tool makes from results/*.json: no hand edit, no stale verdict."""
    assert claims_table.main(["--check"]) == 0, "run `python tools/claims_table.py` and commit results/claims.md"


def test_a_corrupt_table_is_named_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"settings": ')  # e.g. a file cut short by a full disk
    with pytest.raises(SystemExit, match="broken.json is not readable JSON.*git checkout"):
        claims_table.main(["--results", str(tmp_path)])
    assert not (tmp_path / "claims.md").exists()


def write_claims_file(folder: Path, model: str, report: dict) -> None:
    """A family's claims file as family_claims.claims_report makes it, on the full data."""
    report["settings"].update(limit=None, dtype="float32")
    (folder / f"{model}-{report['settings']['benchmark']}.json").write_text(json.dumps(report, default=float))


def test_a_verdict_one_task_decides_is_marked_fragile(tmp_path: Path) -> None:
    """Leave each task out in turn: CP (NS) over PromptEOL on transfer holds on the Avg. of three tasks, but only
    because of MR (MR +3, SST2 and TREC about 0); without MR the mean is not distinguishable from zero, so the
    verdict is "holds; fragile (decided by MR)". Leaving out SST2 or TREC keeps it holding: they decide nothing."""
    draws = np.random.default_rng(0).normal(size=(3, 1000))
    replicates = {"MR": 3.0 + 0.3 * draws[0], "SST2": 0.8 * draws[1], "TREC": 0.8 * draws[2]}

    def differences(method: str, base: str):
        point = {name: float(np.mean(values)) for name, values in replicates.items()}
        return family_claims.with_avg(point, {name: values.copy() for name, values in replicates.items()})

    report = family_claims.claims_report("transfer", {"model": "m", "limit": None}, ["prompteol", "prompteol+cp"],
                                         ["prompteol", "prompteol+cp"], differences)
    [record] = report["claims"]
    assert record["claim"] == "CP (NS) improves PromptEOL" and record["verdict"] == HOLDS
    assert record["scores"]["avg without MR"]["verdict"] == UNDECIDED
    assert record["scores"]["avg without SST2"]["verdict"] == HOLDS == record["scores"]["avg without TREC"]["verdict"]
    assert record["fragile"] == ["MR"]
    write_claims_file(tmp_path, "m", report)
    text = claims_table.render(*claims_table.load_tables(tmp_path))
    line = next(line for line in text.splitlines() if line.startswith("| CP (NS) improves PromptEOL |")
                and "fragile" in line)
    assert "**holds**" in line and "fragile (decided by MR)" in line
    assert "CP (NS) improves PromptEOL (transfer) on m: holds, decided by MR" in text


def test_a_comparison_on_a_row_its_paper_never_ran_prints_its_number_without_a_verdict(tmp_path: Path) -> None:
    """TP's transfer ablation rows use the STS-chosen TP end (provenance.py flags them: TP section 5.8 ends TP
    deeper for transfer), so "TP improves PromptEOL (STS end, ablation)" gets no verdict even where its interval
    lies above zero; CP's row and TP's transfer-end row are not flagged, and the same interval holds."""
    tp, cp, deep = (next(c for c in BENCHMARK_CLAIMS if c.benchmark == "transfer" and c.method == key)
                    for key in ("prompteol+tp", "prompteol+cp", "prompteol+tp-transfer"))
    withheld = judge(tp, {"avg": 1.0}, {"avg": (0.5, 1.5)})
    assert withheld["verdict"] == NOT_PAPER and "TP end chosen on STS" in withheld["not_paper"]
    assert withheld["scores"]["avg"]["verdict"] == NOT_PAPER
    assert judge(cp, {"avg": 1.0}, {"avg": (0.5, 1.5)})["verdict"] == HOLDS
    assert judge(deep, {"avg": 1.0}, {"avg": (0.5, 1.5)})["verdict"] == HOLDS
    bootstrap = {"resamples": 1000, "seed": 0, "level": 0.95, "interval": "percentile"}
    data = {"settings": {"model": "m", "benchmark": "transfer", "limit": None, "bootstrap": bootstrap},
            "rows_planned": ["a"], "rows_done": ["a"], "claims": [withheld]}
    (tmp_path / "m-transfer.json").write_text(json.dumps(data))
    text = claims_table.render(*claims_table.load_tables(tmp_path))
    line = next(line for line in text.splitlines() if line.startswith("| TP improves PromptEOL (STS end, ablation) |")
                and "+1.00" in line)
    assert "+1.00 [+0.50, +1.50], **not the paper's setup** (prompteol+tp: TP end chosen on STS" in line
    assert "; no verdict |" in line and "**holds**" not in line and line.endswith("| 0 / 0 / 0, 1 not the paper's setup |")
    assert "TP improves PromptEOL (STS end, ablation) (transfer)" in text[text.index("**No verdict: judged on rows"):]


@pytest.mark.parametrize("benchmark, base, withheld_without_bos", [
    ("retrieval", "mean", True), ("retrieval", "prompteol+tp", True), ("retrieval", "mean+tp", False),
    ("classification", "echo", True), ("classification", "prompteol", True)])
def test_a_row_without_the_bos_htps_code_writes_gets_no_verdict(benchmark: str, base: str,
                                                                 withheld_without_bos: bool) -> None:
    """HTP's code opens its baselines' templates with a literal <s> (all but tp-mean-pool's) and minidecoder's HTP
    row always puts the BOS first; a baseline that ran without it (SmolLM2's tokenizer adds none) is not the
    paper's setup, so HTP's comparison with it is withheld; one with its BOS (Gemma-3's policy, or `{bos}`) is
    judged, as is TP w. Mean, which has no <s> in HTP's code either."""
    from reproduce.provenance import NO_BOS

    def report(without_bos: list[str]) -> dict:
        sets = ("Emotion", "Banking77")  # classification's claims are judged per task, retrieval's on the average
        differences = lambda method, base: family_claims.with_avg(dict.fromkeys(sets, 1.0),
                                                                  {name: np.full(1000, 1.0) for name in sets})
        settings = {"model": "m", "limit": None, "rows_without_bos": without_bos}
        return family_claims.claims_report(benchmark, settings, ["htp", base], ["htp", base], differences)

    for record in report([])["claims"]:
        assert record["verdict"] != NOT_PAPER
    for record in report([base])["claims"]:
        assert (record["verdict"] == NOT_PAPER) == withheld_without_bos
        assert (NO_BOS in record.get("not_paper", "")) == withheld_without_bos
    assert report([base])["claims"] and report([])["claims"]


def test_every_comparison_withheld_as_not_the_papers_is_named_an_ablation() -> None:
    """A comparison withheld on every model (not_the_papers without a model's tokenizer policy) is an ablation
    beside the paper's own, and its claim says so; a claim withheld for a row still to re-run (a model's missing
    BOS, provenance.NO_BOS) is withheld only on that model, and its reason says why."""
    from reproduce.provenance import not_the_papers

    withheld = [c.text for c in BENCHMARK_CLAIMS if not_the_papers(c.benchmark, c.method, c.base)]
    assert withheld and all("ablation" in text for text in withheld), withheld
    assert not [c.text for c in BENCHMARK_CLAIMS if "ablation" in c.text and c.text not in withheld]


def test_a_hand_edited_table_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A table whose settings or claims lack what the tool reads (a hand edit, a key renamed) was a KeyError or
    TypeError traceback from a line of claims_table; a JSON that is not an object, or a folder named *.json, too."""
    write_table(tmp_path, "fine", {"TP improves PromptEOL": (0.5, 1.5)})
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "number.json").write_text("5")  # not a results table: left alone, as any other JSON is
    assert claims_table.main(["--results", str(tmp_path)]) == 0
    table = json.loads((tmp_path / "fine.json").read_text())
    edits = {"no model": lambda t: t["settings"].pop("model"),
             "no bootstrap seed": lambda t: t["settings"]["bootstrap"].pop("seed"),
             "claims not a list": lambda t: t.update(claims=3),
             "an unknown verdict": lambda t: t["claims"][0].update(verdict="probably"),
             "no decisive score": lambda t: t["claims"][0]["scores"].pop("avg")}
    for what, edit in edits.items():
        edited = json.loads(json.dumps(table))
        edit(edited)
        (tmp_path / "edited.json").write_text(json.dumps(edited))
        with pytest.raises(SystemExit, match="edited.json is not a results table as the tools write it .*git checkout"):
            claims_table.main(["--results", str(tmp_path)])
