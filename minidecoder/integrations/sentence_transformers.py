"""A minidecoder method as a sentence-transformers module (sentence-transformers 6.x).

    from sentence_transformers import SentenceTransformer
    from minidecoder.integrations.sentence_transformers import MinidecoderModule
    model = SentenceTransformer(modules=[MinidecoderModule("smollm2-135m-instruct", "tp")])
    model.encode(["A man plays a guitar."])        # everything SentenceTransformer offers, on top of TP

Install with `pip install -e ".[st]"`. Imported only when used: `import minidecoder` never loads
sentence-transformers.

The module is an `InputModule` that does all the work in one step: `preprocess` passes the texts
through (a method builds its own prompt and tokenizes inside its loop, so there are no input ids to
hand on), and `forward` returns them as `sentence_embedding`. sentence-transformers still does its
own batching, length sorting, normalization and conversions around it. `save` writes the encoder's
configuration (`SentenceEncoder.configuration()`): model folder, method, options, dtype, `truncate`,
prompts (no weights: they stay where minidecoder keeps them), so `SentenceTransformer(saved_folder)`
rebuilds the same module; a model changed in memory since it was loaded is refused, as the folder would
not give it back.

Prompts: a prompt sentence-transformers passes (`encode(prompt=...)`, or a `prompt_name` it finds in its own
`SentenceTransformer(..., prompts=...)`) replaces the module's default prompt; with none, the module's
`default_prompt_name` applies.
"""
from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules.input_module import InputModule

from minidecoder.errors import ArgumentTypeError, InputError
from minidecoder.running.encoder import SentenceEncoder, refuse_settings_beside_an_encoder, tensors_sha256


class MinidecoderModule(InputModule):
    """One minidecoder method on one model; arguments as `SentenceEncoder`'s (method default "prompteol", dtype
    "float32"), or pass a SentenceEncoder, which comes with its own method and options."""

    config_keys = ["model", "method", "options", "dtype", "truncate", "prompts", "default_prompt_name"]
    config_file_name = "minidecoder_config.json"

    def __init__(self, model: Any = None, method: Any = None, options: dict | None = None, *,
                 dtype: str | None = None, truncate: int | None = None, prompts: dict[str, str] | None = None,
                 default_prompt_name: str | None = None, **method_options: Any) -> None:
        super().__init__()
        if isinstance(model, SentenceEncoder):
            refuse_settings_beside_an_encoder("MinidecoderModule", method=method, options=options, dtype=dtype,
                                              truncate=truncate, prompts=prompts,
                                              default_prompt_name=default_prompt_name, **method_options)
            encoder = model
        else:
            if options is not None and not isinstance(options, dict):
                raise ArgumentTypeError(f"MinidecoderModule(options={options!r}) must map option names to values",
                                        "e.g. options={'layer': -2}, or give them by name: layer=-2")
            twice = sorted(set(options or {}) & set(method_options))  # one value would silently win
            if twice:
                raise InputError(f"MinidecoderModule got {', '.join(twice)} both in options= and by name",
                                 "give each option once")
            encoder = SentenceEncoder(model, "prompteol" if method is None else method, dtype=dtype,
                                      truncate=truncate, prompts=prompts, default_prompt_name=default_prompt_name,
                                      **(options or {}), **method_options)
        self.encoder = encoder
        # A registered submodule, so that SentenceTransformer.device and .eval() see the weights.
        self.decoder = encoder.model

    def get_config_dict(self) -> dict[str, Any]:
        """What `save` writes and `load` passes back to __init__: the encoder's configuration
        (`SentenceEncoder.configuration()`, the one place that decides it), so that the loaded module is
        the saved one: same files, dtype, method, options, truncate and prompts. A model whose parameters
        were changed in memory cannot be rebuilt from its folder, and is refused."""
        configuration = self.encoder.configuration()
        _check_rebuildable(configuration, self.encoder.model.config)
        return {"model": configuration["source"], **{key: configuration[key] for key in self.config_keys[1:]}}

    # the module as sentence-transformers shows it
    @property
    def model(self) -> str:
        return str(self.encoder.model.source)

    @property
    def method(self) -> str:
        return self.encoder.method.name

    @property
    def options(self) -> dict:
        return self.encoder.method.option_values()  # options only: descriptive details do not load back

    def get_embedding_dimension(self) -> int:
        return self.encoder.embedding_dim

    def preprocess(self, inputs: list[str], prompt: str | None = None, **kwargs: Any) -> dict[str, Any]:
        # sentence-transformers' prompt (given, or its own default) replaces the module's default prompt, as an
        # explicit prompt does in `SentenceEncoder.encode`; None leaves the module's default to apply
        return {"texts": list(inputs), "prompt": prompt}

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        vectors = self.encoder.encode(features["texts"], prompt=features.get("prompt"), convert_to_tensor=True,
                                      batch_size=len(features["texts"]), show_progress_bar=False)  # (B, E), CPU
        features["sentence_embedding"] = vectors.to(self.encoder.model.device)
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)

    def __repr__(self) -> str:
        return f"MinidecoderModule({self.encoder.name})"


def _check_rebuildable(configuration: dict[str, Any], config: Any) -> None:
    """The saved folder names the model's folder, not its weights: refuse a model that folder does not
    give back (built in memory, or its parameters changed since it was loaded). The folder's weights are
    read one tensor at a time, cast as the model was, so no second model is loaded (a 7B model's save would
    need its memory twice)."""
    from pathlib import Path

    from minidecoder.core.loading import checkpoint_parameters, resolve_dtype

    source = configuration["source"]
    if source is None:
        raise InputError("this model was built in memory, not loaded from a folder, so a saved module could not "
                         "load it back", "write it as a checkpoint folder and load it with minidecoder.load(folder)")
    saved = checkpoint_parameters(config, Path(source), resolve_dtype(configuration["dtype"]))
    if tensors_sha256(saved) != configuration["parameters_sha256"]:
        raise InputError(f"the model's parameters were changed in memory since they were loaded from {source}; a "
                         "saved module names that folder, so loading it would give the original model",
                         "write the changed weights as a checkpoint folder and load that, then save")
