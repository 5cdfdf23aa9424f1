"""Output files: the one writer behind everything eval, embed, sweep, explain and the plots write.

    with claim_outputs([run.json, run.md], overwrite=False) as claim:   # before a model loads
        ...                                                             # the long run
        claim.write_text(run_json, text)                                # whole, never a silent replace

`claim_outputs` locks every path (in sorted order, so two runs never wait on each other in a ring),
then, under the locks, refuses a path that is a folder or exists (unless `overwrite`) and proves each
folder writable. The locks are held until the block ends: a second run on any of the paths is told
which process holds it before its own model loads, or waits for it (`wait=True`, `--wait`). A write
goes to a temporary name first and is then published under its own name (`publish`): without
`overwrite` that is a hard link, which fails if the name was taken meanwhile, even by a program that
takes no lock, so a file is never replaced unless the user asked.

The lock is an advisory `fcntl.flock` on `.NAME.lock` beside the output, holding `LOCK_MARK` and the
owner's process id: the kernel drops it when the process ends, however it ends (kill -9 included), so a
crashed run never leaves a stale lock behind. The file itself is removed when the block ends (the CLI
turns SIGTERM into an exception, so that happens then too); the files a SIGKILL left are removed by the
next claim in that folder (`remove_stale_locks`: marked ones nobody holds). Within one process the lock is re-entrant: the CLI takes it before
the model loads, and the library function it calls (`run_embedding_job`, `write_report`) takes the
same lock again without waiting on itself.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from minidecoder.errors import OutputError

_REASONS = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
            errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded"}


def _reason(error: OSError) -> str:
    """Why a write failed, in words ("permission denied", "no space left on the device", ...)."""
    return _REASONS.get(error.errno, error.strerror or str(error))


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
        raise OutputError(f"{what} {folder} is not writable ({_reason(error)})",
                          "choose a folder you can write to, or fix its permissions or free space; "
                          "nothing was loaded or computed yet") from None


def check_free(path: str | Path, overwrite: bool, what: str = "output") -> None:
    """Refuse a folder at `path`, or an existing file unless `overwrite`."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder", "give a file name")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise OutputError(f"{what} {path} already exists; it is never overwritten silently",
                          "pass --overwrite (overwrite=True) to replace it, or choose another name")


def check_not_inputs(paths: Iterable[str | Path], inputs: Iterable[str | Path]) -> None:
    """No output (a sidecar included) is one of the run's inputs, however it is named (a link, `./x`, a
    hard link): writing it would replace what the run reads, `--overwrite` or not."""
    inputs = [Path(source) for source in inputs]
    for path in map(Path, paths):
        for source in inputs:
            if _same_file(path, source):
                raise OutputError(f"the output {path} is the input {source}; a run never writes over what it reads",
                                  "choose an output name (and so its sidecar NAME.json) other than the input's")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they point
        return os.path.realpath(a) == os.path.realpath(b)


# ---- locks ---------------------------------------------------------------------------------------------
_HELD: dict[Path, list] = {}  # lock file -> [open handle, depth]: this process's locks (re-entrant)


def lock_path(output: str | Path) -> Path:
    output = Path(output)
    return output.parent / f".{output.name}.lock"


def lock_holder(output: str | Path) -> int | None:
    """The process id holding the lock on `output` (this one included), or None when nobody holds it."""
    import fcntl

    path = lock_path(output)
    if _key(path) in _HELD:
        return os.getpid()
    try:
        handle = path.open("rb")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_pid(handle)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


LOCK_MARK = "minidecoder lock, process "  # what a lock file holds before its owner's id: ours to clean


def _holder_pid(handle) -> int:
    """The process id a held lock file holds (written by `_acquire`), or -1 when it is not readable yet."""
    handle.seek(0)
    text = handle.read().decode("ascii", "replace").strip().removeprefix(LOCK_MARK.strip()).strip()
    return int(text) if text.isdigit() else -1


def remove_stale_locks(folder: str | Path) -> None:
    """Remove the lock files in `folder` that a killed run left (SIGKILL: no `finally` ran): those that hold
    `LOCK_MARK` (never another program's) and that nobody holds. Removed while locked here, as
    `output_lock` removes its own, so a run that opened one meanwhile locks the file at that path anew."""
    import fcntl

    for path in Path(folder).glob(".*.lock"):
        if _key(path) in _HELD:
            continue
        try:
            handle = path.open("rb")
        except OSError:
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a live run's
            if handle.read(len(LOCK_MARK)).decode("ascii", "replace") == LOCK_MARK:
                with contextlib.suppress(OSError):
                    path.unlink()


def _key(path: Path) -> Path:
    return Path(os.path.abspath(path))


