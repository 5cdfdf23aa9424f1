"""The package's layering: no import cycle, and no module imports from a layer above its own.

    errors, output_files ─ core ─ methods ─ fast ─ running ─ evaluation ─ integrations ─ cli
             sources (beside core: model sourcing needs no model code)
                                                   audit (beside evaluation: the audit view)

Imports inside functions count too (they are how a cycle hides). The package root
(`minidecoder/__init__.py`, "root") is the public facade: it may import from anywhere, lazily, and
only the two top layers (integrations, cli) import it.
"""
from __future__ import annotations

import ast
from pathlib import Path
from repo_paths import REPO

PACKAGE = REPO / "minidecoder"

# layer -> the layers it may import from (besides itself)
ALLOWED = {
    "errors": set(),
    "output_files": {"errors"},
    "core": {"errors", "output_files"},
    "sources": {"errors", "output_files"},
    "methods": {"errors", "output_files", "core"},
    "fast": {"errors", "output_files", "core", "methods"},
    "running": {"errors", "output_files", "core", "fast", "methods", "sources"},
    "evaluation": {"errors", "output_files", "core", "fast", "methods", "running", "sources"},
    "audit": {"errors", "output_files", "core", "fast", "methods", "running", "sources"},
    "integrations": {"root", "errors", "output_files", "core", "fast", "methods", "running", "sources", "evaluation"},
    "cli": {"root", "errors", "output_files", "core", "fast", "methods", "running", "sources", "evaluation", "integrations",
            "audit"},
}

# The fast paths run beneath the plain loop but import it (`fast.forward.FastForward` subclasses its
# `Forward`); no method imports them: the caller picks the executor. No import crosses the layering.
EXCEPTIONS: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minidecoder"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("minidecoder"))
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    wrong = []
    for module, targets in graph().items():
        layer = layer_of(module)
        if layer == "root" or layer == "__main__":
            continue
        assert layer in ALLOWED, f"{module}: layer {layer!r} is not in the layering table"
        for target in targets:
            other = layer_of(target)
            if other != layer and other not in ALLOWED[layer] and (module, target) not in EXCEPTIONS:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (depth-first search), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_plain_loop_imports_no_fast_path_running_or_evaluation() -> None:
    """methods/loop.py is what a reader reads: it stands alone, beneath nothing but core and methods."""
    found = imports_of(PACKAGE / "methods" / "loop.py")
    assert found, "the parser found no import at all"
    assert {layer_of(m) for m in found} <= {"core", "methods"}, sorted(found)


def test_no_import_cycle() -> None:
    edges = {module: {t for t in targets if not t.startswith(module + ".")}  # a package importing its children
             for module, targets in graph().items() if layer_of(module) != "root"}
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    edges = {module: set(targets) for module, targets in graph().items() if layer_of(module) != "root"}
    edges["minidecoder.core.model"].add("minidecoder.methods.tp")  # tp -> ... -> core.model -> tp
    assert find_cycle(edges) is not None
