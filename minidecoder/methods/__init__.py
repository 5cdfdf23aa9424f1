"""Every embedding method; importing this package registers them all (`METHODS`), so `build_method`
sees each one."""
from __future__ import annotations

from typing import Any

from minidecoder.methods.base import METHODS, Method, build_from, option, register

# One module per method family; each registers its methods as it is imported.
from minidecoder.methods import composite, cp, echo, htp, metaeol, pooling, reading, reba, tp  # noqa: E402,F401


def build_method(name: str, **options: Any) -> Method:
    """A registered method by name, with options by their field names; unknown names are errors."""
    return build_from(METHODS, name, options)


__all__ = ["METHODS", "Method", "build_method", "option", "register"]
