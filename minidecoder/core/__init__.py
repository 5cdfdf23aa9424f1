"""The decoder core: configuration, RoPE, the model (one forward for every family), strict
safetensors loading and the tokenizer. Nothing here knows about methods, fast paths or sources."""
