"""The one durable writer: every file minidecoder publishes is whole or absent, never half written.

    a run's outputs         claim_outputs, write_whole, write_streamed, write_file -> publish, whole_or_absent
    kept work               write_kept, write_chunk     (files in a work folder its run already guards)
    a write that failed     write_failure               (its cause in words, and the way out, for every writer)
    a folder or large file  staging -> swap_into_place, remove_stale_partials   (the converter, a fetch)
    checksums               sha256_file, sha256_files, Sha256Reader

Every write follows the same three steps: the bytes go to a temporary name beside the target (the same
folder, or the run's work folder: the same file system, where a rename is atomic); they are flushed to the disk (`_sync`),
because a rename can reach the disk before the data it names, and a power cut would then leave a
complete-looking empty file; only then is the name given (a rename, or a hard link that refuses to
replace). A failed write removes its temporary file, so a killed or full-disk write leaves the old file
or nothing.

A run's outputs:

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
next claim in that folder (`remove_stale_locks`: marked ones nobody holds). Within one thread the
lock is re-entrant: the CLI takes it before the model loads, and the library function it calls
(`run_embedding_job`, `write_report`) takes the same lock again without waiting on itself. Another thread
of the same process waits for it, or is refused, as another process is.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from minidecoder.errors import OutputError

if TYPE_CHECKING:  # numpy is only named in an annotation here
    import numpy as np

_REASONS = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
            errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded"}


def _reason(error: OSError) -> str:
    """Why a write failed, in words ("permission denied", "no space left on the device", ...)."""
    return _REASONS.get(error.errno, error.strerror or str(error))


def write_failure(error: OSError, path: str | Path | None = None) -> tuple[str, str]:
    """(the cause in words, the way out) of a write that raised `error`, for every writer's message:

        cause, way_out = write_failure(error, path)
        raise OutputError(f"writing {path} failed: {cause}; <what is kept>",
                          f"{way_out}, then run the same command again")

    A folder standing where the file belongs (a copy gone wrong), or a file where a folder belongs, is named with
    its removal as the way out: freeing space or fixing permissions would not help. A full disk asks for space, a
    permission problem for permissions, each on the folder written to. `path`: what was being written, naming
    that folder where the error names no file (a failed `write` on an open file)."""
    blocker = _in_the_way(error)
    if blocker is not None:
        kind, belongs = ("folder", "a file") if blocker.is_dir() else ("file", "a folder")
        return f"a {kind} stands where {belongs} belongs ({blocker})", f"remove the {kind} {blocker}"
    folder = _written_folder(error, path)
    there = f" {folder}" if folder is not None else " the output folder"
    code = error.errno
    if code == errno.ENOSPC:
        way_out = f"free space on the disk that holds{there}"
    elif code == errno.EDQUOT:
        way_out = f"free space within your disk quota on{there} (or have the quota raised)"
    elif code == errno.EFBIG:  # the file system's largest file (FAT32: 4 GiB), or a limit set with `ulimit -f`
        way_out = "put the output on a file system that takes larger files, or raise the file size limit (ulimit -f)"
    elif code in (errno.EACCES, errno.EPERM):
        way_out = f"make{there} writable (e.g. chmod u+w{there})"
    elif code == errno.EROFS:
        way_out = f"remount the file system that holds{there} read-write"
    else:
        way_out = f"fix what stops writing in{there} (or the disk it is on)"
    return _reason(error), way_out


def _in_the_way(error: OSError) -> Path | None:
    """The folder standing where a file was to be written, or the file standing where a folder was to be made
    (at the path or above it), that made the write fail; None when nothing stands in the way."""
    names = [Path(os.fsdecode(name)) for name in (error.filename2, error.filename) if name is not None]
    if error.errno in (errno.EISDIR, errno.ENOTEMPTY) or (error.errno == errno.EEXIST and error.filename2 is not None):
        # a file opened or renamed onto a folder, or hard-linked to a folder's name
        return next((name for name in names if name.is_dir()), None)
    if error.errno == errno.EEXIST:  # mkdir, where a file stands
        return names[0] if names and names[0].exists() and not names[0].is_dir() else None
    if error.errno == errno.ENOTDIR:  # a file where a folder of the path belongs
        return next((above for name in names for above in [*reversed(name.parents), name]
                     if above.exists() and not above.is_dir()), None)
    return None


def _written_folder(error: OSError, path: str | Path | None) -> Path | None:
    """The folder a failed write wrote into: of the file the error names (of a rename's two, one that is not
    writable), else of `path`. A file inside a staging folder (`staging`, removed as the error leaves it) names
    the folder that holds the staging folder: on the same disk, and still there."""
    names = [Path(os.fsdecode(name)) for name in (error.filename, error.filename2) if name is not None]
    folders = [name.parent for name in names] or ([Path(path).parent] if path is not None else [])
    folders = [folder.parent if _is_staging_name(folder.name) else folder for folder in folders]
    return next((folder for folder in folders if not os.access(folder, os.W_OK)), folders[0] if folders else None)


def check_writable_folder(folder: str | Path, what: str = "the output folder") -> None:
    """Create `folder` if needed and prove a file can be written there, or raise OutputError saying why."""
    folder = Path(folder) if str(folder) else Path(".")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{what} {folder} is a file, not a folder", "choose an output path inside a folder")
    probe = folder / f".minidecoder-write-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as handle:
            handle.write(b"x")
    except OSError as error:
        cause, way_out = write_failure(error, probe)
        raise OutputError(f"{what} {folder} is not writable ({cause})",
                          f"{way_out}, or choose another folder; nothing was loaded or computed yet") from None
    finally:  # a full disk fails the probe's write once the probe exists
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)


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
# (lock file, thread) -> [open handle, depth]: the locks this process's threads hold, each re-entrant for its
# own thread only. Another thread takes the lock as another process would (waits, or is refused): re-entered,
# two threads would write one output at once through the same temporary file.
_HELD: dict[tuple[Path, int], list] = {}


def held_here(lock: Path) -> bool:
    """Whether a thread of this process holds the lock file `lock`."""
    return any(path == _key(lock) for path, _ in list(_HELD))  # a copy: other threads add and remove


def lock_path(output: str | Path) -> Path:
    output = Path(output)
    return output.parent / f".{output.name}.lock"


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
        if held_here(path):
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
    """Hold the lock on `output` for the block; another process's (or thread's) lock raises OutputError, or is
    waited for. Re-entrant within this thread."""
    key = (_key(lock_path(output)), threading.get_ident())
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
            raise _lock_failed(error, path, "create") from None
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
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(f"{LOCK_MARK}{os.getpid()}".encode("ascii"))
                handle.flush()
            except OSError as error:  # a full disk: the file was made, its few bytes cannot be
                with contextlib.suppress(OSError):
                    path.unlink()  # while locked, as `output_lock` removes its own: unmarked, no later run would
                with contextlib.suppress(OSError):  # its close flushes the bytes that did not fit again
                    handle.close()
                raise _lock_failed(error, path, "write") from None
            return handle
        handle.close()


def _lock_failed(error: OSError, path: Path, verb: str) -> OutputError:
    cause, way_out = write_failure(error, path)
    return OutputError(f"cannot {verb} the lock file {path} ({cause})", f"{way_out}, then run the same command again")


def _held_message(output, pid: int) -> str:
    if pid == os.getpid():
        return f"another thread of this process is writing {output} right now"
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


@contextlib.contextmanager
def whole_or_absent(overwrite: bool) -> Iterator[list[Path]]:
    """Outputs written together (a report's JSON and Markdown, its figures): the block appends each path once it
    is written; if the block fails, those go again (not with `overwrite`: each replaced a file of the user's), so
    that the set is whole or absent and the same command, which refuses an existing output, writes it all again."""
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        if not overwrite:
            for path in written:
                with contextlib.suppress(OSError):
                    Path(path).unlink()
        raise


def write_whole(path: str | Path, data: bytes, overwrite: bool = False, wait: bool = False) -> Path:
    """`data` written under a temporary name, then published at `path` (see `publish`), under its lock."""
    return write_streamed(path, lambda handle: handle.write(data), overwrite, wait)


def write_streamed(path: str | Path, write: Callable[[BinaryIO], object], overwrite: bool = False,
                   wait: bool = False, tmp_folder: Path | None = None) -> Path:
    """`write(handle)` fills a temporary file, then published at `path` under its lock (as `write_whole`, for
    data written in pieces, such as `np.save`, rather than held whole as bytes)."""
    return write_file(path, _opened(write), overwrite, wait, tmp_folder)


def write_file(path: str | Path, write: Callable[[Path], None], overwrite: bool = False,
               wait: bool = False, tmp_folder: Path | None = None) -> Path:
    """`write(tmp)` fills a temporary file beside `path`, which is then published at `path` under the
    path's lock (taken here unless this process holds it; with `wait`, another process's lock is waited
    for rather than refused). A failed write leaves nothing behind. `tmp_folder`: where the temporary file
    goes instead, on the same file system (a job's work folder: a copy a kill leaves, which can be GBs, is
    then removed with the folder rather than left beside the output)."""
    path = Path(path)
    with output_lock(path, wait=wait):
        _write_then_publish(path, write, overwrite, tmp_folder)
    return path


def _write_then_publish(path: Path, write: Callable[[Path], None], overwrite: bool,
                        tmp_folder: Path | None = None) -> None:
    """The three steps of every write (see the module): a temporary file, flushed to the disk, published."""
    tmp = (tmp_folder or path.parent) / f".{path.name}.{os.getpid()}.tmp"  # this process's own: never shared
    try:
        write(tmp)
        _sync(tmp)
        publish(tmp, path, overwrite)
    finally:
        tmp.unlink(missing_ok=True)


def _opened(write: Callable[[BinaryIO], object]) -> Callable[[Path], None]:
    """A writer of an open handle (`np.save(handle, ...)`) as a writer of the new file at a path."""
    def fill(tmp: Path) -> None:
        with tmp.open("wb") as handle:
            write(handle)
    return fill


def _sync(path: Path) -> None:
    """Flush `path`'s bytes (a file) or its entries (a folder) to the disk, before a rename names it."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


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
        if path.is_dir():  # a folder, which no --overwrite replaces: the caller's `write_failure` names it
            raise
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


# ---- kept work -----------------------------------------------------------------------------------------
# A resumable run keeps its finished pieces in a work folder of its own (a job's `.NAME.partial/`). The run
# that owns the folder holds its output's lock, so these files take no lock of their own; each replaces
# what is there, whole or not at all, and a kill leaves the old file or the new one.

def write_kept(path: str | Path, data: bytes) -> Path:
    """`data` at `path` in a kept-work folder, replacing what is there (see the section)."""
    path = Path(path)
    _write_then_publish(path, lambda tmp: tmp.write_bytes(data), overwrite=True)
    return path


def read_kept_json(path: str | Path) -> Any:
    """A kept JSON file's value, or None where it is missing, unreadable or cut short: kept work is the run's own
    derived work, so its caller checks the value's shape and recomputes (or names) what is not whole."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_chunk(array_path: Path, array: np.ndarray, record_path: Path, record: dict[str, Any]) -> None:
    """One kept chunk: its JSON record, then its array (`.npy`). The array goes last, so a chunk whose array
    exists is whole; a kill between the two leaves a record that the chunk's next computation rewrites."""
    import numpy as np  # only a chunk needs it; most commands import this module and never write one

    write_kept(record_path, json.dumps(record).encode("utf-8"))
    _write_then_publish(array_path, _opened(lambda handle: np.save(handle, array)), overwrite=True)


# ---- a folder or a large file built in place -----------------------------------------------------------
# A conversion or a GGUF assembly writes `.NAME.partial-XXXXXXXX` beside its target and renames it into place
# only when it is complete, so an interrupted run never leaves something that looks finished. But a run
# killed with SIGKILL (or by the OOM killer, or a power cut) cannot clean up, and its partial can be hundreds
# of MB. So the writer holds an `flock` on the partial itself (its folder's or file's descriptor) for as long
# as it writes: the kernel releases that lock when the process ends, however it ends. A partial whose lock
# can be taken has no living writer, and the next run for the same target removes it; one whose lock is held
# belongs to a run still going and is left alone. Where locks are not supported (some network file systems)
# nothing is ever judged stale: a leaked partial there is safer than a deleted live one.
#
#     remove_stale_partials(target)                   # before writing: partials whose writer is dead
#     with staging(target, folder=True) as partial:   # .NAME.partial-1a2b3c4d, locked by this process
#         ...write into partial...
#         swap_into_place(partial, target)

# Names a writer of `target` gives its temporary copies: being written, and (a replaced folder) being deleted.
_PARTIAL, _OLD = ".{name}.partial-", ".{name}.old-"


@contextlib.contextmanager
def staging(target: Path, folder: bool) -> Iterator[Path]:
    """A new, empty `.NAME.partial-XXXXXXXX` beside `target` (a folder or a file), locked for the block.

    The block renames it into place (`swap_into_place`) or leaves it; on any exception it is removed.
    Either way the lock is released when the block ends."""
    while True:
        partial = _beside(target, _PARTIAL)
        if folder:
            partial.mkdir()
        else:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        handle = _lock_entry(partial, blocking=True)
        if handle is not None and _same_inode(handle, partial):
            break
        if handle is None and os.path.lexists(partial):
            break  # locks are not supported here: write unlocked (remove_stale_partials never removes it either)
        if handle is not None:  # a cleaner took it for stale between creation and lock: take a new name
            os.close(handle)
    try:
        yield partial
    except BaseException:
        _remove(partial)
        raise
    finally:
        if handle is not None:
            os.close(handle)


def swap_into_place(partial: Path, target: Path) -> None:
    """Rename the finished `partial` (a file or a folder), flushed to the disk first, to `target`. A file
    replaces an existing `target` atomically. An existing folder (which a rename cannot overwrite) is first
    moved aside (`.NAME.old-XXXXXXXX`), so that a failure never loses both, and is locked until it is
    deleted, so that no cleaner takes it for stale."""
    _sync_tree(partial)
    if not partial.is_dir() or not os.path.lexists(target):
        os.replace(partial, target)
        return
    held = _lock_entry(target, blocking=True)
    try:
        trash = _beside(target, _OLD)
        os.replace(target, trash)
        os.replace(partial, target)
        _remove(trash)
    finally:
        if held is not None:
            os.close(held)


def remove_stale_partials(target: Path, legacy: tuple[str, ...] = ()) -> list[Path]:
    """Remove every temporary copy of `target` whose writer is dead (its lock is free); returns them.
    `legacy`: more name patterns ("{name}" is the target's name) that older versions used."""
    removed = []
    for pattern in (_PARTIAL, _OLD) + legacy:
        prefix = pattern.format(name=glob.escape(target.name))
        for path in sorted(target.parent.glob(prefix + "*")):
            handle = _lock_entry(path, blocking=False)
            if handle is None:
                continue  # held by a live writer, or locks unsupported here: not ours to judge
            try:
                if _same_inode(handle, path):
                    _remove(path)
                    removed.append(path)
            finally:
                os.close(handle)
    return removed


def _beside(target: Path, pattern: str) -> Path:
    return target.parent / (pattern.format(name=target.name) + uuid.uuid4().hex[:8])


def _is_staging_name(name: str) -> bool:
    """Whether `name` is one `staging` gives (`_PARTIAL` of some target's name, then `_beside`'s 8 hex digits)."""
    head, tail = (re.escape(part) for part in _PARTIAL.split("{name}"))
    return re.fullmatch(head + ".+" + tail + "[0-9a-f]{8}", name) is not None


def _lock_entry(path: Path, blocking: bool) -> int | None:
    """An open descriptor of `path` (a file or a folder) holding its exclusive flock, or None if it is held
    or cannot be locked."""
    import fcntl

    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError:  # EWOULDBLOCK: held; ENOLCK or EBADF (some network mounts): no locks, so never stale
        os.close(handle)
        return None
    return handle


def _same_inode(handle: int, path: Path) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(handle).st_ino
    except FileNotFoundError:
        return False


def _sync_tree(path: Path) -> None:
    """`_sync` of a file, or of a folder's files and the folder itself (a conversion's shards and its
    listing)."""
    if path.is_dir():
        for entry in path.rglob("*"):
            if entry.is_file() and not entry.is_symlink():
                _sync(entry)
    _sync(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# ---- checksums -----------------------------------------------------------------------------------------
# A file's sha256 is how a download is checked and how a cache or a resumed job knows its inputs: one way
# to compute it, streamed in blocks (a weight file is GBs; it is never read whole).
_BLOCK = 1 << 22


class Sha256Reader:
    """A binary file read through a sha256: every block read also feeds the digest, so one pass can both
    check a file (a job's input, line by line) and hash it."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle, self._digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        self._digest.update(block)
        return block

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def sha256_files(paths: Iterable[str | Path]) -> str:
    """sha256 of the files' bytes, one file after another (a tokenizer's files as one checksum)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)
    return digest.hexdigest()


def sha256_file(path: str | Path) -> str:
    """sha256 of one file's bytes, what `sha256sum` prints."""
    return sha256_files([path])
