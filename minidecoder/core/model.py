"""The decoder: one forward pass for Llama, Mistral, Qwen2, Gemma2 and Gemma3, top to bottom.

    input_ids ─ embed ─┬─ Block 0 ─ Block 1 ─ ... ─ Block L-1 ─ norm ─ unembed ─ logits
                       │   each Block:                             (hidden_states[L] is after norm)
                       │   resid_pre ─ input_layernorm ─ attention ─[post_attention_layernorm]─(+)─ resid_mid
                       │   resid_mid ─ pre-MLP norm ─ MLP ─[post_feedforward_layernorm]─(+)─ resid_post
                       └─ hidden_states[0]                   [..] only with `sandwich_norms` (Gemma)

Module names equal Hugging Face parameter names, so a checkpoint loads with `strict=True` and no
rename table (docs/style.md, rule 2). Family differences are the behaviour flags of `ModelConfig`.
Numerics mirror transformers' eager path: the same primitives and the same cast points, each
commented where it happens.

Shapes: B batch, T query length, S key length (cache + T), H query heads, Hkv key/value heads,
D head_dim, E hidden size.

Internals (TransformerLens site names) are reachable through an explicit `Sites` argument, created by
the caller for one call: `resid_pre`, `q`, `k`, `v`, `pattern`, `z`, `attn_out`, `resid_mid`,
`mlp_out`, `resid_post`. A site in `sites.record` is stored in `sites.store[name]`; a function in
`sites.edit[name]` replaces the value at that site before the forward continues (CP uses `z`).
`z` is (B, T, H, D), TransformerLens' `hook_z` [batch, pos, head, d_head]: every head's
softmax(QK^T)V before the heads are concatenated into o_proj.

Two attention kernels compute the same thing: the explicit matmul-softmax-matmul (`_eager`, the one a
reader audits, and the one that materializes `pattern`) and PyTorch's fused scaled-dot-product
attention. A call takes the explicit one when it needs the pattern, when Gemma2's soft-capping is on,
or when the caller's `Context.explicit_attention` asks for it (the executor beneath the method loop does,
for short inputs on a CPU: minidecoder.fast.attention); otherwise the fused one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from minidecoder.core.config import ModelConfig
from minidecoder.core.forward_inputs import check_forward_inputs
from minidecoder.core.rope import apply_rope, cos_sin, inverse_frequencies

SITES = ("resid_pre", "q", "k", "v", "pattern", "z", "attn_out", "resid_mid", "mlp_out", "resid_post")

@dataclass
class Sites:
    """What one Block call should record or edit. Lives for one call; no global state."""

    record: frozenset[str] | set[str] = frozenset()
    edit: dict[str, Callable[[torch.Tensor], torch.Tensor]] = field(default_factory=dict)
    store: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.record = frozenset() if self.record is None else self.record  # None: nothing, as `record=` left out
        self.edit = {} if self.edit is None else self.edit
        if isinstance(self.record, str):  # set("pattern") would be its letters, and record="z" a lucky accident
            from minidecoder.errors import ArgumentTypeError
            raise ArgumentTypeError(f"Sites(record={self.record!r}) is one string, not a set of site names",
                                    f"pass a set: Sites(record={{{self.record!r}}})")
        unknown = (set(self.record) | set(self.edit)) - set(SITES)
        if unknown:
            raise ValueError(f"unknown site(s) {sorted(unknown)}; sites are {SITES}")
        not_functions = sorted(name for name, edit in self.edit.items() if not callable(edit))
        if not_functions:
            raise TypeError(f"Sites(edit=...) of {not_functions} is not a function; an edit maps the site's "
                            "tensor to its replacement")

    def visit(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if name in self.edit:
            edited = self.edit[name](value)
            if not isinstance(edited, torch.Tensor) or edited.shape != value.shape:  # named here, not by a reshape
                raise ValueError(f"the edit of site {name!r} returned {getattr(edited, 'shape', type(edited))}; "
                                 f"it must return a tensor of the site's shape {tuple(value.shape)}")
            if edited.dtype != value.dtype or edited.device != value.device:  # else torch's "m1 and m2" further on
                raise ValueError(f"the edit of site {name!r} returned a {edited.dtype} tensor on {edited.device}; it "
                                 f"must return the site's {value.dtype} on {value.device} (end the edit with "
                                 ".to(value.dtype) or .to(value.device))")
            value = edited
        if name in self.record:
            self.store[name] = value
        return value


@dataclass
class KVCache:
    """Keys and values of every block after RoPE, (B, Hkv, S, D) each, plus the key padding mask."""

    keys: list[torch.Tensor | None]
    values: list[torch.Tensor | None]
    key_mask: torch.Tensor | None = None  # (B, S) bool, True = real token

    @classmethod
    def empty(cls, num_layers: int) -> "KVCache":
        return cls([None] * num_layers, [None] * num_layers)

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def expand(self, batch_size: int) -> "KVCache":
        """A batch-1 cache (a shared prompt prefix) broadcast to `batch_size` rows, without copying."""
        grow = lambda t: None if t is None else t.expand(batch_size, *t.shape[1:])  # noqa: E731
        return KVCache([grow(k) for k in self.keys], [grow(v) for v in self.values], grow(self.key_mask))


@dataclass
class Context:
    """Per-forward inputs shared by every block: RoPE tables and masks per layer type, the cache."""

    cos_sin: dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer type -> (B, T, D) each
    masks: dict[str, torch.Tensor | None]  # layer type -> additive (B, 1, T, S), None = no masking needed
    cache: KVCache | None = None
    positions: torch.Tensor | None = None  # (B, T)
    explicit_attention: bool = False  # take `Attention._eager` even where the fused kernel could run
    scratch: dict = field(default_factory=dict)  # tables a fast path derives once per forward (fast.fused)


@dataclass
class DecoderOutput:
    logits: torch.Tensor  # (B, T, V)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L+1 entries, last one after the final norm
    attentions: tuple[torch.Tensor, ...] | None = None  # L entries, (B, H, T, S)
    cache: KVCache | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, unit_offset: bool) -> None:
        super().__init__()
        self.eps = eps
        self.unit_offset = unit_offset  # Gemma stores w and scales by (1 + w)
        self.weight = nn.Parameter(torch.zeros(dim) if unit_offset else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 for every family; where the cast back happens differs (PR 29402):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        if self.unit_offset:  # Gemma: (x * (1 + w)) in float32, then cast
            return (normed * (1.0 + self.weight.float())).type_as(x)
        return self.weight * normed.to(x.dtype)  # Llama: cast, then scale in the weight dtype


class MLP(nn.Module):
    """Gated MLP: down(act(gate(x)) * up(x)); SiLU for Llama/Mistral/Qwen2, tanh-GELU for Gemma."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        bias = config.mlp_bias
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act = nn.SiLU() if config.hidden_act == "silu" else nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.layer_type = config.layer_types[layer_idx]
        self.window = config.sliding_window if self.layer_type == "sliding_attention" else None
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.scale = config.attn_scale
        self.softcap = config.attn_logit_softcap  # Gemma2
        E, H, Hkv, D = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
        self.q_proj = nn.Linear(E, H * D, bias=config.qkv_bias)  # Qwen2 has q/k/v biases
        self.k_proj = nn.Linear(E, Hkv * D, bias=config.qkv_bias)
        self.v_proj = nn.Linear(E, Hkv * D, bias=config.qkv_bias)
        self.o_proj = nn.Linear(H * D, E, bias=config.o_bias)
        if config.qk_norm:  # Gemma3: per-head RMSNorm on queries and keys, before RoPE
            self.q_norm = RMSNorm(D, config.rms_norm_eps, config.norm_unit_offset)
            self.k_norm = RMSNorm(D, config.rms_norm_eps, config.norm_unit_offset)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, ctx: Context, sites: Sites | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = ctx.cos_sin[self.layer_type]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if ctx.cache is not None:
            k, v = ctx.cache.append(self.layer_idx, k, v)  # (B, Hkv, S, D)
        if sites is not None:
            q, k, v = sites.visit("q", q), sites.visit("k", k), sites.visit("v", v)
        mask = ctx.masks[self.layer_type]  # (B, 1, T, S) additive, or None
        need_pattern = sites is not None and ("pattern" in sites.record or "pattern" in sites.edit)
        if need_pattern or self.softcap is not None or ctx.explicit_attention:
            z = self._eager(q, k, v, mask, sites)
        else:
            # Fast path (docs/style.md, rule 7): same maths, fused kernel; tested equal to the eager path.
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=Hkv != H)
        z = z.transpose(1, 2)  # (B, T, H, D): TransformerLens' hook_z layout
        if sites is not None:
            z = sites.visit("z", z)
        return self.o_proj(z.reshape(B, T, H * D))  # heads concatenated into the output projection

    def _eager(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               sites: Sites | None) -> torch.Tensor:
        B, H, T, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        groups = H // Hkv
        # GQA/MQA: query heads j*groups ... (j+1)*groups - 1 share kv head j (transformers repeats k and
        # v to H heads); stacking each group's queries into one (groups*T)-row matrix gives the same
        # products without the copies.
        q_grouped = q.reshape(B, Hkv, groups * T, D)
        scores = torch.matmul(q_grouped, k.transpose(2, 3)).view(B, H, T, S) * self.scale  # (B, H, T, S)
        if self.softcap is not None:  # Gemma2: scores = c * tanh(scores / c), before the mask
            scores = torch.tanh(scores / self.softcap) * self.softcap
        if mask is not None:
            scores = scores + mask
        # Softmax in float32, then back to the activation dtype, as transformers does.
        pattern = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # (B, H, T, S)
        if sites is not None:
            pattern = sites.visit("pattern", pattern)
        return torch.matmul(pattern.reshape(B, Hkv, groups * T, S), v).view(B, H, T, D)  # (B, H, T, D)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.sandwich_norms = config.sandwich_norms  # Gemma2/3
        eps, offset = config.rms_norm_eps, config.norm_unit_offset
        self.self_attn = Attention(config, layer_idx)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps, offset)
        # Llama names its pre-MLP norm `post_attention_layernorm`; Gemma uses that name for the norm
        # after attention and calls its pre-MLP norm `pre_feedforward_layernorm`.
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, offset)
        if self.sandwich_norms:
            self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps, offset)
            self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps, offset)

    def forward(self, x: torch.Tensor, ctx: Context, sites: Sites | None = None) -> torch.Tensor:
        """x: the residual stream (B, T, E) entering this block; returns the stream leaving it."""
        visit = sites.visit if sites is not None else (lambda name, value: value)
        x = visit("resid_pre", x)
        attn_out = self.self_attn(self.input_layernorm(x), ctx, sites)
        if self.sandwich_norms:
            attn_out = self.post_attention_layernorm(attn_out)
            mlp_in_norm = self.pre_feedforward_layernorm
        else:
            mlp_in_norm = self.post_attention_layernorm
        attn_out = visit("attn_out", attn_out)
        resid_mid = visit("resid_mid", x + attn_out)
        mlp_out = self.mlp(mlp_in_norm(resid_mid))
        if self.sandwich_norms:
            mlp_out = self.post_feedforward_layernorm(mlp_out)
        mlp_out = visit("mlp_out", mlp_out)
        return visit("resid_post", resid_mid + mlp_out)


