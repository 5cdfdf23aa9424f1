"""Every embedding method; importing this package registers them all (`METHODS`), so `build_method`
sees each one."""
from __future__ import annotations

from typing import Any

from minidecoder.errors import ArgumentTypeError, InputError
from minidecoder.methods.base import METHODS, Method, build_from, option, register

# One module per method family; each registers its methods as it is imported.
from minidecoder.methods import composite, cp, echo, htp, metaeol, pooling, reading, reba, tp  # noqa: E402,F401


def build_method(name: str, **options: Any) -> Method:
    """A registered method by name, with options by their field names; unknown names are errors."""
    return build_from(METHODS, name, options)


def method_of(method: "str | Method", options: dict[str, Any]) -> Method:
    """The method a call was given: a registered name built with `options`, or a method object, which carries
    its own options (given beside it they are refused, not dropped)."""
    if isinstance(method, str):
        return build_method(method, **options)
    if not isinstance(method, Method):
        raise ArgumentTypeError(f"method={method!r} ({type(method).__name__}) is neither a method name nor a Method",
                                "pass a name such as 'prompteol' (minidecoder.methods.METHODS lists them) or an "
                                "object from minidecoder.methods.build_method(...)")
    if options:
        raise InputError("options were given together with a method object", "set them on the method object")
    return method


__all__ = ["METHODS", "Method", "build_method", "method_of", "option", "register"]
