"""What a checkpoint's weights are, as checksums: the identity every cache and resumable job keys on.

    weights_identity(folder)   # {"model.safetensors": {"bytes": 538090408, "sha256": "9c1e..."}, ...}

A folder's name says nothing about its content (two training runs' `checkpoint-500`), so anything that
reuses a result computed from weights (a job's resume, MTEB's result cache) keys on the sha256 of every
safetensors file instead. Hashing streams the file, about a second per GB; each file's digest is kept
for the life of the process under (path, inode, size, mtime), so asking again is free and a file
replaced in place is hashed again. `sources_sha256()` is the same kind of key for the code: a result
computed by an older minidecoder is never served to a newer one.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from minidecoder.output_files import sha256_file

_DIGESTS: dict[tuple[str, int, int, int], str] = {}
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # minidecoder/, above sources/


def file_sha256(path: str | Path) -> str:
    """sha256 of `path`'s content, computed once per (path, inode, size, mtime) in this process."""
    resolved = os.path.realpath(path)
    info = os.stat(resolved)
    key = (resolved, info.st_ino, info.st_size, info.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = sha256_file(Path(resolved))
    return _DIGESTS[key]


def weights_identity(folder: str | Path | None) -> dict[str, Any]:
    """{file name: {"bytes", "sha256"}} of every `*.safetensors` file in `folder`; {} without a folder."""
    if not folder or not Path(folder).is_dir():
        return {}
    return {path.name: {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
            for path in sorted(Path(folder).glob("*.safetensors"))}


def model_identity(model: Any) -> dict[str, Any]:
    """What a loaded model's outputs depend on, read from its folder: the folder (for the reader), the sha256
    of config.json (of the parsed config when there is no folder), of the tokenizer files, and of every
    weight file. dtype and device are the caller's to add: they are the model's, not its folder's."""
    source = getattr(model, "source", None)
    config_file = Path(source) / "config.json" if source else None
    if config_file is not None and config_file.is_file():
        config_hash = file_sha256(config_file)
    else:
        config_hash = hashlib.sha256(repr(model.config).encode("utf-8")).hexdigest()
    tokenizer = getattr(model, "tokenizer", None)
    return {"source": str(Path(source).resolve()) if source else None, "config_sha256": config_hash,
            "tokenizer_sha256": getattr(tokenizer, "checksum", None), "weights": weights_identity(source)}


def sources_sha256() -> str:
    """sha256 of `sha256sum`'s listing of every minidecoder source file (its digest, two spaces, its path in
    the package), in path order: any change to the code gives another digest. Read afresh on each call
    (never `file_sha256`'s memory), so an edited file counts at once."""
    paths = sorted(_PACKAGE_DIR.rglob("*.py"))
    listing = "".join(f"{sha256_file(path)}  {path.relative_to(_PACKAGE_DIR).as_posix()}\n" for path in paths)
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()
