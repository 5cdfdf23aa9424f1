"""Greedy decoding with a KV cache: enough to see that a model is sane, nothing more.

The prompt runs once and fills the cache; each new token then runs alone against the cache
(one query row, all earlier keys), so the cost per token is one row, not the whole sequence.
On a GPU each token runs as one replay of a captured decode step over a static cache
(minidecoder.fast.static_cache), kept across calls, since there the host's kernel launches would
otherwise set the pace (docs/benchmarks.md measures both); on a CPU the dynamic cache, unless graphs are on
(`load(graphs=True)`), which runs the same static step uncaptured.

As transformers' `generate(do_sample=False)` does, it reads the checkpoint's generation_config.json: its stop ids
(`eos_token_id`) and its `repetition_penalty`; the logits processors of other keys there are warned about, not run.

One sequence a call: a batch of prompts (a (B, T) tensor or a list of lists with B > 1) is refused rather
than run as one concatenated text; call `generate` once per prompt.
"""
from __future__ import annotations


import json
import warnings
from pathlib import Path

import numpy as np
import torch

from minidecoder.core.model import KVCache
from minidecoder.fast.options import fast_paths_of
from minidecoder.fast.static_cache import decode_step, one_decoder, static_decoding_applies
from minidecoder.running.load_model import require_loaded
from minidecoder.errors import (ArgumentTypeError, CheckpointError, ContextLengthError, InputError, file_is_there,
                                is_whole_number)


@torch.inference_mode()
def greedy(model, input_ids: torch.Tensor | list[int], max_new_tokens: int = 32,
           stop_at_eos: bool = True, static: bool | None = None) -> list[int]:
    """The ids of up to `max_new_tokens` greedily chosen tokens after `input_ids` (one sequence: (T,), (1, T),
    a list of ids, a list holding one list of ids, or a NumPy integer array).
    stop_at_eos: stop after the first end-of-sequence id (`_eos_ids`, and generation_config.json's), kept as the
        last id; False: every one of `max_new_tokens`.
    static: decode over a static cache, one captured step a token (None: on a GPU, or where the model's graphs
        are on; a dynamic-NTK model decodes over the dynamic cache, with a warning where static=True)."""
    require_loaded(model, "generate", "ids")
    if not is_whole_number(max_new_tokens, 0):
        raise ArgumentTypeError(f"max_new_tokens={max_new_tokens!r} must be an integer, 0 or more",
                                "e.g. max_new_tokens=32 (CLI --max-new-tokens 32)")
    max_new_tokens = int(max_new_tokens)  # a NumPy integer is one too (as in input_ids)
    for name, value in (("stop_at_eos", stop_at_eos), ("static", static)):  # "false" is true to `if`: never read so
        if not isinstance(value, bool) and not (value is None and name == "static"):
            raise ArgumentTypeError(f"generate({name}={value!r}): {name} is True or False"
                                    + (" (or None: the device decides)" if name == "static" else ""),
                                    f"e.g. minidecoder.generate(model, ids, {name}=False)")
    ids = prompt_ids(model, input_ids)  # (1, T)
    limit = getattr(model, "max_context", None)
    if limit is not None and ids.shape[1] + max_new_tokens > limit:  # refused up front, not after a long run
        room = limit - ids.shape[1]
        raise ContextLengthError(
            f"the prompt is {ids.shape[1]} tokens; with max_new_tokens={max_new_tokens} the sequence would reach "
            f"{ids.shape[1] + max_new_tokens} tokens, past the model's context of {limit}",
            f"ask for at most {room} new tokens (--max-new-tokens {room})" if room >= 0 else "shorten the prompt",
            length=ids.shape[1] + max_new_tokens, limit=limit)
    stop_ids, penalty = _generation_config(model)
    eos = _eos_ids(model) | stop_ids
    cache = KVCache.empty(model.num_layers)
    logits = model(ids, cache=cache, logits_to_keep=1).logits[:, -1]  # (1, V): the prompt's other logits unneeded
    if static is None:  # on a GPU, or where graphs are asked for (a CPU then runs the same step, uncaptured)
        static = model.device.type == "cuda" or bool(fast_paths_of(model).for_device(model.device).graphs)
    elif static and not static_decoding_applies(model):  # asked for by name: say why it is not taken
        warnings.warn("generate(static=True): this model's dynamic-NTK RoPE recomputes its frequencies from the "
                      "sequence's length, which a static step cannot; it decodes over the dynamic cache (the same "
                      "tokens)", UserWarning, stacklevel=3)
    if static and static_decoding_applies(model) and max_new_tokens > 1:
        with one_decoder(model):  # the step's buffers are the model's: another thread waits for them
            step = decode_step(model, cache, ids.shape[1] + max_new_tokens)  # kept across calls: captured once
            return _continue(logits, step, ids, max_new_tokens, eos if stop_at_eos else set(), penalty)

    def advance(token: int, position: int) -> torch.Tensor:  # the dynamic cache is this call's own
        # torch.full fills on the device: no copy from the host's pageable memory each token
        return model(torch.full((1, 1), token, device=model.device), cache=cache).logits[:, -1]
    return _continue(logits, advance, ids, max_new_tokens, eos if stop_at_eos else set(), penalty)


