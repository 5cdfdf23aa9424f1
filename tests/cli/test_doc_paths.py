"""Every path the documentation names exists in the checkout, so a reader who follows one finds it.

A path is a backticked span (or the script a backticked command runs, or a Markdown link) whose first
part is a top-level entry of the checkout (`tools/bench.py`, `results/claims.md`) or a folder of the
package, which the docs name without the `minidecoder/` prefix (`methods/tp.py`). Other spans are not
paths of this checkout: file names inside a model folder (`config.json`), the papers' repositories
(`snap-research/HTP`), placeholders (`results/<model>.json`) and what a command makes (`weights/...`).
"""
from __future__ import annotations

import posixpath
import re
import subprocess

import pytest
from repo_paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "results" / "README.md",
        REPO / "tools" / "gpu" / "README.md"]
PACKAGE = REPO / "minidecoder"
MADE_BY_A_COMMAND = ("weights/", "results/sweeps/", "results/sts/")  # written by the commands the docs show
SCRIPT = re.compile(r"^(?:python3?|bash|torchrun(?: --\S+(?: \d+)?)*)\s+(\S+\.(?:py|sh))\b")


def tracked() -> set[str]:
    """The files and folders a fresh clone has (git's index, not the working tree with its outputs)."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {"/".join(f.split("/")[:i]) + "/" for f in files for i in range(1, f.count("/") + 1)}
    return set(files) | folders


def named_paths(text: str) -> list[str]:
    return named_spans(text) + named_links(text)


def _unfenced(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)  # fenced blocks: commands' output


def named_spans(text: str) -> list[str]:
    """Backticked paths, and the script a backticked command runs: named from the checkout's root, as the
    commands beside them run (`../shared/data` is the folder beside the checkout, in any doc)."""
    spans = re.findall(r"`([^`\n]+)`", _unfenced(text))
    found = [span for span in spans if " " not in span.strip()]
    return found + [m.group(1) for span in spans if (m := SCRIPT.match(span.strip()))]


def named_links(text: str) -> list[str]:
    """Markdown links to files of the checkout: relative to the doc's own folder, as a renderer reads them."""
    return [link for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _unfenced(text)) if "://" not in link]


def repo_path(name: str, doc_folder: str, link: bool = True) -> str | None:
    """`name` as a path from the checkout's root, or None when it is not a path of this checkout. A link's
    `../` climbs from `doc_folder`; a backticked span's from the checkout's root (`named_spans`)."""
    name = re.split(r"::|:\d", name)[0].rstrip(".,;:")
    if not name or re.search(r"[<>{}*$|]|\.\.\.|^~|^/|^\./", name):
        return None
    if name.startswith("../"):
        name = posixpath.normpath(posixpath.join(doc_folder if link else "", name))
        if name.startswith("../"):
            return None  # outside the checkout (../shared)
    elif doc_folder and "/" not in name.rstrip("/") and (REPO / doc_folder / name).exists():
        name = f"{doc_folder}/{name}"  # a link beside the doc
    first = name.split("/")[0]
    if (PACKAGE / first).is_dir() and first != "minidecoder" and "/" in name:
        return f"minidecoder/{name}"
    if (REPO / first).exists() and ("/" in name or (REPO / name).suffix == ".md"):
        return name
    return None


def exists(path: str, have: set[str]) -> bool:
    """In a fresh clone; `fast/plan.choose` (a module's function or class) counts when the module defines it."""
    if path in have or path.rstrip("/") + "/" in have:
        return True
    folder, _, dotted = path.rpartition("/")
    module, _, attribute = dotted.partition(".")  # `methods/reba.FoldAttention.fold`: the class is looked up
    module, attribute = f"{folder}/{module}", attribute.split(".")[0]
    if f"{module}.py" not in have or not attribute.isidentifier():
        return False
    source = (REPO / f"{module}.py").read_text(encoding="utf-8")
    return re.search(rf"^\s*(?:def|class) {attribute}\b|^{attribute}\s*[:=]", source, flags=re.MULTILINE) is not None


def missing_paths() -> list[str]:
    have = tracked()
    missing = []
    for doc in DOCS:
        folder = doc.parent.relative_to(REPO).as_posix() if doc.parent != REPO else ""
        text = doc.read_text(encoding="utf-8")
        for name, link in [(span, False) for span in named_spans(text)] + [(link, True) for link in named_links(text)]:
            path = repo_path(name, folder, link)
            if path is not None and not path.startswith(MADE_BY_A_COMMAND) and not exists(path, have):
                missing.append(f"{doc.relative_to(REPO)}: `{name}`")
    return sorted(set(missing))


def test_every_path_the_docs_name_exists():
    missing = missing_paths()
    assert not missing, "the docs name paths this checkout does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize("name, expected", [
    ("methods/tp.py", "minidecoder/methods/tp.py"),
    ("tools/bench.py", "tools/bench.py"),
    ("tests/evaluation/test_transfer.py::test_x", "tests/evaluation/test_transfer.py"),
    ("minidecoder/convert/", "minidecoder/convert/"),
    ("results/<model>.json", None),
    ("snap-research/HTP", None),
    ("config.json", None),
    ("../shared/data/sts", None),
    ("./x", None),
])
def test_what_counts_as_a_path(name, expected):
    assert repo_path(name, "") == expected


@pytest.mark.parametrize("name, folder, expected", [
    ("../tools/gpu/README.md", "results", "tools/gpu/README.md"),
    ("../../docs/benchmarks.md", "tools/gpu", "docs/benchmarks.md"),
    ("../../../shared/data", "tools/gpu", None),  # beside the checkout, not in it
    ("claims.md", "results", "results/claims.md"),
])
def test_a_link_is_read_from_its_own_folder(name, folder, expected):
    assert repo_path(name, folder) == expected


