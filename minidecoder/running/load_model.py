"""`minidecoder.load`: a name, folder or Hub id to a ready model (config, weights, tokenizer, context,
fast-path settings). Re-exported by the package root."""
from __future__ import annotations

from pathlib import Path

import torch

from minidecoder.core.config import load_config
from minidecoder.core.model import Decoder
from minidecoder.errors import ArgumentTypeError, InputError


def load(source: str | Path | None = None, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
         ignore_config_keys: tuple[str, ...] = (), progress: bool = True, compile: bool = False,
         pack_weights: bool = False, check_finite: bool = True, graphs: bool = False,
         buckets: bool | None = None, fused: bool | None = None) -> Decoder:
    """Load a checkpoint: None (the default model), a known model name, a folder, or a Hub id.

    A folder needs config.json and safetensors; without tokenizer files (tokenizer.json or tokenizer.model)
    it loads with a warning for use with token ids only, and any call that needs text says so.

    dtype: float32 (default), bfloat16 or float16. device: cpu, cuda (cuda:N), mps; checked before any
        weight is read, so a device this machine lacks is named as such (`check_device`).
    ignore_config_keys: config.json keys you vouch do not change numerics (unknown keys are errors).
    compile: the method loop runs site-free blocks through torch.compile (minidecoder.fast.compiled); the
        first embedding batch then compiles, and later ones run faster. Logits and generation stay plain.
    pack_weights: reorder every block's linear weights once into oneDNN's layout (minidecoder.fast.packed):
        CPU only, float32 or bfloat16; 8-13% faster embedding runs on an AVX-512 EPYC, no gain on an AMX Xeon
        (docs/benchmarks.md), a second copy of the block weights
        in memory. Combines with compile.
    graphs: replay small site-free block calls of the method loop from captured CUDA graphs (minidecoder.fast.graphs;
        on a CPU: the same static buffers, no capture). Off by default on every device: graphs pay only for block
        calls of a few hundred tokens, and their buffers take memory; `fast.options.describe(model)` says why.
    buckets: pad batches to a bounded set of shapes (what graphs need); None: as `graphs`.
    fused: site-free block calls of the method loop run with merged q/k/v and gate/up GEMMs and fused norms and
        RoPE (minidecoder.fast.fused); None: on a GPU only, where it is measured faster (docs/benchmarks.md);
        a CPU keeps the plain block, whose float32 numbers equal transformers' bit for bit.
    check_finite: refuse weights holding NaN or inf, naming them (on by default; one pass over the weights,
        docs/reliability.md gives its cost). False loads such a checkpoint anyway, to inspect it.
    """
    from minidecoder.core.loading import load_weights, resolve_dtype
    from minidecoder.core.tokenizer import MissingTokenizer, Tokenizer
    from minidecoder.sources.resolve import resolve_source

    ignore_config_keys = _check_switches(ignore_config_keys, compile=compile, pack_weights=pack_weights,
                                         check_finite=check_finite, graphs=graphs, buckets=buckets, fused=fused)
    device = check_device(device)  # first: before a download, and never blamed on the weights later
    folder = resolve_source(source, progress=progress)
    config = load_config(folder, ignore_keys=ignore_config_keys)
    model = load_weights(config, folder, resolve_dtype(dtype), device, check_finite=check_finite)
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
    if graphs and device.type != "cuda":  # accepted (the buffer bank runs, tests rely on it), never silently
        import warnings
        warnings.warn(f"graphs=True on {device}: no CUDA graphs run there; batches are padded to bucket shapes and "
                      "reuse static buffers, which only slows a CPU run (outputs record graphs as buffers only); "
                      "leave graphs off (no --graphs) off CUDA", stacklevel=2)
    from minidecoder.fast.options import FastPaths, fused_on
    model.fast_paths = FastPaths(compiled=bool(compile), packed=bool(pack_weights), graphs=bool(graphs),
                                 buckets=None if buckets is None else bool(buckets),
                                 fused=None if fused is None else bool(fused))
    if fused_on(model.fast_paths, model.device):
        from minidecoder.fast.fused import merge_projections
        merge_projections(model)
    return model


def _check_switches(ignore_config_keys, **switches) -> tuple[str, ...]:
    """Each switch a bool (buckets and fused may be None: decided by device), so that compile="false" never turns a
    path on; and the config keys a list of strings (a string alone would be read as its characters)."""
    for name, value in switches.items():
        if not isinstance(value, bool) and not (value is None and name in ("buckets", "fused")):
            raise InputError(f"load({name}={value!r}): {name} is True or False"
                             + (" (or None: the device decides)" if name in ("buckets", "fused") else ""),
                             f"e.g. minidecoder.load(..., {name}=True)")
    if isinstance(ignore_config_keys, (str, bytes)) or not hasattr(ignore_config_keys, "__iter__") \
            or not all(isinstance(key, str) for key in ignore_config_keys):
        raise InputError(f"load(ignore_config_keys={ignore_config_keys!r}) is not a list of config.json keys",
                         "e.g. minidecoder.load(..., ignore_config_keys=['my_inert_key'])")
    return tuple(ignore_config_keys)


def require_loaded(model, call: str, rest: str) -> None:
    """Refuse anything but a loaded model where `minidecoder.<call>` takes one: a name or folder there would
    fail deep inside as "'str' object has no attribute 'tokenizer'". `rest`: the call's other arguments, for
    the example."""
    if not isinstance(model, Decoder):
        name = str(model) if isinstance(model, (str, Path)) else "smollm2-135m-instruct"
        raise ArgumentTypeError(f"{call}(model=...) got a {type(model).__name__} ({model!r:.60}), not a loaded model",
                                f"load it first: minidecoder.{call}(minidecoder.load({name!r}), {rest})")


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device this machine has, or an InputError naming what is missing (before any
    weight is read, so that a device problem is never reported as a bad file)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"device {str(device)!r} is not one minidecoder runs on",
                         "use device='cpu', 'cuda' (or 'cuda:1') or 'mps'")
    if parsed.type == "cpu":
        if parsed.index not in (None, 0):
            raise InputError(f"device {str(device)!r}: the CPU has no device index (all cores are one device)",
                             "use device='cpu'; set the number of threads with OMP_NUM_THREADS")
        return torch.device("cpu")  # 'cpu:0' is the CPU, but safetensors reads only onto 'cpu'
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        raise InputError(f"device 'mps' (Apple GPU) is not available: {'this machine has none' if built else 'this PyTorch was built without it'}",
                         "use device='cpu' (--device cpu)")
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"device {str(device)!r} requested but no CUDA GPU is available", "use device='cpu'")
        if (parsed.index or 0) >= count:
            raise InputError(f"device {str(device)!r} requested but this machine has {count} CUDA GPU(s), "
                             f"cuda:0 to cuda:{count - 1}", "use one of them, e.g. device='cuda:0'")
    return parsed
