"""Embeddings already computed, served to `mteb`'s own evaluators: the classification and C-MTEB
families run the installed mteb's task classes on local data instead of restating their protocol.

    encoder = PrecomputedEncoder(texts, vectors)     # row i of vectors (N, E) embeds texts[i]
    scores = task.evaluate(encoder, "test", encode_kwargs={"batch_size": 64})

The texts are embedded first, as one resumable job (`minidecoder.running.jobs.embed_resumably`), so an
interrupted run resumes from its kept chunks; mteb then asks for texts in its own order and gets their
rows. `similarity_fn_name` is left unset, so mteb's evaluators score by cosine (`AbsEncoder.similarity`'s
fallback), as every minidecoder method is scored. Imported only by those families: `import minidecoder`
never loads mteb.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from mteb.models.abs_encoder import AbsEncoder


class PrecomputedEncoder(AbsEncoder):
    """mteb's encoder protocol over a fixed table of embeddings; a text without a row is an error (it
    would mean mteb evaluates texts this family never embedded)."""

    mteb_model_meta = None  # no similarity function named: mteb falls back to cosine
    model = None

    def __init__(self, texts: Sequence[str], vectors: torch.Tensor | np.ndarray) -> None:
        self.vectors = np.asarray(vectors.numpy() if isinstance(vectors, torch.Tensor) else vectors, np.float32)  # (N, E)
        if self.vectors.ndim != 2 or len(self.vectors) != len(texts):
            raise ValueError(f"{len(texts)} texts but embeddings of shape {self.vectors.shape}")
        self.rows = {text: row for row, text in enumerate(texts)}

    def encode(self, inputs, *, task_metadata=None, hf_split: str = "", hf_subset: str = "", prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        """(N, E) float32 for every text of mteb's DataLoader, in its order."""
        texts = [text for batch in inputs for text in batch["text"]]
        missing = [text for text in texts if text not in self.rows]
        if missing:
            raise KeyError(f"{len(missing)} texts mteb asked for were never embedded (first: {missing[0]!r})")
        return self.vectors[[self.rows[text] for text in texts]]


def local_task(name: str, splits: dict[str, dict[str, list]]):
    """The installed mteb's own task `name` (its class, defaults and evaluator), reading `splits`
    ({split: {column: values}}) instead of the Hugging Face Hub. The task keeps the predictions of each
    classification experiment (`task.predictions`), for an interval over test items."""
    import mteb
    from datasets import Dataset, DatasetDict

    base = type(mteb.get_task(name))

    class Local(base):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = DatasetDict({split: Dataset.from_dict(columns) for split, columns in splits.items()})
            self.data_loaded = True

        def _run_experiment(self, *args: Any, **kwargs: Any):
            scores, predictions = super()._run_experiment(*args, **kwargs)
            self.predictions.append(predictions)
            return scores, predictions

    Local.__name__ = Local.__qualname__ = f"Local{base.__name__}"
    task = Local()
    task.predictions = []
    return task
