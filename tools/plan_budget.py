"""How a GPU token budget pads STS-B: the project's own batching (`running.embedding.plan_batches`) on the
STS-B test sentences' token lengths, per budget, on the CPU (nothing runs on a device).

For each budget it prints the batches the embedding loop would make and their padding: computed tokens
(rows x the longest row's forward length) over real tokens (each row's own forward length), unpadded as
the default GPU path runs them, and padded to `fast.graphs.bucket` shapes as `--graphs` runs them; and the
activation memory of the largest batch for a Llama-2-7B shape (`running.memory.forward_bytes`, bf16).
`running.memory.GPU_MAX_TOKENS` cites its figures.

    python tools/plan_budget.py                        # PromptEOL and mean, the default model's tokenizer
    python tools/plan_budget.py --methods prompteol --budgets 4096 8192
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGETS = [2048, 4096, 8192, 16384, 32768]


def sts_b_sentences(data_dir: Path) -> list[str]:
    from minidecoder.evaluation.sts import load_task

    subset = load_task("STSBenchmark", data_dir).subsets["test"]
    return subset.sentences1 + subset.sentences2


def llama2_7b_like(model):
    """A meta-device Decoder with Llama-2-7B's shape (hidden 4096, 32 layers, 32 heads, MLP 11008), bf16,
    and `model`'s vocabulary and tokenizer: shapes and byte counts, no weights."""
    import torch

    from minidecoder.core.model import Decoder

    config = dataclasses.replace(model.config, hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=32,
                                 head_dim=128, intermediate_size=11008,
                                 layer_types=("full_attention",) * 32)
    with torch.device("meta"):
        big = Decoder(config).to(torch.bfloat16)
    big.tokenizer = model.tokenizer
    return big


def plan(model, texts: list[str], method: str, budget: int, big=None) -> dict:
    """The batches `minidecoder.embed` makes on a GPU at `budget` tokens, and their padding; with `big` (a
    model), the largest estimated forward memory of a batch on it (`running.memory.forward_bytes`)."""
    from minidecoder.running.memory import forward_bytes
    from minidecoder.fast.graphs import bucket
    from minidecoder.methods import build_method
    from minidecoder.running.embedding import forward_length, plan_batches

    lengths = [len(ids) for ids in model.tokenizer.encode_batch(texts, add_special_tokens=False)]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    length = forward_length(model, build_method(method))
    batches = plan_batches(order, lengths, None, budget, lambda n: length.per_row(n, False))  # a GPU's rule
    real = sum(length(lengths[i]) for i in order)
    padded = bucketed = 0
    shapes = set()
    for batch in batches:
        longest = math.ceil(length(max(lengths[i] for i in batch)))
        padded += len(batch) * longest
        rows, columns = bucket(len(batch), longest)
        bucketed += rows * columns
        shapes.add((rows, columns))
    sizes = [(len(b), math.ceil(length(max(lengths[i] for i in b)))) for b in batches]
    return {"batches": len(batches), "rows": len(texts) / len(batches), "padded": padded / real,
            "bucketed": bucketed / real, "shapes": len(shapes), "largest": max(r * c for r, c in sizes),
            "bytes": 0 if big is None else max(forward_bytes(big, r, c) for r, c in sizes)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="whose tokenizer (default: the default model)")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/sts")
    parser.add_argument("--methods", nargs="+", default=["prompteol", "mean"])
    parser.add_argument("--budgets", nargs="+", type=int, default=BUDGETS)
    args = parser.parse_args(argv)

    import minidecoder

    model = minidecoder.load(args.model, progress=False)
    big = llama2_7b_like(model)
    texts = sts_b_sentences(args.data)
    print(f"STS-B test, {len(texts)} sentences, tokenizer of {Path(model.source).name}; "
          "computed/real tokens (1.00 = no padding)")
    print("| method | budget | batches | rows/batch | unpadded | bucket-padded | bucket shapes | largest batch "
          "| 7B forward memory, largest (GiB, bf16) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for method in args.methods:
        for budget in args.budgets:
            row = plan(model, texts, method, budget, big)
            print(f"| {method} | {budget} | {row['batches']} | {row['rows']:.0f} | {row['padded']:.3f} | "
                  f"{row['bucketed']:.3f} | {row['shapes']} | {row['largest']} | {row['bytes'] / 2**30:.2f} |")


if __name__ == "__main__":
    main()
