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
own batching, length sorting, normalization and conversions around it. `save` writes the model
source, method and options (no weights: they stay where minidecoder keeps them), so
`SentenceTransformer(saved_folder)` rebuilds the same module.
"""
from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules.input_module import InputModule

from minidecoder.running.encoder import SentenceEncoder


class MinidecoderModule(InputModule):
    """One minidecoder method on one model; arguments as `SentenceEncoder`'s (or pass a SentenceEncoder)."""

    config_keys = ["model", "method", "options"]
    config_file_name = "minidecoder_config.json"

    def __init__(self, model: Any = None, method: Any = "prompteol", options: dict | None = None,
                 **method_options: Any) -> None:
        super().__init__()
        options = {**(options or {}), **method_options}
        encoder = model if isinstance(model, SentenceEncoder) else SentenceEncoder(model, method, **options)
        self.encoder = encoder
        # A registered submodule, so that SentenceTransformer.device and .eval() see the weights.
        self.decoder = encoder.model

    # what `save` writes and `load` passes back to __init__
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
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        return {"texts": texts}

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        vectors = self.encoder.encode(features["texts"], batch_size=len(features["texts"]), convert_to_tensor=True,
                                      show_progress_bar=False)  # (B, E) float32, CPU
        features["sentence_embedding"] = vectors.to(self.encoder.model.device)
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)

    def __repr__(self) -> str:
        return f"MinidecoderModule({self.encoder.name})"
