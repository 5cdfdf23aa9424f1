"""The papers' claims as data, each on the benchmark its paper made it on, and a verdict on each generated
from a paired bootstrap interval.

Each claim says a method beats its base (direction +1; -1 where the paper says it loses), on one
benchmark, judged on one score of that benchmark's table (`score`: "avg", the headline mean over the
benchmark's sets, unless the paper claims it per set). Where the spec or the data's README gives both
published numbers, the claim carries the papers' difference:

    STS (docs/spec.md section 10; Llama-2-7B, fp32, Avg. of seven): PromptEOL 70.03 -> +TP
    77.19; Pretended CoT 76.86 -> +TP 77.54, +CP-NS 77.45; Knowledge 77.14 -> +TP 77.54, +CP-NS 77.56;
    PromptEOL +CP-NS 75.27; MetaEOL 75.96 -> +TP 77.91; Echo 66.05; mean pooling 47.06.
    transfer (shared/data/senteval/README.md; TP Table 5, CP Table 6, Llama-2-7B, Avg. of seven):
    PromptEOL 90.94, +TP 91.42, +CP-NS 91.73.
    retrieval (shared/data/beir/README.md; HTP Table 1, Qwen2-1.5B-Instruct, nDCG@10 mean of SciFact
    and NFCorpus): Vanilla Mean 15.53, TP w. PromptEOL 13.29, TP w. Mean 12.10, HTP 16.86.
    classification (shared/data/mteb/README.md; HTP Table 12, Mistral-7B-Instruct, accuracy):
    Banking77 Echo 77.50, HTP 68.88; Emotion Echo 38.90, PromptEOL 46.44, HTP 47.51.

Where a paper states a direction only (MetaEOL + CP, HTP and ReBA-2 on STS, ReBA on C-MTEB with other
models, the long-input curve) the claim is the direction only. The verdict reads the interval of
(method - base):

    lower bound > 0 (in the claimed direction)   "holds"
    upper bound < 0 (against it)                 "reversed"
    interval contains 0                          "not distinguishable from zero at 95%"

and, where the paper gives a size, whether that size lies below, inside or above the interval.

A verdict on the mean over several sets or tasks says how fragile it is: each set is left out in turn
(`leave_one_out`: the mean over the others of the same per-resample differences), and a verdict whose
class changes when one set is left out is "fragile (decided by SET)". A comparison with a row that is not
its paper's configuration (provenance.py) gets no verdict: NOT_PAPER, with the reason, and its number.

`PAPERS` says on which benchmarks each paper makes its claims (docs/spec.md section 12). A claim on another
benchmark (HTP and ReBA-2 against mean pooling on STS: HTP's paper says it lags on STS, ReBA claims
C-MTEB) is still judged, but labelled as outside its paper's claims, so that no reader takes it for a
verdict on what the paper claimed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reproduce.provenance import not_the_papers

SOURCE = "docs/spec.md section 10 (Llama-2-7B, fp32, STS Avg. of seven)"

# Published STS Avg. per reproduce.py row key (docs/spec.md section 10); rows absent here have no number there.
PAPER_AVG: dict[str, float] = {
    "mean": 47.06, "prompteol": 70.03, "prompteol+tp": 77.19, "prompteol+cp": 75.27,
    "pretended_cot": 76.86, "pretended_cot+tp": 77.54, "pretended_cot+cp": 77.45,
    "knowledge": 77.14, "knowledge+tp": 77.54, "knowledge+cp": 77.56,
    "metaeol": 75.96, "metaeol+tp": 77.91, "echo": 66.05,
}
PAPER_TIME: dict[str, float] = {"prompteol+tp": 1.04, "pretended_cot": 1.18, "metaeol": 8.17, "echo": 1.67}

HOLDS, REVERSED, UNDECIDED = "holds", "reversed", "not distinguishable from zero at 95%"
NOT_PAPER = "not the paper's setup"  # a comparison on a row its paper never ran: the number, no verdict
# what follows NOT_PAPER's reason: the row is an ablation kept beside the paper's own, or a row that ran without a
# setting of its paper's (provenance.NO_BOS) and waits for its re-run; either way the number stands, unjudged
NO_VERDICT = "no verdict"
WITHOUT = " without "  # "avg without MRPC": the mean over every set but MRPC


# The benchmarks a claim can be judged on: key -> what its headline score is.
BENCHMARKS: dict[str, str] = {
    "sts": "STS12-16, STS-B, SICK-R: Spearman x100, Avg. of seven",
    "transfer": "SentEval transfer (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC): accuracy x100, Avg. of seven",
    "retrieval": "BEIR retrieval (SciFact, NFCorpus): nDCG@10 x100, mean of the sets",
    "classification": "MTEB classification (Banking77, Emotion): accuracy x100",
    "sts-long": "long-input STS (STS-B test pairs grouped 1-16 sentences): Spearman x100 per length",
    "cmteb": "C-MTEB pair sets (ATEC, BQ, LCQMC, PAWSX, STSB, AFQMC, QBQTC, Ocnli): Spearman / AP x100, mean",
}


@dataclass(frozen=True)
class Paper:
    key: str
    short: str  # the method's name in a heading
    title: str
    benchmarks: tuple[tuple[str, str], ...]  # (benchmark key, where in the paper) for each benchmark it claims on


# docs/spec.md section 12: which paper claims what, where. The order is the order of results/claims.md.
PAPERS: tuple[Paper, ...] = (
    Paper("tp", "TP", "Token Prepending (TP)", (("sts", "STS table"), ("transfer", "Table 5"))),
    Paper("cp", "CP", "Contrastive Prompting (CP)", (("sts", "STS table"), ("transfer", "Table 6"))),
    Paper("htp", "HTP", "Hierarchical Token Prepending (HTP)",
          (("retrieval", "Table 1"), ("classification", "Table 12"), ("sts-long", "Figure 1, section 3.1"))),
    Paper("reba", "ReBA", "ReBA", (("cmteb", "Tables 2-3"),)),
    Paper("metaeol", "MetaEOL", "MetaEOL", (("sts", "STS table"),)),
    Paper("echo", "Echo", "Echo embeddings", (("sts", "STS table"),)),
)


@dataclass(frozen=True)
class Claim:
    method: str  # the results table's row key
    base: str  # the row it is claimed to beat
    text: str  # what the paper claims, in words
    direction: int = +1  # +1: method > base; -1: the paper says the method is below its base
    paper: str = ""  # the key of the paper in PAPERS that makes (or is judged on) this claim
    benchmark: str = "sts"  # the key in BENCHMARKS it is judged on
    score: str = "avg"  # which of the table's scores decides: its headline "avg", or one set the paper names
    published: float | None = None  # the papers' (method - base) off STS, where the data's README gives both

    @property
    def paper_delta(self) -> float | None:
        """The papers' (method - base): on STS from docs/spec.md section 10's Llama-2-7B numbers when both are there,
        elsewhere the published difference the claim carries."""
        if self.benchmark == "sts" and self.method in PAPER_AVG and self.base in PAPER_AVG:
            return round(PAPER_AVG[self.method] - PAPER_AVG[self.base], 2)
        return self.published

    @property
    def within_its_paper(self) -> bool:
        """Whether its paper makes its claim on this benchmark (False: judged here, but not what the paper claimed)."""
        paper = next((p for p in PAPERS if p.key == self.paper), None)
        return paper is not None and any(key == self.benchmark for key, _ in paper.benchmarks)


_PROMPTS = (("prompteol", "PromptEOL"), ("pretended_cot", "Pretended CoT"), ("knowledge", "Knowledge"),
            ("metaeol", "MetaEOL"))
# STS: the claims reproduce.py judges on every results/<model>.json (names kept for that tool).
CLAIMS: tuple[Claim, ...] = (
    *(Claim(f"{key}+tp", key, f"TP improves {label}", paper="tp") for key, label in _PROMPTS),
    *(Claim(f"{key}+cp", key, f"CP (NS) improves {label}", paper="cp") for key, label in _PROMPTS),
    Claim("htp", "mean", "HTP improves on mean pooling", paper="htp"),
    Claim("reba-2", "mean", "ReBA-2 improves on mean pooling", paper="reba"),
    Claim("metaeol", "prompteol", "MetaEOL improves on PromptEOL", paper="metaeol"),
    Claim("echo", "mean", "Echo improves on mean pooling", paper="echo"),
)

# Published scores off STS, by benchmark, then the score a claim reads ("avg" or a set), then row key
# (the data folders' READMEs: senteval TP Table 5 / CP Table 6 on Llama-2-7B; beir HTP Table 1 on
# Qwen2-1.5B-Instruct, the mean of its SciFact and NFCorpus nDCG@10; mteb HTP Table 12 on Mistral-7B).
PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "transfer": {"avg": {"prompteol": 90.94, "prompteol+tp": 91.42, "prompteol+cp": 91.73}},
    "retrieval": {"avg": {"mean": (27.16 + 3.90) / 2, "last": (0.01 + 1.74) / 2, "echo": (22.98 + 5.11) / 2,
                          "prompteol+tp": (18.54 + 8.03) / 2, "mean+tp": (18.31 + 5.89) / 2,
                          "htp": (28.29 + 5.43) / 2}},
    "classification": {"Banking77": {"echo": 77.50, "prompteol": 66.46, "prompteol+tp": 66.46, "htp": 68.88},
                       "Emotion": {"echo": 38.90, "prompteol": 46.44, "prompteol+tp": 46.43, "htp": 47.51}},
}


def published_delta(benchmark: str, method: str, base: str, score: str = "avg") -> float | None:
    """The papers' (method - base) on a benchmark off STS, when both are in PUBLISHED."""
    numbers = PUBLISHED.get(benchmark, {}).get(score, {})
    if method in numbers and base in numbers:
        return round(numbers[method] - numbers[base], 2)
    return None


