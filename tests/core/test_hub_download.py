"""A Hub id downloads what `load` reads and nothing more: the config, tokenizer and chat template files,
then the weights the folder's index names (or model.safetensors). The Hub is out of reach here, so
huggingface_hub's `snapshot_download` is replaced by one that serves a local folder, choosing the files
with huggingface_hub's own pattern matching (`filter_repo_objects`), as the real one does.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import minidecoder
from tiny_models import build_hf_model, random_ids, save_hf_model, save_tiny_tokenizer

TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"


def _serve(monkeypatch, repository: Path, cache: Path) -> list[list[str]]:
    """Make `snapshot_download(repo_id, allow_patterns=...)` copy the matching files of `repository` into
    `cache` and return that folder; returns the list each call's patterns are appended to."""
    import huggingface_hub
    from huggingface_hub.utils import filter_repo_objects

    calls: list[list[str]] = []

    def snapshot_download(repo_id: str, allow_patterns: list[str], **kwargs) -> str:
        calls.append(list(allow_patterns))
        served = cache / repo_id.replace("/", "--")
        names = [path.relative_to(repository).as_posix() for path in repository.rglob("*") if path.is_file()]
        for name in filter_repo_objects(names, allow_patterns=allow_patterns):
            (served / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repository / name, served / name)
        return str(served)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


@pytest.fixture(scope="module")
def sharded_repository(tmp_path_factory) -> Path:
    """A tiny llama saved in shards, with what a Mistral repository also holds: consolidated.safetensors,
    pickled weights, params.json; and its chat template as transformers 5 saves it."""
    folder = tmp_path_factory.mktemp("repository")
    save_hf_model(build_hf_model("llama"), folder, max_shard_size="100KB")
    save_tiny_tokenizer(folder)
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    (folder / "added_tokens.json").write_text(json.dumps({"<tool>": 99}))  # the layout before transformers 4.34
    first_shard = sorted(folder.glob("model-*.safetensors"))[0]
    shutil.copyfile(first_shard, folder / "consolidated.safetensors")
    (folder / "pytorch_model.bin").write_bytes(b"pickled weights are never fetched")
    (folder / "params.json").write_text("{}")
    return folder


def test_a_sharded_repository_downloads_its_shards_and_templates_only(sharded_repository: Path, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """Before, `*.safetensors` also fetched consolidated.safetensors (a second copy of a Mistral 7B, 14 GB),
    and chat_template.jinja was left behind, so the model had no chat template."""
    calls = _serve(monkeypatch, sharded_repository, tmp_path / "cache")
    model = minidecoder.load("owner/tiny", progress=False)
    served = tmp_path / "cache" / "owner--tiny"
    shards = sorted(path.name for path in sharded_repository.glob("model-*.safetensors"))
    assert len(shards) > 1 and len(calls) == 2
    assert sorted(path.name for path in served.iterdir()) == sorted(
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
         "added_tokens.json", "model.safetensors.index.json", *shards])
    ids = random_ids()
    reference = minidecoder.load(sharded_repository, progress=False)
    assert torch.equal(model(ids).logits, reference(ids).logits)
    assert model.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "[user] hi"
    assert model.tokenizer.encode("a<tool>", add_special_tokens=False)[-1] == 99  # added_tokens.json was fetched


def test_a_repository_with_model_safetensors_and_shards_loads_model_safetensors(sharded_repository: Path,
                                                                                tmp_path: Path, monkeypatch) -> None:
    """transformers (and `load` from a folder) reads model.safetensors where a repository holds both it and an
    index; fetching the index's shards alone loaded the other copy of the weights."""
    single = save_hf_model(build_hf_model("llama", seed=1), tmp_path / "single")
    save_tiny_tokenizer(single)
    repository = Path(shutil.copytree(sharded_repository, tmp_path / "repository"))
    shutil.copyfile(single / "model.safetensors", repository / "model.safetensors")
    _serve(monkeypatch, repository, tmp_path / "cache")
    with pytest.warns(UserWarning, match="holds both model.safetensors and model.safetensors.index.json"):
        model = minidecoder.load("owner/tiny", progress=False)
    ids = random_ids()
    assert torch.equal(model(ids).logits, minidecoder.load(single, progress=False)(ids).logits)
    assert not list((tmp_path / "cache" / "owner--tiny").glob("model-*.safetensors"))


def test_a_repository_without_an_index_downloads_model_safetensors(tmp_path: Path, monkeypatch) -> None:
    repository = tmp_path / "repository"
    save_hf_model(build_hf_model("llama"), repository)
    save_tiny_tokenizer(repository)
    (repository / "adapter_model.safetensors").write_bytes(b"another model's weights")
    _serve(monkeypatch, repository, tmp_path / "cache")
    minidecoder.load("owner/tiny", progress=False)
    served = sorted(path.name for path in (tmp_path / "cache" / "owner--tiny").iterdir())
    assert "model.safetensors" in served and "adapter_model.safetensors" not in served


def test_an_index_naming_a_pattern_downloads_only_that_name(sharded_repository: Path, tmp_path: Path,
                                                            monkeypatch) -> None:
    """The index is the repository's text, and snapshot_download reads names as fnmatch patterns: a shard
    called "*" must not fetch every file (the pickled weights among them)."""
    repository = Path(shutil.copytree(sharded_repository, tmp_path / "repository"))
    index = repository / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    index.write_text(json.dumps({**raw, "weight_map": {tensor: "*" for tensor in raw["weight_map"]}}))
    calls = _serve(monkeypatch, repository, tmp_path / "cache")
    with pytest.raises(minidecoder.MinidecoderError, match="missing"):
        minidecoder.load("owner/tiny", progress=False)
    assert not (tmp_path / "cache" / "owner--tiny" / "pytorch_model.bin").exists()
    assert not (tmp_path / "cache" / "owner--tiny" / "consolidated.safetensors").exists()
    assert calls[1][-1] == "[*]"