@contextlib.contextmanager
def output_lock(output: str | Path, wait: bool = False, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the lock on `output` for the block; another process's lock raises OutputError, or is waited
    for. Re-entrant within this process."""
    key = _key(lock_path(output))
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    handle = _acquire(output, wait, poll_s)
    _HELD[key] = [handle, 1]
    try:
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            lock_path(output).unlink()
        handle.close()  # releases the lock


def _acquire(output: str | Path, wait: bool, poll_s: float):
    """An open handle of `.NAME.lock` holding the exclusive flock, with this process's id written in."""
    import fcntl

    path = lock_path(output)
    announced = False
    while True:
        try:
            handle = path.open("a+b")
        except OSError as error:
            raise OutputError(f"cannot create the lock file {path} ({_reason(error)})",
                              "choose an output in a folder you can write to") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(handle)
            handle.close()
            if not wait:
                raise OutputError(_held_message(output, pid), _held_fix()) from None
            if not announced:
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
            handle.seek(0)
            handle.truncate()
            handle.write(f"{LOCK_MARK}{os.getpid()}".encode("ascii"))
            handle.flush()
            return handle
        handle.close()


def _held_message(output, pid: int) -> str:
    who = f"process {pid}" if pid > 0 else "another process"
    return f"another run ({who}) is writing {output} right now"


def _held_fix() -> str:
    return ("wait for it to finish, pass --wait (wait=True) to wait for it, or choose another output; "
            "two runs on one output would overwrite each other's results")


# ---- claims and writes ---------------------------------------------------------------------------------
class OutputClaim:
    """The files one run may write: locked, checked; every write goes through `write_*` (see the module)."""

    def __init__(self, paths: list[Path], overwrite: bool) -> None:
        self.paths = paths
        self.overwrite = overwrite

    def write_text(self, path: str | Path, text: str) -> Path:
        return self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: str | Path, data: bytes) -> Path:
        return write_whole(path, data, self.overwrite)


@contextlib.contextmanager
def claim_outputs(paths: Iterable[str | Path], overwrite: bool = False, wait: bool = False,
                  inputs: Iterable[str | Path] = ()) -> Iterator[OutputClaim]:
    """Lock every path and check it (see the module docstring); hold the locks for the block. `inputs`:
    the files the run reads, none of which may be an output (`check_not_inputs`)."""
    paths = list(dict.fromkeys(Path(p) for p in paths))
    check_not_inputs(paths, inputs)
    for folder in dict.fromkeys(p.parent for p in paths):
        check_writable_folder(folder, "the output folder")
        remove_stale_locks(folder)  # what a killed run left there
    with contextlib.ExitStack() as stack:
        for path in sorted(paths, key=_key):
            stack.enter_context(output_lock(path, wait=wait))
        for path in paths:  # under the locks: a run we waited for may have just written one
            check_free(path, overwrite)
        yield OutputClaim(paths, overwrite)


def write_whole(path: str | Path, data: bytes, overwrite: bool = False, wait: bool = False) -> Path:
    """`data` written under a temporary name, then published at `path` (see `publish`), under its lock."""
    return write_streamed(path, lambda handle: handle.write(data), overwrite, wait)


def write_streamed(path: str | Path, write: Callable[[BinaryIO], object], overwrite: bool = False,
                   wait: bool = False) -> Path:
    """`write(handle)` fills a temporary file, flushed to disk, then published at `path` under its lock (as
    `write_whole`, for data written in pieces, such as `np.save`, rather than held whole as bytes)."""
    def fill(tmp: Path) -> None:
        with tmp.open("wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    return write_file(path, fill, overwrite, wait)


def write_file(path: str | Path, write: Callable[[Path], None], overwrite: bool = False,
               wait: bool = False) -> Path:
    """`write(tmp)` fills a temporary file beside `path`, which is then published at `path` under the
    path's lock (taken here unless this process holds it; with `wait`, another process's lock is waited
    for rather than refused). A failed write leaves nothing behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with output_lock(path, wait=wait):
        try:
            write(tmp)
            publish(tmp, path, overwrite)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def publish(tmp: Path, path: Path, overwrite: bool) -> None:
    """Give the finished file `tmp` the name `path`. With `overwrite`, an atomic rename; without, a hard
    link, which fails rather than replace a file that appeared meanwhile (then `tmp` is left for the
    caller to remove or rescue)."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise OutputError(f"{path} appeared while this run was working (another program wrote it); it is never "
                          "overwritten silently",
                          "move it away or pass --overwrite (overwrite=True), then run the same command again") \
            from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        # A file system without hard links: check, then rename (the lock still keeps our own runs out).
        if path.exists():
            raise OutputError(f"{path} appeared while this run was working; it is never overwritten silently",
                              "move it away or pass --overwrite, then run the same command again") from None
        os.replace(tmp, path)
        return
    tmp.unlink()
