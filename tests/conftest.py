import sys
from pathlib import Path

# Test helpers (tiny_models.py, real_models.py) are plain modules beside the tests.
sys.path.insert(0, str(Path(__file__).parent))
