"""The one layer-numbering convention (docs/spec.md section 1), in one place.

Output layer (`layer`): an index into the transformers `hidden_states` tuple of L+1 entries.
    0 = embedding output (Gemma: after the sqrt(hidden) scaling); k = raw output of block k counted
    from 1; L = output of the last block *after* the final norm; negatives count from the end.
Intervention layers (TP/HTP start/end, CP steer layer): 0-based block indices; ranges are
half-open [start, end).

Worked example, Llama-2-7B (L = 32):
    layer=-1 -> 32: the final-normed output (PromptEOL's default)
    layer=-2 -> 31: the raw output of block 31, i.e. of 0-based block 30 (Pretended CoT, Knowledge)
    layer=27 -> 27: the raw output of the 27th block (0-based block 26); blocks 27..31 never run
    TP start=1, end=7: copies before 0-based blocks 1, 2, 3, 4, 5, 6 (six copies)
"""
from __future__ import annotations

from minidecoder.errors import InputError


def resolve_output_layer(layer: int, num_layers: int) -> int:
    """Map an output layer (negative allowed) to its hidden_states index in [0, L]."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InputError(f"output layer {layer!r} is not an integer", "pass an int such as -1 or 27")
    index = layer + num_layers + 1 if layer < 0 else layer
    if not 0 <= index <= num_layers:
        raise InputError(
            f"output layer {layer} is outside this model's hidden states (it has {num_layers} blocks, so "
            f"layers 0..{num_layers}, or -{num_layers + 1}..-1)",
            f"pick a layer in that range; -1 is the final normed output, {num_layers - 1} the raw output of the "
            "second-to-last block... see minidecoder.methods.layers for the convention",
        )
    return index


def check_block_index(index: int, num_layers: int, what: str) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_layers:
        raise InputError(f"{what} {index!r} is not a block of this model (0-based blocks 0..{num_layers - 1})",
                         f"pick {what} in 0..{num_layers - 1}")
    return index


def check_block_range(start: int, end: int, num_layers: int, what: str) -> tuple[int, int]:
    """A half-open range [start, end) of 0-based blocks; empty (start == end) is allowed."""
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{what} {name} {value!r} is not an integer", f"pass integers for the {what} range")
    if not 0 <= start <= end <= num_layers:
        last = min(7, num_layers)  # the papers' start=1, end=7, cut to this model's blocks
        first = 1 if last > 1 else 0
        raise InputError(
            f"{what} range [{start}, {end}) is not within this model's blocks 0..{num_layers - 1} "
            "(a half-open range needs 0 <= start <= end <= number of blocks)",
            f"e.g. start={first}, end={last} copies before blocks {first}..{last - 1}; this model has {num_layers} "
            "blocks",
        )
    return start, end
