"""Render a checkpoint's chat template (Jinja) into a prompt string, as transformers does.

The template is the checkpoint's own: `chat_template` in tokenizer_config.json (the converter copies
a GGUF's `tokenizer.chat_template` there), or a `chat_template.jinja` file beside it (transformers 5's
layout). Templates are untrusted code from a model repository, so they run in jinja2's
ImmutableSandboxedEnvironment with exactly the environment transformers builds
(transformers/utils/chat_template_utils.py `_cached_compile_jinja_template`, 5.23): trim_blocks and
lstrip_blocks, the loopcontrols extension, a `tojson` that keeps non-ASCII text, and the globals
`raise_exception`, `strftime_now`, `dict` and `namespace`. Render variables are transformers' too:
`messages`, `tools`, `documents`, `add_generation_prompt` and the special-token strings (`bos_token`,
...), so the rendered text, and hence the token ids, are the same.
"""
from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from minidecoder.errors import InputError, TokenizerError


def find_chat_template(folder: Path, tokenizer_config: dict) -> str | None:
    """The folder's default chat template, or None when it ships none."""
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # transformers' named templates: [{"name": ..., "template": ...}]
        if not all(isinstance(entry, dict) and isinstance(entry.get("template"), str) for entry in template):
            raise TokenizerError(f"{folder / 'tokenizer_config.json'}: chat_template is a list whose entries are not "
                                 f"all {{\"name\": ..., \"template\": TEXT}}: {template!r:.120}",
                                 "fix or remove the key (transformers reads the same file)")
        template = {entry.get("name"): entry["template"] for entry in template}.get("default")
    elif template is not None and not isinstance(template, str):  # refused now, not as "no chat template" later
        raise TokenizerError(f"{folder / 'tokenizer_config.json'}: chat_template is {template!r:.80}, neither a "
                             "template text nor a list of named templates",
                             "fix or remove the key (transformers reads the same file)")
    if isinstance(template, str):
        return template
    jinja_file = folder / "chat_template.jinja"
    return jinja_file.read_text(encoding="utf-8") if jinja_file.is_file() else None


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool, special_tokens: dict[str, str],
                **kwargs: Any) -> str:
    """The prompt text for `messages` ([{"role": ..., "content": ...}, ...])."""
    import jinja2

    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise InputError(f"messages must be a list of dicts, got {messages!r:.80}",
                         "pass e.g. [{'role': 'user', 'content': 'Hello'}]")
    if not messages:  # rendered, most templates give "" (or a lone default system turn): no prompt to continue
        raise InputError("messages is empty: there is no conversation to render",
                         "pass at least one message, e.g. [{'role': 'user', 'content': 'Hello'}]")
    for number, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise InputError(f"message {number} has the role {message.get('role')!r}, not a text",
                             "give every message a role such as 'system', 'user' or 'assistant'")
    tools = kwargs.pop("tools", None)
    for tool in tools or []:  # transformers turns a function into its schema (utils.get_json_schema); not done here
        if not isinstance(tool, dict):
            raise InputError(f"tools holds {tool!r:.60}, a {type(tool).__name__}, where a chat template takes a JSON "
                             "schema (a dict)", "pass each tool's schema, e.g. transformers.utils.get_json_schema("
                             "function), or {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
    # transformers 5 drops the keys whose value is None (an OpenAI-style content=None), so that a template sees
    # them undefined: `content | trim` is "" there, "None" if they were kept.
    messages = [{key: value for key, value in m.items() if value is not None} for m in messages]
    try:
        return _compile(template).render(messages=messages, tools=tools,
                                         documents=kwargs.pop("documents", None),
                                         add_generation_prompt=add_generation_prompt, **{**special_tokens, **kwargs})
    except jinja2.exceptions.SecurityError:
        raise  # the sandbox stopped the template: that is the template's fault, not the messages'
    except jinja2.TemplateError as error:  # raise_exception() in the template, or a syntax error
        raise InputError(f"the chat template refused these messages: {error}",
                         "check the roles and their order (many templates want user/assistant alternating)") from None
    except (TypeError, ValueError) as error:  # e.g. a content of 5 added to a text inside the template
        raise InputError(f"the chat template could not render these messages: {error}",
                         "give every message's content as a text (or the list of parts the template expects)") \
            from None


@functools.lru_cache(maxsize=8)
def _compile(template: str):
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:  # pragma: no cover - jinja2 is a dependency
        raise TokenizerError("chat templates need jinja2", "pip install 'jinja2>=3.1.6'") from None

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own tojson escapes HTML characters; transformers' does not, so neither does this one
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _namespace_class()
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as error:
        raise TokenizerError(f"the checkpoint's chat template does not parse: {error}",
                             "fix `chat_template` in tokenizer_config.json, or re-convert the GGUF") from None


class _TemplateDict:
    """`dict(...)` for templates without handing them the type itself (as transformers does)."""

    def __call__(self, *args, **kwargs) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs) -> dict:
        return dict.fromkeys(*args, **kwargs)


@functools.lru_cache(maxsize=1)
def _namespace_class():
    """jinja's Namespace refusing underscore names, so a template cannot reach CPython internals
    through it (transformers' TemplateNamespace)."""
    import jinja2

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # jinja's signature trick, so that namespace(self=...) still works
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"chat templates cannot store {name!r} on a namespace")

    return TemplateNamespace
