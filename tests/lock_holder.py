"""Who holds an output's lock, and a second process holding it (`output_files.output_lock`), as another run
writing it would: for tests of who waits for whom."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from minidecoder.output_files import _holder_pid, held_here, lock_path
from repo_paths import REPO

def lock_holder(output: str | Path) -> int | None:
    """The process id holding the lock on `output` (this one included), or None when nobody holds it."""
    import fcntl

    path = lock_path(output)
    if held_here(path):
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


HOLDER = """
import sys, time
from pathlib import Path
from minidecoder.output_files import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    if len(sys.argv) > 3:
        Path(sys.argv[3]).touch()  # the last thing it does holding the lock
"""


@contextlib.contextmanager
def lock_held(output: Path, seconds: float, let_go: Path | None = None) -> Iterator[subprocess.Popen]:
    """Another process holding `output`'s lock for `seconds` (then touching `let_go`, if given, before it
    lets go); yielded once it holds it, killed on leaving."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(output), str(seconds),
                               *([str(let_go)] if let_go else [])], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()
