"""`SentenceEncoder`: one method on one model behind sentence-transformers' `encode` contract.

    encoder = minidecoder.SentenceEncoder("smollm2-135m-instruct", "tp", layer=-2)
    vectors = encoder.encode(["A man plays a guitar.", "Someone plays music."])   # numpy (2, E) float32
    encoder.similarity(vectors, vectors)                                          # torch (2, 2) cosines

`encode` follows `SentenceTransformer.encode` (sentence-transformers 6.2) argument for argument, so
code written for sentence-transformers runs unchanged: a bare string gives one vector (E,), a list
gives (N, E); numpy float32 by default, a torch tensor with `convert_to_tensor=True` (which wins over
`convert_to_numpy`), a list of per-sentence tensors when both are False; `normalize_embeddings`
L2-normalizes; `show_progress_bar=None` shows a bar when logging is at INFO or DEBUG, as there.
`minidecoder.embed` stays the low-level call (list in, torch (N, E) out); this class only adapts it.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minidecoder.errors import InputError
from minidecoder.methods import Method, build_method

_logger = logging.getLogger("minidecoder")


class SentenceEncoder:
    """A model and an embedding method, with sentence-transformers' `encode` and `similarity`.

    model: a loaded `Decoder`, or anything `minidecoder.load` takes (None = the default model, a known
        name, a folder, a Hub id); `dtype`/`device` are passed to `load` in that case.
    method: a method name (`minidecoder embed --help` lists them) or a method object; `method_options`
        are its options by name, as in `minidecoder.embed`.
    truncate: keep the first N tokens of each text instead of refusing a text longer than the context.
    """

    def __init__(self, model: Any = None, method: str | Method = "prompteol", *, dtype: str = "float32",
                 device: str = "cpu", truncate: int | None = None, **method_options: Any) -> None:
        from minidecoder.core.model import Decoder
        from minidecoder.running.load_model import load

        if isinstance(method, str):
            method = build_method(method, **method_options)
        elif method_options:
            raise InputError("options were given together with a method object", "set them on the method object")
        if not isinstance(method, Method):
            raise InputError(f"method {method!r} is neither a method name nor a method object",
                             "pass e.g. method='prompteol' or method='tp'")
        if model is None or isinstance(model, (str, Path)):
            model = load(model, dtype=dtype, device=device)
        elif not isinstance(model, Decoder):
            raise InputError(f"model {type(model).__name__} is not a minidecoder model",
                             "pass a name or folder, or a model from minidecoder.load()")
        method.check(model)  # a bad layer fails here, not at the first encode
        self.model = model
        self.method = method
        self.truncate = truncate

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

    def encode(self, sentences: str | list[str], batch_size: int = 32, show_progress_bar: bool | None = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, normalize_embeddings: bool = False,
               device: str | torch.device | None = None) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Embeddings of `sentences` in input order; see the module docstring for the return types."""
        # as sentence-transformers decides: a list, tuple or numpy array of strings is a batch, anything else one input
        batch = isinstance(sentences, (list, tuple)) or (isinstance(sentences, np.ndarray) and sentences.ndim >= 1
                                                         and sentences.dtype.kind in ("U", "O"))
        single = not batch
        texts = [sentences] if single else [str(t) if isinstance(t, np.str_) else t for t in sentences]
        if device is not None and torch.device(device) != self.model.device:
            # sentence-transformers moves the model here; a minidecoder model keeps RoPE tables beside its
            # parameters, so it is loaded on its device instead of moved.
            raise InputError(f"encode(device={str(device)!r}) but the model is on {self.model.device}",
                             f"load it there: SentenceEncoder(name, method, device={str(device)!r})")
        if show_progress_bar is None:
            show_progress_bar = logging.getLogger().getEffectiveLevel() in (logging.INFO, logging.DEBUG)
        from minidecoder.running.embedding import embed

        if not texts:  # sentence-transformers' empty results: no (0, E) shape
            return torch.tensor([]) if convert_to_tensor else np.array([]) if convert_to_numpy else []
        vectors = embed(self.model, texts, self.method, batch_size=batch_size, progress=show_progress_bar,
                        truncate=self.truncate)  # (N, E) float32 on the CPU
        if normalize_embeddings:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        if convert_to_tensor:
            return vectors[0] if single else vectors
        if convert_to_numpy:
            array = vectors.numpy()
            return array[0] if single else array
        rows = list(vectors)  # sentence-transformers' list of (E,) tensors
        return rows[0] if single else rows

    def similarity(self, a: Any, b: Any) -> torch.Tensor:
        """Cosine similarity of every row of `a` with every row of `b`: (N, M) torch float32, as
        sentence-transformers' `similarity` (numpy, tensors, lists of vectors, or single vectors)."""
        a, b = _as_matrix(a), _as_matrix(b)
        return torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T  # (N, M)

    def similarity_pairwise(self, a: Any, b: Any) -> torch.Tensor:
        """Cosine of row i of `a` with row i of `b`: (N,)."""
        a, b = _as_matrix(a), _as_matrix(b)
        if a.shape != b.shape:
            raise InputError(f"similarity_pairwise needs equal shapes, got {tuple(a.shape)} and {tuple(b.shape)}",
                             "pass two sets with the same number of vectors")
        return torch.nn.functional.cosine_similarity(a, b, dim=1)


def _as_matrix(x: Any) -> torch.Tensor:
    if isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
        x = torch.stack(x)
    x = torch.as_tensor(x, dtype=torch.float32)
    return x.unsqueeze(0) if x.dim() == 1 else x  # (N, E)