def _continue(logits: torch.Tensor, advance, ids: torch.Tensor, max_new_tokens: int, eos: set[int],
              penalty: float = 1.0) -> list[int]:
    """The greedy loop: the argmax of `logits`, then `advance(token, position)` for the next logits, until an
    EOS id in `eos` or `max_new_tokens` tokens. A `penalty` other than 1 is transformers' repetition penalty
    (RepetitionPenaltyLogitsProcessor): the logit of every id in the prompt or already chosen is divided by it
    where positive, multiplied where negative, in float32 as transformers' `generate` scores."""
    new: list[int] = []
    seen = ids  # (1, T + k): the prompt and the new ids so far, read only under a penalty
    for k in range(max_new_tokens):
        if penalty != 1.0:
            scores = logits.to(torch.float32)  # (1, V); a new tensor where logits are not float32: never in place
            score = scores.gather(-1, seen)
            logits = scores.scatter(-1, seen, torch.where(score < 0, score * penalty, score / penalty))
        next_id = int(logits.argmax(-1))
        new.append(next_id)
        if next_id in eos or k + 1 == max_new_tokens:
            break
        if penalty != 1.0:
            seen = torch.cat([seen, torch.full((1, 1), next_id, device=seen.device)], dim=1)
        logits = advance(next_id, ids.shape[1] + k)  # the new token sits at position T + k
    return new


def prompt_ids(model, input_ids) -> torch.Tensor:
    """One prompt's ids as a (1, T) long tensor on the model's device; a batch, a ragged or mixed list, a
    non-integer, an id outside the vocabulary or an empty prompt is an error saying what to pass instead."""
    one_call = "generate continues one prompt a call: call it once per prompt, e.g. " \
               "[minidecoder.generate(model, row) for row in prompts]"
    vocab = model.config.vocab_size

    def outside(token: int) -> InputError:
        return InputError(f"token id {token} is outside the model's vocabulary of {vocab} ids (0..{vocab - 1})",
                          "encode the prompt with this model's tokenizer (model.tokenizer.encode(text))")
    if isinstance(input_ids, np.ndarray):  # an integer array as a long tensor; any other is refused below, by type
        past = input_ids[(input_ids < 0) | (input_ids >= vocab)] if input_ids.dtype.kind in "iu" else ()
        if len(past):  # before the cast: a uint64 id past 2**63 became a negative one, named as such
            raise outside(int(past[0]))
        input_ids = (torch.from_numpy(input_ids.astype(np.int64)) if input_ids.dtype.kind in "iu"
                     else torch.from_numpy(input_ids) if input_ids.dtype.kind == "b" else input_ids.tolist())
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() > 2:
            raise InputError(f"input_ids has shape {tuple(input_ids.shape)}; one prompt is (T,) or (1, T)",
                             "pass one row of token ids, e.g. torch.tensor(model.tokenizer.encode(text))")
        if input_ids.dim() == 2 and input_ids.shape[0] != 1:
            raise InputError(f"input_ids has shape {tuple(input_ids.shape)}: a batch of "
                             f"{input_ids.shape[0]} prompts, not one", one_call)
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ArgumentTypeError(f"input_ids has dtype {input_ids.dtype}; token ids are integers",
                                    "pass a long tensor, e.g. torch.tensor(model.tokenizer.encode(text))")
        ids = input_ids.reshape(1, -1)
    else:
        if isinstance(input_ids, (str, bytes)) or not isinstance(input_ids, (list, tuple)):
            raise ArgumentTypeError(f"input_ids is a {type(input_ids).__name__}; generate takes token ids",
                                    "pass model.tokenizer.encode(text) (a list of ints) or a tensor of ids")
        # a row is a list, a tensor or an array of ids ([np.array(ids)] was "input_ids[0] is array(...)")
        rows = [x for x in input_ids if isinstance(x, (list, tuple))
                or isinstance(x, (torch.Tensor, np.ndarray)) and x.ndim > 0]
        if rows and len(rows) == len(input_ids) == 1:  # [[ids]]: one prompt as a batch of one
            return prompt_ids(model, rows[0])
        if rows and len(rows) == len(input_ids):
            lengths = sorted({len(row) for row in rows})
            raise InputError(f"input_ids is a list of {len(rows)} lists (lengths {', '.join(map(str, lengths))}): "
                             "a batch of prompts, not one", one_call)
        wrong = next((i for i, x in enumerate(input_ids) if not _is_id(x)), None)
        if wrong is not None:
            raise ArgumentTypeError(f"input_ids[{wrong}] is {input_ids[wrong]!r} ({type(input_ids[wrong]).__name__}); "
                                    "every entry must be an integer token id",
                                    "pass model.tokenizer.encode(text): a flat list of ints")
        values = [int(x) for x in input_ids]
        past = next((x for x in values if not 0 <= x < vocab), None)  # before a tensor: 2**70 fits no long
        if past is not None:
            raise outside(past)
        ids = torch.tensor([values], dtype=torch.long)
    if ids.shape[1] == 0:
        raise InputError("the prompt has no tokens", "give a prompt that encodes to at least one token")
    past = ids[(ids < 0) | (ids >= vocab)]
    if past.numel():
        raise outside(int(past[0]))
    return ids.to(device=model.device, dtype=torch.long)


