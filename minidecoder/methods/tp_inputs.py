"""TP's inputs: the prompt templates with `<PST>` before the quote, tokenized with the placeholder as an
added token, and where the placeholders landed. The step itself is in `minidecoder.methods.tp`.

Reference code (fuyuchenIfyw/token_prepending, commit ab3081d6), read for every convention here:
- `senllm/modeling_llama.py`, `LlamaModel.forward`, plan "tp": for `index` in
  [tp_starting_index, tp_exiting_index): `hidden_states[arange(B), pst_token_indices] =
  hidden_states[:, -1].clone()` before calling decoder layer `index`; the same loop in
  `senllm/modeling_qwen2.py` and `senllm/modeling_gemma2.py`. `find_token_indices` takes the *first*
  `<PST>` of each row only; with `num_pst > 1` (paper Table 14) minidecoder overwrites every `<PST>`.
- `evaluate.py`: `tokenizer.add_tokens(["<PST>"])`, `resize_token_embeddings`, and the new row set
  to `torch.randn(hidden)` (unscaled N(0, I), on the GPU RNG seeded 3407 -- not reproducible on CPU;
  minidecoder draws its N(0, I) row from a CPU generator with `seed`, stated in `describe()`). Gemma2
  multiplies it by sqrt(hidden) like every embedding row (`modeling_gemma2.py`, `normalizer`).
  Left padding with `pad_token_id = 0`; the prompt strings are PromptEOL's / Pretended CoT's /
  Knowledge's / MetaEOL's with `<PST> ` inserted before the opening quote; MetaEOL+TP averages the
  last tokens of the 8 prompts (`outputs.view(-1, 8, E).mean(1)`).
- `config.yaml`: the reference (prompt, output layer, start, end) per model, listed in
  docs/methods.md (the TP row).
- The ablations `mask_pst_first_layer` (paper Table 15) and `resume_at` (Table 16) are not in the
  released code; they follow the paper's text (see the option help).

Layer numbers follow `minidecoder.methods.layers`: `layer` indexes hidden_states (0 = embeddings,
-1 = final normed output), `start`/`end` are 0-based block indices of a half-open range, so the
reference's `tp_starting_index=1, tp_exiting_index=7` is `start=1, end=7`: copies before blocks 1..6.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.prompts import TEMPLATES, check_template

PST = "<PST>"


@dataclass
class TPInputs:
    """One template's batch: the ids, where the placeholders are, their input row."""

    batch: PromptBatch
    placeholder_id: int
    positions: list[list[int]]  # per row, the padded positions of the <PST> tokens
    row: torch.Tensor  # (E,) float32, before Gemma scaling


def with_placeholders(template: str, num_pst: int) -> str:
    """A prompt template with `num_pst` `<PST>` put right before its opening quote: the reference's TP
    strings (`This sentence : <PST> "*sent 0*" means in one word:"`, evaluate.py)."""
    if template.count('"{text}"') != 1:
        raise InputError(f"template {template!r} has no single '\"{{text}}\"' to put <PST> before",
                         "pass a custom template with <PST> where you want it")
    return template.replace('"{text}"', PST * num_pst + ' "{text}"')


def tp_templates(prompt: str, num_pst: int) -> list[str]:
    """The TP template(s) of a named prompt, or a custom template that already holds `<PST>`."""
    if prompt in TEMPLATES:
        return [with_placeholders(TEMPLATES[prompt], num_pst)]
    if prompt == "metaeol":
        from minidecoder.methods.metaeol import METAEOL_TEMPLATES  # the 8 strings of spec section 3
        return [with_placeholders(t, num_pst) for t in METAEOL_TEMPLATES]
    if not isinstance(prompt, str) or PST not in prompt or "{text}" not in prompt:
        raise InputError(f"prompt {prompt!r} is neither a known prompt nor a template with {PST} and {{text}}",
                         f"use one of {', '.join([*TEMPLATES, 'metaeol'])}, or e.g. "
                         "'This sentence : <PST> \"{text}\" means in one word:\"'")
    check_template(prompt)
    if prompt.count(PST) != num_pst:
        raise InputError(f"the template holds {prompt.count(PST)} {PST} but num_pst is {num_pst}",
                         f"set num_pst={prompt.count(PST)} (a custom template places its own placeholders)")
    return [prompt]


def encode_tp(model, template: str, texts: list[str], row: torch.Tensor) -> TPInputs:
    """Tokenize one TP template for prepared texts (left padding, `<PST>` as an added token)."""
    pst_id = model.tokenizer.add_placeholder(PST)
    batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
    positions = batch.positions_of(pst_id)
    expected = template.count(PST)
    for index, found in enumerate(positions):
        if len(found) != expected:
            raise InputError(f"text {index} ({texts[index]!r}) gives {len(found)} {PST} tokens; the template has "
                             f"{expected}", f"the text must not contain the placeholder string {PST}")
    return TPInputs(batch, pst_id, positions, row)
