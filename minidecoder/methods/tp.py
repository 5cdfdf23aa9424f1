"""Token Prepending (TP): Fu et al., "Token Prepending: A Training-Free Approach for Eliciting Better
Sentence Embeddings from LLMs" (ACL 2025, arXiv 2412.11556). Spec `methods.md` section 4.

A placeholder token `<PST>` is put before the quoted sentence of a prompt. Before each block i in
[start, end), the residual-stream row of every `<PST>` is overwritten with the residual-stream row of
the prompt's last token (the block's input, before its input norm), so that the sentence's early
tokens can attend, in block i, to the sentence summary built by blocks < i. The embedding is the
last token at an (early-exit) output layer.

    ids:   <s> This sentence : <PST> " a cat sat . " means in one word : "
    block i in [start, end):   h[<PST>] <- h[last]      (whole vector replaced)
    output: hidden_states[layer][last]

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
  docs/methods_table_tp_htp.md.
- The ablations `mask_pst_first_layer` (paper Table 15) and `resume_at` (Table 16) are not in the
  released code; they follow the paper's text (see the option help).

Layer numbers follow `minidecoder.methods.layers`: `layer` indexes hidden_states (0 = embeddings,
-1 = final normed output), `start`/`end` are 0-based block indices of a half-open range, so the
reference's `tp_starting_index=1, tp_exiting_index=7` is `start=1, end=7`: copies before blocks 1..6.

Reusable pieces (HTP and CP build on them): `CopyPlan` (row copies inside the residual stream),
`copy_last_into_placeholders`, `placeholder_row`, and `forward_with_copies`, the per-block loop that
accepts per-block `Sites` (CP edits the attention output `z` of one block through it).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import Method, option, register
from minidecoder.methods.inputs import PromptBatch, encode_prompts
from minidecoder.methods.layers import check_block_range, resolve_output_layer
from minidecoder.methods.prompts import TEMPLATES, check_bool, check_template, prepare_texts
from minidecoder.methods.runner import last_token
from minidecoder.core.model import Sites

PST = "<PST>"
PLACEHOLDER_INITS = ("zeros", "ones", "uniform", "gaussian", "mean", "token:<text>")


# ---- reusable pieces ------------------------------------------------------------------------------
@dataclass
class CopyPlan:
    """Row copies inside the residual stream: h[batch[k], target[k]] <- h[batch[k], source[k]] for
    every k, all sources read before any target is written. Index tensors are (K,) long."""

    batch: torch.Tensor
    target: torch.Tensor
    source: torch.Tensor

    @classmethod
    def from_pairs(cls, pairs: list[tuple[int, int, int]], device: torch.device | None = None) -> "CopyPlan":
        """pairs: (row, target position, source position) triples."""
        index = torch.tensor(pairs, dtype=torch.long, device=device).reshape(-1, 3)  # (K, 3)
        return cls(index[:, 0], index[:, 1], index[:, 2])

    def to(self, device: torch.device) -> "CopyPlan":
        return CopyPlan(self.batch.to(device), self.target.to(device), self.source.to(device))

    def apply(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, E) -> a new (B, T, E) with the rows copied; `h` itself is left untouched, so hidden
        states handed out earlier keep their values (the references wrote in place)."""
        out = h.clone()
        out[self.batch, self.target] = h[self.batch, self.source]  # the whole vector is replaced
        return out


def tp_copy_plan(batch: PromptBatch, positions: list[list[int]]) -> CopyPlan:
    """Spec 4.2: every placeholder position of row b receives row b's last real token."""
    last = batch.last_positions().tolist()
    return CopyPlan.from_pairs([(b, p, last[b]) for b, row in enumerate(positions) for p in row])


def copy_last_into_placeholders(h: torch.Tensor, batch: PromptBatch, positions: list[list[int]]) -> torch.Tensor:
    """h (B, T, E): overwrite h[b, p] for every p in positions[b] with h[b, last real token of row b].
    The TP step (spec 4.2; reference `hidden_states[arange(B), pst_idx] = hidden_states[:, -1]`)."""
    return tp_copy_plan(batch, positions).to(h.device).apply(h)


