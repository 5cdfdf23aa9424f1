"""Every embedding method; importing this package registers them all (see base.METHODS)."""
from __future__ import annotations

import importlib

from minidecoder.methods.base import METHODS, Method, build_method, option, register

# One module per method family; each registers its methods on import.
_MODULES = ["pooling", "prompts", "metaeol", "echo", "tp", "htp", "cp", "reba"]
for _name in _MODULES:
    try:
        importlib.import_module(f"minidecoder.methods.{_name}")
    except ModuleNotFoundError as _error:  # a method module not written yet
        if _error.name != f"minidecoder.methods.{_name}":
            raise

__all__ = ["METHODS", "Method", "build_method", "option", "register"]
