"""The code and the docs cite the methods spec one way, "docs/spec.md section N" (or N.M: item M of
section N's numbered list), and every such citation names a section the checkout's docs/spec.md has."""
from __future__ import annotations

import re

from repo_paths import REPO

SPEC = REPO / "docs" / "spec.md"
CITATION = re.compile(r"docs/spec\.md[`)]?,? sections? (\d+(?:\.\d+)?)(?:\s*(?:-|,|and)\s*(\d+(?:\.\d+)?))?")
# The forms the citations had before: a bare "spec 5.4", "spec section 3", "spec (docs/spec.md) section 2",
# "shared/spec/methods.md section 11" (a path outside the checkout), "Spec `methods.md`", "(spec)".
OTHER_FORMS = re.compile(r"\bspec \d|\bspec section|\bspec \(|shared/spec/|`methods\.md`|(?<!\w)\(spec\)|\bthe spec's\b",
                         flags=re.IGNORECASE)


def citing_files() -> list:
    files = [*REPO.glob("minidecoder/**/*.py"), *REPO.glob("tools/**/*.py"), *REPO.glob("tests/**/*.py"),
             REPO / "README.md", REPO / "results" / "README.md", *REPO.glob("docs/*.md")]
    return [f for f in files if f not in (SPEC, REPO / "tests" / "cli" / "test_spec_citations.py")]


def spec_sections(text: str) -> dict[str, set[str]]:
    """Section number -> the numbers of its numbered list's items."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        heading = re.match(r"## (\d+)\. ", line)
        if heading:
            current = sections.setdefault(heading.group(1), set())
        elif current is not None and (item := re.match(r"(\d+)\. ", line)):
            current.add(item.group(1))
    return sections


def unresolved(text: str, sections: dict[str, set[str]]) -> list[str]:
    bad = []
    for match in CITATION.finditer(text):
        for number in filter(None, match.groups()):
            section, _, item = number.partition(".")
            if section not in sections or (item and item not in sections[section]):
                bad.append(f"{match.group(0)!r}: no section {number}")
    return bad


def test_every_spec_citation_names_a_section_of_docs_spec():
    sections = spec_sections(SPEC.read_text(encoding="utf-8"))
    bad = [f"{path.relative_to(REPO)}: {problem}" for path in citing_files()
           for problem in unresolved(path.read_text(encoding="utf-8"), sections)]
    assert not bad, "\n".join(bad)


def test_the_spec_is_cited_one_way():
    other = [f"{path.relative_to(REPO)}:{number}: {line.strip()}" for path in citing_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if OTHER_FORMS.search(line)]
    assert not other, "cite the spec as `docs/spec.md section N`:\n" + "\n".join(other)


def test_a_citation_is_checked_against_sections_and_their_items():
    sections = spec_sections("## 4. TP\n\n1. insert\n2. copy\n\n## 11. Benchmarks\n")
    assert sections == {"4": {"1", "2"}, "11": set()}
    assert unresolved("see docs/spec.md section 4.2 and docs/spec.md sections 4.1-4.2, 11", sections) == []
    assert unresolved("(docs/spec.md section 4.3)", sections) == ["'docs/spec.md section 4.3': no section 4.3"]
    assert unresolved("[docs/spec.md](docs/spec.md) sections 11-13", sections) == [
        "'docs/spec.md) sections 11-13': no section 13"]
    assert unresolved("| `docs/spec.md` section 4.9 |", sections) == ["'docs/spec.md` section 4.9': no section 4.9"]


def test_the_old_forms_are_recognised():
    for line in ("(spec 5.4)", "spec section 11", "(spec (docs/spec.md) section 2)",
                 "(../shared/spec/methods.md section 11)", "Spec `methods.md` section 4.", "last token (spec)"):
        assert OTHER_FORMS.search(line), line
    for line in ("module_from_spec(spec)", "docs/spec.md section 5.4", "spec.loader.exec_module(tool)"):
        assert not OTHER_FORMS.search(line), line
