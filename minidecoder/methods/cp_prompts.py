"""CP's prompts: the normal prompt (by name or a template) and the auxiliary prompt of paper Table 4.

One auxiliary pass serves every normal prompt of a multi-prompt method (`ck` = Knowledge and
Pretended CoT averaged, as the reference's `ck`; `metaeol` = the eight MetaEOL prompts).
"""
from __future__ import annotations

from minidecoder.errors import InputError
from minidecoder.methods.text import template_fields

# The paper's Table 4 auxiliary prompts, by name; the default is the reference's `negative_prompt`.
AUX_PROMPTS: dict[str, str] = {
    name: f'The {phrase} of this sentence : "{{text}}" means in one word:"'
    for name, phrase in [("irrelevant", "irrelevant information"), ("redundant", "redundant information"),
                         ("background", "background"), ("descriptive", "descriptive term")]
}

# Output layer used when `layer` is None: the reference configuration of each prompt (spec 1, 3).
REFERENCE_LAYER = {"prompteol": -1, "pretended_cot": -2, "knowledge": -2, "ck": -2, "metaeol": -1}


def resolve_prompts(prompt: str) -> list[str]:
    """A prompt name (prompteol, pretended_cot, knowledge, ck, metaeol) or a template with {text}."""
    if not isinstance(prompt, str):
        raise InputError(f"CP prompt {prompt!r} is not a name or a template", "pass e.g. prompt=prompteol")
    if "text" in template_fields(prompt):
        return [prompt]
    if prompt == "metaeol":
        from minidecoder.methods.metaeol import METAEOL_TEMPLATES
        return list(METAEOL_TEMPLATES)
    from minidecoder.methods.prompts import TEMPLATES
    if prompt == "ck":  # reference `ck`: Knowledge first, then Pretended CoT, embeddings averaged
        return [TEMPLATES["knowledge"], TEMPLATES["pretended_cot"]]
    if prompt in TEMPLATES:
        return [TEMPLATES[prompt]]
    raise InputError(f"unknown CP prompt {prompt!r}",
                     f"use one of {', '.join(sorted([*TEMPLATES, 'ck', 'metaeol']))}, or a template containing {{text}}")


def resolve_aux_prompt(aux_prompt: str) -> str:
    if not isinstance(aux_prompt, str):
        raise InputError(f"CP aux_prompt {aux_prompt!r} is not a name or a template", "pass e.g. aux_prompt=irrelevant")
    if "text" in template_fields(aux_prompt):
        return aux_prompt
    if aux_prompt in AUX_PROMPTS:
        return AUX_PROMPTS[aux_prompt]
    raise InputError(f"unknown CP auxiliary prompt {aux_prompt!r}",
                     f"use one of {', '.join(AUX_PROMPTS)} (paper Table 4), or a template containing {{text}}")
