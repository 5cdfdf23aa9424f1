"""The papers' claims across models: one table of every claim's verdict on every full results table.

    python tools/claims_table.py            # reads results/*.json, writes results/claims.md
    python tools/claims_table.py --check    # exit 1 (and say why) when results/claims.md is stale

Each results/<model>.json written by tools/reproduce.py already judges every claim on its own model
(`claims`: a paired 95% bootstrap interval of method - base and a verdict generated from it). This tool
only gathers those records side by side, so a reader sees at once which claims hold on every model,
which are reversed on every model and which depend on the model. It computes no statistic itself and
types no number: every cell is copied from a JSON's `claims`, and the counts are counted from them.

A verdict on the mean over several sets names the sets whose leaving out changes its class ("fragile
(decided by SET)", claims.judge's `fragile`); a comparison on a row that is not its paper's configuration
(reproduce/provenance.py) prints its number and the reason instead of a verdict.

Only tables on the full test sets enter the counts (`settings.limit` and `settings.dev_limit` both
None): a limited run's interval answers a different question. A full table that is not complete yet
enters with its finished claims; a claim whose rows are not done reads "not yet run".
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from reproduce import read_json  # noqa: E402
from reproduce.claims import (ALL_CLAIMS, BENCHMARKS, HOLDS, NO_VERDICT, NOT_PAPER, PAPERS, REVERSED,  # noqa: E402
                              SOURCE, UNDECIDED, Claim)
from minidecoder.output_files import write_whole  # noqa: E402

NOT_RUN = "not yet run"
SHORT = {HOLDS: "holds", REVERSED: "reversed", UNDECIDED: "n.s."}  # n.s.: not distinguishable from zero


def load_tables(results_dir: Path) -> tuple[list[dict], list[str]]:
    """Every results table on the full test sets, with its model and benchmark (`settings.benchmark`;
    reproduce.py's STS tables have none and are "sts"); and a line for each table left out (a limited
    run), saying why."""
    tables, left_out = [], []
    for path in sorted(results_dir.glob("*.json")):
        if not path.is_file():
            continue  # a folder named like a table
        data, problem = read_json(path)
        if problem:
            raise SystemExit(f"{path} {problem}; restore it with `git checkout -- {path}` or move it out of the "
                             "results folder")
        if not isinstance(data, dict) or "claims" not in data or "settings" not in data:
            continue  # not a results table
        try:
            settings = data["settings"]
            if settings.get("limit") is not None or settings.get("dev_limit") is not None:
                left_out.append(f"`{path.name}`: a limited run (limit {settings.get('limit')}, dev limit "
                                f"{settings.get('dev_limit')}), not the full test sets")
                continue
            tables.append({"md": path.with_suffix(".md").name, "model": settings["model"],
                           "benchmark": settings.get("benchmark", "sts"),
                           "device": settings.get("device", "cpu"), "dtype": settings.get("dtype"),
                           "bootstrap": {name: settings["bootstrap"][name] for name in ("resamples", "seed", "level",
                                                                                        "interval")},
                           "done": len(data.get("rows_done", [])), "planned": len(data.get("rows_planned", [])),
                           "claims": {(c["method"], c["base"], c.get("score", "avg")): checked(c) for c in data["claims"]}})
        except (KeyError, TypeError, AttributeError, ValueError) as err:  # a hand edit: name the file, not a line here
            raise SystemExit(f"{path} is not a results table as the tools write it ({type(err).__name__}: {err}); "
                             f"restore it with `git checkout -- {path}`, rerun the tool that wrote it, or move it out "
                             "of the results folder") from None
    return tables, left_out


def checked(record: dict) -> dict:
    """A claim's record with what `cell` and `tally` read of it: a verdict they know and the decisive score's
    difference and interval, as numbers (KeyError, TypeError or ValueError otherwise)."""
    if record["verdict"] not in (*SHORT, NOT_PAPER):
        raise ValueError(f"claim {record.get('claim', record['method'])!r} has the verdict {record['verdict']!r}")
    decisive = record["scores"][record.get("score", "avg")]
    for name in ("diff", "lo", "hi"):
        float(decisive[name])
    return record


def cell(record: dict | None) -> str:
    """One model's verdict on one claim: verdict, the decisive score's difference and its 95% interval, and
    the sets that decide a fragile verdict; a comparison on a row its paper never ran: the number, no verdict."""
    if record is None:
        return NOT_RUN
    decisive = record["scores"][record.get("score", "avg")]
    number = f"{decisive['diff']:+.2f} [{decisive['lo']:+.2f}, {decisive['hi']:+.2f}]"
    if record["verdict"] == NOT_PAPER:
        return f"{number}, **{NOT_PAPER}** ({record['not_paper']}); {NO_VERDICT}"
    fragile = record.get("fragile") or []
    return f"**{SHORT[record['verdict']]}** {number}" + (f"; fragile (decided by {', '.join(fragile)})" if fragile else "")


def tally(records: list[dict | None]) -> dict[str, int]:
    """How many models' verdicts are holds / reversed / not distinguishable / withheld / not yet run."""
    counts = {HOLDS: 0, REVERSED: 0, UNDECIDED: 0, NOT_PAPER: 0, NOT_RUN: 0}
    for record in records:
        counts[record["verdict"] if record else NOT_RUN] += 1
    return counts


