"""Where a model comes from: the offline registry, PyPI fetching, GGUF conversion, Hub ids, paths."""
