"""Where the tests find the checkout and the shared folder beside it, wherever the test file sits."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout: minidecoder/, tools/, README.md
SHARED = REPO.parent / "shared"  # ../shared: the evaluation data
