"""Turn what a user names into a checkpoint folder on disk.

    None                          -> the default offline model (smollm2-135m-instruct), fetched and
                                     converted on first use (minidecoder.sources.registry)
    a known name                  -> the same, for that model (`minidecoder fetch --list`)
    an existing folder            -> used as it is
    "owner/name" (a Hub id)       -> downloaded with huggingface-hub (config, tokenizer, safetensors only)
"""
from __future__ import annotations

from pathlib import Path

from minidecoder.errors import CheckpointError

_HUB_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
                 "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]


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
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        return _from_hub(text)
    raise CheckpointError(f"{text!r} is neither a folder, a known model nor a Hub id",
                          f"known models: {', '.join(registry.KNOWN_MODELS)}; or give a checkpoint folder")


def _from_hub(repo_id: str) -> Path:
    """Download safetensors + JSON + tokenizer files only: never pickle weights."""
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS))
    except Exception as error:  # offline, unknown repo, gated repo...
        raise CheckpointError(
            f"could not download {repo_id!r} from the Hugging Face Hub ({type(error).__name__}: {error})",
            "check the name and your connection, or download it elsewhere and pass the folder",
        ) from None
