"""Does a checkpoint give the same numbers on a GPU as on the CPU? Every method, side by side.

    python tools/device_parity.py weights/qwen2.5-coder-0.5b-instruct --device cuda
    python tools/device_parity.py FOLDER [FOLDER ...] --device cuda --tolerance 1e-4
    python tools/device_parity.py tiny:mistral_window --device cpu --cp-contrast   # no GPU needed

Each checkpoint is loaded twice in float32, on the CPU and on `--device`; the logits of one prompt and
every method's embeddings of a few sentences of different lengths (so batches are padded) are compared.
The measure is the largest absolute difference over the largest absolute CPU value of that output
(each method's embeddings on their own scale, so that one method's large activations do not hide
another's error), and the smallest cosine between the two devices' embeddings of one sentence. A GPU
sums in another order than the CPU, so the two are not bit-equal: on an H100 the differences were
2e-7 to 3e-6 relative (docs/benchmarks.md, "GPU"). transformers is not needed: this compares
minidecoder with itself across devices (tests/core/test_parity.py ties the CPU side to transformers).
A source `tiny:NAME` is a test model of tests/tiny_models.py (built into a temporary folder; needs
transformers).

How far rounding alone moves each output is measured on the CPU, per output: every weight of the CPU
model is multiplied by (1 + 1e-7 g), g standard normal (seeded), about one float32 unit in the last
place (2^-23 = 1.2e-7), the size of what another summation order changes, and the output is computed
again; `rounding` is its relative change. An output may differ between devices by K = 10 times that,
or by `--tolerance` (default 1e-4), whichever is larger; above that it is a wrong result, not
rounding, and the exit status is 1. Why 10: on the tiny test models (5 families x 13 cases) another
float32 computation of a well-conditioned output (the CPU at batch 1 instead of 2) lands within 1.1x
`rounding`, float64 within 1.6x, and two seeds of the estimate differ by up to 3.5x; 10 covers the
product with room. On every output of every tiny family but one, `rounding` <= 4.1e-6 (smollm2-135m:
<= 1.5e-6), so K x rounding stays under the tolerance and the bound is the plain tolerance: a
well-conditioned output that differs by more fails as before. An output whose own rounding sets its
bound is reported as ill-conditioned: rounding alone decides it, and no device comparison can check it.

The one such output (reported from an H100: `mistral_window`'s `cp mode=nr steer_layer=3` differed
from the CPU by 0.70 relative) is ill-conditioned, not a device defect. CP's Norm Recovering writes
(a - b) ||a|| / (||a - b|| + 1e-7) at block 3, and on that model a = b exactly: all four blocks attend
within a window of 5, so the last token at block 3 sees the last 17 tokens only; both prompts end in
the same 37 or more (`his sentence : "{text}" means in one word:"`), and RoPE sees relative positions
only. What is left of a - b is rounding (||a - b|| / ||a|| = 7e-7 to 2e-6 in float32, 2e-16 in float64
with float64 RoPE angles), which NR scales up to ||a|| = 4.95: the steered value points where rounding
sent it. On the CPU alone, batch 1 against batch 2 moves this output 0.42, float64 against float32
0.50, the 1-ulp weight perturbation 0.71 (its `rounding`; 0.78 with another seed); in float64 NR gives
a' ~ 0 and equals NS's output within 4e-8. `--cp-contrast` prints ||a||, ||a - b|| and NR's gain
||a|| / ||a - b|| per sentence (5e5 to 9e5 there, 0.85 to 12 on the other families).
docs/benchmarks.md ("GPU") has the commands behind these figures.

The methods run with their defaults (the reference's layers and options), each through `embed`, so the
loop's fast paths (prefix cache, attention kernel choice) are those each device picks by itself. On a
model too shallow for a default block index (TP's end 7, CP's steer layer 4 on a 4-block test model),
that index is moved to the last block, so every method still runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
ROUNDING_STEP = 1e-7  # relative perturbation of every weight for the rounding estimate: about 1 float32 ulp
K = 10  # a device may differ by K x the CPU's rounding estimate (see the module docstring for why 10)
PROMPT = "The capital of France is"


@dataclass
class Comparison:
    what: str
    relative: float  # max |device - cpu| / max |cpu|
    cosine: float | None  # smallest per-row cosine (embeddings only)
    rounding: float | None = None  # the same measure between the CPU's output and a 1-ulp weight perturbation's

    def bound(self, tolerance: float) -> float:
        """The largest relative difference accepted: the tolerance, or K x this output's own rounding."""
        return tolerance if self.rounding is None else max(tolerance, K * self.rounding)

    def ill_conditioned(self, tolerance: float) -> bool:
        """Rounding alone moves this output by more than tolerance / K: its own rounding sets its bound."""
        return self.rounding is not None and not K * self.rounding <= tolerance  # NaN counts as ill-conditioned

    def ok(self, tolerance: float) -> bool:
        return self.relative == self.relative and self.relative <= self.bound(tolerance)  # NaN fails


