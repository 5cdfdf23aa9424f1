"""The README is executable documentation: every ```python block runs, in order, in one namespace,
on the default model (the Hub / cuda / other-model lines are comments there)."""
from __future__ import annotations

import re

import pytest
from repo_paths import REPO

README = REPO / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_readme_has_the_blocks_it_documents():
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 6  # load/forward, Sites, encode, sentence-transformers, MTEB, chat
    joined = "\n".join(blocks)
    for call in ("minidecoder.load(", "SentenceEncoder(", "MinidecoderModule(", "MtebEncoder(", "apply_chat_template("):
        assert call in joined


@pytest.mark.real
def test_readme_python_blocks_run(capsys):
    namespace: dict = {"__name__": "readme"}
    for number, block in enumerate(python_blocks(README.read_text(encoding="utf-8")), start=1):
        try:
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # name the block, keep the traceback
            raise AssertionError(f"README python block {number} failed: {error!r}\n{block}") from error
    printed = capsys.readouterr().out
    assert "(3, 576) float32" in printed and "\ncosine\n" in printed
    assert "Paris" in printed  # the chat block's reply, as the README shows it
