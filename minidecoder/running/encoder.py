"""`SentenceEncoder`: one method on one model behind sentence-transformers' `encode` contract.

    encoder = minidecoder.SentenceEncoder("smollm2-135m-instruct", "tp", layer=-2)
    vectors = encoder.encode(["A man plays a guitar.", "Someone plays music."])   # numpy (2, E) float32
    encoder.similarity(vectors, vectors)                                          # torch (2, 2) cosines

`encode` follows `SentenceTransformer.encode` (sentence-transformers 6.2) argument for argument, so
code written for sentence-transformers runs unchanged: `inputs` (or the older `sentences=`): a bare
string gives one vector (E,), a list gives (N, E); numpy float32 by default, a torch tensor with
`convert_to_tensor=True` (which wins over `convert_to_numpy`), a list of per-sentence tensors when both
are False (tensors on the model's device, on the CPU once quantized by `precision`, as there); `prompt`
(or `prompt_name`, a key of the constructor's `prompts`, else `default_prompt_name`) is put before every
text, as there (given both, `prompt` wins with a warning, as there); `truncate_dim` keeps the first N
dimensions (an N past the width keeps them all, as there, with a warning), then `normalize_embeddings`
L2-normalizes, then `precision` int8 / uint8 / binary / ubinary quantizes with
sentence-transformers' own `quantize_embeddings` (which needs it installed), in its order;
`show_progress_bar=None` shows a bar when logging is at INFO or DEBUG, as there. Beyond sentence-transformers:
`context=` (one string, or one per input) is read by the model before each text and never pooled, unlike
`prompt`, which is joined to the text and pooled with it (`minidecoder.embed`'s context).

Refused with a message naming the argument: `output_value` other than "sentence_embedding" (a method
pools inside its own loop: there are no token embeddings to give), `pool=`, `chunk_size=` and a list of
devices (one process here), `device=` other than the model's (a minidecoder model is loaded on its
device, not moved), and any other keyword (sentence-transformers passes those to its modules).
`minidecoder.embed` stays the low-level call (list in, torch (N, E) out); this class only adapts it.
"""
from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minidecoder.errors import ArgumentTypeError, InputError, is_whole_number
from minidecoder.methods import Method, method_of

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")  # sentence-transformers' ALLOWED_PRECISIONS


