"""The GPU default for site-free block calls: `Block.forward`'s arithmetic with its elementwise work fused
and its projections merged, beneath the plain block it speeds up.

    plain Block.forward (core/model.py)                 fused_block_forward (here)
    RMSNorm: two casts, square, mean, rsqrt, multiply,  F.rms_norm: one kernel, float32 inside, the
             cast, scale (eight passes over memory)     weight scale in it; one cast (Gemma: of its input)
    q, k, v: three GEMMs                                one GEMM over [W_q; W_k; W_v]
    RoPE on q, then on k: neg, cat, mul, mul, add       q and k together: x cos, then each half's
                                                        rotate_half term added in place (no cat, no copy)
    gate, up: two GEMMs; act(gate) * up, a new tensor   one GEMM over [W_gate; W_up]; act and * up in
                                                        place on the gate half
    the residual adds allocate                          added in place into the fresh block outputs

The merged weights are made once, at load (`merge_projections`): each block's q/k/v and gate/up weights are
concatenated, and the separate Parameters become views of the merged tensor, so no weight is held twice,
state-dict names and `Sites` are unchanged, and an in-place edit of `q_proj.weight` is seen by both paths. A
block whose Parameters were replaced or moved since (their addresses differ from the merge's) runs the plain
`Block.forward`: a stale merge can cost speed, never change a number.

Same maths as the plain block; the floating-point results differ in the last bits (a fused reduction's
order, a fused multiply-add, another GEMM tiling), which is why this path is the default on CUDA only (bf16,
where the plain block's own roundings are coarser than these) and the CPU keeps the plain block, whose
float32 numbers equal transformers' bit for bit. tests/fast/test_fused.py holds it to the plain block in
float32 on every family (1e-5), with every quirk on: sliding windows, soft-capping, q/k norms, biases,
sandwich norms, a KV cache.

Like the compiled and graph calls, the executor sends only site-free calls here (no site recorded or
edited): what a step reads or edits runs through the plain `Block.forward` a reader audits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from minidecoder.core.model import Block, Context, RMSNorm
from minidecoder.fast.hooks import with_block_hooks


@dataclass(frozen=True)
class MergedProjections:
    """One block's merged weights, and the addresses its separate Parameters had when they became views."""

    qkv_weight: torch.Tensor  # (H D + 2 Hkv D, E)
    qkv_bias: torch.Tensor | None
    gate_up_weight: torch.Tensor  # (2 I, E)
    gate_up_bias: torch.Tensor | None
    addresses: tuple[int, ...]

    def current(self, block: Block) -> bool:
        """Whether the block's Parameters are still the views this merge made."""
        return _addresses(block) == self.addresses


def _projections(block: Block) -> tuple[nn.Linear, ...]:
    attn, mlp = block.self_attn, block.mlp
    return attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj


def _addresses(block: Block) -> tuple[int, ...]:
    return tuple(t.data_ptr() for linear in _projections(block)
                 for t in (linear.weight, linear.bias) if t is not None)


def _merge(linears: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The linears' weights (and biases) concatenated along the output dimension; each linear's Parameter
    is then rebound to its rows of the merged tensor (a view: one copy of the weights in memory)."""
    merged = torch.cat([linear.weight.detach() for linear in linears])
    has_bias = linears[0].bias is not None
    merged_bias = torch.cat([linear.bias.detach() for linear in linears]) if has_bias else None
    start = 0
    for linear in linears:
        rows = linear.out_features
        linear.weight = nn.Parameter(merged[start:start + rows], requires_grad=False)
        if has_bias:
            linear.bias = nn.Parameter(merged_bias[start:start + rows], requires_grad=False)
        start += rows
    return merged, merged_bias


def merge_projections(model) -> None:
    """Every block's q/k/v and gate/up weights merged (see the module docstring). Called by `minidecoder.load`
    where the fused path is on; idempotent."""
    for block in model.layers:
        old = getattr(block, "merged", None)
        if old is not None and old.current(block):
            continue
        attn, mlp = block.self_attn, block.mlp
        with torch.no_grad():
            qkv_weight, qkv_bias = _merge((attn.q_proj, attn.k_proj, attn.v_proj))
            gate_up_weight, gate_up_bias = _merge((mlp.gate_proj, mlp.up_proj))
        # a plain attribute, not a Parameter or buffer: the state dict keeps Hugging Face's names
        block.merged = MergedProjections(qkv_weight, qkv_bias, gate_up_weight, gate_up_bias, _addresses(block))


def fused_block_forward(block: Block, x: torch.Tensor, ctx: Context) -> torch.Tensor:
    """`block(x, ctx)` for a site-free call, fused (see the module docstring); the plain block where its
    weights were not merged, or no longer are. The block's hooks run around it as `nn.Module.__call__` runs
    them (fast.hooks; the benchmarks count block calls with a pre-hook)."""
    merged = getattr(block, "merged", None)
    if merged is None or not merged.current(block) or merged.qkv_weight.device != x.device:
        return block(x, ctx)
    return with_block_hooks(block, lambda x, ctx: _fused_block(block, merged, x, ctx), x, ctx)


def _fused_block(block: Block, merged: MergedProjections, x: torch.Tensor, ctx: Context) -> torch.Tensor:
    attn_out = _attention(block, merged, rms_norm(block.input_layernorm, x), ctx)
    if block.sandwich_norms:  # Gemma: a norm after attention, another before the MLP
        attn_out, mlp_in_norm = rms_norm(block.post_attention_layernorm, attn_out), block.pre_feedforward_layernorm
    else:
        mlp_in_norm = block.post_attention_layernorm
    resid_mid = attn_out.add_(x)  # x + attn_out, into attn_out (a fresh tensor)
    mlp_out = _mlp(block, merged, rms_norm(mlp_in_norm, resid_mid))
    if block.sandwich_norms:
        mlp_out = rms_norm(block.post_feedforward_layernorm, mlp_out)
    return mlp_out.add_(resid_mid)  # resid_mid + mlp_out


def rms_norm(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` in one fused kernel, float32 inside. The weight scales inside the kernel too, before the one
    cast: Gemma scales there (in float32, by 1 + w); Llama casts first and scales in the weight dtype, so here
    its result rounds once where the plain block rounds twice (a last-bit difference in bfloat16)."""
    if norm.unit_offset:  # Gemma: (x * (1 + w)) in float32, then cast
        return F.rms_norm(x.float(), norm.weight.shape, 1.0 + norm.weight.float(), norm.eps).type_as(x)
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.eps)


