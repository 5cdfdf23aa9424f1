"""Reading the benchmark folders of `../shared/data` (BEIR, MTEB, C-MTEB): the folder, each file's
lines, and errors that name the file, the line and the way out.

Every reader of the retrieval, classification and C-MTEB families goes through these three calls, so a
missing file, a line that does not parse or text that is not UTF-8 reads the same everywhere:

    folder = resolve_data_folder("--data", "beir", "the folder holding scifact/ and nfcorpus/")
    for number, line in numbered_lines(folder / "scifact" / "queries.jsonl"): ...
    record = json_line(path, number, line)

and every reader of an eval family (these, SentEval's transfer and STS files) ends a file with the same two:
`require_rows` (a file with no rows, empty or a header alone, is an error naming it, never an empty array
handed to scikit-learn) and `limit_that_cut` (the one stamp rule: a run is limited only where its --limit
left items of the data unscored).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from minidecoder.errors import InputError, describe_unusable_file


def resolve_data_folder(data_dir: str | Path | None, folder: str, holds: str) -> Path:
    """`data_dir` if given, else `$MINIDECODER_<FOLDER>_DATA` or ../shared/data/<folder> (`sources.paths.shared_data_dir`);
    it must be a folder."""
    from minidecoder.sources.paths import shared_data_dir

    if data_dir is not None:
        path: Path | None = Path(data_dir).expanduser()
    else:
        path = shared_data_dir(folder, f"MINIDECODER_{folder.upper()}_DATA")
    if path is None or not path.is_dir():
        why = "(none found)" if path is None else f"{path} {describe_unusable_file(path, 'folder')}"
        if path is not None and path.is_file():
            why = f"{path} is a file, not a folder"
        raise InputError(f"{folder} data folder {why}",
                         f"pass --data DIR (or set MINIDECODER_{folder.upper()}_DATA) to {holds}")
    return path


def require_file(path: Path, what: str) -> Path:
    """`path` if it is a readable file, else an InputError naming it and what it should hold."""
    if not path.is_file():
        raise InputError(f"{what} {path} {describe_unusable_file(path)}",
                         "point --data at a complete copy of the data (the folder's README lists its files)")
    return path


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its end) of a UTF-8 text file; a UTF-8 byte order mark is dropped.
    Line ends are \\n or \\r\\n (SciFact's qrels use CRLF)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise InputError(f"{path} line {line} is not valid UTF-8", "re-encode the file as UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    for number, line in enumerate(text.split("\n"), start=1):
        line = line[:-1] if line.endswith("\r") else line
        if line.strip():
            yield number, line


def json_line(path: Path, number: int, line: str) -> dict:
    """One JSON Lines record (an object), or an InputError naming the file and line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{path} line {number} is not JSON ({error.msg} at column {error.colno})",
                         "fix or remove that line (one JSON object a line)") from None
    if not isinstance(record, dict):
        raise InputError(f"{path} line {number} is not a JSON object", "write one JSON object a line")
    return record


def field(path: Path, number: int, record: dict, key: str) -> str:
    """record[key] as a string (a number is taken as its text: BEIR ids are sometimes written as numbers)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{path} line {number} has no string {key!r} field (got {value!r})",
                         f"give every line a {key!r} string")
    return str(value)


def require_rows(path: Path, rows: int, what: str = "rows", why: str = "it is empty or a header alone") -> int:
    """`rows` if the file gave any, else an InputError naming the file, what it lacks and `why`."""
    if rows == 0:
        raise InputError(f"{path} holds no {what} ({why})",
                         "restore the file, or point --data at a complete copy of the data (the folder's README "
                         "lists its files)")
    return rows


def limit_that_cut(limit: int | None, sizes: Iterable[int]) -> int | None:
    """The limit a run is stamped with: `limit` where it left some of the data unscored (a file, set or split of
    `sizes` holds more items than it), else None. A --limit at least the size of everything scores every item:
    a full run, comparable to published results, and the claims tools count it."""
    return limit if limit is not None and any(size > limit for size in sizes) else None


def run_limit(limits: Iterable[int | None]) -> int | None:
    """The stamp's limit of a run over several sets: the limit where any set was cut, else None."""
    return next((limit for limit in limits if limit is not None), None)