def relative_difference(reference: torch.Tensor, other: torch.Tensor) -> float:
    """max |other - reference| / max |reference|, in float64."""
    reference, other = reference.double(), other.detach().to("cpu").double()
    return ((other - reference).abs().max() / reference.abs().max().clamp_min(1e-30)).item()


def compare(cpu: torch.Tensor, other: torch.Tensor, what: str, rows: bool) -> Comparison:
    cosine = None
    if rows:
        cosine = torch.nn.functional.cosine_similarity(cpu.double(), other.cpu().double(), dim=-1).min().item()
    return Comparison(what, relative_difference(cpu, other), cosine)


def fitted(name: str, options: dict, num_layers: int) -> dict:
    """`options` with every default block index past the model's last block moved onto it."""
    method = build_method(name, **options)
    last = num_layers - 1
    uses_end = hasattr(method, "end")  # tp, htp and cp+tp (`cp tp=true`); plain CP has no block range
    keys = ("end", "steer_layer") if uses_end else ("steer_layer",)
    moved = {key: last for key in keys if getattr(method, key, 0) > last}
    return {**options, **moved}


def label_of(name: str, options: dict) -> str:
    return name + "".join(f" {k}={v}" for k, v in options.items())


def outputs(model, cases: list[tuple[str, dict]], batch_size: int,
            skipped: set[str] | None = None) -> dict[str, torch.Tensor]:
    """The logits of PROMPT and each case's embeddings of SENTENCES (options fitted to the model), by label.
    A case the checkpoint cannot run (e.g. HTP on a tokenizer with no BOS: not a device question) is left
    out and its label added to `skipped` with a note on stderr."""
    ids = torch.tensor([model.tokenizer.encode(PROMPT)], device=model.device)
    with torch.no_grad():
        found = {"logits": model(ids).logits}
    for name, options in cases:
        options = fitted(name, options, model.num_layers)
        label = label_of(name, options)
        try:
            found[label] = minidecoder.embed(model, SENTENCES, name, batch_size=batch_size, **options)
        except minidecoder.MinidecoderError as error:
            if skipped is not None and label not in skipped:
                skipped.add(label)
                print(f"  {label}: skipped on this checkpoint ({error})", file=sys.stderr)
    return found


