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


def option_claims(text: str) -> list[tuple[str, str, str]]:
    """(methods of the row, option, value) for every `option=value` in the knobs column (the third) of a
    method table's rows: README's "main knobs (defaults)" and docs/methods.md's "knobs (option = default)"."""
    claims = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) >= 3:
            names = " ".join(re.findall(r"`([\w+]+)`", cells[0].split("(`methods/")[0]))
            knobs = cells[2]
            while re.search(r"\([^()]*\)", knobs):  # asides, `(pooling=last only)`, are not defaults
                knobs = re.sub(r"\([^()]*\)", "", knobs)
            claims += [(names, key, value) for key, value in re.findall(r"`(\w+)=([^`/]*)`?", knobs)]
    return claims


def test_the_method_tables_state_each_options_default():
    """The method tables are written by hand (methods.base says so), so every `option=value` they give must
    be an option of the row's method (or of the method it builds, `cp tp=true`) with that default."""
    import dataclasses
    import json

    from minidecoder.methods.base import METHODS

    wrong, checked = [], 0
    for doc in (README, REPO / "docs" / "methods.md"):
        for names, key, value in option_claims(doc.read_text(encoding="utf-8")):
            classes = [METHODS[n] for n in names.split() if n in METHODS]
            classes += [METHODS[e] for c in classes for e in c.extensions.values()]
            fields = {f.name: f for c in classes for f in dataclasses.fields(c)}
            if not classes or "<" in value or ".." in value:  # a placeholder (`template=<above>`, `tasks=[0..7]`)
                continue
            if key not in fields:
                wrong.append(f"{doc.name}: {names}: no option {key!r}")
                continue
            field = fields[key]
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            try:
                stated = json.loads({"None": "null", "True": "true", "False": "false"}.get(value, value))
            except json.JSONDecodeError:
                stated = value.strip('"')
            checked += 1
            if stated != default:
                wrong.append(f"{doc.name}: {names}: {key}={value}, but the default is {default!r}")
    assert checked > 40 and not wrong, wrong
