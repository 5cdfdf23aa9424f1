"""Turn what a user names into a checkpoint folder on disk.

    None                          -> the default offline model (smollm2-135m-instruct), fetched and
                                     converted on first use (minidecoder.sources.registry)
    a known name                  -> the same, for that model (`minidecoder fetch --list`)
    an existing folder            -> used as it is
    "owner/name" (a Hub id)       -> downloaded with huggingface-hub (config, tokenizer, model.safetensors
                                     or else the shards its index names)

Anything that looks like a path and is not a folder is reported as a missing folder, never tried on the
Hub (where it would end in a DNS error far from the typo): one that starts with ./ ../ / or ~, has more
than one slash, ends in a slash, or whose first part is a folder here (`runs/chekpoint-500` with `runs/`
present). A Hub id is owner/name with neither part starting or ending in . or -.
"""
from __future__ import annotations

import glob
import json
import re
from pathlib import Path

from minidecoder.errors import CheckpointError, describe_unusable_file

# Everything a checkpoint folder is read from except its weights, by the names transformers gives them
# (chat templates as transformers 5 saves them); the weights are chosen apart, in _from_hub.
_HUB_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
              "additional_chat_templates/*.jinja", "model.safetensors.index.json"]
# huggingface_hub's repo id rule: letters, digits, - _ . (no leading/trailing - or ., no "--" or "..")
_HUB_PART = r"(?!.*(--|\.\.))[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(f"{_HUB_PART}/{_HUB_PART}")


def resolve_source(source: str | Path | None, progress: bool = True) -> Path:
    if source is not None and Path(str(source)).expanduser().is_dir():
        return Path(str(source)).expanduser()
    from minidecoder.sources import registry  # only needed for names: a folder works without it

    if source is None:
        return registry.ensure_model(registry.DEFAULT_MODEL, progress=progress)
    text = str(source)
    path = Path(text).expanduser()
    if registry.is_known(text):
        return registry.ensure_model(text, progress=progress)
    if path.exists():
        raise CheckpointError(f"{text} is a file, not a checkpoint folder",
                              "pass the folder holding config.json; to convert a GGUF use `minidecoder convert`")
    if _looks_like_a_path(text) or path.is_symlink():
        raise CheckpointError(f"checkpoint folder {text} {describe_unusable_file(path)}",
                              f"check the path (a relative one starts from {Path.cwd()}); a known model is named "
                              f"without a path ({', '.join(registry.KNOWN_MODELS)}), a Hub id as owner/name "
                              "(from a folder that has no subfolder called owner)")
    if _HUB_ID.fullmatch(text):
        return _from_hub(text)
    raise CheckpointError(f"{text!r} is neither a folder, a known model nor a Hub id",
                          f"known models: {', '.join(registry.KNOWN_MODELS)}; or give a checkpoint folder")


def _looks_like_a_path(text: str) -> bool:
    """A name meant as a path on this machine, not a Hub id (see the module docstring)."""
    if text.startswith(("./", "../", "/", "~")) or text in (".", "..") or text.endswith("/") or "\\" in text:
        return True
    if text.count("/") > 1:
        return True
    return "/" in text and Path(text.split("/", 1)[0]).is_dir()


def _from_hub(repo_id: str) -> Path:
    """Download what `load` reads and nothing else: the JSON, tokenizer and chat template files and
    model.safetensors, then, only where there is no model.safetensors, the shards
    model.safetensors.index.json names. transformers' order (modeling_utils `_get_resolved_checkpoint_files`):
    a repository holding both loads model.safetensors, and so does `load` from a folder holding both. Never
    pickled weights, and no other safetensors a repository holds beside them (Mistral's repositories add
    consolidated.safetensors, a second copy of every weight in Mistral's own layout: about 14 GB for a 7B)."""
    folder = _snapshot(repo_id, [*_HUB_FILES, "model.safetensors"])
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file() or not index.is_file():
        return folder
    # escaped: huggingface_hub matches the names as fnmatch patterns, and an index is the repository's text
    return _snapshot(repo_id, _HUB_FILES + [glob.escape(name) for name in _shard_names(index)])


def _shard_names(index: Path) -> list[str]:
    """The shard files a downloaded index names; none where it is malformed (`load` then names the fault)."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return sorted({name for name in weight_map.values() if isinstance(name, str)})
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _snapshot(repo_id: str, patterns: list[str]) -> Path:
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as error:  # offline, unknown repo, gated repo...
        raise CheckpointError(
            f"could not download {repo_id!r} from the Hugging Face Hub ({type(error).__name__}: {error})",
            "check the name and your connection, or download it elsewhere and pass the folder",
        ) from None
