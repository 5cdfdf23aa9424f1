"""What `--compile` costs before the first embedding: two sentences through SmolLM2 with compile=True.

    python tools/compile_cost.py            # empty inductor cache (cold), then warm, in fresh processes

`mean` runs site-free block calls, which compile (one variant, reused by later shapes); PromptEOL's
calls go through the prefix cache's KV cache, which run plain (minidecoder.fast.compiled).
"""
from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_RUN = """
import time, minidecoder
model = minidecoder.load(compile=True, progress=False)
for method in ("mean", "prompteol"):
    start = time.perf_counter()
    minidecoder.embed(model, ["A man plays a guitar.", "Someone plays music."], method)
    print(f"{sys.argv[1]:>4} cache, {method:>9}: {time.perf_counter() - start:.1f} s")
"""


def main() -> int:
    shutil.rmtree(Path("/tmp") / f"torchinductor_{getpass.getuser()}", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for cache in ("cold", "warm"):
        subprocess.run([sys.executable, "-c", "import sys\n" + ONE_RUN, cache], check=True, env=env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