class SentenceEncoder:
    """A model and an embedding method, with sentence-transformers' `encode` and `similarity`.

    model: a loaded `Decoder`, or anything `minidecoder.load` takes (None = the default model, a known
        name, a folder, a Hub id); `dtype`/`device` (default float32 on the CPU) are passed to `load` in that
        case. A loaded model keeps its own: one loaded in another dtype or on another device is refused.
    method: a method name (`minidecoder embed --help` lists them) or a method object; `method_options`
        are its options by name, as in `minidecoder.embed`.
    truncate: keep the first N tokens of each text instead of refusing a text longer than the context.
    prompts / default_prompt_name: as sentence-transformers' constructor (`{"query": "query: "}`), for
        `encode(prompt_name=...)`.
    """

    def __init__(self, model: Any = None, method: str | Method = "prompteol", *, dtype: str | None = None,
                 device: str | None = None, truncate: int | None = None, prompts: dict[str, str] | None = None,
                 default_prompt_name: str | None = None, **method_options: Any) -> None:
        from minidecoder.core.model import Decoder
        from minidecoder.running.load_model import load

        method = method_of(method, method_options)
        if model is None or isinstance(model, (str, Path)):
            model = load(model, dtype=dtype or "float32", device=device or "cpu")
        elif not isinstance(model, Decoder):
            raise InputError(f"model {type(model).__name__} is not a minidecoder model",
                             "pass a name or folder, or a model from minidecoder.load()")
        else:
            _refuse_another_placement(model, dtype, device)
        method.check(model)  # a bad layer fails here, not at the first encode
        # checked before dict(): dict("query: ") fails as "dictionary update sequence element #0"
        if prompts is not None and (not isinstance(prompts, dict)
                                    or any(not isinstance(k, str) or not isinstance(v, str) for k, v in prompts.items())):
            raise ArgumentTypeError(f"prompts={prompts!r} must map names to texts", "e.g. prompts={'query': 'query: '}")
        prompts = dict(prompts or {})
        if default_prompt_name is not None and default_prompt_name not in prompts:
            raise InputError(f"default_prompt_name={default_prompt_name!r} is not a key of prompts {list(prompts)}",
                             "add it to prompts, or leave default_prompt_name out")
        self.model = model
        self.method = method
        self.truncate = truncate
        self.prompts = prompts
        self.default_prompt_name = default_prompt_name

    @property
    def embedding_dim(self) -> int:
        """Width E of every vector (`get_sentence_embedding_dimension()` in sentence-transformers)."""
        return self.model.config.hidden_size

    def get_embedding_dimension(self) -> int:
        return self.embedding_dim

    get_sentence_embedding_dimension = get_embedding_dimension  # the name before sentence-transformers 6

    @property
    def name(self) -> str:
        """'<model folder>/<method>', used by the integrations as a model name."""
        return f"{Path(getattr(self.model, 'source', 'model')).name}/{self.method.name}"

    def __repr__(self) -> str:
        return f"SentenceEncoder({self.name}, {self.method.describe()})"

    def configuration(self) -> dict[str, Any]:
        """Everything this encoder's vectors depend on, decided here once: MTEB's result cache keys a score
        on it (integrations.mteb.revision_of) and the sentence-transformers save writes it
        (integrations.sentence_transformers), so neither serves or rebuilds another configuration.

        The model's files (sha256 of config.json, tokenizer and weight files; sources.checksums) and a
        sha256 of its parameters as they are in memory (an edit after loading changes that, not the
        files'), dtype, device kind, the method and its options, `truncate`, `prompts` and
        `default_prompt_name` (which `encode` puts before every text)."""
        from minidecoder.sources.checksums import model_identity

        files = model_identity(self.model)
        return {"source": files.pop("source"), "files": files, "parameters_sha256": parameters_sha256(self.model),
                "dtype": str(self.model.dtype).replace("torch.", ""), "device": self.model.device.type,
                "method": self.method.name, "options": self.method.option_values(), "truncate": self.truncate,
                "prompts": dict(self.prompts), "default_prompt_name": self.default_prompt_name}

    def encode(self, inputs: Any = None, prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int | None = None, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False,
               device: str | torch.device | list | None = None, normalize_embeddings: bool = False,
               truncate_dim: int | None = None, pool: Any = None, chunk_size: int | None = None,
               context: str | list[str] | None = None, **kwargs: Any) -> np.ndarray | torch.Tensor | list:
        """Embeddings of `inputs` in input order; see the module docstring for the arguments and returns.
        batch_size: sentences per batch (sentence-transformers' 32 is honoured when given); None fills each
        batch up to the device's token budget, `minidecoder.embed`'s default."""
        inputs = _inputs_argument(inputs, kwargs)
        _refuse_unsupported(output_value, pool, chunk_size, device, precision, kwargs)
        if device is not None and not _same_device(device, self.model.device):
            # sentence-transformers moves the model here; a minidecoder model keeps RoPE tables beside its
            # parameters, so it is loaded on its device instead of moved.
            raise InputError(f"encode(device={str(device)!r}) but the model is on {self.model.device}",
                             f"load it there: SentenceEncoder(name, method, device={str(device)!r})")
        if truncate_dim is not None and not is_whole_number(truncate_dim, 1):
            raise InputError(f"encode(truncate_dim={truncate_dim!r}) must be a positive number of dimensions",
                             f"e.g. truncate_dim=256 keeps the first 256 of {self.embedding_dim}")
        truncate_dim = None if truncate_dim is None else int(truncate_dim)  # a NumPy integer is one too
        if truncate_dim is not None and truncate_dim > self.embedding_dim:
            # kept, not refused: sentence-transformers slices past the width without a word, and its code runs here
            warnings.warn(f"encode(truncate_dim={truncate_dim}) is more than the {self.embedding_dim} dimensions this "
                          f"encoder gives: every vector keeps all {self.embedding_dim} (pass truncate_dim="
                          f"{self.embedding_dim} or less, or leave it out)", UserWarning, stacklevel=2)
        # as sentence-transformers decides: a list, tuple or numpy array of strings is a batch, anything else one input
        batch = isinstance(inputs, (list, tuple)) or (isinstance(inputs, np.ndarray) and inputs.ndim >= 1
                                                      and inputs.dtype.kind in ("U", "O"))
        if not batch and not isinstance(inputs, (str, bytes, dict)) and hasattr(inputs, "__iter__"):
            # sentence-transformers would take a generator, set or range as one input: refuse, naming the way out
            raise ArgumentTypeError(f"encode() takes a text or a list of texts, not a {type(inputs).__name__}",
                                    f"pass a list: encode(list(texts)) (a {type(inputs).__name__} would be read as "
                                    "one text)")
        single = not batch
        texts = [inputs] if single else [str(t) if isinstance(t, np.str_) else t for t in inputs]
        prompt = self._resolve_prompt(prompt, prompt_name)
        if prompt:
            texts = [_prompted(prompt, text) for text in texts]
        if show_progress_bar is None:
            show_progress_bar = logging.getLogger().getEffectiveLevel() in (logging.INFO, logging.DEBUG)
        from minidecoder.running.embedding import embed

        if not texts:  # sentence-transformers' empty results: no (0, E) shape
            return torch.tensor([], device=self.model.device) if convert_to_tensor else \
                np.array([]) if convert_to_numpy else []
        vectors = embed(self.model, texts, self.method, batch_size=batch_size, progress=show_progress_bar,
                        truncate=self.truncate, context=context)  # (N, E) float32 on the CPU
        if truncate_dim is not None:
            vectors = vectors[:, :truncate_dim]  # before normalizing, as sentence-transformers does
        if normalize_embeddings:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        if precision != "float32":
            vectors = torch.from_numpy(_quantized(vectors, precision))  # on the CPU, as there
        elif not convert_to_numpy or convert_to_tensor:
            vectors = vectors.to(self.model.device)  # tensors stay on the model's device, as there
        if convert_to_tensor:
            return vectors[0] if single else vectors
        if convert_to_numpy:
            array = vectors.numpy()
            return array[0] if single else array
        rows = list(vectors)  # sentence-transformers' list of (E,) tensors
        return rows[0] if single else rows

    def _resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """`prompt`, else `prompts[prompt_name]`, else the default prompt, as sentence-transformers resolves it."""
        if prompt is not None:
            if not isinstance(prompt, str):
                raise ArgumentTypeError(f"encode(prompt={prompt!r}) must be a text", "e.g. prompt='query: '")
            if prompt_name is not None:  # the prompt wins, as in sentence-transformers, which says so too
                warnings.warn(f"encode() got both prompt={prompt!r} and prompt_name={prompt_name!r}: prompt_name is "
                              "ignored in favour of prompt, as sentence-transformers does; pass one of them",
                              stacklevel=3)
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise InputError(f"encode(prompt_name={prompt_name!r}) is not one of this encoder's prompts "
                                 f"{list(self.prompts)}",
                                 "give the prompts when building it: SentenceEncoder(..., prompts={'query': 'query: '})"
                                 ", or pass prompt='...' itself")
            return self.prompts[prompt_name]
        if self.default_prompt_name is not None:
            return self.prompts[self.default_prompt_name]
        return None

    def similarity(self, a: Any, b: Any) -> torch.Tensor:
        """Cosine similarity of every row of `a` with every row of `b`: (N, M) torch float32, as
        sentence-transformers' `similarity` (numpy, tensors, lists of vectors, or single vectors)."""
        a, b = _as_matrix(a), _as_matrix(b)
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
            raise InputError(f"similarity needs two sets of vectors of one width, got {tuple(a.shape)} and "
                             f"{tuple(b.shape)}", "pass encode()'s outputs of one encoder, (N, E) and (M, E)")
        return torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T  # (N, M)

    def similarity_pairwise(self, a: Any, b: Any) -> torch.Tensor:
        """Cosine of row i of `a` with row i of `b`: (N,)."""
        a, b = _as_matrix(a), _as_matrix(b)
        if a.shape != b.shape:
            raise InputError(f"similarity_pairwise needs equal shapes, got {tuple(a.shape)} and {tuple(b.shape)}",
                             "pass two sets with the same number of vectors")
        return torch.nn.functional.cosine_similarity(a, b, dim=1)


