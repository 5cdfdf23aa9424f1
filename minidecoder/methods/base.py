"""What every embedding method is: a small configuration dataclass with the paper's names for its
knobs, a registry name, and `embed_batch(model, texts) -> (B, E) float32`.

Each field's `metadata["help"]` is its one-line documentation; the CLI's `--help` and the README's
method table are generated from it, so the options a user sees are exactly the fields that exist.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from minidecoder.errors import InputError

METHODS: dict[str, type["Method"]] = {}


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A method option: a dataclass field with its documentation."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def register(cls: type["Method"]) -> type["Method"]:
    if cls.name in METHODS:
        raise AssertionError(f"method name {cls.name!r} registered twice")
    METHODS[cls.name] = cls
    return cls


@dataclasses.dataclass
class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line: what it does, with its paper

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        """(B, E) float32 embeddings of `texts`, in order."""
        raise NotImplementedError

    def check(self, model) -> None:
        """Validate options against a model (layers in range...) before any work starts."""

    def output_layer(self, model) -> int:
        """The hidden_states index this configuration reads, as given (may be negative). Every method has a
        `layer` option; TP and CP override this where `layer=None` means a default of their own."""
        return self.layer

    def describe(self) -> dict[str, Any]:
        """Name and every option value: the stamp written next to results."""
        return {"method": self.name, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))


def mistyped_options(cls: type[Method], options: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(option, value given, the option's default) for each text or true/false option given a value of
    another type (`prompt=True`). Numbers are left to the methods, whose messages also name the range."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    wrong = []
    for key, value in options.items():
        default = defaults.get(key, dataclasses.MISSING)
        if type(default) in (str, bool) and not isinstance(value, type(default)):
            wrong.append((key, value, default))
    return wrong


def build_method(name: str, **options: Any) -> Method:
    """A method by its registry name with options by their field names; unknown names are errors."""
    import minidecoder.methods  # noqa: F401  (registers every method module)

    if not isinstance(name, str) or name not in METHODS:
        raise InputError(f"unknown method {name!r}", f"available methods: {', '.join(sorted(METHODS))}")
    cls = METHODS[name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"method {name!r} has no option(s) {unknown}",
                         f"its options are: {', '.join(sorted(known)) or 'none'}")
    for key, value, default in mistyped_options(cls, options):
        kind = "true or false" if isinstance(default, bool) else "a text"
        raise InputError(f"method {name!r} option {key}={value!r} is not {kind} ({type(value).__name__})",
                         f"pass e.g. {key}={default!r}")
    try:
        return cls(**options)
    except (TypeError, ValueError) as error:
        raise InputError(f"invalid options for method {name!r}: {error}", "see `minidecoder embed --help`") from None