@pytest.mark.parametrize("name, folder, expected", [
    ("../shared/data", "tools/gpu", None),  # the folder beside the checkout, as the commands read it
    ("../shared/data/sts", "docs", None),
    ("tools/gpu/run.sh", "tools/gpu", "tools/gpu/run.sh"),
])
def test_a_backticked_span_is_read_from_the_checkouts_root(name, folder, expected):
    assert repo_path(name, folder, link=False) == expected


@pytest.mark.parametrize("path, found", [
    ("minidecoder/methods/tp.py", True),
    ("minidecoder/methods/", True),
    ("minidecoder/convert/", False),  # moved to minidecoder/sources/convert/
    ("minidecoder/methods/loop.CopyRows", True),
    ("minidecoder/methods/tp.NoSuchStep", False),
    ("minidecoder/methods/reba.FoldAttention.fold", True),
])
def test_a_named_path_or_function_is_looked_up(path, found):
    assert exists(path, tracked()) is found


def test_commands_and_links_name_their_paths():
    text = "Run `python tools/bench.py --limit 8` or `torchrun --nproc_per_node 2 tools/embed_distributed.py x`; " \
           "see [the spec](docs/spec.md#section) and `methods/tp.py`, not `pip install x`.\n```\n`tools/none.py`\n```\n"
    assert named_paths(text) == ["methods/tp.py", "tools/bench.py", "tools/embed_distributed.py", "docs/spec.md"]


def command_helps() -> list[str]:
    """Every `--help` text the CLI prints: each command's, and each eval family's."""
    import argparse

    from minidecoder.cli import build_parser

    helps, parsers = [], [build_parser()]
    while parsers:
        parser = parsers.pop()
        helps.append(parser.format_help())
        parsers += [choice for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                    for choice in action.choices.values()]
    return helps


def test_every_model_the_docs_and_helps_name_is_known():
    """Found: `eval sts --help` showed `--model smollm2-135m`, which no command resolves. A name in an example
    is a registry name; a placeholder (MODEL, <model>) or a Hub id (owner/name) is left alone."""
    from minidecoder.sources.registry import is_known

    texts = [doc.read_text(encoding="utf-8") for doc in DOCS] + command_helps()
    named = {name.rstrip("`.,;:)") for text in texts for name in re.findall(r"--model[ =](\S+)", text)}
    unknown = sorted(name for name in named
                     if not is_known(name) and not re.search(r"[A-Z<>{}$/]", name) and not name.startswith("."))
    assert len(named) > 3 and not unknown, unknown


def test_every_help_description_is_whole_sentences():
    """Found: `demo --help` printed "... the default model if needed," (`__doc__.splitlines()[0]` cut its
    docstring's first sentence at the line's end). A description a parser prints ends as a sentence does."""
    import argparse

    from minidecoder.cli import build_parser

    cut, parsers = [], [build_parser()]
    while parsers:
        parser = parsers.pop()
        if parser.description and not parser.description.rstrip().endswith((".", ")")):
            cut.append(f"{parser.prog}: ...{parser.description.rstrip()[-40:]!r}")
        parsers += [choice for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                    for choice in action.choices.values()]
    assert not cut, cut


def test_the_families_helps_name_every_method_that_takes_the_instruction():
    """Found: `eval retrieval --help` and `eval classification --help` said the instruction goes to "mean,
    last, echo, htp and reba", leaving out tp with pooling=mean, which `family.instruction_for` gives it."""
    from minidecoder.evaluation import classification, retrieval
    from minidecoder.evaluation.family import INSTRUCT_METHODS

    said = ", ".join(INSTRUCT_METHODS[:-1]) + f", {INSTRUCT_METHODS[-1]} and tp with pooling=mean"
    stale = [module.__name__ for module in (retrieval, classification) if said not in module.COMMAND_HELP]
    assert not stale, f"{stale} do not say the instruction goes to {said}"


def command_examples(text: str) -> list[str]:
    """Every `minidecoder ...` command written out in full in `text`: a backticked span, or a line of an
    indented or fenced example (a trailing `\\` joins the next line). Templates are left out: a span with a
    placeholder (NAME, FILE, [--opt ...], a|b) is the shape of a command, not one to run."""
    text = re.sub(r"\\\n\s*", "", text)
    found = re.findall(r"`(minidecoder [^`\n]+)`", text)
    found += [m.group(1).strip() for m in re.finditer(r"^(?: {4,}|\$ )(minidecoder .+)$", text, flags=re.MULTILINE)]
    shape = re.compile(r"\[|\.\.\.|\||\b(?:NAME|FILE|PROMPT|TEXT|DIR|OUT_DIR|BENCHMARK|M|N)\b")
    named = re.compile(r"^minidecoder(?: [a-z-]+){0,2}$")  # a command named, not run: `minidecoder eval sts`
    return [c.split("  #")[0].strip() for c in found if not shape.search(c) and not named.match(c.strip())]


def test_every_command_example_parses():
    """Found: `sweep --help`'s example `--layers -2,-1` failed as written (argparse reads `-2,-1` as an
    option; `--layers=-2,-1` is the form that works). Every example in the docs and the `--help` texts
    parses with the CLI's own parser (running them is the docs' audit; parsing is cheap)."""
    import shlex

    from minidecoder.cli import build_parser

    examples = sorted({c for text in [doc.read_text(encoding="utf-8") for doc in DOCS] + command_helps()
                       for c in command_examples(text)})
    failed = []
    for command in examples:
        try:
            build_parser().parse_args(shlex.split(command)[1:])
        except SystemExit as exit:
            if exit.code != 0:  # 0: `--help`
                failed.append(command)
    assert len(examples) > 10 and not failed, failed
