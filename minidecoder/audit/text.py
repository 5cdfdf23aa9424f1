"""`minidecoder explain`'s record as text, for a terminal (`Explanation.format`).

Every table is built from the events the steps reported (`Step.report`), whatever their keys, so a
new method's step is printed without code here: one table per kind of event (its set of keys), a
sub-table for a list of per-head numbers (CP's steering).
"""
from __future__ import annotations

import torch

CONVENTION = ("output layers are hidden_states indices (0 = the embeddings, k = the raw output of block k counted "
              "from 1, L = the last block's output after the final norm); intervention blocks are 0-based and "
              "ranges half-open: [1, 7) is blocks 1..6")


def format_explanation(record, width: int = 100) -> str:
    """record: a audit.explain.Explanation."""
    L = record.model["blocks"]
    options = " ".join(f"{k}={v}" for k, v in record.method.items() if k != "method" and not k.endswith("_detail"))
    lines = [f"minidecoder explain: method {record.method['method']} on {record.model['name']} "
             f"({L} blocks, {record.model['dtype']})",
             f"text: {record.text!r}",
             f"options: {options}",
             f"layer convention: {CONVENTION}"]
    for p in record.passes:
        lines += _pass_lines(p, L, width)
    for name, value in record.details.items():
        lines += [""] + _detail_lines(name, value, record.passes[0] if record.passes else None)
    e = record.embedding
    lines += ["", f"embedding: {e.numel()} values, norm {float(e.norm()):.4f}, first four "
                  f"[{', '.join(f'{float(x):.4f}' for x in e[:4])}]"]
    if record.baseline is not None:
        lines.append(f"net effect: cosine {record.net_cosine:.4f} with the baseline: {record.baseline}")
    lines += [f"note: {n}" for n in record.notes]
    return "\n".join(lines)


def _pass_lines(p, L: int, width: int) -> list[str]:
    lines = ["", f"== {p.role} ==", f"prompt: {p.prompt!r}", "tokens (position:token):"]
    lines += _wrapped([f"{q}:{t!r}" for q, _, t in p.tokens], width)
    token = {q: t for q, _, t in p.tokens}
    if p.acts_on:
        lines.append("acts on:")
        lines += ["  " + _act_text(act, token) for act in p.acts_on]
    if p.records:
        lines.append(f"records: {', '.join(p.records)}")
    if p.output_index is not None:
        lines.append(f"reads: {describe_output(p.output_index, L)}: {p.reads}")
    else:
        lines.append(f"reads: {p.reads}")
    ran = p.blocks_run
    skipped = f"; early exit: blocks {ran[-1] + 1}..{L - 1} never run" if ran and ran[-1] < L - 1 else ""
    lines.append(f"blocks run: {ranges(ran)} ({len(ran)} of {L}{skipped})")
    if not p.interventions:
        return lines + ["per block: no intervention recorded"]
    kinds: dict[tuple, list[dict]] = {}
    for event in p.interventions:
        kinds.setdefault(tuple(event), []).append(event)
    for events in kinds.values():
        lines.append("per block: what the step did")
        lines += _table([{k: v for k, v in e.items() if not isinstance(v, (list, dict))} for e in events])
        for e in events:
            for key, value in e.items():
                if isinstance(value, dict):  # one row of totals
                    lines += [f"  block {e['block']}, {key}:"] + _table([value], indent=4)
                elif isinstance(value, list) and value and isinstance(value[0], dict):  # per head
                    lines += [f"  block {e['block']}, per {key}:"] + _table(value, indent=4)
    return lines


def _table(rows: list[dict], indent: int = 2) -> list[str]:
    """Rows of numbers under their keys, aligned; floats to 4 decimals."""
    keys = list(rows[0])
    cells = [[_cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[j]) for c in cells)) for j, k in enumerate(keys)]
    pad = " " * indent
    return [pad + " ".join(k.rjust(w) for k, w in zip(keys, widths))] + \
        [pad + " ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]


def _cell(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _detail_lines(name: str, value: torch.Tensor, first) -> list[str]:
    """A pass's own tensor: a matrix by its shape and largest entry, a vector over the tokens by its ten
    largest entries and their tokens."""
    token = {q: t for q, _, t in first.tokens} if first is not None else {}
    if value.dim() == 1:
        top = torch.argsort(value, descending=True)[:10].tolist()
        return [f"{name}: {value.numel()} values over the positions; the largest:"] + \
            [f"  {name}[{k:>3}] {float(value[k]):.4f}  {token.get(k, '?')!r}" for k in top]
    return [f"{name}: {tuple(value.shape)}, largest entry {float(value.max()):.4f}"]


def _wrapped(items: list[str], width: int) -> list[str]:
    lines, line = [], " "
    for item in items:
        if len(line) + 1 + len(item) > width and line.strip():
            lines.append(line)
            line = " "
        line += " " + item
    return lines + ([line] if line.strip() else [])


def _act_text(act: dict, token: dict) -> str:
    position = act["position"]
    text = f"position {position} {token.get(position, '?')!r}: {act['what']}"
    if "source" in act:
        text += f" <- position {act['source']} {token.get(act['source'], '?')!r}"
    if "blocks" in act:
        blocks = act["blocks"]
        text += f", before block(s) {ranges(blocks)}" if "source" in act else f", at block {ranges(blocks)}"
    if act.get("note"):
        text += f" ({act['note']})"
    return text


def ranges(positions: list[int]) -> str:
    """[3, 4, 5, 9] -> '3..5, 9'."""
    parts, start = [], None
    for k, p in enumerate(positions):
        if start is None:
            start = p
        if k + 1 == len(positions) or positions[k + 1] != p + 1:
            parts.append(f"{start}" if start == p else f"{start}..{p}")
            start = None
    return ", ".join(parts) or "none"


def describe_output(index: int, num_layers: int) -> str:
    if index == 0:
        return "hidden_states[0] (the embeddings)"
    if index == num_layers:
        return f"hidden_states[{index}] (block {index - 1}'s output after the final norm)"
    return f"hidden_states[{index}] (the raw output of block {index - 1})"
