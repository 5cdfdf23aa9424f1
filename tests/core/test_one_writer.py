"""One durable writer: in the library, its tools and reproduce/, only `minidecoder/output_files.py` renames,
syncs, links or locks a file, and only it reads a file to hash it. A second copy of the mechanism (a module's own temporary file and `os.replace`)
is how a write that skips the flush, or leaves half a file behind, gets in. And what it publishes is on
the disk before it is named.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
from repo_paths import REPO

PACKAGE = REPO / "minidecoder"
WRITER = PACKAGE / "output_files.py"

# os.* and fcntl.* calls that publish a file or guard a write: the writer's alone
DURABLE_CALLS = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("os", "link"), ("os", "fsync"),
                 ("os", "fdatasync"), ("fcntl", "flock"), ("fcntl", "lockf")}
FILE_READS = {"open", "read_bytes"}  # open(path), path.open(), path.read_bytes()


def modules() -> list[Path]:
    """Every module of the library and of the tools and reproduction app beside it, the writer excepted."""
    return sorted(path for folder in (PACKAGE, REPO / "tools", REPO / "reproduce") for path in folder.rglob("*.py")
                  if path != WRITER)


def calls_in(node: ast.AST) -> list[ast.Call]:
    return [call for call in ast.walk(node) if isinstance(call, ast.Call)]


def dotted(call: ast.Call) -> tuple[str, str] | None:
    """("os", "replace") for `os.replace(...)`; None for anything not called on a plain name."""
    function = call.func
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
        return function.value.id, function.attr
    return None


def called_name(call: ast.Call) -> str | None:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)


def durable_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(REPO)}:{call.lineno} {'.'.join(name)}"
            for call in calls_in(tree) if (name := dotted(call)) in DURABLE_CALLS]


def file_hashing(path: Path) -> list[str]:
    """The functions of `path` that both read a file and build a sha256: a file hashed by hand."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        calls = calls_in(function)
        if any(dotted(call) == ("hashlib", "sha256") for call in calls) \
                and any(called_name(call) in FILE_READS for call in calls):
            found.append(f"{path.relative_to(REPO)}:{function.lineno} {function.name}")
    return found


def test_only_the_writer_renames_syncs_links_or_locks_a_file() -> None:
    found = [line for path in modules() for line in durable_calls(path)]
    assert not found, "write through minidecoder.output_files instead:\n" + "\n".join(found)


def test_only_the_writer_hashes_a_file() -> None:
    found = [line for path in modules() for line in file_hashing(path)]
    assert not found, "hash with output_files.sha256_file (or Sha256Reader) instead:\n" + "\n".join(found)


def test_the_scans_find_what_they_look_for() -> None:
    """The writer itself holds each kind, so a scan that found nothing there would be blind."""
    assert {line.rsplit(" ", 1)[1] for line in durable_calls(WRITER)} >= {"os.replace", "os.link", "os.fsync",
                                                                          "fcntl.flock"}
    assert [line.rsplit(" ", 1)[1] for line in file_hashing(WRITER)] == ["sha256_files"]


@pytest.fixture
def unsynced_names(monkeypatch) -> list[str]:
    """Every file or folder given a name (rename or hard link) before its bytes were synced to the disk."""
    synced: set[int] = set()
    found: list[str] = []
    fsync, replace, link = os.fsync, os.replace, os.link

    def recording_fsync(handle: int) -> None:
        synced.add(os.fstat(handle).st_ino)
        fsync(handle)

    def checked(name):
        def publish(source, target, *args, **kwargs):
            entries = [Path(source), *Path(source).rglob("*")] if Path(source).is_dir() else [Path(source)]
            found.extend(str(entry) for entry in entries if entry.stat().st_ino not in synced)
            return name(source, target, *args, **kwargs)
        return publish

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", checked(replace))
    monkeypatch.setattr(os, "link", checked(link))
    return found


def test_what_is_published_is_on_the_disk_before_it_is_named(tmp_path, unsynced_names) -> None:
    """A rename can reach the disk before the data it names: a power cut then leaves a complete-looking empty
    file. So every publish syncs first: a writer that syncs nothing itself (a figure's `savefig(tmp)`), a
    run's output, kept work, and a converted folder with its files."""
    from minidecoder.output_files import staging, swap_into_place, write_chunk, write_file, write_whole

    write_file(tmp_path / "figure.png", lambda tmp: tmp.write_bytes(b"a figure"))
    write_whole(tmp_path / "run.json", b"{}")
    write_chunk(tmp_path / "chunk-000000.npy", np.zeros((2, 3), np.float32),
                tmp_path / "chunk-000000.json", {"rows": 2})
    target = tmp_path / "converted"
    with staging(target, folder=True) as partial:
        (partial / "config.json").write_text("{}")
        (partial / "model.safetensors").write_bytes(b"weights")
        swap_into_place(partial, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk-000000.json", "chunk-000000.npy", "converted",
                                                          "figure.png", "run.json"]
    assert not unsynced_names, unsynced_names


def test_two_threads_writing_one_path_take_turns(tmp_path) -> None:
    """The lock was re-entrant per process, so a second thread writing the same output walked in while the first
    wrote, into the same temporary file: the published file mixed both threads' bytes. A thread now takes the
    lock as another process would: it waits (`wait=True`) or is refused."""
    import threading
    import time

    from minidecoder.errors import OutputError
    from minidecoder.output_files import write_streamed

    path = tmp_path / "out.bin"
    started = threading.Event()

    def writer(byte: bytes) -> None:
        def fill(handle) -> None:
            for _ in range(20):
                handle.write(byte * 4096)
                started.set()
                time.sleep(0.005)  # the other thread runs meanwhile
        write_streamed(path, fill, overwrite=True, wait=True)

    first = threading.Thread(target=writer, args=(b"a",))
    first.start()
    started.wait()
    writer(b"b")  # while the first thread writes
    first.join()
    assert path.read_bytes() in (b"a" * 4096 * 20, b"b" * 4096 * 20)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    def hold_and_write(byte: bytes, holding: threading.Event, done: threading.Event) -> None:
        from minidecoder.output_files import output_lock
        with output_lock(path):
            holding.set()
            done.wait(10)

    holding, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_and_write, args=(b"a", holding, done))
    holder.start()
    holding.wait()
    try:
        with pytest.raises(OutputError, match="another thread of this process is writing"):  # no wait: refused
            write_streamed(path, lambda handle: handle.write(b"c"), overwrite=True)
    finally:
        done.set()
        holder.join()