def perturb_weights(model, relative: float = ROUNDING_STEP, seed: int = 0) -> None:
    """Every weight w becomes w (1 + relative g), g standard normal from `seed`, rounded once to its dtype."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_(parameter.double().cpu().mul_(noise.mul_(relative).add_(1.0)).to(parameter.device))


def rounding_estimates(model, expected: dict[str, torch.Tensor], cases: list[tuple[str, dict]], batch_size: int,
                       seed: int = 0) -> dict[str, float]:
    """Per output of `expected` (computed by `outputs` on `model`), its relative change when every weight
    of `model` moves by about one float32 ulp (`perturb_weights`). Perturbs `model` in place."""
    perturb_weights(model, seed=seed)
    moved = outputs(model, cases, batch_size)
    return {label: relative_difference(expected[label], moved[label]) for label in expected}


def compare_checkpoint(source: str, device: str, batch_size: int = 2, cases: list[tuple[str, dict]] = CASES,
                       other_model=None, rounding: bool = True) -> list[Comparison]:
    """Logits and every case's embeddings of `source` on the CPU against `device`, each with its rounding
    estimate (`rounding=False`: none, and the plain tolerance applies). `other_model`, when given, stands
    for the device-side model (the tests plant a wrong weight in it to see a failure)."""
    cpu_model = minidecoder.load(source, device="cpu", progress=False)
    other_model = other_model or minidecoder.load(source, device=device, progress=False)
    skipped: set[str] = set()
    expected = outputs(cpu_model, cases, batch_size, skipped)
    got = outputs(other_model, cases, batch_size)
    results = [compare(expected[label], got[label], label, rows=label != "logits") for label in expected]
    if rounding:  # last: it perturbs the CPU model, which nothing reads after this
        estimates = rounding_estimates(cpu_model, expected, cases, batch_size)
        for result in results:
            result.rounding = estimates[result.what]
    return results


def cp_contrast(model, options: dict, texts: list[str] = SENTENCES) -> list[tuple[float, float]]:
    """Per text, (||a||, ||a - b||) at CP's steered site and block, over the whole row as NR takes them
    (all heads at z): a is the normal prompt's value there (its first prompt, TP's copies included
    with tp=True), b the auxiliary prompt's. NR divides by ||a - b||: ||a|| / ||a - b|| is its gain."""
    from minidecoder.methods.cp import SITE_NAMES, unsteered
    from minidecoder.methods.loop import last_token

    method = build_method("cp", **options)
    l, site = method.steer_layer, SITE_NAMES[method.site]
    aux = method.passes(model, texts)[0]
    normal = unsteered(method).passes(model, texts)[0]  # the same forward, unsteered
    with torch.no_grad():
        b = last_token(aux.start(model).run_to(aux.blocks).recorded(l, site), aux.batch)
        a = last_token(dataclasses.replace(normal, record={l: {site}}).start(model).recorded(l, site), normal.batch)
    a, b = a.double().flatten(1), b.double().flatten(1)
    return [(float(x), float(y)) for x, y in zip(a.norm(dim=-1), (a - b).norm(dim=-1))]


def resolve(source: str, folder: Path) -> str:
    """`tiny:NAME` -> a folder holding tests/tiny_models.py's variant NAME (written under `folder`)."""
    if not source.startswith("tiny:"):
        return source
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from tiny_models import tiny_checkpoint
    name = source.removeprefix("tiny:")
    target = folder / f"tiny-{name}"
    if not target.exists():
        tiny_checkpoint(name, target)
    return str(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="checkpoint folders, known model names, or tiny:NAME (a test model)")
    parser.add_argument("--device", default="cuda", help="the device to compare with the CPU (default cuda)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help=f"largest relative difference accepted where {K} x the output's rounding is smaller")
    parser.add_argument("--batch-size", type=int, default=2, help="small, so the sentences span several padded batches")
    parser.add_argument("--cp-contrast", action="store_true",
                        help="also print ||a||, ||a - b|| and NR's gain ||a|| / ||a - b|| of each CP case per sentence")
    args = parser.parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU is available here; run this on a machine with one (or pass --device cpu)")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="device-parity-") as scratch:
        for source in args.sources:
            folder = resolve(source, Path(scratch))
            print(f"{source}: cpu vs {args.device} (float32), tolerance max({args.tolerance:g}, {K} x rounding)")
            print(f"  {'what':<34} {'max rel. diff':>14} {'min cosine':>12} {'rounding':>10} {'bound':>10}")
            for result in compare_checkpoint(folder, args.device, args.batch_size):
                cosine = "" if result.cosine is None else f"{result.cosine:.9f}"
                flag = "" if result.ok(args.tolerance) else "  <-- above its bound"
                if result.ill_conditioned(args.tolerance):
                    flag += "  (ill-conditioned: its own rounding sets the bound)"
                failed += not result.ok(args.tolerance)
                print(f"  {result.what:<34} {result.relative:>14.3e} {cosine:>12} {result.rounding:>10.2e} "
                      f"{result.bound(args.tolerance):>10.2e}{flag}")
            if args.cp_contrast:
                model = minidecoder.load(folder, progress=False)
                print("  CP's steered site, per sentence: ||a||  ||a - b||  gain ||a|| / ||a - b||")
                for name, options in CASES:
                    if name == "cp":
                        options = fitted(name, options, model.num_layers)
                        rows = cp_contrast(model, options)
                        print(f"  {label_of(name, options):<34} " + "   ".join(
                            f"{a:.3g} {d:.3g} {a / max(d, 1e-300):.3g}" for a, d in rows))
    if failed:
        print(f"{failed} comparison(s) above their bound", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
