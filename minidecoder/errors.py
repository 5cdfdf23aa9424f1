"""One error type for everything a user can get wrong.

Every message names the offending value and the way out; the CLI prints it without a traceback
and exits with status 2. Internal bugs stay ordinary exceptions so they keep their traceback.
"""
from __future__ import annotations


class MinidecoderError(Exception):
    """A problem with the user's input, files or options, with a hint on how to fix it."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")


class ConfigError(MinidecoderError):
    """config.json is missing, malformed, or uses a key/value this code does not understand."""


class CheckpointError(MinidecoderError):
    """Weights are missing, truncated, mis-shaped, or do not match the config."""


class TokenizerError(MinidecoderError):
    """The tokenizer files are missing or disagree with the model."""


class InputError(MinidecoderError):
    """Text, templates, layers or options passed to a method are invalid."""


class NumericsError(MinidecoderError):
    """NaN or inf appeared in activations."""