def _rotation(ctx: Context, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign * sin of a layer type, (B, T, 1, D), made once per forward (every block of the type
    shares them): rotate_half(x) sin = (-x2 sin1, x1 sin2) = (x2, x1) * (sign sin), sign = -1, then +1."""
    key = ("fused_rotation", kind)
    if key not in ctx.scratch:
        cos, sin = ctx.cos_sin[kind]  # (B, T, D)
        half = sin.shape[-1] // 2
        signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        ctx.scratch[key] = (cos[:, :, None], signed[:, :, None])
    return ctx.scratch[key]


def _rotated(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """apply_rope on (B, T, heads, D): x cos + rotate_half(x) sin, where rotate_half(x) sin is each half of x
    times the other half's signed sin, added into x cos in place (no rolled or concatenated copy of x)."""
    half = x.shape[-1] // 2
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], signed_sin[..., :half])  # first half: -x2 sin
    out[..., half:].addcmul_(x[..., :half], signed_sin[..., half:])  # second half: +x1 sin
    return out


def _attention(block: Block, merged: MergedProjections, x: torch.Tensor, ctx: Context) -> torch.Tensor:
    attn = block.self_attn
    B, T, _ = x.shape
    H, Hkv, D = attn.num_heads, attn.num_kv_heads, attn.head_dim
    qkv = F.linear(x, merged.qkv_weight, merged.qkv_bias).view(B, T, H + 2 * Hkv, D)
    cos, signed_sin = _rotation(ctx, attn.layer_type)
    if attn.q_norm is None:  # q and k rotated in one pass
        qk = _rotated(qkv[:, :, :H + Hkv], cos, signed_sin)
        q, k = qk[:, :, :H], qk[:, :, H:]
    else:  # Gemma3: per-head norms on q and k first, each with its own weight
        q = _rotated(rms_norm(attn.q_norm, qkv[:, :, :H]), cos, signed_sin)
        k = _rotated(rms_norm(attn.k_norm, qkv[:, :, H:H + Hkv]), cos, signed_sin)
    v = qkv[:, :, H + Hkv:]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D) views
    if ctx.cache is not None:
        k, v = ctx.cache.append(attn.layer_idx, k, v)
    mask = ctx.masks[attn.layer_type]
    if attn.softcap is not None or ctx.explicit_attention:
        z = attn._eager(q, k, v, mask, None)
    else:
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scale, enable_gqa=Hkv != H)
    return attn.o_proj(z.transpose(1, 2).reshape(B, T, H * D))


def _mlp(block: Block, merged: MergedProjections, x: torch.Tensor) -> torch.Tensor:
    mlp = block.mlp
    gate, up = F.linear(x, merged.gate_up_weight, merged.gate_up_bias).chunk(2, dim=-1)  # views, (B, T, I)
    if isinstance(mlp.act, nn.SiLU):
        hidden = F.silu(gate, inplace=True).mul_(up)
    else:  # Gemma's tanh-GELU has no in-place form
        hidden = mlp.act(gate).mul_(up)
    return mlp.down_proj(hidden)
