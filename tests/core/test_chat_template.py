"""Chat templates: the converter keeps a GGUF's `tokenizer.chat_template`, and
`Tokenizer.apply_chat_template` gives the token ids transformers' `apply_chat_template` gives, on a
tiny checkpoint with a template of its own, on a tiny GGUF converted here, and on the shipped models'
own templates (SmolLM2 in the default run; Qwen2.5-Coder and Gemma-3 under `-m slow`).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minidecoder.core.tokenizer import Tokenizer
from minidecoder.errors import InputError, TokenizerError
from real_models import REAL_MODELS, real_files

CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Héllo, what is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]

# A template of the tiny model's own that uses what real templates use: a namespace carried across
# the loop, loop.first / loop.last, the special-token variables, `tojson`, whitespace control
# (trim_blocks / lstrip_blocks make the indented block lines vanish) and raise_exception.
TINY_TEMPLATE = """{{ bos_token }}{% set ns = namespace(turns=0) %}
{% for message in messages %}
    {% if message['role'] not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('unknown role ' + message['role']) }}
    {% endif %}
    {% if message['role'] == 'user' %}{% set ns.turns = ns.turns + 1 %}{% endif %}
[{{ message['role'] | upper }} {{ ns.turns }}{% if loop.first %} first{% endif %}] {{ message['content'] | trim }}
{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT] {% endif %}{{ {'n': ns.turns, 'note': 'é'} | tojson }}"""


def _transformers_ids(folder: Path, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast.from_pretrained(str(folder))
    return list(reference.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                              return_dict=False))


@pytest.fixture(scope="module")
def tiny_chat_folder(tmp_path_factory) -> Path:
    from tiny_models import save_tiny_tokenizer

    folder = save_tiny_tokenizer(tmp_path_factory.mktemp("tiny-chat"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TINY_TEMPLATE}))
    return folder


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_tiny_template_ids_equal_transformers(tiny_chat_folder: Path, chat: int, add_generation_prompt: bool):
    ours = Tokenizer(tiny_chat_folder).apply_chat_template(CHATS[chat], add_generation_prompt=add_generation_prompt)
    assert ours == _transformers_ids(tiny_chat_folder, CHATS[chat], add_generation_prompt)
    text = Tokenizer(tiny_chat_folder).apply_chat_template(CHATS[chat], add_generation_prompt, tokenize=False)
    assert text.startswith("<s>[USER 1 first]") or text.startswith("<s>[SYSTEM 0 first]")
    assert text.endswith("[ASSISTANT] " + json.dumps({"n": chat + 1, "note": "é"}, ensure_ascii=False)) \
        == add_generation_prompt


def test_template_errors_are_input_errors(tiny_chat_folder: Path):
    tokenizer = Tokenizer(tiny_chat_folder)
    with pytest.raises(InputError, match="unknown role tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}])
    with pytest.raises(InputError, match="list of dicts"):
        tokenizer.apply_chat_template("hello")


def test_transformers_arguments_it_lacks_are_refused_not_handed_to_the_template(tiny_chat_folder: Path):
    """They reached the template as variables it never reads: continue_final_message=True closed the final
    message, sanitize_control_tokens=True left control tokens in, truncation=True cut nothing, unsaid."""
    tokenizer = Tokenizer(tiny_chat_folder)
    plain = tokenizer.apply_chat_template(CHATS[1])
    for argument in ({"continue_final_message": True}, {"sanitize_control_tokens": True}, {"return_tensors": "pt"},
                     {"truncation": True, "max_length": 4}, {"return_dict": True}):
        with pytest.raises(InputError, match=f"apply_chat_template\\({next(iter(argument))}="):
            tokenizer.apply_chat_template(CHATS[1], **argument)
    # What they do by default (transformers' return_dict=False is what this one returns) stays taken.
    assert tokenizer.apply_chat_template(CHATS[1], continue_final_message=False, return_dict=False, padding=False,
                                         max_length=None) == plain


def test_a_none_value_is_left_out_and_an_empty_conversation_refused_as_in_transformers(tiny_chat_folder: Path):
    """content=None rendered as "None" (transformers drops the key: `content | trim` is ""); [] rendered the
    template around nothing, where transformers refuses it."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": None}]
    tokenizer = Tokenizer(tiny_chat_folder)
    assert tokenizer.apply_chat_template(messages) == _transformers_ids(tiny_chat_folder, messages, False)
    assert messages[1]["content"] is None  # the caller's messages are untouched
    with pytest.raises(InputError, match="messages is empty"):
        tokenizer.apply_chat_template([], add_generation_prompt=True)