def _on(benchmark: str, method: str, base: str, text: str, paper: str, score: str = "avg",
        direction: int = +1) -> Claim:
    return Claim(method, base, text, direction, paper, benchmark, score,
                 published_delta(benchmark, method, base, score))


# The claims each paper makes off STS (docs/spec.md section 12 and the data folders' READMEs). Their tables'
# row keys: transfer prompteol, prompteol+cp, pretended_cot, knowledge, each prompt's +tp-transfer (TP's end
# chosen for transfer on SST2 dev) and +tp (its STS-B-dev end: the ablation);
# retrieval mean, last, echo, prompteol+tp, mean+tp, htp; classification echo, prompteol, prompteol+tp,
# htp; sts-long last, mean-final, mean (the STS-B-dev layer), prompteol, mean+tp, htp (scores per length "1" ..
# "16"); cmteb under last pooling
# (Table 3) last, repeat-2-last, repeat-3-last, reba-2-last, reba-3-last, and under mean pooling (Table 2)
# mean, repeat-2, echo-3 (every copy after the first), reba-2, reba-3, repeat-3 (the last copy: an ablation).
BENCHMARK_CLAIMS: tuple[Claim, ...] = (
    *(_on("transfer", f"{key}+tp-transfer", key, f"TP improves {label}", "tp") for key, label in _PROMPTS[:3]),
    *(_on("transfer", f"{key}+tp", key, f"TP improves {label} (STS end, ablation)", "tp") for key, label in _PROMPTS[:3]),
    _on("transfer", "prompteol+cp", "prompteol", "CP (NS) improves PromptEOL", "cp"),
    _on("retrieval", "htp", "mean", "HTP improves on Vanilla Mean", "htp"),
    _on("retrieval", "htp", "prompteol+tp", "HTP improves on TP w. PromptEOL", "htp"),
    _on("retrieval", "htp", "mean+tp", "HTP improves on TP w. Mean", "htp"),
    _on("classification", "htp", "echo", "HTP above Echo Mean on Emotion", "htp", score="Emotion"),
    _on("classification", "htp", "prompteol", "HTP above PromptEOL on Emotion", "htp", score="Emotion"),
    _on("classification", "htp", "echo", "HTP below Echo Mean on Banking77", "htp", score="Banking77", direction=-1),
    _on("sts-long", "mean-final", "last", "Mean pooling beats last-token readout at 16 sentences", "htp", score="16"),
    _on("sts-long", "mean-final", "prompteol", "Mean pooling beats PromptEOL's last token at 16 sentences", "htp",
        score="16"),
    _on("cmteb", "reba-2-last", "last", "ReBA improves on classical last pooling (Table 3)", "reba"),
    _on("cmteb", "reba-2-last", "repeat-2-last", "ReBA improves on repetition alone, two copies (Table 3)", "reba"),
    _on("cmteb", "reba-3-last", "repeat-3-last", "ReBA-3 improves on repetition alone, three copies (Table 3)", "reba"),
    _on("cmteb", "reba-2", "mean", "ReBA improves on classical mean pooling (Table 2)", "reba"),
    _on("cmteb", "reba-2", "repeat-2", "ReBA improves on repetition alone, two copies, mean (Table 2)", "reba"),
    _on("cmteb", "reba-3", "echo-3", "ReBA-3 improves on repetition alone, three copies, mean (Table 2)", "reba"),
    _on("cmteb", "reba-3", "repeat-3", "ReBA-3 improves on the last of three copies, mean (ablation)", "reba"),
)
ALL_CLAIMS: tuple[Claim, ...] = CLAIMS + BENCHMARK_CLAIMS


