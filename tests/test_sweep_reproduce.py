"""tools/reproduce.py without a model: the grid of rows and the generated comparison with the papers."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("reproduce", Path(__file__).parent.parent / "tools" / "reproduce.py")
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


def test_comparison_states_what_the_numbers_show() -> None:
    def row(key: str, label: str, avg: float, time: float = 1.0) -> dict:
        return {"key": key, "label": label, "avg": avg, "time": time}
    rows = {r["key"]: r for r in [row("prompteol", "PromptEOL", 60.0), row("prompteol+tp", "PromptEOL + TP", 58.0, 1.1),
                                  row("prompteol+cp", "PromptEOL + CP (NS)", 62.5), row("mean", "Mean pooling", 40.0)]}
    text = "\n".join(reproduce.comparison(rows))
    assert "TP does not improve PromptEOL here: Avg. 60.00 -> 58.00 (-2.00); paper (Llama-2-7B): +7.16." in text
    assert "CP improves PromptEOL here: Avg. 60.00 -> 62.50 (+2.50); paper (Llama-2-7B): +5.24." in text
    assert "Ranking by Avg. here: PromptEOL + CP (NS) > PromptEOL > PromptEOL + TP > Mean pooling." in text
    assert "PromptEOL + TP 1.10x (paper 1.04x)" in text
    assert "rankings over these 4 rows: 0.40." in text  # ranks differ by -1, -1, +2, 0: 1 - 6*6/(4*15)
