"""What a lent GPU sitting brings back (tools/gpu/pack.sh): every finished row and every piece of kept work a
later sitting resumes from, and none of the resumable bulk that would not fit the way back (16 MiB a file)."""
from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from repo_paths import REPO


@pytest.mark.skipif(shutil.which("tar") is None, reason="pack.sh runs tar")
def test_pack_keeps_rows_and_kept_work_and_leaves_out_chunks_and_grids(tmp_path: Path) -> None:
    res = tmp_path / "res"
    kept = ["cmteb/echo-3.json", "cmteb/echo-3.md", "cmteb/table.md", "results/m-transfer.json",
            "results/m-transfer-work/tp-transfer/task-CR.kept.json",
            "results/m-transfer-work/tp-transfer/end-choice/end-choice.json"]
    left_out = ["cmteb/.reba-3.json.partial/job/chunk-000000.npy", "cmteb/.reba-3.json.lock",
                "results/m-transfer-work/tp-transfer/end-choice/grid-13-20/chunk-000000.npy",
                "results/m-transfer-work/tp-transfer/end-choice/grid-13-20/manifest.json",
                "results/m-transfer-work/tp-transfer/job-CR/chunk-000000.npy",
                "results/m-transfer-work/tp-transfer/embeddings.kept.npy"]
    for name in kept + left_out:
        (res / name).parent.mkdir(parents=True, exist_ok=True)
        (res / name).write_text(name)
    archive = tmp_path / "res.tgz"
    subprocess.run(["bash", str(REPO / "tools" / "gpu" / "pack.sh"), str(archive), str(res)], check=True)
    with tarfile.open(archive) as packed:
        files = {Path(member.name).as_posix().removeprefix("./") for member in packed if member.isfile()}
    assert files == set(kept)
