"""Render a checkpoint's chat template (Jinja) into a prompt string, as transformers does.

The template is the checkpoint's own: a `chat_template.jinja` file (transformers 5's layout, with
named ones in `additional_chat_templates/`), or else `chat_template` in tokenizer_config.json (the
converter copies a GGUF's `tokenizer.chat_template` there). Templates are untrusted code from a model
repository, so they run in jinja2's ImmutableSandboxedEnvironment with exactly the environment transformers builds
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

# transformers' names (transformers/utils/hub.py): the default template's file, and the folder of named ones
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"


def find_chat_template(folder: Path, tokenizer_config: dict) -> str | dict[str, str] | None:
    """The folder's chat template(s), found as transformers 5 finds them: None when it ships none, one
    template's text, or {name: template} when there are named ones.

    Files win over the config, as in transformers (tokenization_utils_base `_from_pretrained`):
    `chat_template.jinja` is the default template and each `additional_chat_templates/NAME.jinja` a named
    one; only without them is tokenizer_config.json's `chat_template` read (a text, or a list of
    {"name": ..., "template": ...})."""
    files = {}
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        files["default"] = _read_template(folder / CHAT_TEMPLATE_FILE)
    if (folder / CHAT_TEMPLATE_DIR).is_dir():
        for path in sorted((folder / CHAT_TEMPLATE_DIR).glob("*.jinja")):
            files[path.name.removesuffix(".jinja")] = _read_template(path)
    if files:
        return files["default"] if list(files) == ["default"] else files
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # transformers' named templates: [{"name": ..., "template": ...}]
        if not all(isinstance(entry, dict) and isinstance(entry.get("name"), str)
                   and isinstance(entry.get("template"), str) for entry in template):
            raise TokenizerError(f"{folder / 'tokenizer_config.json'}: chat_template is a list whose entries are not "
                                 f"all {{\"name\": TEXT, \"template\": TEXT}}: {template!r:.120}",
                                 "fix or remove the key (transformers reads the same file)")
        return {entry["name"]: entry["template"] for entry in template}
    if template is not None and not isinstance(template, str):  # refused now, not as "no chat template" later
        raise TokenizerError(f"{folder / 'tokenizer_config.json'}: chat_template is {template!r:.80}, neither a "
                             "template text nor a list of named templates",
                             "fix or remove the key (transformers reads the same file)")
    return template


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise TokenizerError(f"{path} is not UTF-8 text (byte {error.start})",
                             "save the template as UTF-8 (transformers reads it as UTF-8 too)") from None


def choose_chat_template(templates: str | dict[str, str] | None, chat_template: str | None, tools: Any,
                         folder: Path) -> str:
    """The template one `apply_chat_template` call renders, chosen as transformers' `get_chat_template`
    chooses it: `chat_template` is the name of one of the folder's named templates, or else a template
    text; without it, a call with `tools` takes the template named "tool_use" where there is one, and
    every other call the default."""
    if isinstance(templates, dict):
        if chat_template is not None:
            return templates.get(chat_template, chat_template)
        if tools is not None and "tool_use" in templates:
            return templates["tool_use"]
        if "default" in templates:
            return templates["default"]
        raise TokenizerError(f"the tokenizer in {folder} has named chat templates and none called 'default': "
                             f"{', '.join(sorted(templates))}",
                             "name the one to use: chat_template=NAME (or pass a template's text)")
    if chat_template is not None:
        return chat_template
    if templates is None:
        raise TokenizerError(f"the tokenizer in {folder} has no chat template",
                             "use an instruct checkpoint (its tokenizer_config.json has `chat_template`, or it "
                             "ships chat_template.jinja), pass chat_template=..., or write the prompt yourself")
    return templates


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