def placeholder_row(model, init: str, seed: int = 0, index: int = 0) -> torch.Tensor:
    """(E,) float32 input-embedding row for a placeholder, *before* Gemma's sqrt(hidden) scaling
    (`Decoder.embed` scales it like every row, as transformers scales the resized table's row).

    zeros / ones; uniform: U[0, 1); gaussian: N(0, I) (the reference's `torch.randn`); both drawn from
    `torch.Generator('cpu').manual_seed(seed)`, skipping `index` earlier draws (HTP's second
    placeholder uses index 1); mean: the mean row of the embedding table (what transformers'
    `resize_token_embeddings` gives a new row, up to its 1e-9-covariance noise; HTP's reference
    default); token:<text>: a copy of that token's row (the TP paper's Table 4 uses a space).
    """
    weight = model.model.embed_tokens.weight
    E = weight.shape[1]
    if not isinstance(init, str):
        raise InputError(f"pst_init {init!r} is not a string", f"use one of {', '.join(PLACEHOLDER_INITS)}")
    if init == "zeros":
        return torch.zeros(E)
    if init == "ones":
        return torch.ones(E)
    if init in ("uniform", "gaussian"):
        generator = torch.Generator().manual_seed(seed)
        draw = torch.rand if init == "uniform" else torch.randn
        for _ in range(index):
            draw(E, generator=generator)
        return draw(E, generator=generator)
    if init == "mean":
        return weight.detach().float().mean(dim=0).cpu()
    if init.startswith("token:"):
        text = init[len("token:"):]
        ids = model.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise InputError(f"pst_init {init!r}: {text!r} is {len(ids)} tokens ({ids}), not one",
                             "name a text that is a single token, e.g. 'token: ' (a space, the paper's choice)")
        return weight[ids[0]].detach().float().cpu()
    raise InputError(f"unknown pst_init {init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")


def forward_with_copies(model, batch: PromptBatch, plan: CopyPlan, copy_before: Collection[int], layer: int,
                        extra_rows: dict[int, torch.Tensor] | None = None,
                        hidden_from_first_block: torch.Tensor | None = None,
                        sites_for: Callable[[int], Sites | None] | None = None,
                        reuse_prefix: bool = False) -> torch.Tensor:
    """hidden_states[layer] (B, T, E) of a forward in which `plan` is applied to the residual stream
    before every block i in `copy_before` (TP's and HTP's per-layer loop).

    extra_rows: input-embedding rows of placeholder ids (see `Decoder.embed`).
    hidden_from_first_block: (B, T) bool, keys that block 0 must not attend to (TP's
        `mask_pst_first_layer`); positions stay those of the full mask.
    sites_for: i -> Sites for block i, or None (CP passes an edit of `z` at its steer block).
    reuse_prefix: run the template text that every row shares before its first copy target once
        (minidecoder.fast.prefix_cache), when nothing else reads or edits the stream (no sites, no hidden
        keys). Same states up to float rounding, tested.
    Early exit: blocks after the output layer never run; the final norm only for layer L / -1.
    """
    L = model.num_layers
    output_index = resolve_output_layer(layer, L)
    if reuse_prefix and sites_for is None and hidden_from_first_block is None:
        p = _prefix_before_copies(model, batch, plan)
        if p:
            from minidecoder.fast.prefix_cache import hidden_with_prefix
            shifted = CopyPlan(plan.batch, plan.target - p, plan.source - p).to(model.device)  # rest coordinates
            copies = lambda i, h: shifted.apply(h) if i in copy_before else h  # noqa: E731
            return hidden_with_prefix(model, batch, {layer: output_index}, p, extra_rows, copies)[layer]
    ids, mask = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
    B, T = ids.shape
    plan = plan.to(model.device)
    h = model.embed(ids, extra_rows)  # (B, T, E): hidden_states[0]
    ctx = model.context(mask, T, B)
    first_ctx = ctx
    if hidden_from_first_block is not None:
        # Zeroing a key column of the mask hides that key from every query; the positions are passed
        # explicitly because mask-derived positions would otherwise skip the hidden token.
        visible = mask & ~hidden_from_first_block.to(model.device)
        first_ctx = model.context(visible, T, B, position_ids=ctx.positions)
    for i, block in enumerate(model.layers[:output_index]):
        if i in copy_before:
            h = plan.apply(h)  # spec 4.2: h[<PST>] <- h[last], on the block's input (before its norm)
        h = block(h, first_ctx if i == 0 else ctx, sites_for(i) if sites_for is not None else None)
    if output_index == L:
        h = model.norm(h)  # only the last hidden state is normed (transformers' convention)
    return h


