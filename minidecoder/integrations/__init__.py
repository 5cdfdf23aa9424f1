"""Optional bridges to other libraries, each behind a pip extra and imported only when used:
`minidecoder.integrations.sentence_transformers` (`.[st]`) and `minidecoder.integrations.mteb` (`.[mteb]`).
Nothing is imported here, so `import minidecoder` never needs either package."""
