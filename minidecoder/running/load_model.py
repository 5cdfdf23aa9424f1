"""`minidecoder.load`: a name, folder or Hub id to a ready model (config, weights, tokenizer, context,
fast-path settings). Re-exported by the package root."""
from __future__ import annotations

from pathlib import Path

import torch

from minidecoder.core.config import load_config
from minidecoder.core.model import Decoder
from minidecoder.errors import MinidecoderError


def load(source: str | Path | None = None, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
         ignore_config_keys: tuple[str, ...] = (), progress: bool = True, compile: bool = False,
         pack_weights: bool = False) -> Decoder:
    """Load a checkpoint: None (the default model), a known model name, a folder, or a Hub id.

    A folder needs config.json and safetensors; without tokenizer files (tokenizer.json or tokenizer.model)
    it loads with a warning for use with token ids only, and any call that needs text says so.

    dtype: float32 (default), bfloat16 or float16. device: cpu, cuda, mps.
    ignore_config_keys: config.json keys you vouch do not change numerics (unknown keys are errors).
    compile: the method loop runs site-free blocks through torch.compile (minidecoder.fast.compiled); the
        first embedding batch then compiles, and later ones run faster. Logits and generation stay plain.
    pack_weights: reorder every block's linear weights once into oneDNN's layout (minidecoder.fast.packed):
        CPU only, float32 or bfloat16; 8-13% faster embedding runs (docs/benchmarks.md), a second copy of the block weights
        in memory. Combines with compile.
    """
    from minidecoder.core.loading import load_weights, resolve_dtype
    from minidecoder.core.tokenizer import MissingTokenizer, Tokenizer
    from minidecoder.sources.resolve import resolve_source

    folder = resolve_source(source, progress=progress)
    config = load_config(folder, ignore_keys=tuple(ignore_config_keys))
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda", "mps"):
        raise MinidecoderError(f"device {str(device)!r} is not one minidecoder runs on",
                               "use device='cpu', 'cuda' (or 'cuda:1') or 'mps'")
    device = parsed
    if device.type == "cuda" and not torch.cuda.is_available():
        raise MinidecoderError("device 'cuda' requested but no CUDA GPU is available", "use device='cpu'")
    model = load_weights(config, folder, resolve_dtype(dtype), device)
    if not MissingTokenizer.present(folder):
        import warnings
        # config.json + safetensors are a complete model; without tokenizer files it runs on ids only
        warnings.warn(f"{folder} has no tokenizer.json or tokenizer.model: loaded for use with token ids only "
                      "(model(ids), minidecoder.generate(model, ids)); text-level calls will say so", stacklevel=2)
        tokenizer = MissingTokenizer(folder)
    else:
        tokenizer = Tokenizer(folder)
    if isinstance(tokenizer, Tokenizer) and (tokenizer.vocab_size > config.vocab_size
                                             or tokenizer.max_id >= config.vocab_size):
        from minidecoder.errors import TokenizerError
        raise TokenizerError(f"the tokenizer in {folder} has {tokenizer.vocab_size} ids (the largest {tokenizer.max_id}) "
                             f"but the model's embedding has {config.vocab_size} rows",
                             "use the tokenizer that belongs to these weights")
    model.tokenizer = tokenizer
    model.source = str(folder)
    declared = tokenizer.model_max_length if isinstance(tokenizer, Tokenizer) else None  # the smaller wins
    if declared is not None and (model.max_context is None or declared < model.max_context):
        model.max_context = declared
    if pack_weights:
        from minidecoder.fast.packed import pack_linear_weights
        pack_linear_weights(model)
    from minidecoder.fast.options import FastPaths
    model.fast_paths = FastPaths(compiled=bool(compile), packed=bool(pack_weights))
    return model
