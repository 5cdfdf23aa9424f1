"""Does a checkpoint give the same numbers on a GPU as on the CPU? Every method, side by side.

    python tools/device_parity.py weights/qwen2.5-coder-0.5b-instruct --device cuda
    python tools/device_parity.py FOLDER [FOLDER ...] --device cuda --tolerance 1e-4

Each checkpoint is loaded twice in float32, on the CPU and on `--device`; the logits of one prompt and
every method's embeddings of a few sentences of different lengths (so batches are padded) are compared.
The measure is the largest absolute difference over the largest absolute CPU value of that output
(each method's embeddings on their own scale, so that one method's large activations do not hide
another's error), and the smallest cosine between the two devices' embeddings of one sentence. A GPU
sums in another order than the CPU, so the two are not bit-equal: on an H100 the differences were
2e-7 to 3e-6 relative (docs/benchmarks.md, "GPU"). `--tolerance` (default 1e-4) bounds the relative
difference; anything above it is a wrong result, not rounding, and the exit status is 1. transformers
is not needed: this compares minidecoder with itself across devices
(tests/core/test_parity.py ties the CPU side to transformers).

The methods run with their defaults (the reference's layers and options), each through `embed`, so the
loop's fast paths (prefix cache, attention kernel choice) are those each device picks by itself. On a
model too shallow for a default block index (TP's end 7, CP's steer layer 4 on a 4-block test model),
that index is moved to the last block, so every method still runs.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

import minidecoder
from minidecoder.methods import build_method

# Lengths from one word to a long sentence, so that a batch mixes padded and unpadded rows.
SENTENCES = [
    "Rain.",
    "A man is playing a guitar.",
    "The stock market fell sharply today after the central bank raised interest rates again.",
    "Two dogs run across a snowy field while a child watches from the porch. It was cold.",
]
# Every registered method with its default options, plus the variants whose code paths differ.
CASES: list[tuple[str, dict]] = [
    ("mean", {}), ("last", {}), ("prompteol", {}), ("pretended_cot", {}), ("knowledge", {}), ("metaeol", {}),
    ("echo", {}), ("tp", {}), ("htp", {}), ("cp", {}), ("cp", {"mode": "nr"}), ("cp", {"tp": True}), ("reba", {}),
]


@dataclass
class Comparison:
    what: str
    relative: float  # max |device - cpu| / max |cpu|
    cosine: float | None  # smallest per-row cosine (embeddings only)

    def ok(self, tolerance: float) -> bool:
        return self.relative == self.relative and self.relative <= tolerance  # NaN fails


def compare(cpu: torch.Tensor, other: torch.Tensor, what: str, rows: bool) -> Comparison:
    cpu, other = cpu.double(), other.detach().to("cpu").double()
    relative = ((other - cpu).abs().max() / cpu.abs().max().clamp_min(1e-30)).item()
    cosine = torch.nn.functional.cosine_similarity(cpu, other, dim=-1).min().item() if rows else None
    return Comparison(what, relative, cosine)


def fitted(name: str, options: dict, num_layers: int) -> dict:
    """`options` with every default block index past the model's last block moved onto it."""
    method = build_method(name, **options)
    last = num_layers - 1
    uses_end = name in ("tp", "htp") or getattr(method, "tp", False) is True  # CP's end is TP's, unused without it
    keys = ("end", "steer_layer") if uses_end else ("steer_layer",)
    moved = {key: last for key in keys if getattr(method, key, 0) > last}
    return {**options, **moved}


def compare_checkpoint(source: str, device: str, batch_size: int = 2, cases: list[tuple[str, dict]] = CASES,
                       other_model=None) -> list[Comparison]:
    """Logits and every case's embeddings of `source` on the CPU against `device`. `other_model`, when
    given, stands for the device-side model (the tests plant a wrong weight in it to see a failure)."""
    cpu_model = minidecoder.load(source, device="cpu", progress=False)
    other_model = other_model or minidecoder.load(source, device=device, progress=False)
    ids = torch.tensor([cpu_model.tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        results = [compare(cpu_model(ids).logits, other_model(ids.to(other_model.device)).logits, "logits", rows=False)]
    for name, options in cases:
        options = fitted(name, options, cpu_model.num_layers)
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        try:
            expected = minidecoder.embed(cpu_model, SENTENCES, name, batch_size=batch_size, **options)
        except minidecoder.MinidecoderError as error:  # e.g. HTP on a tokenizer with no BOS: not a device question
            print(f"  {label}: skipped on this checkpoint ({error})", file=sys.stderr)
            continue
        got = minidecoder.embed(other_model, SENTENCES, name, batch_size=batch_size, **options)
        results.append(compare(expected, got, label, rows=True))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="checkpoint folders or known model names")
    parser.add_argument("--device", default="cuda", help="the device to compare with the CPU (default cuda)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest relative difference accepted")
    parser.add_argument("--batch-size", type=int, default=2, help="small, so the sentences span several padded batches")
    args = parser.parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU is available here; run this on a machine with one (or pass --device cpu)")
    failed = 0
    for source in args.sources:
        print(f"{source}: cpu vs {args.device} (float32), tolerance {args.tolerance:g}")
        print(f"  {'what':<34} {'max rel. diff':>14} {'min cosine':>12}")
        for result in compare_checkpoint(source, args.device, args.batch_size):
            cosine = "" if result.cosine is None else f"{result.cosine:.9f}"
            flag = "" if result.ok(args.tolerance) else "  <-- above tolerance"
            failed += not result.ok(args.tolerance)
            print(f"  {result.what:<34} {result.relative:>14.3e} {cosine:>12}{flag}")
    if failed:
        print(f"{failed} comparison(s) above tolerance {args.tolerance:g}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
