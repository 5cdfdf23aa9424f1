"""The methods package reads as the reference it is: nothing in it imports the fast paths (they live
beneath the loop, and the caller picks the executor), and masked mean pooling is written once
(`methods.loop.masked_mean`), so every mean over tokens rounds the same way."""
from __future__ import annotations

import ast
import re

from repo_paths import REPO

METHODS = REPO / "minidecoder" / "methods"


def imported_modules(path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved against minidecoder.methods."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "minidecoder.methods" if node.level == 1 else "minidecoder" if node.level == 2 else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def test_no_method_file_imports_the_fast_paths() -> None:
    offending = [f"{path.name}:{line} imports {module}" for path in sorted(METHODS.glob("*.py"))
                 for line, module in imported_modules(path)
                 if module == "minidecoder.fast" or module.startswith("minidecoder.fast.")]
    assert not offending, offending


# A masked mean divides a sum over the token dimension by a count: `(h * mask).sum(dim=1) / ...` or an
# einsum over the tokens divided the same way.
MASKED_SUM = re.compile(r"\.sum\(dim=1\)\s*/|einsum\([^)]*\"bt,bte->be\"[^)]*\)\s*/")


def test_masked_mean_pooling_is_written_once() -> None:
    written = [f"{path.name}:{number}: {line.strip()}" for path in sorted(METHODS.glob("*.py"))
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
               if MASKED_SUM.search(line)]
    assert len(written) == 1 and written[0].startswith("loop.py:"), written


# README's "Reading the code" table names each method's lines: `methods/tp.py:55-73` (`TPStep`).
LINES = re.compile(r"`(methods/\w+\.py):(\d+)-(\d+)` \(`([\w.]+)`")


def defined_at(path, dotted: str) -> tuple[int, int] | None:
    """(first, last) line of the class or function `dotted` (`TP.passes`) in `path`; None if absent."""
    body, node = ast.parse(path.read_text(encoding="utf-8")).body, None
    for name in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node.lineno, node.end_lineno


def test_the_readme_points_at_the_lines_that_hold_each_method() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Reading the code"):]
    pointers = LINES.findall(section[:section.index("\n## ", 1)])
    assert len(pointers) >= 8, pointers
    stale = [f"{path}:{first}-{last} ({name}) is at {found}" for path, first, last, name in pointers
             if (found := defined_at(REPO / "minidecoder" / path, name)) != (int(first), int(last))]
    assert not stale, f"README's Reading the code table points at moved lines: {stale}"
