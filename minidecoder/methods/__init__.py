"""Every embedding method; importing this package registers them all (see base.METHODS)."""
from __future__ import annotations

# One module per method family; each registers its methods on import.
from minidecoder.methods import cp, echo, htp, metaeol, pooling, prompt_methods, reba, tp  # noqa: F401
from minidecoder.methods.base import METHODS, Method, build_method, option, register

__all__ = ["METHODS", "Method", "build_method", "option", "register"]