class Backbone(nn.Module):
    """Holds `embed_tokens`, `layers`, `norm` under the `model.` prefix of Hugging Face names."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.norm_unit_offset)


class Decoder(nn.Module):
    """The whole model. Its public pieces (`embed`, `context`, `layers`, `norm`, `unembed`) are what a
    method's own per-layer loop calls; `forward` is that loop for the plain case."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tokenizer = None  # set by minidecoder.load
        self.source: str | None = None  # folder the weights came from
        self.fast_paths = None  # set by minidecoder.load: which fast paths the method loop may take
        self._inv_freq = {kind: inverse_frequencies(spec, config.head_dim, config.max_position_embeddings)
                          for kind, spec in config.rope.items()}
        # The longest sequence (in positions) the model accepts: config.json max_position_embeddings (a
        # converted GGUF's context_length), lowered by minidecoder.load to tokenizer_config.json's
        # model_max_length when that is smaller. None = no limit: dynamic-NTK RoPE is built to run past it.
        dynamic = any(spec.rope_type == "dynamic" for spec in config.rope.values())
        self.max_context: int | None = None if dynamic else config.max_position_embeddings

    # ---- the public pieces -------------------------------------------------------------------
    @property
    def layers(self) -> nn.ModuleList:
        return self.model.layers

    @property
    def norm(self) -> RMSNorm:
        return self.model.norm

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def embed(self, input_ids: torch.Tensor, extra_rows: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, E): hidden_states[0].

        extra_rows: embedding-table rows for ids the table lacks (placeholders such as TP's <PST>);
        they are treated like every other row, so Gemma's scaling applies to them too.
        """
        if extra_rows:
            # Selected with `where`, not a boolean-mask assignment: the same values, and no nonzero()
            # for the device to report back to the host.
            is_extra = torch.zeros_like(input_ids, dtype=torch.bool)
            for token_id in extra_rows:
                is_extra |= input_ids == token_id
            h = self.model.embed_tokens(input_ids.masked_fill(is_extra, 0))
            for token_id, row in extra_rows.items():
                h = torch.where((input_ids == token_id)[..., None], row.to(device=h.device, dtype=h.dtype), h)
        else:
            h = self.model.embed_tokens(input_ids)
        if self.config.scale_embeddings:  # Gemma: sqrt(E), rounded to the weight dtype first
            # torch.full, not torch.tensor: the same rounded scalar, filled on the device (no copy from the host)
            h = h * torch.full((), self.config.hidden_size ** 0.5, dtype=h.dtype, device=h.device)
        return h

    def unembed(self, h: torch.Tensor) -> torch.Tensor:
        """Final-normed states (B, T, E) -> logits (B, T, V)."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(h, weight)
        if self.config.final_logit_softcap is not None:  # Gemma2: c * tanh(logits / c)
            cap = self.config.final_logit_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    def context(self, attention_mask: torch.Tensor | None, num_new: int, batch_size: int,
                cache: KVCache | None = None, position_ids: torch.Tensor | None = None,
                explicit_attention: bool = False, longest: int | None = None) -> Context:
        """Masks and RoPE tables for `num_new` new tokens after `cache.length` cached ones.

        attention_mask: (B, T_new) or (B, cache + T_new), 1 = real token, 0 = padding (left or right).
        Positions: by default counted over real tokens only (cumsum of the mask - 1), so a padded row
        gets exactly the positions of its unpadded self. The reference code fed 0..T-1 over the padded
        row; with RoPE a constant shift cancels in q.k, so both give the same scores up to rounding.
        Pass `position_ids` to choose them yourself (parity tests do, to match transformers bit for bit).
        explicit_attention: every block takes the explicit attention kernel (see the module docstring).
        longest: the number of positions the longest row reaches, when the caller knows it on the host
        (the method loop does); otherwise it is read back from the positions, which waits for a GPU.
        """
        past = 0 if cache is None else cache.length
        device = self.device
        S = past + num_new
        key_mask = self._key_mask(attention_mask, cache, batch_size, num_new, device)  # (B, S) bool or None
        if cache is not None:
            cache.key_mask = key_mask
        if position_ids is None:
            if key_mask is None:
                position_ids = torch.arange(past, S, device=device).expand(batch_size, num_new)
            else:
                position_ids = (key_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]  # (B, T)
        if longest is not None:
            seq_len = longest
        else:
            seq_len = int(position_ids.max()) + 1 if position_ids.numel() else 1
        if self.max_context is not None and seq_len > self.max_context:  # every entry point passes here
            from minidecoder.errors import ContextLengthError
            raise ContextLengthError(
                f"a sequence of {seq_len} tokens is longer than the model's context of {self.max_context} tokens",
                "shorten the input; to embed, pass truncate=N (CLI --truncate N) to keep the first N tokens of "
                "each text; to generate, ask for fewer new tokens", length=seq_len, limit=self.max_context)
        tables = {}
        for kind, spec in self.config.rope.items():
            inv_freq, scaling = self.rope_frequencies(kind)
            if spec.rope_type == "dynamic" and seq_len > self.config.max_position_embeddings:
                inv_freq, scaling = inverse_frequencies(spec, self.config.head_dim,
                                                        self.config.max_position_embeddings, seq_len)
            tables[kind] = cos_sin(inv_freq, scaling, position_ids, self.dtype)
        masks = {kind: self._additive_mask(key_mask, num_new, past, self.config.sliding_window
                                           if kind == "sliding_attention" else None)
                 for kind in set(self.config.layer_types)}
        return Context(cos_sin=tables, masks=masks, cache=cache, positions=position_ids,
                       explicit_attention=explicit_attention)

    def rope_frequencies(self, kind: str) -> tuple[torch.Tensor, float]:
        """(inverse frequencies on the model's device, attention scaling) of a layer type's RoPE. Kept on the
        device once moved there: a copy from the host's memory each forward would make a GPU wait."""
        inv_freq, scaling = self._inv_freq[kind]
        if inv_freq.device != self.device:
            inv_freq = inv_freq.to(self.device, non_blocking=True)
            self._inv_freq[kind] = (inv_freq, scaling)
        return inv_freq, scaling

    # ---- the plain forward -----------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                position_ids: torch.Tensor | None = None, cache: KVCache | None = None,
                inputs_embeds: torch.Tensor | None = None, logits_to_keep: int = 0) -> DecoderOutput:
        """logits_to_keep: the logits of the last N positions only (transformers' argument; 0 = every position).
        A next-token call keeps 1: the (B, T, V) logits of a long prompt are gigabytes (Gemma's V = 262,144)."""
        check_forward_inputs(self, input_ids, attention_mask, inputs_embeds, cache, logits_to_keep)
        h = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, E)
        B, T, _ = h.shape
        ctx = self.context(attention_mask, T, B, cache, position_ids)
        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for block in self.layers:
            sites = Sites(record={"pattern"}) if output_attentions else None
            h = block(h, ctx, sites)
            if output_hidden_states:
                hidden_states.append(h)
            if output_attentions:
                attentions.append(sites.store["pattern"])
        h = self.norm(h)
        if output_hidden_states:
            hidden_states[-1] = h  # transformers' convention: the last entry is after the final norm
        return DecoderOutput(
            logits=self.unembed(h if logits_to_keep == 0 else h[:, -logits_to_keep:]),
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
            cache=cache,
        )

    # ---- masks -----------------------------------------------------------------------------
    @staticmethod
    def _key_mask(attention_mask: torch.Tensor | None, cache: KVCache | None, B: int, T: int,
                  device: torch.device) -> torch.Tensor | None:
        past_mask = None if cache is None else cache.key_mask
        past = 0 if cache is None else cache.length
        if attention_mask is None and past_mask is None:
            return None
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.bool, device=device)
        attention_mask = attention_mask.to(device=device, dtype=torch.bool)
        if attention_mask.shape[1] == past + T:  # the caller passed the mask of the whole sequence
            return attention_mask
        if attention_mask.shape[1] != T:
            raise ValueError(f"attention_mask has {attention_mask.shape[1]} columns; expected {T} (new tokens) "
                             f"or {past + T} (cache + new tokens)")
        if past == 0:
            return attention_mask
        if past_mask is None:
            past_mask = torch.ones(B, past, dtype=torch.bool, device=device)
        return torch.cat([past_mask.expand(B, past), attention_mask], dim=1)

    def _additive_mask(self, key_mask: torch.Tensor | None, T: int, past: int,
                       window: int | None) -> torch.Tensor | None:
        """(B, 1, T, S): 0 where query i may see key j, the dtype's minimum elsewhere.

            causal: j <= i          sliding: i - j < window (transformers' `kv_idx > q_idx - window`)
            padding: key j is a real token
        i and j are indices in the (cache + new) sequence, so left padding shifts both alike. Fully
        masked rows (queries on padding) get a uniform pattern instead of NaN: their output is unused.
        """
        S = past + T
        device = self.device
        if key_mask is None and window is None and T == 1:
            return None
        i = torch.arange(past, S, device=device)[:, None]  # (T, 1)
        j = torch.arange(S, device=device)[None, :]  # (1, S)
        visible = j <= i  # (T, S)
        if window is not None:
            visible = visible & (i - j < window)
        visible = visible[None, None]  # (1, 1, T, S)
        if key_mask is not None:
            visible = visible & key_mask[:, None, None, :]  # (B, 1, T, S)
        zero = torch.zeros((), dtype=self.dtype, device=device)
        return torch.where(visible, zero, torch.finfo(self.dtype).min)