def parameters_sha256(model: Any) -> str:
    """sha256 over every parameter (name, then raw bytes), in the model's parameter order: the weights as they
    are in memory, edits included (about a second per GB)."""
    return tensors_sha256((name, p.detach()) for name, p in model.named_parameters())


def tensors_sha256(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over (name, raw bytes) pairs, in the order given: `parameters_sha256` of a model, or of a
    checkpoint read one tensor at a time (`core.loading.checkpoint_parameters`)."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in named:
        digest.update(name.encode("utf-8"))
        digest.update(tensor.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _inputs_argument(inputs: Any, kwargs: dict[str, Any]) -> Any:
    """`inputs`, or the older name `sentences=` (sentence-transformers still takes it, with a warning)."""
    if "sentences" in kwargs:
        sentences = kwargs.pop("sentences")
        if inputs is not None:
            raise ArgumentTypeError("encode() got both inputs= and sentences=", "pass the texts once, as inputs")
        return sentences
    if inputs is None:
        raise ArgumentTypeError("encode() needs the texts to embed", "e.g. encoder.encode(['a sentence'])")
    return inputs


def _refuse_unsupported(output_value: Any, pool: Any, chunk_size: Any, device: Any, precision: Any,
                        kwargs: dict[str, Any]) -> None:
    """sentence-transformers' arguments this encoder cannot honour, each named with the reason."""
    if output_value != "sentence_embedding":
        raise InputError(f"encode(output_value={output_value!r}) is not supported: a minidecoder method pools "
                         "inside its own loop, so only sentence embeddings exist",
                         "leave output_value out (\"sentence_embedding\")")
    if pool is not None or chunk_size is not None or isinstance(device, list):
        given = "pool=" if pool is not None else "chunk_size=" if chunk_size is not None else "a list of devices"
        raise InputError(f"encode() with {given} asks for multi-process encoding, which a SentenceEncoder does not do",
                         "call encode in one process (split the texts yourself to use several)")
    if precision not in PRECISIONS:
        raise InputError(f"encode(precision={precision!r}) is not one of {', '.join(PRECISIONS)}",
                         "e.g. precision='int8'")
    if kwargs:
        raise ArgumentTypeError(f"encode() got keyword argument(s) {sorted(kwargs)} that a SentenceEncoder does not "
                                "take (sentence-transformers passes such keywords to its modules)",
                                "drop them; the method's options go to SentenceEncoder(model, method, **options)")


def _refuse_another_placement(model, dtype: Any, device: Any) -> None:
    """`dtype` and `device` say how to load a model: given with one already loaded otherwise, they would be
    ignored."""
    from minidecoder.core.loading import resolve_dtype

    if dtype is not None and resolve_dtype(dtype) != model.dtype:
        raise InputError(f"SentenceEncoder(model, dtype={str(dtype)!r}) but the model is loaded in "
                         f"{str(model.dtype).replace('torch.', '')}; a loaded model is not cast",
                         f"load it so: minidecoder.load(..., dtype={str(dtype).replace('torch.', '')!r}), or pass its "
                         "name or folder instead of the model")
    if device is not None and not _same_device(device, model.device, "SentenceEncoder(model, device=...)"):
        raise InputError(f"SentenceEncoder(model, device={str(device)!r}) but the model is on {model.device}; a "
                         "loaded model is not moved",
                         f"load it there: minidecoder.load(..., device={str(device)!r}), or pass its name or folder "
                         "instead of the model")


def _same_device(given: Any, model_device: torch.device, call: str = "encode(device=...)") -> bool:
    """Whether `encode(device=given)` names the model's device as torch places tensors: 'cuda' is the current GPU
    (the model's 'cuda:0' when that is current) and 'cpu:0' the one CPU, though torch.device compares them unequal."""
    try:
        given = torch.device(given)
    except (RuntimeError, TypeError):
        raise InputError(f"{call.replace('...', repr(given))} is not a device",
                         "e.g. device='cpu' or device='cuda'") from None
    if given.type != model_device.type:
        return False
    if given.type != "cuda":  # one CPU, one Apple GPU
        return True
    current = torch.cuda.current_device()
    return (current if given.index is None else given.index) == (current if model_device.index is None
                                                                  else model_device.index)


def _quantized(vectors: torch.Tensor, precision: str) -> np.ndarray:
    """sentence-transformers' `quantize_embeddings` of the whole set: (N, E) int8 / uint8, or packed bits
    (N, E / 8)."""
    try:
        from sentence_transformers.util.quantization import quantize_embeddings
    except ImportError:
        try:
            from sentence_transformers.quantization import quantize_embeddings
        except ImportError:
            raise InputError(f"encode(precision={precision!r}) quantizes with sentence-transformers, which is not "
                             "installed", "pip install 'minidecoder[st]', or leave precision at 'float32'") from None
    try:
        return quantize_embeddings(vectors, precision)
    except ValueError as error:  # e.g. int8 ranges from a single embedding
        raise InputError(f"encode(precision={precision!r}): {error}",
                         "encode several texts at once (the ranges come from them), or use precision='binary' / "
                         "'ubinary', which need no ranges") from None


def _as_matrix(x: Any) -> torch.Tensor:
    if isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
        x = torch.stack(x)
    x = torch.as_tensor(x, dtype=torch.float32)
    return x.unsqueeze(0) if x.dim() == 1 else x  # (N, E)


def _prompted(prompt: str, item: Any) -> Any:
    """`prompt` before the text, in a (context, text) pair too: the pair is the same input as `context=`.
    Anything else is left as it is, for `embed` to name."""
    if isinstance(item, str):
        return prompt + item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
        return item[0], prompt + item[1]
    return item


def refuse_settings_beside_an_encoder(wrapper: str, **given: Any) -> None:
    """A `SentenceEncoder` comes with its method and options: settings given beside it would be ignored."""
    named = sorted(key for key, value in given.items() if value is not None and value != {})
    if named:
        raise InputError(f"{wrapper}(encoder, ...) was given {', '.join(named)} beside a SentenceEncoder, which "
                         "comes with its own method and options: they would be ignored",
                         f"give them to SentenceEncoder(...), or pass the model instead of an encoder: "
                         f"{wrapper}(model, method, ...)")