def _is_id(x) -> bool:
    """An integer (a Python or NumPy one, or a 0-d integer tensor), never a bool."""
    if isinstance(x, torch.Tensor):
        return x.dim() == 0 and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    return is_whole_number(x)


_FIX = "repair or delete the file (generation then stops at config.json's and the tokenizer's EOS, unpenalized)"
# generation_config.json keys whose logits processors transformers' greedy `generate` runs and minidecoder does not
_UNAPPLIED = ("no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens", "min_length",
              "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "sequence_bias")


def _generation_config(model) -> tuple[set[int], float]:
    """The stop ids and the repetition penalty of the model folder's generation_config.json, which transformers'
    `generate` reads by default (none and 1.0 without one). Its `eos_token_id` is where transformers stops (Gemma
    2's instruct models list their `<end_of_turn>` there alone: without it a chat reply ran on into the next turn);
    its `repetition_penalty` applies with do_sample=False too (Qwen2.5's instruct models set 1.05 or 1.1: without
    it greedy tokens were not theirs). A key from `_UNAPPLIED` set to other than its neutral value is warned
    about."""
    folder = getattr(model, "source", None)
    path = Path(folder) / "generation_config.json" if folder is not None else None
    if path is None or not file_is_there(path, CheckpointError):
        return set(), 1.0
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}", _FIX) from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} holds a JSON {type(raw).__name__}, not an object of settings", _FIX)
    unapplied = [f"{key}={raw[key]!r}" for key in _UNAPPLIED if raw.get(key) not in (None, 0, [], {})]
    if unapplied:
        warnings.warn(f"{path} sets {', '.join(unapplied)}, which transformers' generate applies and minidecoder's "
                      "greedy decoding does not: the tokens may differ from transformers'", UserWarning, stacklevel=5)
    ids = raw.get("eos_token_id")
    ids = [] if ids is None else [ids] if is_whole_number(ids) else ids
    if not isinstance(ids, list) or not all(is_whole_number(x) for x in ids):
        raise CheckpointError(f"{path} has eos_token_id={raw['eos_token_id']!r}; it must be a token id or a list of "
                              "them", _FIX)
    penalty = raw.get("repetition_penalty")
    penalty = 1.0 if penalty is None else penalty
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty > 0:
        raise CheckpointError(f"{path} has repetition_penalty={penalty!r}; it must be a number above 0", _FIX)
    return {int(x) for x in ids}, float(penalty)


def _eos_ids(model) -> set[int]:
    """The ids generation stops at besides generation_config.json's: config.json's `eos_token_id` and the
    tokenizer's EOS."""
    ids = model.config.eos_token_id
    found = set(ids) if isinstance(ids, list) else ({ids} if ids is not None else set())
    if model.tokenizer is not None and model.tokenizer.eos_id is not None:
        found.add(model.tokenizer.eos_id)
    return found


def continuation_text(tokenizer, prompt: list[int], new: list[int]) -> str:
    """The text `new` adds after `prompt`, read off the decoding of both together: decoded alone, the first new
    token of a SentencePiece tokenizer loses its leading space (its decoder strips the text's first one), so
    "the" + " the the" printed as "thethe the"."""
    whole = tokenizer.decode(prompt + new, skip_special_tokens=True)
    head = tokenizer.decode(prompt, skip_special_tokens=True)
    return whole[len(head):] if whole.startswith(head) else tokenizer.decode(new, skip_special_tokens=True)