def verdict(lo: float, hi: float, direction: int = +1) -> str:
    """The verdict on a claimed direction from the 95% interval [lo, hi] of (method - base)."""
    if not (lo <= hi):  # NaN or a malformed interval: nothing can be said
        raise ValueError(f"not an interval: [{lo}, {hi}]")
    if direction * lo > 0 and direction * hi > 0:
        return HOLDS
    if direction * lo < 0 and direction * hi < 0:
        return REVERSED
    return UNDECIDED


def size_against(delta: float | None, lo: float, hi: float) -> str:
    """Where the paper's size sits against the interval, in words."""
    if delta is None:
        return "no paper size (direction only)"
    where = "below" if delta < lo else "above" if delta > hi else "inside"
    return f"paper {delta:+.2f}: {where} the interval"


def leave_one_out(point: dict[str, float], replicates: dict[str, np.ndarray],
                  level: float = 0.95) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """For each set, the mean over the other sets of the point difference and of the per-resample
    differences, and that mean's percentile interval: {"avg without SET": ...}. `point` and `replicates`
    hold one entry per set (no "avg"); fewer than two sets leave nothing to leave out."""
    if len(replicates) < 2:
        return {}, {}
    tail = 100.0 * (1.0 - level) / 2.0
    points, intervals = {}, {}
    for left in replicates:
        others = [name for name in replicates if name != left]
        values = np.mean([replicates[name] for name in others], axis=0)
        finite = values[np.isfinite(values)]
        if not finite.size:
            continue
        lo, hi = np.percentile(finite, [tail, 100.0 - tail])
        points[f"avg{WITHOUT}{left}"] = float(np.mean([point[name] for name in others]))
        intervals[f"avg{WITHOUT}{left}"] = (float(lo), float(hi))
    return points, intervals