def _prefix_before_copies(model, batch: PromptBatch, plan: CopyPlan) -> int:
    """The shared-prefix length the cache may take for a copy plan: the prefix cache's own choice,
    cut so that no copy reads or writes inside it (TP's `<PST>` follows the template's first words,
    and the shared ids run on through it), or 0 if that leaves less than `MIN_PREFIX`."""
    from minidecoder.fast.prefix_cache import MIN_PREFIX, prefix_cache_applies
    p = prefix_cache_applies(model, batch)
    if p and plan.batch.numel():
        first = batch.first_positions(plan.batch.device)[plan.batch]  # (K,) first real position of each copy's row
        p = min(p, int((plan.target - first).min()), int((plan.source - first).min()))
    return p if p >= MIN_PREFIX else 0


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
    if PST not in prompt or "{text}" not in prompt:
        raise InputError(f"prompt {prompt!r} is neither a known prompt nor a template with {PST} and {{text}}",
                         f"use one of {', '.join([*TEMPLATES, 'metaeol'])}, or e.g. "
                         "'This sentence : <PST> \"{text}\" means in one word:\"'")
    check_template(prompt)
    if prompt.count(PST) != num_pst:
        raise InputError(f"the template holds {prompt.count(PST)} {PST} but num_pst is {num_pst}",
                         f"set num_pst={prompt.count(PST)} (a custom template places its own placeholders)")
    return [prompt]


@dataclass
class TPInputs:
    """One template's batch, ready for `TP.hidden`: the ids, where the placeholders are, their row."""

    batch: PromptBatch
    placeholder_id: int
    positions: list[list[int]]  # per row, the padded positions of the <PST> tokens
    row: torch.Tensor  # (E,) float32, before Gemma scaling


