"""Rotary position embeddings: inverse frequencies per RoPE type, and their application.

Mirrors transformers' `modeling_rope_utils` (default, linear, dynamic NTK, llama3, YaRN). cos/sin are
computed in float32 and then cast to the activation dtype, as transformers does, so fp32 parity is
exact and bf16 rounds at the same point.

Dynamic NTK: transformers recomputes the frequencies when a forward's longest position exceeds the
trained context, and keeps that state across calls; here the frequencies are a pure function of the
current call (max position + 1), which equals transformers on a fresh model and on growing inputs.
"""
from __future__ import annotations

import math

import torch

from minidecoder.core.config import RopeSpec


def inverse_frequencies(spec: RopeSpec, head_dim: int, max_position_embeddings: int,
                        seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Returns (inv_freq of shape (head_dim/2,), attention_scaling applied to cos and sin)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim  # (D/2,)
    base = spec.theta
    if spec.rope_type == "dynamic":
        # NTK-aware base growth once the input is longer than the trained context.
        seq_len = max(seq_len or max_position_embeddings, max_position_embeddings)
        base = base * ((spec.factor * seq_len / max_position_embeddings) - (spec.factor - 1)) ** (
            head_dim / (head_dim - 2))
    inv_freq = 1.0 / (base ** exponents)
    if spec.rope_type in ("default", "dynamic"):
        return inv_freq, 1.0
    if spec.rope_type == "linear":
        return inv_freq / spec.factor, 1.0  # positions divided by factor
    if spec.rope_type == "llama3":
        return _llama3(inv_freq, spec), 1.0
    if spec.rope_type == "yarn":
        return _yarn(spec, head_dim)
    raise AssertionError(spec.rope_type)  # config.py rejects other types


def _llama3(inv_freq: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth ramp in between."""
    old_context = spec.original_max_position_embeddings
    low_freq_wavelen = old_context / spec.low_freq_factor
    high_freq_wavelen = old_context / spec.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / spec.factor, inv_freq)
    smooth = (old_context / wavelen - spec.low_freq_factor) / (spec.high_freq_factor - spec.low_freq_factor)
    smoothed = (1 - smooth) * scaled / spec.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(spec: RopeSpec, head_dim: int) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): interpolate low frequencies, extrapolate high ones, scale attention."""
    def mscale_of(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    factor, base = spec.factor, spec.theta
    attention_factor = spec.attention_factor
    if attention_factor is None:
        if spec.mscale and spec.mscale_all_dim:
            attention_factor = mscale_of(factor, spec.mscale) / mscale_of(factor, spec.mscale_all_dim)
        else:
            attention_factor = mscale_of(factor)

    def correction_dim(num_rotations: float) -> float:
        return (head_dim * math.log(spec.original_max_position_embeddings / (num_rotations * 2 * math.pi))) / (
            2 * math.log(base))

    low, high = correction_dim(spec.beta_fast), correction_dim(spec.beta_slow)
    if spec.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation_weight = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_weight) + (1.0 / pos_freqs) * extrapolation_weight
    return inv_freq, float(attention_factor)


def cos_sin(inv_freq: torch.Tensor, attention_scaling: float, positions: torch.Tensor,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (B, T) -> cos, sin (B, T, D), computed in float32, then cast to the activation dtype."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)  # (B, T, D/2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (B, T, D): the two halves rotate together
    return (angles.cos() * attention_scaling).to(dtype), (angles.sin() * attention_scaling).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D); cos/sin (B, T, D)."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]