def test_a_function_as_a_tool_is_named_not_blamed_on_the_messages(tiny_chat_folder: Path):
    """transformers turns a Python function into its JSON schema; here it failed as "Object of type function is
    not JSON serializable", with the fix "give every message's content as a text"."""
    def get_weather(city: str) -> str:
        return "sunny"

    template = "{{ tools | tojson }}{{ messages[0]['content'] }}"
    tokenizer = Tokenizer(tiny_chat_folder)
    with pytest.raises(InputError, match="tools holds <function .*, a function, where a chat") as caught:
        tokenizer.apply_chat_template(CHATS[0], chat_template=template, tools=[get_weather])
    assert "get_json_schema" in str(caught.value) and "content" not in str(caught.value)
    schema = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    assert tokenizer.apply_chat_template(CHATS[0], chat_template=template, tools=[schema], tokenize=False) \
        == json.dumps([schema]) + CHATS[0][0]["content"]


def test_template_cannot_reach_python_internals(tiny_chat_folder: Path):
    """The sandbox refuses attribute access to internals, as transformers' environment does."""
    import jinja2

    tokenizer = Tokenizer(tiny_chat_folder)
    with pytest.raises(jinja2.exceptions.SecurityError):
        tokenizer.apply_chat_template(CHATS[0], chat_template="{{ messages.__class__.__mro__ }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        tokenizer.apply_chat_template(CHATS[0], chat_template="{% set ns = namespace() %}{% set ns._x = 1 %}")


def test_no_template_is_a_clear_error(tiny_llama: Path):
    with pytest.raises(TokenizerError, match="has no chat template"):
        Tokenizer(tiny_llama).apply_chat_template(CHATS[0])


def test_chat_template_jinja_file_is_read(tiny_chat_folder: Path, tmp_path: Path):
    """transformers 5 saves the template as chat_template.jinja beside tokenizer_config.json."""
    folder = Path(shutil.copytree(tiny_chat_folder, tmp_path / "jinja"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "chat_template.jinja").write_text(config.pop("chat_template"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert Tokenizer(folder).apply_chat_template(CHATS[1], True) == _transformers_ids(folder, CHATS[1], True)


# Two more templates, each telling which one rendered; TOOL_USE also reads `tools`.
OTHER_TEMPLATE = "[other]{% for m in messages %}{{ m['content'] }};{% endfor %}"
TOOL_USE_TEMPLATE = "[tool_use {{ (tools or []) | length }}]{% for m in messages %}{{ m['content'] }};{% endfor %}"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def _folder_with(tiny_chat_folder: Path, tmp_path: Path, config_template, jinja: str | None = None,
                 named: dict[str, str] | None = None) -> Path:
    """A copy of the tiny chat folder whose templates are laid out as given: tokenizer_config.json's
    `chat_template` (a text, a list of named ones, or None), chat_template.jinja, additional_chat_templates/."""
    folder = Path(shutil.copytree(tiny_chat_folder, tmp_path / "templates"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    if config_template is not None:
        config["chat_template"] = config_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (folder / "chat_template.jinja").write_text(jinja)
    for name, template in (named or {}).items():
        (folder / "additional_chat_templates").mkdir(exist_ok=True)
        (folder / "additional_chat_templates" / f"{name}.jinja").write_text(template)
    return folder


def _both_texts(folder: Path, **kwargs) -> tuple[str, str]:
    """(minidecoder's, transformers') rendered text of CHATS[0] for one apply_chat_template call."""
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast.from_pretrained(str(folder))
    return (Tokenizer(folder).apply_chat_template(CHATS[0], tokenize=False, **kwargs),
            reference.apply_chat_template(CHATS[0], tokenize=False, **kwargs))


def test_chat_template_jinja_wins_over_tokenizer_config_as_in_transformers(tiny_chat_folder: Path, tmp_path: Path):
    """transformers reads the template files first: with both, the config's template rendered here."""
    folder = _folder_with(tiny_chat_folder, tmp_path, TINY_TEMPLATE, jinja=OTHER_TEMPLATE)
    ours, theirs = _both_texts(folder)
    assert ours == theirs == "[other]What is 2+2?;"


def test_named_templates_are_chosen_as_transformers_chooses(tiny_chat_folder: Path, tmp_path: Path):
    """A list of named templates: the default, "tool_use" when tools are passed, any one by its name. Before,
    tools rendered the default, and a name was rendered as if it were a template's text."""
    folder = _folder_with(tiny_chat_folder, tmp_path, [{"name": "default", "template": OTHER_TEMPLATE},
                                                       {"name": "tool_use", "template": TOOL_USE_TEMPLATE}])
    for kwargs, expected in (({}, "[other]What is 2+2?;"), ({"tools": TOOLS}, "[tool_use 1]What is 2+2?;"),
                             ({"chat_template": "tool_use"}, "[tool_use 0]What is 2+2?;"),
                             ({"chat_template": "{{ 'a text' }}"}, "a text")):
        ours, theirs = _both_texts(folder, **kwargs)
        assert ours == theirs == expected, kwargs


def test_additional_chat_templates_are_named_templates(tiny_chat_folder: Path, tmp_path: Path):
    """transformers 5 saves named templates as additional_chat_templates/NAME.jinja; they replace the config's."""
    folder = _folder_with(tiny_chat_folder, tmp_path, TINY_TEMPLATE, jinja=OTHER_TEMPLATE,
                          named={"tool_use": TOOL_USE_TEMPLATE})
    assert Tokenizer(folder).chat_template == {"default": OTHER_TEMPLATE, "tool_use": TOOL_USE_TEMPLATE}
    for kwargs in ({}, {"tools": TOOLS}, {"chat_template": "tool_use"}):
        ours, theirs = _both_texts(folder, **kwargs)
        assert ours == theirs, kwargs


def test_named_templates_without_a_default_ask_for_a_name(tiny_chat_folder: Path, tmp_path: Path):
    """transformers refuses too; here the message names the templates there are."""
    from transformers import PreTrainedTokenizerFast

    folder = _folder_with(tiny_chat_folder, tmp_path, None, named={"rag": OTHER_TEMPLATE,
                                                                   "tool_use": TOOL_USE_TEMPLATE})
    with pytest.raises(TokenizerError, match="none called 'default': rag, tool_use") as caught:
        Tokenizer(folder).apply_chat_template(CHATS[0])
    assert "chat_template=NAME" in caught.value.fix
    with pytest.raises(ValueError, match="no default"):
        PreTrainedTokenizerFast.from_pretrained(str(folder)).apply_chat_template(CHATS[0])
    assert _both_texts(folder, chat_template="rag")[0] == "[other]What is 2+2?;"


def test_a_template_file_that_is_not_utf8_is_named(tiny_chat_folder: Path, tmp_path: Path):
    folder = _folder_with(tiny_chat_folder, tmp_path, None)
    (folder / "chat_template.jinja").write_bytes(b"[\xff]{{ messages[0]['content'] }}")
    with pytest.raises(TokenizerError, match=r"chat_template.jinja is not UTF-8 text \(byte 1\)"):
        Tokenizer(folder)


def test_converter_keeps_the_gguf_template(tmp_path: Path):
    from minidecoder.sources.convert.converter import convert_gguf
    from tiny_gguf import write_tiny_gguf

    template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}" \
               "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    write_tiny_gguf(tmp_path / "tiny.gguf", "llama", extra_metadata={"tokenizer.chat_template": template})
    folder = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "out", progress=False)
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == template
    ours = Tokenizer(folder).apply_chat_template(CHATS[1], add_generation_prompt=True)
    assert ours == _transformers_ids(folder, CHATS[1], True)


@pytest.mark.parametrize("name", REAL_MODELS)
def test_shipped_model_template_ids_equal_transformers(name: str):
    """The template the GGUF ships, through the converter, renders to transformers' ids."""
    from transformers import AutoTokenizer

    from minidecoder.sources.convert.gguf_reader import GGUFFile

    gguf_path, folder = real_files(name)
    shipped = GGUFFile(gguf_path).metadata.get("tokenizer.chat_template")
    if shipped is None:
        pytest.skip(f"{gguf_path.name} ships no tokenizer.chat_template")
    tokenizer = Tokenizer(folder)
    assert tokenizer.chat_template == shipped
    reference = AutoTokenizer.from_pretrained(str(folder))
    for chat in CHATS:
        for add_generation_prompt in (True, False):
            expected = list(reference.apply_chat_template(chat, add_generation_prompt=add_generation_prompt,
                                                          return_dict=False))
            assert tokenizer.apply_chat_template(chat, add_generation_prompt=add_generation_prompt) == expected


def test_generate_chat_cli_uses_the_template(tiny_llama_copy: Path, capsys):
    """`minidecoder generate --chat/--system` continues exactly the ids transformers' template gives."""
    import minidecoder
    import minidecoder.cli as cli

    config = json.loads((tiny_llama_copy / "tokenizer_config.json").read_text())
    (tiny_llama_copy / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TINY_TEMPLATE}))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    model = minidecoder.load(tiny_llama_copy)
    new = minidecoder.generate(model, _transformers_ids(tiny_llama_copy, messages, True), max_new_tokens=6)
    expected = model.tokenizer.decode(new, skip_special_tokens=True).strip()
    assert expected  # a reply that is empty would make the comparison below vacuous
    assert cli.main(["generate", "--system", "Be brief.", "--chat", "Hi?", "--max-new-tokens", "6",
                     "--model", str(tiny_llama_copy)]) == 0
    assert capsys.readouterr().out == expected + "\n"
    # the raw-prompt path continues the text itself, so the template visibly changes what is continued
    assert cli.main(["generate", "Hi?", "--max-new-tokens", "6", "--model", str(tiny_llama_copy)]) == 0
    raw = capsys.readouterr().out
    assert raw.startswith("Hi?")
