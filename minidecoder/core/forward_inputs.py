"""What a caller of `model(...)` can get wrong, checked before `Decoder.forward` runs: the model's own code
(core/model.py) reads its inputs as given."""
from __future__ import annotations

import torch

from minidecoder.errors import ArgumentTypeError, InputError, is_whole_number


def check_forward_inputs(model, input_ids, attention_mask, inputs_embeds, cache, logits_to_keep: int = 0) -> None:
    """What a caller of `model(...)` can get wrong, named before torch's own error from deep inside (an
    IndexError "index out of range in self" on a CPU; on a GPU a device-side assert that ends the process),
    and what would otherwise run silently wrong: ids that disagree with the `inputs_embeds` that replace them,
    an additive mask (0 / -inf) read as 1 = real token, 0 = padding. The id and mask values are read back
    from the device once a call: the method loop never calls `forward`, and `generate` reads every new token
    back anyway."""
    one = "e.g. model(torch.tensor([model.tokenizer.encode(text)]))"
    if not is_whole_number(logits_to_keep, 0):
        raise InputError(f"logits_to_keep={logits_to_keep!r} is not a count of positions",
                         "pass 0 (every position's logits, the default) or N (the last N positions'), e.g. 1")
    if inputs_embeds is not None:
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != model.config.hidden_size:
            raise InputError(f"inputs_embeds has shape {tuple(inputs_embeds.shape)}; the model takes (B, T, "
                             f"{model.config.hidden_size})", "pass model.embed(input_ids), edited as you like")
        if input_ids is not None and tuple(input_ids.shape) != tuple(inputs_embeds.shape[:2]):
            raise InputError(f"input_ids {tuple(input_ids.shape)} and inputs_embeds {tuple(inputs_embeds.shape)} "
                             "describe different tokens; the embeddings are what runs, and the ids would be ignored",
                             "pass inputs_embeds alone, or ids of the same (B, T)")
        B, T = inputs_embeds.shape[:2]
    else:
        if not isinstance(input_ids, torch.Tensor):
            raise ArgumentTypeError(f"input_ids is a {type(input_ids).__name__}; the model takes a (B, T) tensor of "
                                    "token ids", one)
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ArgumentTypeError(f"input_ids has dtype {input_ids.dtype}; token ids are integers",
                                    "pass a long tensor: input_ids.long() or " + one)
        if input_ids.dim() != 2:
            raise InputError(f"input_ids has shape {tuple(input_ids.shape)}; the model takes (B, T): a batch of "
                             "rows of token ids", "one row of ids is ids[None]; " + one)
        if input_ids.numel():
            low, high = torch.stack(torch.aminmax(input_ids)).tolist()  # one read back from the device
            if low < 0 or high >= model.config.vocab_size:
                vocab = model.config.vocab_size
                raise InputError(f"token id {low if low < 0 else high} is outside the model's vocabulary of {vocab} "
                                 f"ids (0..{vocab - 1})",
                                 "encode the text with this model's tokenizer (model.tokenizer.encode(text))")
        B, T = input_ids.shape
    if attention_mask is not None:
        past = 0 if cache is None else cache.length
        if (not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2
                or attention_mask.shape[0] not in (1, B) or attention_mask.shape[1] not in (T, past + T)):
            shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask
            raise InputError(f"attention_mask {shape} does not fit {B} rows of {T} new tokens"
                             + (f" after {past} cached ones" if past else ""),
                             f"pass a ({B}, {T}) tensor" + (f" or ({B}, {past + T})" if past else "")
                             + " of 1 = real token, 0 = padding")
        if attention_mask.numel() and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise InputError("attention_mask holds values other than 0 and 1: it is read as 1 = real token, "
                             "0 = padding (an additive mask of 0 and -inf would be read the other way round)",
                             "pass the tokenizer's mask of 1s and 0s")
    if cache is not None and len(cache.keys) != model.num_layers:
        raise InputError(f"the cache has {len(cache.keys)} layers; the model has {model.num_layers}",
                         "start one with KVCache.empty(model.num_layers)")
    if cache is not None and cache.length and cache.keys[0].shape[0] != B:
        raise InputError(f"the cache holds {cache.keys[0].shape[0]} rows; this call has {B}",
                         "continue a cache with the batch that filled it, or start a new one")
