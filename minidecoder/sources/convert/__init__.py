"""GGUF (llama.cpp) checkpoints -> Hugging Face-style folders that `minidecoder.load` reads.

    from minidecoder.sources.convert import convert_gguf
    convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "weights/smollm2")

One job per module: `gguf_reader` (metadata, dequantization), `names` (tensor names),
`transforms` (undoing llama.cpp's permutation and norm offset), `hf_config` (config.json),
`gguf_tokenizer` (tokenizer.json, tokenizer_config.json), `writer` (streamed safetensors shards),
`converter` (the pipeline, written atomically).
"""
from minidecoder.sources.convert.converter import CONVERTER_VERSION, DTYPES, convert_gguf, read_source_info, why_not_replaceable
from minidecoder.sources.convert.gguf_reader import SUPPORTED_ARCHITECTURES, SUPPORTED_QUANT_TYPES
from minidecoder.sources.convert.writer import DEFAULT_SHARD_SIZE, parse_size

__all__ = [
    "CONVERTER_VERSION",
    "DEFAULT_SHARD_SIZE",
    "DTYPES",
    "SUPPORTED_ARCHITECTURES",
    "SUPPORTED_QUANT_TYPES",
    "convert_gguf",
    "parse_size",
    "read_source_info",
    "why_not_replaceable",
]
