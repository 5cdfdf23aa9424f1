"""Every prompt string of the papers, verbatim, with where it comes from; and how a prompt option
(a name or a template with `{text}`) resolves to templates.

    PromptEOL      Jiang et al., "Scaling Sentence Embeddings with Large Language Models" (arXiv
                   2307.16645), the explicit one-word limitation prompt; code kongds/scaling_sentemb,
                   `evaluation.py` (`batcher`: `hidden_states[-1][:, -1, :]`).
    Pretended CoT  Zhang et al., "Simple Techniques for Enhancing Sentence Embeddings in Generative
    Knowledge      Language Models" (arXiv 2404.03921); code ZBWpro/PretCoTandKE, `settings.py` (the
                   strings `Pretended_CoT`, `Knowledge_Enhancement`) and `evaluation.py` (`batcher`:
                   `hidden_states[-2][:, -1, :]` for these two prompts, `hidden_states[-1]` for PromptEOL).
    MetaEOL        Lei et al., "Meta-Task Prompting Elicits Embeddings from Large Language Models" (arXiv
                   2402.18458); code Yibin-Lei/MetaEOL, `evaluation.py` (`task_prompts`).
    CP auxiliary   Cheng et al. (arXiv 2505.12831), Table 4; the default is the reference's `negative_prompt`
                   (zifengcheng/CP, `evaluate_intervention.py`).

The strings are those of docs/spec.md section 3 (= the references' strings with `*sent 0*` written `{text}`).
"""
from __future__ import annotations

from minidecoder.errors import InputError
from minidecoder.methods.text import template_fields

TEMPLATES: dict[str, str] = {
    # kongds/scaling_sentemb, evaluation.py; ZBWpro/PretCoTandKE, settings.py `PromptEOL`
    "prompteol": 'This sentence : "{text}" means in one word:"',
    # ZBWpro/PretCoTandKE, settings.py `Pretended_CoT`
    "pretended_cot": 'After thinking step by step , this sentence : "{text}" means in one word:"',
    # ZBWpro/PretCoTandKE, settings.py `Knowledge_Enhancement`
    "knowledge": ('The essence of a sentence is often captured by its main subjects and actions, while descriptive '
                  'terms provide additional but less central details. With this in mind , this sentence : '
                  '"{text}" means in one word:"'),
}

# The output layer each reference reads (hidden_states index; see minidecoder.methods.layers).
REFERENCE_LAYERS: dict[str, int] = {"prompteol": -1, "pretended_cot": -2, "knowledge": -2,
                                    "ck": -2, "metaeol": -1}  # ck: CP's Knowledge + Pretended CoT

# The eight prompts, verbatim from Yibin-Lei/MetaEOL `evaluation.py` with `*sent 0*` written `{text}`
# (docs/spec.md section 3). Order kept: `tasks` indexes this list.
METAEOL_TEMPLATES: list[str] = [
    # task 1: text categorization
    "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a broad category such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', or 'Culture'. These categories help in organizing content for better accessibility and targeting. For this task, this sentence : \"{text}\" should be classified under one general category in one word:\"",
    # task 2: opinion vs fact
    "In this task, you're given a statement and you need to determine whether it's presenting an 'Opinion' or a 'Fact'. This distinction is vital for information verification, educational purposes, and content analysis. For this task, this sentence : \"{text}\" discriminates between opinion and fact in one word:\"",
    # task 3: sentiment (review rating)
    "In this task, you're given a review from an online platform. Your task is to generate a rating for the product based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means 'extremely positive'. For this task, this sentence : \"{text}\" reflects the sentiment in one word:\"",
    # task 4: emotion (diary entry)
    "In this task, you're reading a personal diary entry. Your task is to identify the predominant emotion expressed, such as joy, sadness, anger, fear, or love. For this task, this sentence : \"{text}\" conveys the emotion in one word:\"",
    # task 5: paraphrase / semantic similarity
    "In this task, you're presented with two sentences. Your task is to assess whether the sentences convey the same meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the relationship. To enhance the performance of this task, this sentence : \"{text}\" means in one word:\"",
    # task 6: contextual synonym
    "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a contextual synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance the performance of this task, this sentence : \"{text}\" means in one word:\"",
    # task 7: key fact (news)
    "In this task, you're examining a news article. Your task is to extract the most critical fact from the article. For this task, this sentence : \"{text}\" encapsulates the key fact in one word:\"",
    # task 8: entities and relations (science)
    "In this task, you're reviewing a scientific abstract. Your task is to identify the main entities (e.g., proteins, diseases) and their relations (e.g., causes, treats). For this task, this sentence : \"{text}\" highlights the primary entity or relation in one word:\"",
]

# CP's auxiliary prompts (paper Table 4), by name.
AUX_PROMPTS: dict[str, str] = {
    name: f'The {phrase} of this sentence : "{{text}}" means in one word:"'
    for name, phrase in [("irrelevant", "irrelevant information"), ("redundant", "redundant information"),
                         ("background", "background"), ("descriptive", "descriptive term")]
}


def resolve_prompts(prompt: str) -> list[str]:
    """A prompt name (prompteol, pretended_cot, knowledge, ck, metaeol) or a template with {text}: the
    templates whose embeddings are averaged (`ck` = Knowledge then Pretended CoT, the CP reference's)."""
    if not isinstance(prompt, str):
        raise InputError(f"prompt {prompt!r} is not a name or a template", "pass e.g. prompt=prompteol")
    if "text" in template_fields(prompt):
        return [prompt]
    if prompt == "metaeol":
        return list(METAEOL_TEMPLATES)
    if prompt == "ck":
        return [TEMPLATES["knowledge"], TEMPLATES["pretended_cot"]]
    if prompt in TEMPLATES:
        return [TEMPLATES[prompt]]
    raise InputError(f"unknown prompt {prompt!r}",
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
