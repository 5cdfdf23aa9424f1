"""`minidecoder convert GGUF_FILE OUTPUT_DIR`: a llama.cpp GGUF -> a folder `minidecoder.load` reads."""
from __future__ import annotations

import argparse

INTERRUPTED = "interrupted; nothing was kept (the half-written folder is removed); run the same command again"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a GGUF (llama, qwen2, gemma2, gemma3) into config.json + safetensors + tokenizer.json",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("gguf_file", metavar="GGUF_FILE")
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="created; never overwritten without --overwrite")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="dtype of the written weights (dequantization itself is exact in float32)")
    parser.add_argument("--shard-size", default="5GB",
                        help="largest safetensors file before sharding with an index, e.g. 500MB or 2GiB (default 5GB)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUTPUT_DIR if it is a folder `minidecoder convert` made and holds nothing else")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from minidecoder.sources.convert import convert_gguf, parse_size

    folder = convert_gguf(
        args.gguf_file, args.output_dir, dtype=args.dtype, shard_size=parse_size(args.shard_size),
        overwrite=args.overwrite, progress=not args.quiet,
    )
    print(folder)
    return 0
