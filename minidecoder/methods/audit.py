"""What each step tells the audit view (minidecoder.audit.explain): the positions it acts on and what it
did at each block. Kept apart from the paper's loop: nothing here changes an embedding, and a reader of a
method needs none of it. A step class takes its hooks by inheriting the matching class here
(`CopyRows(CopiesAudited, Step)`); a new step that says nothing inherits `Audited`'s empty answers.

    acts_on(row)                       -> [{"position": column, ...}]   where, in batch columns
    report(i, where, old, new, shift)  -> [{"block": i, ...}]           what, at block i

`where` is "stream" (before the block: old/new h), a site name (old/new value of an edit) or "fold"
(old/new A); `shift` is the batch column of the stream's column 0.
"""
from __future__ import annotations

from typing import Any

import torch


class Audited:
    """The hooks every step has; this base reports nothing (PromptEOL, pooling, Echo)."""

    def acts_on(self, row: int) -> list[dict]:
        """The positions this step acts on in batch row `row`, in batch columns."""
        return []

    def report(self, i: int, where: str, old: Any, new: Any, shift: int) -> list[dict]:
        """What the step did at block i (see the module docstring)."""
        return []


class CopiesAudited(Audited):
    """`methods.loop.CopyRows` (TP, HTP): each row written, its norm, the norm it replaced, their cosine."""

    def acts_on(self, row: int) -> list[dict]:
        return [{"position": t, "source": s, "blocks": sorted(self.blocks),
                 "note": "h[position] <- h[source] before each of these blocks"}
                for b, t, s in zip(self.rows.tolist(), self.target.tolist(), self.source.tolist()) if b == row]

    def report(self, i: int, where: str, old, new, shift: int) -> list[dict]:
        if where != "stream":
            return []
        events = []
        for b, t, s in zip(self.rows.tolist(), self.target.tolist(), self.source.tolist()):
            written, replaced = new[b, t].float(), old[b, t].float()
            events.append({"block": i, "target": t + shift, "source": s + shift,
                           "written_norm": float(written.norm()), "replaced_norm": float(replaced.norm()),
                           "cosine": float(torch.nn.functional.cosine_similarity(written, replaced, dim=0))})
        return events


class SteeringAudited(Audited):
    """`methods.cp.SteerLastToken`: a, b, a - b and the steering term a' written in a's place (norms and
    cosines), per head for z."""

    def acts_on(self, row: int) -> list[dict]:
        return [{"position": int(self.last[row]), "what": f"a: {self.site} steered to steer(a, b)",
                 "blocks": sorted(self.blocks), "note": f"mode {self.mode}, alpha {self.alpha}"}]

    def report(self, i: int, where: str, old, new, shift: int) -> list[dict]:
        if where != self.site:
            return []
        row = int(self.last[0])
        a, steered, b = old[0, row].float().cpu(), new[0, row].float().cpu(), self.b[0].float().cpu()
        event = {"block": i, "site": where, "position": row + shift, "total": _norms(a, b, steered)}
        if a.dim() == 2:  # z: (H, D), one row per head
            event["heads"] = [{"head": h, **_norms(a[h], b[h], steered[h])} for h in range(a.shape[0])]
        return [event]


def _norms(a: torch.Tensor, b: torch.Tensor, steered: torch.Tensor) -> dict:
    def cos(x: torch.Tensor, y: torch.Tensor) -> float:
        return float(torch.nn.functional.cosine_similarity(x.flatten(), y.flatten(), dim=0))
    return {"a_norm": float(a.norm()), "b_norm": float(b.norm()), "a_minus_b_norm": float((a - b).norm()),
            "steering_norm": float(steered.norm()), "cos_a_b": cos(a, b),
            "cos_steering_a": cos(steered, a) if float(steered.norm()) > 0 else 0.0}


class FoldAudited(Audited):
    """`methods.reba.FoldAttention`: how much block i raised the running maximum (entries raised, largest
    and total increase)."""

    def report(self, i: int, where: str, old, new, shift: int) -> list[dict]:
        if where != "fold":
            return []
        delta = new - (torch.zeros_like(new) if old is None else old)  # >= 0: a running maximum only rises
        return [{"block": i, "raised": int((delta > 0).sum()), "max_increase": float(delta.max()),
                 "total_increase": float(delta.sum())}]


class PartsAudited(Audited):
    """`methods.composite.Steps`: what each part acts on and reports, in order."""

    def acts_on(self, row: int) -> list[dict]:
        return [act for part in self.parts for act in part.acts_on(row)]

    def report(self, i: int, where: str, old: Any, new: Any, shift: int) -> list[dict]:
        return [event for part in self.parts for event in part.report(i, where, old, new, shift)]
