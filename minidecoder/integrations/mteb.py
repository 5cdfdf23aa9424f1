"""A minidecoder method as an MTEB encoder (mteb 2.x): `mteb.evaluate(MtebEncoder(...), tasks)`.

    import mteb
    from minidecoder.integrations.mteb import MtebEncoder
    results = mteb.evaluate(MtebEncoder("smollm2-135m-instruct", "tp"), mteb.get_tasks(tasks=["STSBenchmark"]))

Install with `pip install -e ".[mteb]"`. Imported only when used: `import minidecoder` never loads mteb.

The metadata MTEB reads is filled from the model, not guessed: `similarity_fn_name` is
`ScoringFunction.COSINE` (every minidecoder method is scored by cosine, as in the papers; MTEB's
evaluators read it from here), `embed_dim` the hidden size, `n_parameters` and `memory_usage_mb` counted
from the loaded weights, `max_tokens` the context, `training_datasets` empty (the methods are
training-free), and the method with every option in `experiment_kwargs`, so that MTEB's result cache
keeps two methods (or two option values) on the same model apart. MTEB's task instructions are not
used: each method applies its own paper's prompt (`use_instructions=False`).

MTEB's result cache files a score under the model's name, `revision` and experiment, and reuses it for
any encoder that reports the same three. The name is only the folder's base name (two training runs'
`checkpoint-500` share it), so `revision` carries everything else the score depends on (`revision_of`):
`SentenceEncoder.configuration()` (the files' sha256, the parameters as they are in memory, dtype, device
kind, method, options, `truncate`, prompts) and the minidecoder code (version and a hash of its sources).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import torch
from mteb.models import ModelMeta
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ScoringFunction

from minidecoder.errors import ArgumentTypeError
from minidecoder.running.encoder import SentenceEncoder, refuse_settings_beside_an_encoder
from minidecoder.sources.checksums import sources_sha256


class MtebEncoder(AbsEncoder):
    """MTEB's encoder protocol around a `SentenceEncoder`; arguments as `SentenceEncoder`'s (method default
    "prompteol"), or pass one (`MtebEncoder(encoder)`), which comes with its own method and options.

    The encoder's `prompts` are picked by MTEB's rules, as its sentence-transformers wrapper picks them: the
    task's name or type, with or without the prompt type, then the prompt type alone ("query", "document");
    where none is named, the encoder's default prompt applies.

    It takes no `batch_size`: `mteb.evaluate` passes one to every `encode` call (its `encode_kwargs`, 32 where
    they name none), so one given here would never act. Called directly, `encode` fills batches by tokens, as
    `SentenceEncoder.encode` does."""

    def __init__(self, model: Any = None, method: Any = None, **kwargs: Any) -> None:
        if "batch_size" in kwargs:
            raise ArgumentTypeError(f"MtebEncoder(batch_size={kwargs['batch_size']!r}) would never act: mteb.evaluate "
                                    "passes a batch size to every encode call (32 unless you give one)",
                                    "pass it to mteb.evaluate: encode_kwargs={'batch_size': N}")
        if isinstance(model, SentenceEncoder):
            refuse_settings_beside_an_encoder("MtebEncoder", method=method, **kwargs)
            self.encoder = model
        else:
            self.encoder = SentenceEncoder(model, "prompteol" if method is None else method, **kwargs)
        self.model = self.encoder  # AbsEncoder's convention: `model` is the wrapped model
        self.model_prompts = dict(self.encoder.prompts)  # AbsEncoder's: what `get_prompt_name` picks from
        self.mteb_model_meta = model_meta(self.encoder)

    def encode(self, inputs, *, task_metadata=None, hf_split: str = "", hf_subset: str = "", prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        """(N, E) for every text of MTEB's DataLoader, in its order (float32 unless `precision` says). `kwargs`
        are `mteb.evaluate`'s `encode_kwargs`, passed on to `SentenceEncoder.encode` whole, as MTEB's
        sentence-transformers wrapper passes them: `precision="int8"` quantizes (MTEB files the score under that
        precision), `normalize_embeddings` normalizes, and a keyword `encode` does not take is refused there,
        naming it, rather than dropped."""
        texts = [text for batch in inputs for text in batch["text"]]
        name = self._prompt_name(task_metadata, prompt_type)
        kwargs = {"show_progress_bar": False, **kwargs}
        if name is not None and "prompt" not in kwargs and "prompt_name" not in kwargs:  # a prompt given wins
            kwargs["prompt_name"] = name
        return self.encoder.encode(texts, **kwargs)

    def _prompt_name(self, task_metadata, prompt_type) -> str | None:
        if not self.model_prompts:
            return None
        if task_metadata is None:  # called outside an MTEB task: the prompt type alone
            value = getattr(prompt_type, "value", None)
            return value if value in self.model_prompts else None
        return self.get_prompt_name(task_metadata, prompt_type)


def model_meta(encoder: SentenceEncoder) -> ModelMeta:
    """The ModelMeta MTEB needs for `encoder`'s model and method."""
    model = encoder.model
    n_parameters = sum(p.numel() for p in model.parameters())
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    options = encoder.method.option_values()
    # the context minidecoder enforces (the smaller of config.json's and the tokenizer's); a dynamic-NTK model has
    # no limit there, and reports what its files declare
    context = model.max_context or model.tokenizer.model_max_length or model.config.max_position_embeddings
    return ModelMeta(
        loader=None,  # an instance is passed to mteb.evaluate; there is nothing for MTEB to load by name
        name=f"minidecoder/{encoder.name.replace('/', '-')}",  # MTEB wants "organization/model_name"
        revision=revision_of(encoder),  # MTEB's cache key besides the name: see the module docstring
        release_date=None,
        languages=None,  # whatever the checkpoint was trained on; minidecoder does not know
        n_parameters=n_parameters,
        memory_usage_mb=round(n_bytes / 2**20, 2),
        max_tokens=context,
        embed_dim=encoder.embedding_dim,
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch", "safetensors"],
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=False,
        training_datasets=set(),  # training-free: no dataset was trained on
        experiment_kwargs={"method": encoder.method.name, **{k: _plain(v) for k, v in options.items()}},
    )


def revision_of(encoder: SentenceEncoder) -> str:
    """'<configuration hash>-<dtype>-<device kind>-<code version>', e.g. '3fa2c1d9e0b4-float32-cpu-0.1.0+8c1e2f3a'.

    The configuration is `SentenceEncoder.configuration()`, the one place that decides what identifies an
    encoder: the checkpoint's files and its parameters as they are in memory (an edited model gets its
    own score), dtype, device, method and options, `truncate` and the prompts. Where the files are does
    not change the score; what they hold does."""
    configuration = encoder.configuration()
    configuration.pop("source")
    digest = hashlib.sha256(json.dumps(_plain(configuration), sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return f"{digest}-{configuration['dtype']}-{configuration['device']}-{code_version()}"


def code_version() -> str:
    """minidecoder's version and a hash of its source files (sources.checksums): a changed method gives a
    new score."""
    import minidecoder

    return f"{minidecoder.__version__}+{sources_sha256()[:8]}"


def _plain(value: Any) -> Any:
    """Method options as the JSON-like values MTEB can name an experiment by."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return str(value)
    return repr(value)