def decided_by(scores: dict[str, dict], score: str) -> list[str]:
    """The sets whose leaving out changes the class of the verdict on `score` (empty: not fragile)."""
    verdict_of = scores[score]["verdict"]
    return [name.removeprefix(score + WITHOUT) for name, got in scores.items()
            if name.startswith(score + WITHOUT) and got["verdict"] != verdict_of]


def judge(claim: Claim, point: dict[str, float], intervals: dict[str, tuple[float, float]],
          not_paper: str | None = None) -> dict:
    """One claim's record: the point difference, interval and verdict for Avg., every task and, where the
    intervals hold them, Avg. without each task (`leave_one_out`). point: {task or "avg": method - base};
    intervals: {task or "avg": (lo, hi)} of the paired difference. `not_paper`: why the comparison is not
    the paper's (None: read from provenance.py); when it says so, every verdict is NOT_PAPER."""
    if not_paper is None:
        not_paper = not_the_papers(claim.benchmark, claim.method, claim.base)
    per = {}
    for name, (lo, hi) in intervals.items():
        per[name] = {"diff": point[name], "lo": lo, "hi": hi,
                     "verdict": NOT_PAPER if not_paper else verdict(lo, hi, claim.direction)}
    decisive = per[claim.score]
    record = {"method": claim.method, "base": claim.base, "claim": claim.text, "direction": claim.direction,
              "benchmark": claim.benchmark, "score": claim.score, "paper_delta": claim.paper_delta,
              "verdict": decisive["verdict"], "size": size_against(claim.paper_delta, decisive["lo"], decisive["hi"]),
              "fragile": [] if not_paper else decided_by(per, claim.score), "scores": per}
    if not_paper:
        record["not_paper"] = not_paper
    return record


def shown(record: dict) -> str:
    """The verdict as a table prints it: with the sets that decide it when it is fragile; for a comparison
    on a row its paper never ran (an ablation kept beside the paper's row, or a row to re-run), the reason and no
    verdict."""
    if record["verdict"] == NOT_PAPER:
        return f"{NOT_PAPER} ({record['not_paper']}); {NO_VERDICT}"
    fragile = record.get("fragile") or []
    return record["verdict"] + (f"; fragile (decided by {', '.join(fragile)})" if fragile else "")


def sentence(record: dict, method_label: str, base_label: str) -> str:
    """The claim and its verdict in one line of Markdown; every number comes from `record`."""
    name = record.get("score", "avg")
    decisive = record["scores"][name]
    what = "Avg." if name == "avg" else name
    return (f"- **{record['claim']}** ({method_label} vs {base_label}): **{shown(record)}**; {what} difference "
            f"{decisive['diff']:+.2f}, 95% interval [{decisive['lo']:+.2f}, {decisive['hi']:+.2f}]; {record['size']}.")
