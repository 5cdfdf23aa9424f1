"""Shared by the retrieval, classification and C-MTEB tests: a hashed bag-of-words encoder (deterministic,
no weights), and the CLI run in process."""
from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
import torch

from minidecoder.cli import main
from minidecoder.errors import InputError


def bag_of_words(texts: list[str], width: int = 256, characters: bool = False) -> torch.Tensor:
    """(N, width) counts of each word (or character, for Chinese) hashed into `width` buckets. Of a (context,
    text) pair only the text counts: a context is read by a model, never pooled, and a bag has no reader."""
    out = torch.zeros(len(texts), width)
    for row, text in enumerate(texts):
        text = text[1] if isinstance(text, tuple) else text
        for unit in (text if characters else text.lower().split()):
            out[row, zlib.crc32(unit.encode()) % width] += 1.0
    return out


def run_cli(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as stop:
        return stop.code


def assert_input_error(call: Callable[[], object], problem: str) -> None:
    """`call()` raises an InputError whose problem says `problem` and which names a way out."""
    with pytest.raises(InputError) as error:
        call()
    assert problem in error.value.problem and error.value.fix


def shallow_rows(tool) -> None:
    """tools/reproduce_retrieval.py's rows for a 4-block tiny model: every HTP or TP end at block 2, before the
    exit HTP Table 9's rule gives Llama (-3); the papers' end 7 is past its depth."""
    for family, rows in tool.ROWS.items():
        tool.ROWS[family] = [tool.Row(*row)._replace(options={**row[3], "end": 2}) if "end" in row[3] else tool.Row(*row)
                             for row in rows]
