"""What every embedding method is: a small configuration dataclass with the paper's names for its
knobs, a registry name, and a description of its forwards, `passes(model, texts)`.

    class MyMethod(Method):
        name = "mine"
        layer: int = option(-1, "output layer")

        def passes(self, model, texts):        # one Pass per forward (minidecoder.methods.loop)
            batch = encode_prompts(model.tokenizer, "{text}", texts)
            return [Pass(batch, layer=..., pool=lambda run: last_token(run.hidden(...), batch))]

A text may carry a context (`contexts`, one string per text, "" for none): read by the model before the
text, never pooled, split or given a placeholder (HTP's `embed_mask = 0` pieces). A method that honours it
says so (`takes_context`) and takes `passes(model, texts, contexts)`; `contexts=None` is the plain path.

`embed_batch` runs those passes through the one block loop and averages what they pool; the sweeps
(minidecoder.evaluation.sweep) fork the same passes, and the audit view (minidecoder.audit.explain)
watches them, so nothing outside this package restates a method.

Each field's `metadata["help"]` is its one-line documentation; `minidecoder embed --help` lists every
method's options from it, so the options a user sees there are exactly the fields that exist (the README's
method table and docs/methods.md are written by hand).
"""
from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from minidecoder.errors import InputError
from minidecoder.methods.loop import Forward, Pass, run_passes

METHODS: dict[str, type["Method"]] = {}  # filled by `register` as minidecoder.methods imports each module


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
    takes_context: ClassVar[bool] = False  # True: `passes` takes each text's unpooled context (`contexts=`)
    extensions: ClassVar[dict[str, str]] = {}  # option -> the method `option=true` builds (`cp tp=true`: cp+tp)

    def passes(self, model, texts: list[str], contexts: list[str] | None = None) -> list[Pass]:
        """The forwards this configuration runs on `texts`, in order (a step may take what an earlier pass
        recorded: `Pass.made`, CP's b). contexts: each text's context ("" for none), where `takes_context`."""
        raise NotImplementedError

    def embed_batch(self, model, texts: list[str], contexts: list[str] | None = None,
                    forward: Callable[..., Forward] = Forward) -> torch.Tensor:
        """(B, E) float32 embeddings of `texts`, in order: the mean of what the passes pool. forward: what runs
        each pass, the plain loop or the executor the caller picked (`minidecoder.embed` takes the one the
        model's fast paths ask for, `fast.forward.executor`)."""
        self.check(model)
        if contexts is None:
            passes = self.passes(model, texts)
        elif not self.takes_context:
            raise InputError(f"method {self.name!r} takes no context: it cannot read a text's context unpooled",
                             "embed the texts without one, or join the context to each text yourself")
        else:
            passes = self.passes(model, texts, contexts)
        return run_passes(model, passes, forward)

    def check(self, model) -> None:
        """Validate options against a model (layers in range...) before any work starts."""

    def reads_empty_text(self) -> bool:
        """Whether the empty text "" has an embedding: True where the readout is a position of the template,
        not of the text (a prompt's last token). SentEval reads CR's and MPQA's blank lines as samples with no
        words, and the prompt methods' batchers embed each as the prompt around nothing; a pooling over the
        text's own tokens has nothing to pool there."""
        return False

    def output_layer(self, model) -> int:
        """The hidden_states index this configuration reads, as given (may be negative). Every method has a
        `layer` option; TP and CP override this where `layer=None` means a default of their own."""
        return self.layer

    def baseline(self, model) -> tuple["Method", str] | None:
        """A configuration that differs from this one only by its intervention (the audit view's net effect
        compares with it), and that difference in words; None for a method that only reads."""
        return None

    def option_values(self) -> dict[str, Any]:
        """Every option and its value: what rebuilds this configuration (`build_method(name, **values)`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def describe(self) -> dict[str, Any]:
        """Name, every option value and any detail a reader of the results needs: the stamp written next to
        results. Only `option_values` round-trips."""
        return {"method": self.name, **self.option_values()}


# ---- option checks, shared by every method's __post_init__ -----------------------------------------
def check_int(value: object, what: str, minimum: int | None = None, allow_none: bool = False,
              example: str | None = None, maximum: int | None = None) -> int | None:
    """An integer option (not a bool) in [minimum, maximum]; None where `allow_none`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} {repr(value)[:60]} is not an integer{' or None' if allow_none else ''}",
                         f"pass e.g. {what}={example if example is not None else max(minimum or 0, 1)}")
    if minimum is not None and value < minimum:
        raise InputError(f"{what} {str(value)[:60]} must be at least {minimum}",
                         f"pass e.g. {what}={example if example is not None else minimum}")
    if maximum is not None and value > maximum:
        raise InputError(f"{what} {str(value)[:60]} must be at most {maximum}",
                         f"pass e.g. {what}={example if example is not None else 0}")
    return value


def check_seed(value: object, what: str = "seed") -> int:
    """A seed torch.Generator.manual_seed takes: an integer in [-2**63, 2**64 - 1]."""
    return check_int(value, what, minimum=-(2 ** 63), maximum=2 ** 64 - 1, example="0")


def check_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} {value!r} is not true or false", f"pass {what}=true or {what}=false")
    return value


def check_choice(value: object, what: str, allowed) -> str:
    if value not in allowed:
        raise InputError(f"{what} {value!r} is unknown", f"use one of {', '.join(map(str, allowed))}")
    return value


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


def _plain(value: Any) -> Any:
    """A NumPy number (a grid from np.arange) as the Python number it holds: the options' checks take it, and
    the method's JSON record holds it."""
    if isinstance(value, numbers.Integral) and not isinstance(value, int):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, (int, float)):
        return float(value)
    return value


def build_from(methods: dict[str, type[Method]], name: str, options: dict[str, Any]) -> Method:
    """A method by its registry name with options by their field names; unknown names are errors."""
    if not isinstance(name, str) or name not in methods:
        raise InputError(f"unknown method {name!r}", f"available methods: {', '.join(sorted(methods))}")
    cls = methods[name]
    for switch, other in cls.extensions.items():  # an option naming another method: `cp tp=true` is cp+tp
        if switch in options:
            options = dict(options)
            if check_bool(options.pop(switch), f"method {name!r} option {switch}"):
                return build_from(methods, other, options)
            # `cp tp=false start=1` (a sweep's `--grid tp=false,true`): the extension's options are unused, but
            # checked as the extension checks them, so that a mistyped one is never passed over in silence
            own, theirs = ({f.name for f in dataclasses.fields(c)} for c in (cls, methods[other]))
            if set(options) <= own | theirs:  # an option of neither is named below, as this method's
                build_from(methods, other, options)
            options = {key: value for key, value in options.items() if key in own or key not in theirs}
    options = {key: _plain(value) for key, value in options.items()}
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
