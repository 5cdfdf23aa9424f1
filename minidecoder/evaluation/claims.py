"""The papers' claims as data, and a verdict on each generated from a paired bootstrap interval.

Each claim says a method beats its base (direction +1), by the size the papers report on Llama-2-7B
where `shared/spec/methods.md` section 10 gives both numbers (STS Avg. of seven, fp32):

    PromptEOL 70.03 -> +TP 77.19; Pretended CoT 76.86 -> +TP 77.54, +CP-NS 77.45; Knowledge 77.14 ->
    +TP 77.54, +CP-NS 77.56; PromptEOL +CP-NS 75.27; MetaEOL 75.96 -> +TP 77.91; Echo 66.05;
    mean pooling 47.06.

MetaEOL + CP, HTP and ReBA-2 have no Llama-2-7B number there (HTP reports Mistral-7B, ReBA Chinese
LLMs on C-MTEB): their claim is the direction only. The verdict reads the interval of (method - base):

    lower bound > 0 (in the claimed direction)   "holds"
    upper bound < 0 (against it)                 "reversed"
    interval contains 0                          "not distinguishable from zero at 95%"

and, where the paper gives a size, whether that size lies below, inside or above the interval.
"""
from __future__ import annotations

from dataclasses import dataclass

SOURCE = "shared/spec/methods.md section 10 (Llama-2-7B, fp32, STS Avg. of seven)"

# Published Avg. per reproduce.py row key (spec section 10); rows absent here have no number there.
PAPER_AVG: dict[str, float] = {
    "mean": 47.06, "prompteol": 70.03, "prompteol+tp": 77.19, "prompteol+cp": 75.27,
    "pretended_cot": 76.86, "pretended_cot+tp": 77.54, "pretended_cot+cp": 77.45,
    "knowledge": 77.14, "knowledge+tp": 77.54, "knowledge+cp": 77.56,
    "metaeol": 75.96, "metaeol+tp": 77.91, "echo": 66.05,
}
PAPER_TIME: dict[str, float] = {"prompteol+tp": 1.04, "pretended_cot": 1.18, "metaeol": 8.17, "echo": 1.67}

HOLDS, REVERSED, UNDECIDED = "holds", "reversed", "not distinguishable from zero at 95%"


@dataclass(frozen=True)
class Claim:
    method: str  # reproduce.py row key
    base: str  # the row it is claimed to beat
    text: str  # what the paper claims, in words
    direction: int = +1  # +1: method > base

    @property
    def paper_delta(self) -> float | None:
        """The papers' (method - base) on Llama-2-7B, when both numbers are in the spec."""
        if self.method in PAPER_AVG and self.base in PAPER_AVG:
            return round(PAPER_AVG[self.method] - PAPER_AVG[self.base], 2)
        return None


_PROMPTS = (("prompteol", "PromptEOL"), ("pretended_cot", "Pretended CoT"), ("knowledge", "Knowledge"),
            ("metaeol", "MetaEOL"))
CLAIMS: tuple[Claim, ...] = (
    *(Claim(f"{key}+tp", key, f"TP improves {label}") for key, label in _PROMPTS),
    *(Claim(f"{key}+cp", key, f"CP (NS) improves {label}") for key, label in _PROMPTS),
    Claim("htp", "mean", "HTP improves on mean pooling"),
    Claim("reba-2", "mean", "ReBA-2 improves on mean pooling"),
    Claim("metaeol", "prompteol", "MetaEOL improves on PromptEOL"),
    Claim("echo", "mean", "Echo improves on mean pooling"),
)


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


def judge(claim: Claim, point: dict[str, float], intervals: dict[str, tuple[float, float]]) -> dict:
    """One claim's record: the point difference, interval and verdict for Avg. and every task.
    point: {task or "avg": method - base}; intervals: {task or "avg": (lo, hi)} of the paired difference."""
    per = {}
    for name, (lo, hi) in intervals.items():
        per[name] = {"diff": point[name], "lo": lo, "hi": hi, "verdict": verdict(lo, hi, claim.direction)}
    avg = per["avg"]
    return {"method": claim.method, "base": claim.base, "claim": claim.text, "direction": claim.direction,
            "paper_delta": claim.paper_delta, "verdict": avg["verdict"],
            "size": size_against(claim.paper_delta, avg["lo"], avg["hi"]), "scores": per}


def sentence(record: dict, method_label: str, base_label: str) -> str:
    """The claim and its verdict in one line of Markdown; every number comes from `record`."""
    avg = record["scores"]["avg"]
    return (f"- **{record['claim']}** ({method_label} vs {base_label}): **{record['verdict']}**; Avg. difference "
            f"{avg['diff']:+.2f}, 95% interval [{avg['lo']:+.2f}, {avg['hi']:+.2f}]; {record['size']}.")