# ---- the method -----------------------------------------------------------------------------------
@register
@dataclasses.dataclass
class TP(Method):
    name = "tp"
    summary = ("Token Prepending (Fu et al. 2025): a <PST> before the quoted sentence takes the last token's "
               "residual row before blocks [start, end); last token at an early-exit layer")

    prompt: str = option("prompteol", "prompteol, pretended_cot, knowledge, metaeol (8 prompts averaged), or a "
                                      "custom template holding <PST> and {text}")
    layer: int = option(27, "output layer (hidden_states index; -1 final normed, -2 raw output of the second-to-last "
                            "block). Reference: Llama-2-7B PromptEOL 27; CoT/Knowledge -2")
    start: int = option(1, "first 0-based block before which <PST> takes the last token's row")
    end: int = option(7, "copies happen before blocks start..end-1 (half-open); reference 7 (Llama), 6 (Qwen2, Gemma2), "
                         "3 (Llama-3-8B)")
    num_pst: int = option(1, "how many <PST> tokens precede the quote (paper Table 14); every one is overwritten")
    pst_init: str = option("gaussian", "input row of <PST>: zeros, ones, uniform (U[0,1)), gaussian (N(0, I), seeded), "
                                       "mean (embedding-table mean), token:<text> (copy a token's row; the paper "
                                       "uses a space) -- paper Table 4")
    seed: int = option(0, "seed of the CPU generator for pst_init gaussian/uniform")
    mask_pst_first_layer: bool = option(False, "paper Table 15: <PST> is hidden as a key in block 0 (no query attends "
                                               "to it there); its own query row is computed as usual and is "
                                               "overwritten before block `start` anyway")
    resume_at: int | None = option(None, "paper Table 16: copy again before every block from this 0-based block up to "
                                         "the output layer (None = off); must be >= end")
    senteval_text: bool = option(True, "prepare each text as the SentEval batchers did (append '.', '\"' -> \"'\", "
                                       "final '?' -> '.'); false embeds the text verbatim")

    def __post_init__(self) -> None:
        for name in ("layer", "start", "end", "num_pst", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{name} {value!r} is not an integer", f"pass an integer {name}")
        if self.num_pst < 1:
            raise InputError(f"num_pst {self.num_pst} must be at least 1", "the paper's Table 14 uses 1 to 4")
        if self.resume_at is not None and (isinstance(self.resume_at, bool) or not isinstance(self.resume_at, int)):
            raise InputError(f"resume_at {self.resume_at!r} is not an integer or None", "e.g. resume_at=20")
        check_bool(self.mask_pst_first_layer, "mask_pst_first_layer")
        check_bool(self.senteval_text, "senteval_text")
        if not isinstance(self.pst_init, str) or not (self.pst_init in PLACEHOLDER_INITS[:-1]
                                                      or self.pst_init.startswith("token:")):
            raise InputError(f"unknown pst_init {self.pst_init!r}", f"use one of {', '.join(PLACEHOLDER_INITS)}")
        if self.prompt != "metaeol":
            tp_templates(self.prompt, self.num_pst)  # validates custom templates early

    def describe(self) -> dict:
        out = super().describe()
        if self.pst_init in ("gaussian", "uniform"):
            out["pst_init_detail"] = (f"{'N(0, I)' if self.pst_init == 'gaussian' else 'U[0, 1)'} row drawn in float32 "
                                      f"from torch.Generator('cpu').manual_seed({self.seed}); Gemma scales it by "
                                      "sqrt(hidden) like every embedding row")
        return out

    def check(self, model) -> None:
        L = model.num_layers
        output_index = resolve_output_layer(self.layer, L)
        check_block_range(self.start, self.end, L, "TP")
        if self.resume_at is not None and not self.end <= self.resume_at < L:
            raise InputError(f"resume_at {self.resume_at} must be a block in [end, L) = [{self.end}, {L})",
                             "TP restarts after the first range ends (paper Table 16)")
        if self.end > output_index:
            raise InputError(f"TP range [{self.start}, {self.end}) reaches past the output layer {self.layer} "
                             f"(blocks 0..{output_index - 1} run)", "lower `end` or raise `layer`")

    def copy_blocks(self, model) -> set[int]:
        """The 0-based blocks before which the copy happens: [start, end), plus [resume_at, L)."""
        blocks = set(range(self.start, self.end))
        if self.resume_at is not None:
            blocks |= set(range(self.resume_at, model.num_layers))
        return blocks

    def encode(self, model, template: str, texts: list[str]) -> TPInputs:
        """Tokenize one TP template for prepared texts (left padding, `<PST>` as an added token)."""
        pst_id = model.tokenizer.add_placeholder(PST)
        batch = encode_prompts(model.tokenizer, template, texts, padding_side="left")
        positions = batch.positions_of(pst_id)
        expected = template.count(PST)
        for row, found in enumerate(positions):
            if len(found) != expected:
                raise InputError(f"text {row} ({texts[row]!r}) gives {len(found)} {PST} tokens; the template has "
                                 f"{expected}", f"the text must not contain the placeholder string {PST}")
        return TPInputs(batch, pst_id, positions, placeholder_row(model, self.pst_init, self.seed))

    def hidden(self, model, inputs: TPInputs, sites_for: Callable[[int], Sites | None] | None = None) -> torch.Tensor:
        """hidden_states[layer] (B, T, E) of the TP forward; `sites_for` lets CP edit a block."""
        hidden = None
        if self.mask_pst_first_layer:
            hidden = inputs.batch.input_ids == inputs.placeholder_id  # (B, T)
        return forward_with_copies(model, inputs.batch, tp_copy_plan(inputs.batch, inputs.positions),
                                   self.copy_blocks(model), self.layer, {inputs.placeholder_id: inputs.row},
                                   hidden, sites_for, reuse_prefix=True)

    def embed_batch(self, model, texts: list[str]) -> torch.Tensor:
        self.check(model)
        texts = prepare_texts(texts, self.senteval_text)
        vectors = []
        for template in tp_templates(self.prompt, self.num_pst):  # MetaEOL: 8 templates, averaged
            inputs = self.encode(model, template, texts)
            vectors.append(last_token(self.hidden(model, inputs), inputs.batch))  # (B, E)
        return torch.stack(vectors).mean(dim=0).float()
