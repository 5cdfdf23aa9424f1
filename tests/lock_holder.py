"""A second process holding an output's lock (`output_files.output_lock`), as another run writing it would:
for tests of who waits for whom."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from repo_paths import REPO

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