def paper_size(claim: Claim) -> str:
    """The papers' difference, where the spec or the data's README gives both numbers."""
    return f"{claim.paper_delta:+.2f}" if claim.paper_delta is not None else "direction only"


def agreement(counts: dict[str, int], judged: int) -> str:
    """Which group a claim's verdicts across the models put it in (a key of GROUPS)."""
    if counts[NOT_RUN]:
        return "open"
    if counts[NOT_PAPER]:
        return "withheld"
    if counts[HOLDS] == judged:
        return "every"
    if counts[REVERSED] == judged:
        return "reversed"
    return "none" if counts[HOLDS] == 0 else "mixed"


def claim_table(claims: list[Claim], tables: list[dict], grouped: dict[str, list[str]] | None) -> list[str]:
    """The side-by-side table of `claims` on `tables` (one benchmark's); each judged claim filed in `grouped`."""
    models = [t["model"] for t in tables]
    lines = ["| claim | paper | " + " | ".join(models) + " | holds / reversed / n.s. |",
             "|---|---:|" + "---|" * len(models) + "---|"]
    for claim in claims:
        records = [t["claims"].get((claim.method, claim.base, claim.score)) for t in tables]
        counts = tally(records)
        pending = (f", {counts[NOT_PAPER]} not the paper's setup" if counts[NOT_PAPER] else "") + \
            (f", {counts[NOT_RUN]} not yet run" if counts[NOT_RUN] else "")
        lines.append(f"| {claim.text} | {paper_size(claim)} | " + " | ".join(cell(r) for r in records)
                     + f" | {counts[HOLDS]} / {counts[REVERSED]} / {counts[UNDECIDED]}{pending} |")
        if grouped is not None:
            group = agreement(counts, len(tables) - counts[NOT_RUN])
            grouped[group].append(f"{claim.text} ({claim.benchmark})")
            grouped["fragile"] += [f"{claim.text} ({claim.benchmark}) on {t['model']}: {SHORT[r['verdict']]}, decided by "
                                   f"{', '.join(r['fragile'])}" for t, r in zip(tables, records) if r and r.get("fragile")]
    return lines


def benchmark_section(heading: str, claims: list[Claim], tables: list[dict],
                      grouped: dict[str, list[str]] | None) -> list[str]:
    """A heading, then the claims' table on the benchmark's full tables, or a line saying none is run yet."""
    lines = ["", heading, ""]
    if not tables:
        return lines + ["Not yet run: no full table of this benchmark in results/ yet (waiting: "
                        + "; ".join(c.text for c in claims) + ")."]
    return lines + claim_table(claims, tables, grouped)


def entered(tables: list[dict], left_out: list[str]) -> list[str]:
    """The list of tables that entered, with their settings, and those left out."""
    lines = []
    for t in tables:
        boot = t["bootstrap"]
        lines.append(f"- [{t['model']}]({t['md']}), {t['benchmark']}: {t['done']} of {t['planned']} rows done; "
                     f"{t['dtype']} on {t['device']}; bootstrap {boot['resamples']:,} resamples within each subset, "
                     f"seed {boot['seed']}, {boot['level']:.0%} {boot['interval']}")
    return lines + [f"- left out: {line}" for line in left_out]


