"""Output locations: checked before anything expensive runs, locked while a job writes them.

    check_writable_folder(path.parent, "the output folder")   # before a model loads
    with output_lock(path, wait=False): ...                  # one run per output at a time

The lock is an advisory `fcntl.flock` on `.NAME.lock` beside the output, holding the owner's process
id: the kernel drops it when the process ends, however it ends (kill -9 included), so a crashed run
never leaves a stale lock behind.
"""
from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from minidecoder.errors import OutputError


def check_writable_folder(folder: str | Path, what: str = "the output folder") -> None:
    """Create `folder` if needed and prove a file can be written there, or raise OutputError saying why."""
    folder = Path(folder) if str(folder) else Path(".")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{what} {folder} is a file, not a folder", "choose an output path inside a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".minidecoder-write-test-{uuid.uuid4().hex[:8]}"
        with probe.open("wb") as handle:
            handle.write(b"x")
        probe.unlink()
    except OSError as error:
        reason = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
                  errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded"}
        raise OutputError(f"{what} {folder} is not writable ({reason.get(error.errno, error.strerror or error)})",
                          "choose a folder you can write to, or fix its permissions or free space; "
                          "nothing was loaded or computed yet") from None


def lock_path(output: str | Path) -> Path:
    output = Path(output)
    return output.parent / f".{output.name}.lock"


def lock_holder(output: str | Path) -> int | None:
    """The process id holding the lock on `output`, or None when nobody holds it."""
    import fcntl

    path = lock_path(output)
    try:
        handle = path.open("rb")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read().decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def check_not_locked(output: str | Path) -> None:
    """Raise OutputError if another run holds `output` (a cheap check before a model loads)."""
    pid = lock_holder(output)
    if pid is not None:
        raise OutputError(_held_message(output, pid), _held_fix())


@contextlib.contextmanager
def output_lock(output: str | Path, wait: bool = False, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the lock on `output` for the block; another holder raises OutputError, or is waited for."""
    import fcntl

    path = lock_path(output)
    announced = False
    while True:
        handle = path.open("a+b")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().decode("ascii", "replace").strip()
            handle.close()
            pid = int(text) if text.isdigit() else -1
            if not wait:
                raise OutputError(_held_message(output, pid), _held_fix()) from None
            if not announced:
                import sys
                print(f"minidecoder: waiting for process {pid} to finish writing {output}", file=sys.stderr)
                announced = True
            time.sleep(poll_s)
            continue
        # A holder that finished removed the file we opened: lock the file now at that path instead.
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()).encode("ascii"))
        handle.flush()
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        handle.close()  # releases the lock


def _held_message(output, pid: int) -> str:
    who = f"process {pid}" if pid > 0 else "another process"
    return f"another run ({who}) is writing {output} right now"


def _held_fix() -> str:
    return ("wait for it to finish, pass --wait (wait=True) to wait for it, or choose another output; "
            "two runs on one output would overwrite each other's chunks")
