"""Where things live on disk: converted weights, the download cache, the STS data.

Each location can be overridden by an environment variable so that nothing is written where a user
did not expect it; a location that cannot be written is reported under the variable's name
(`writable_weights_dir`, `writable_download_cache_dir`), since that is what the user has to change.
"""
from __future__ import annotations

import os
from pathlib import Path

from minidecoder.errors import OutputError
from minidecoder.output_files import check_writable_folder

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # minidecoder/, above sources/
_REPO_DIR = _PACKAGE_DIR.parent


def weights_dir() -> Path:
    """`$MINIDECODER_WEIGHTS`, else the checkout's `weights/` folder, else ~/.cache/minidecoder/weights."""
    if env := os.environ.get("MINIDECODER_WEIGHTS"):
        return Path(env).expanduser()
    if (_REPO_DIR / "weights").is_dir() and (_REPO_DIR / "pyproject.toml").is_file():
        return _REPO_DIR / "weights"
    return Path.home() / ".cache" / "minidecoder" / "weights"


def download_cache_dir() -> Path:
    """`$MINIDECODER_CACHE`, else ~/.cache/minidecoder/downloads (pip-downloaded GGUF packages)."""
    if env := os.environ.get("MINIDECODER_CACHE"):
        return Path(env).expanduser()
    return Path.home() / ".cache" / "minidecoder" / "downloads"


def sts_data_dir() -> Path | None:
    """`$MINIDECODER_STS_DATA`, else `../shared/data/sts` (the STS tasks)."""
    return shared_data_dir("sts", "MINIDECODER_STS_DATA")


def writable_weights_dir() -> Path:
    """`weights_dir()`, created and proven writable, or an OutputError naming MINIDECODER_WEIGHTS."""
    return _writable(weights_dir(), "MINIDECODER_WEIGHTS", "converted models")


def writable_download_cache_dir() -> Path:
    """`download_cache_dir()`, created and proven writable, or an OutputError naming MINIDECODER_CACHE."""
    return _writable(download_cache_dir(), "MINIDECODER_CACHE", "downloads")


def _writable(folder: Path, variable: str, what: str) -> Path:
    try:
        check_writable_folder(folder, f"the folder for {what}")
    except OutputError as error:
        value = os.environ.get(variable)
        if value:
            raise OutputError(f"{variable}={value!r}: {error.problem}",
                              f"set {variable} to a folder you can write to, or unset it to use the default") from None
        raise OutputError(error.problem, f"set {variable} to a folder you can write to") from None
    return folder


def shared_data_dir(folder: str, variable: str) -> Path | None:
    """`$variable`, else `../shared/data/<folder>` beside the checkout (or the working folder) when it exists."""
    if env := os.environ.get(variable):
        return Path(env).expanduser()
    for candidate in (_REPO_DIR.parent / "shared" / "data" / folder, Path.cwd().parent / "shared" / "data" / folder):
        if candidate.is_dir():
            return candidate
    return None


def senteval_data_dir() -> Path | None:
    """`$MINIDECODER_SENTEVAL_DATA`, else `../shared/data/senteval` (the transfer tasks)."""
    return shared_data_dir("senteval", "MINIDECODER_SENTEVAL_DATA")
