"""Files and folders written under a temporary name beside their target, and what a killed writer left.

    with staging(target, folder=True) as partial:    # .NAME.partial-1a2b3c4d, locked by this process
        ...write into partial, then swap_into_place(partial, target)...   # a file: os.replace alone
    remove_stale(target)                             # before writing: partials whose writer is dead

A conversion or a GGUF assembly writes `.NAME.partial-XXXXXXXX` and renames it into place only when it
is complete, so an interrupted run never leaves something that looks finished. But a run killed with
SIGKILL (or by the OOM killer, or a power cut) cannot clean up, and its partial can be hundreds of MB.
So the writer holds an `flock` on the partial itself (its directory or file descriptor) for as long as
it writes: the kernel releases that lock when the process ends, however it ends. A partial whose lock
can be taken has no living writer, and the next run for the same target removes it; one whose lock is
held belongs to a run still going and is left alone. Where locks are not supported (some network file
systems) nothing is ever judged stale: a leaked partial there is safer than a deleted live one.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

# Names a writer of `target` gives its temporary copies: being written, and (a replaced folder) being deleted.
_PARTIAL, _OLD = ".{name}.partial-", ".{name}.old-"


@contextlib.contextmanager
def staging(target: Path, folder: bool) -> Iterator[Path]:
    """A new, empty `.NAME.partial-XXXXXXXX` beside `target` (a folder or a file), locked for the block.

    The block renames it into place or leaves it; on any exception it is removed. Either way the lock is
    released when the block ends."""
    while True:
        partial = _beside(target, _PARTIAL)
        if folder:
            partial.mkdir()
        else:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        handle = _lock(partial, blocking=True)
        if handle is not None and _same_inode(handle, partial):
            break
        if handle is None and os.path.lexists(partial):
            break  # locks are not supported here: write unlocked (remove_stale never removes it either)
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
    """Rename the folder `partial` to `target`. An existing `target` (which os.replace cannot overwrite) is first
    moved aside (`.NAME.old-XXXXXXXX`), so that a failure never loses both, and is locked until it is deleted,
    so that no cleaner takes it for stale."""
    if not os.path.lexists(target):
        os.replace(partial, target)
        return
    held = _lock(target, blocking=True)
    try:
        trash = _beside(target, _OLD)
        os.replace(target, trash)
        os.replace(partial, target)
        _remove(trash)
    finally:
        if held is not None:
            os.close(held)


def remove_stale(target: Path, legacy: tuple[str, ...] = ()) -> list[Path]:
    """Remove every temporary copy of `target` whose writer is dead (its lock is free); returns them.
    `legacy`: more name patterns ("{name}" is the target's name) that older versions used."""
    removed = []
    for pattern in (_PARTIAL, _OLD) + legacy:
        prefix = pattern.format(name=glob.escape(target.name))
        for path in sorted(target.parent.glob(prefix + "*")):
            handle = _lock(path, blocking=False)
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


def _lock(path: Path, blocking: bool) -> int | None:
    """An open descriptor of `path` holding its exclusive flock, or None if it is held or cannot be locked."""
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


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
