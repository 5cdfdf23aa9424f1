"""The reproduction application: the papers' claims, where each row's settings come from, and the work
the table tools keep between sittings. It imports the library; the library never imports it.

- `claims`: each paper's claims as data and the paired-interval verdict that judges them.
- `provenance`: where each row's settings come from, written under each table.
- `pieces`: STS test sets scored in kept pieces, so a row longer than a sitting resumes.

The tools that build the tables (tools/reproduce*.py, claims_table.py, family_claims.py) import it from
the checkout's root.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path) -> tuple[Any, str | None]:
    """The JSON value at `path` and None, or None and why there is none to read: the file does not exist, is
    not a file, or is not readable JSON (cut short by a full disk or an interrupted copy, hand-edited, another
    kind of file). Each tool says what it expected and the way out around this reason."""
    if not path.exists():
        return None, "does not exist"
    if not path.is_file():
        return None, "is not a file"
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"is not readable JSON ({error})"
    except OSError as error:  # a permission, a disk gone
        return None, f"could not be read ({error.strerror or error})"


def run_tool(main, name: str) -> None:
    """A table tool's entry point: exit with `main()`'s status; an error in the user's input (a
    MinidecoderError, named with its fix) is one line and status 2, as minidecoder's CLI prints it, not a
    traceback."""
    import sys

    from minidecoder.errors import MinidecoderError

    try:
        status = main()
    except MinidecoderError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(status)