GROUPS = {"every": "Holds on every model judged", "reversed": "Reversed on every model judged",
          "none": "Holds on no model (reversed or not distinguishable on each)",
          "mixed": "Depends on the model (holds on some, not on others)",
          "open": "Not yet judged on every model (rows not run)",
          "withheld": "No verdict: judged on rows that are not the paper's setup (ablations, or rows to re-run)",
          "fragile": "Fragile: leaving one set out changes the verdict's class"}


def render(tables: list[dict], left_out: list[str]) -> str:
    """results/claims.md: the header, which tables entered, then one section per paper with one table per
    benchmark it claims on, its claims judged elsewhere labelled as outside them, and the grouping."""
    lines = ["# The papers' claims, each on its own benchmark (generated by tools/claims_table.py; no number "
             "typed by hand)",
             "",
             "Each cell is copied from a results table's JSON: the verdict on the claim from a paired bootstrap "
             "interval of (method - base) over the same resamples (each table's resamples, seed and level below), "
             "then the decisive score's difference x100 and that interval. **holds**: interval above 0 in the "
             "claimed direction; **reversed**: on the other side; **n.s.**: not distinguishable from zero. The "
             f"paper column is the papers' difference ({SOURCE} for STS; the data folders' READMEs elsewhere), "
             "on far larger models. Each paper is judged on the benchmarks where it makes its claims "
             "(docs/spec.md section 12); a verdict on another benchmark is listed under \"outside "
             "its paper's claims\" and is not a verdict on what the paper claimed.",
             "",
             "**fragile (decided by SET)**: the claim is judged on the mean over several sets or tasks, and leaving "
             "SET out (the mean over the others of the same per-resample differences) changes the verdict's class "
             f"(holds / n.s. / reversed). **{NOT_PAPER} (WHY); {NO_VERDICT}**: a row of the "
             "comparison is not its paper's configuration (its table's provenance section says where each setting "
             "comes from; reproduce/provenance.py): an ablation kept beside the paper's row, or a row that ran "
             "without a setting of the paper's and is to be re-run with it (WHY names it), so the number is "
             "printed without a verdict.",
             "",
             "Command: `python tools/claims_table.py` (after any table sitting; `--check` says whether this file "
             "is stale).",
             "",
             "Tables entered (full test sets; hyper-parameters chosen on dev data only):",
             ""]
    lines += entered(tables, left_out)
    grouped: dict[str, list[str]] = {key: [] for key in GROUPS}
    for paper in PAPERS:
        lines += ["", f"## {paper.title}"]
        mine = [c for c in ALL_CLAIMS if c.paper == paper.key]
        for benchmark, where in paper.benchmarks:
            claims = [c for c in mine if c.benchmark == benchmark]
            on = [t for t in tables if t["benchmark"] == benchmark]
            lines += benchmark_section(f"### {BENCHMARKS[benchmark]} ({paper.short}'s {where})", claims, on,
                                       grouped)
        for benchmark in dict.fromkeys(c.benchmark for c in mine if not c.within_its_paper):
            claims = [c for c in mine if c.benchmark == benchmark]
            on = [t for t in tables if t["benchmark"] == benchmark]
            lines += benchmark_section(f"### Outside its paper's claims: {BENCHMARKS[benchmark]}", claims, on, None)
            lines += ["", f"{paper.short}'s paper claims no gain on this benchmark; the verdict describes the "
                          "method here, not what the paper claimed."]
    lines += ["", "## Grouped by how the verdicts agree (claims on their papers' own benchmarks)", ""]
    for key, heading in GROUPS.items():
        if grouped[key]:
            lines.append(f"- **{heading}**: " + "; ".join(grouped[key]) + ".")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(REPO / "results"), help="folder of reproduce.py tables")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when claims.md is stale")
    args = parser.parse_args(argv)
    results_dir = Path(args.results)
    if not results_dir.is_dir():
        parser.error(f"no results folder at {results_dir}; pass --results FOLDER (where tools/reproduce.py "
                     "wrote its <model>.json files)")
    text = render(*load_tables(results_dir))
    target = results_dir / "claims.md"
    if args.check:
        if not target.exists() or target.read_text() != text:
            print(f"{target} is stale or missing: run `python tools/claims_table.py --results {results_dir}`",
                  file=sys.stderr)
            return 1
        print(f"{target} is up to date with the tables beside it")
        return 0
    write_whole(target, text.encode(), overwrite=True)  # whole: a reader never sees half a file
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
