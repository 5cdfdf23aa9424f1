"""Opt-in speed on CPUs: every block's linear weights reordered once into oneDNN's blocked layout.

A matrix product on a CPU first copies ("packs") the weight into the tile layout its kernel reads.
`F.linear` does that on every call, for every one of a block's seven projections; here it is done once
at load time, and each projection then calls oneDNN's linear kernel on the packed copy:

    plain:   y = F.linear(x, W, b)                      (W packed again inside, every call)
    packed:  W_packed = reorder(W)       once, at load
             y = mkldnn_linear(x, W_packed, b)           (the same kernel, no packing per call)

The products are the same; only the per-call copy goes. At load, each block's `nn.Linear` is
replaced by a `PackedLinear` holding the same Parameters (state-dict names and `Sites` unchanged).
On the 2-core EPYC this repository was measured on (docs/benchmarks.md) that saves 8-13% of an embedding run in float32 and in bfloat16;
on a Xeon with AMX it saves nothing measurable
(`python tools/bench.py --methods md:prompteol,md:prompteol+pack,...`). It is the weight prepacking
inductor's `freezing` mode does, without compiling anything, and it combines with `compile=True`:
the packed product is a custom operator (`minidecoder::packed_linear`) that inductor calls as it is,
fusing the elementwise work around it.

Costs and limits: the packed copies live beside the weights (the blocks' share of the parameters
again). A packed copy is used only while its weight is the tensor it was made from, unchanged (same
storage, same version counter); a weight that was cast, moved or edited in place runs the plain
`F.linear`, so a stale copy can cost speed but never change a number. It needs a CPU build of torch
with oneDNN (mkldnn). Everything that reads internals (`Sites`) works unchanged: the sites are on the
projections' outputs. Tested equal to the plain path in tests/fast/test_packed.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minidecoder.errors import MinidecoderError


@torch.library.custom_op("minidecoder::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) through the packed copy `PackedLinear` attached to `weight`."""
    packed, data_ptr, version = getattr(weight, "onednn_packed", (None, None, None))
    if packed is None or weight.data_ptr() != data_ptr or weight._version != version:
        return F.linear(x, weight, bias)  # no copy, or the weight changed since: the plain product
    # "none": no activation fused after the product
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@packed_linear.register_fake
def _packed_linear_shape(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])  # what torch.compile traces: shape and dtype only


class PackedLinear(nn.Linear):
    """An `nn.Linear` holding the same `weight` and `bias` Parameters (state-dict names unchanged) whose
    product goes through the weight's packed copy."""

    @classmethod
    def replacing(cls, linear: nn.Linear) -> "PackedLinear":
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias  # the same Parameters, not copies
        with torch.no_grad():
            # The second argument is a batch-size hint for the layout; None keeps it valid for any.
            packed = torch.ops.mkldnn._reorder_linear_weight(new.weight.detach(), None)
        new.weight.onednn_packed = (packed, new.weight.data_ptr(), new.weight._version)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.weight, self.bias)


def check_packable(model) -> None:
    """Raise a clear error where packing cannot apply (not a CPU, no oneDNN, another dtype)."""
    if model.device.type != "cpu":
        raise MinidecoderError(f"pack_weights is a CPU fast path (oneDNN) but the model is on {model.device}",
                               "leave pack_weights off on a GPU")
    if not torch.backends.mkldnn.is_available():
        raise MinidecoderError("pack_weights needs torch built with oneDNN (mkldnn), and this torch has none",
                               "leave pack_weights off")
    if model.dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise MinidecoderError("pack_weights in bfloat16 needs a CPU with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, "
                               "which this one lacks (oneDNN has no bfloat16 weight layout for it)",
                               "leave pack_weights off in bfloat16 here, or pack in float32")
    if model.dtype not in (torch.float32, torch.bfloat16):
        raise MinidecoderError(f"pack_weights supports float32 and bfloat16 weights, not {model.dtype}",
                               "load with dtype='float32' or 'bfloat16', or leave pack_weights off")


def pack_linear_weights(model) -> None:
    """Replace every block's `nn.Linear` by a `PackedLinear` over the same parameters."""
    check_packable(model)
    for block in model.layers:
        for parent in list(block.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    setattr(parent, name, PackedLinear.replacing(child))
