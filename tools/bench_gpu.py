"""GPU benchmark: minidecoder on a Llama-2-7B-shaped model against transformers, the
matrix-work floor and the GPU targets, set up and measured in one run.

    python tools/bench.py --device cuda                         # hands over to this file's main
    python tools/bench_gpu.py --device cuda --json bench.json   # the same
    python tools/bench_gpu.py --device cpu --shape tiny --limit 32 --repeat 1   # smoke run (CI, under a minute)

One run, in order (each section prints its table as soon as it is done, and --json is rewritten after
every section, so a run cut off at a time limit still leaves what it measured). Every configuration of a
section runs as on a fresh model: the captures of the one before (CUDA graphs, the kept decode step) are
dropped and their memory freed, then one warm-up call on the very inputs it is timed on, then --repeat timed
runs (median kept), so no capture falls in a timed run and none piles up across configurations:

  checkpoint   a random bfloat16 checkpoint of the chosen shape written once by transformers'
               `LlamaForCausalLM(config).save_pretrained` (initialised on the device), with the default
               model's tokenizer (49,152 ids) copied beside it; `--work DIR` keeps and reuses it
  fast_paths   model.fast_paths, what each path means on the device (minidecoder.fast.options.describe) and
               the default batching's token budget
  rates        bf16 matmul rate (n^3, CUDA events on a GPU) and copy bandwidth, measured now
  throughput   PromptEOL on the STS-B test sentences (s1, s2 of every pair, dataset order), median of
               --repeat runs: minidecoder at its default settings, with graphs on (buckets and captured
               block calls, opt-in) and at batch 32/128/512;
               the reference approach (tools/bench.py's `worker_ref`: AutoModelForCausalLM, sdpa, dataset
               order, left padding, output_hidden_states, hidden_states[-1][:, -1], `.cpu()` per batch);
               transformers length-sorted without hidden states (the base model's last_hidden_state);
               peak GPU memory per configuration
  floor        useful FLOPs = sum over PromptEOL's passes of real tokens x blocks run x 2 x block params
               + 4 H D x causal pairs (as tools/bench.py counts them); floor s = FLOPs / matmul rate
  gpu_busy     torch.profiler over one default-settings call on every sentence (several batches at the
               token budget; the batch count is printed) after a warm-up on them: the union of CUDA kernel
               intervals over wall time (and the same for the reference at batch 128)
  sync         one batch under torch.cuda.set_sync_debug_mode("error"): the block loop alone
               (method.embed_batch) and minidecoder.embed; pass or fail with the error's text
  methods      every method at its default settings against its work ratio to PromptEOL (useful FLOPs of
               its passes over PromptEOL's, on the same sentences)
  reba_batch   ReBA's time per text at batch 2 and batch 8 on eight ~320-token texts (~64 on a CPU)
  generation   greedy decoding at batch 1, 128 new tokens: minidecoder.generate at its defaults and with
               static=True (the captured decode step, kept across calls: captured in the warm-up, replayed in
               the timed runs, which the row's `decode steps made` shows) against transformers'
               generate(do_sample=False), and the memory-bandwidth limit (weight bytes / copy bandwidth)
  targets      the GPU targets (the TARGET_* constants below), met or not met, from the numbers above

Every figure printed is measured in the run; the only typed numbers are the targets (TARGET_*). On a CPU
the CUDA-only parts (profiler kernel time, sync debug mode, CUDA events, GPU memory) are skipped and the
output says so. The GPU has no internet: pass --tokenizer DIR and --sts FILE to files carried along
(docs/benchmarks.md, "GPU benchmark").
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# what the CPU benchmark uses too: the PromptEOL template, the reference loader, the inputs, the matmul timing,
# the FLOP count, and dropping a model's captures between configurations
from bench_common import (PROMPTEOL, block_params, counting_context, drop_captures, long_texts,  # noqa: E402
                          matmul_peak, reference_model, sts_sentences, useful_flops)

DEFAULT_MODEL = "smollm2-135m-instruct"  # its tokenizer (49,152 ids) is the one the issue measured with
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
BATCHES = (32, 128, 512)
METHODS: list[tuple[str, str, dict]] = [  # (label, method name, options): each at its default settings
    ("prompteol", "prompteol", {}), ("pretended_cot", "pretended_cot", {}), ("knowledge", "knowledge", {}),
    ("metaeol", "metaeol", {}), ("echo", "echo", {}), ("mean", "mean", {}), ("tp", "tp", {}), ("htp", "htp", {}),
    ("cp", "cp", {}), ("cp tp=true", "cp", {"tp": True}), ("reba", "reba", {}),
]
# Llama-2-7B's block shape (its config.json), with the default model's vocabulary; `tiny` for a CPU, with
# enough blocks for TP's, HTP's and CP's default block ranges (copies before blocks 1..6, CP's block 4).
SHAPES: dict[str, dict[str, int]] = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, max_position_embeddings=4096),
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=4, max_position_embeddings=4096),
}
SECTIONS = ("fast_paths", "rates", "throughput", "floor", "gpu_busy", "sync", "methods", "reba_batch", "generation")
# The targets set for the GPU work (an H100, the llama2-7b shape, bfloat16): the only typed numbers in the output.
TARGET_SPS, METHOD_SLACK, REBA_SLACK, TARGET_TOKENS, TARGET_BUSY = 2000, 1.10, 1.20, 110, 0.90


# ---- output: tables, the JSON record, the time budget -------------------------------------------------
def table(title: str, headers: list[str], rows: list[list[Any]], note: str = "") -> None:
    lines = ["", f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(cell).replace("\n", " / ").replace("|", "\\|") for cell in row) + " |"
              for row in rows]
    if note:
        lines += ["", note]
    print("\n".join(lines), flush=True)


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


class Record:
    """Every section's result, written to --json after each section (a cut-off run keeps what it has)."""

    def __init__(self, path: Path | None, budget_s: float, skip: set[str]) -> None:
        self.path, self.data, self.skip = path, {}, skip
        self.start, self.budget_s = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def out_of_time(self) -> bool:
        return self.budget_s > 0 and self.elapsed() > self.budget_s

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    @contextlib.contextmanager
    def section(self, name: str, skip: str | None = None):
        """Runs a section's body into self.data[name]; an error is recorded and the run goes on. The body
        gets None when the section is skipped (--skip, the time budget, or `skip`: why not)."""
        if name in self.skip:
            skip = "--skip"
        if skip is None and self.out_of_time():
            skip = f"time budget of {self.budget_s:.0f} s spent ({self.elapsed():.0f} s elapsed)"
        if skip is not None:
            self.data[name] = {"skipped": skip}
            print(f"\n## {name}: skipped ({skip})", flush=True)
            self.save()
            yield None
            return
        result: dict = {}
        self.data[name] = result
        start = time.perf_counter()
        try:
            yield result
        except Exception as error:  # a broken section must not cost the sections after it
            result["error"] = error_text(error)
            result["traceback"] = traceback.format_exc()[-3000:]
            print(f"\n## {name}: error: {result['error']}", file=sys.stderr, flush=True)
            free_device_memory()
        result["section_seconds"] = round(time.perf_counter() - start, 2)
        self.save()


def error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text[:800]


def where_raised(error: BaseException) -> str:
    """The deepest frame of the traceback inside minidecoder/ (where a sync happened), else the last."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f"{os.sep}minidecoder{os.sep}" in f.filename] or frames
    if not ours:
        return ""
    f = ours[-1]
    return f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- timing --------------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float, dict]:
    """fn() timed on the wall clock (the device synchronised before and after) and its peak GPU memory."""
    cuda = device.type == "cuda"
    sync(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        resident = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    seconds = time.perf_counter() - start
    memory = {}
    if cuda:
        peak = torch.cuda.max_memory_allocated(device)
        memory = {"peak_gb": peak / 2**30, "above_resident_gb": (peak - resident) / 2**30}
    return out, seconds, memory


def each_fresh(configs: dict[str, Callable[[], Any]], repeat: int, device: torch.device, record: Record,
               label: str, fresh: Callable[[], None]) -> dict[str, dict]:
    """Each configuration in turn, as on a fresh model: `fresh()` drops what the one before captured (CUDA
    graphs, static buffers) and frees its memory, so neither its pinned memory nor its captures count against
    this one; then one warm-up call on the very inputs the configuration is timed on (every capture and
    first-call cost falls there, not in a timed run), then `repeat` timed runs, the median kept. A failing
    configuration is recorded and left out."""
    out: dict[str, dict] = {name: {"runs_s": []} for name in configs}
    for name, fn in configs.items():
        result = out[name]
        if record.out_of_time():
            result["error"] = f"not run: time budget of {record.budget_s:.0f} s spent"
            continue
        fresh()
        try:
            measure(fn, device)  # the warm-up, on the timed inputs
        except Exception as error:
            result["error"] = f"warm-up: {error_text(error)}"
            free_device_memory()
            continue
        for r in range(repeat):
            if r > 0 and record.out_of_time():
                print(f"  {label} {name}: time budget spent, {r} of {repeat} runs kept", file=sys.stderr, flush=True)
                break
            try:
                value, seconds, memory = measure(fn, device)
            except Exception as error:
                result["error"] = error_text(error)
                free_device_memory()
                break
            result["runs_s"].append(seconds)
            result["value"] = value
            for key, v in memory.items():
                result[key] = max(result.get(key, 0.0), v)
            print(f"  {label} run {r + 1}/{repeat} {name}: {seconds:.3f} s", file=sys.stderr, flush=True)
        if result["runs_s"]:
            result["seconds"] = statistics.median(result["runs_s"])
    return out


def matmul_rate(device: torch.device, n: int, dtype: torch.dtype = torch.bfloat16) -> dict:
    """FLOP/s of an n x n x n matmul on random data: CUDA events around 10 back-to-back products (best of 3)
    on a GPU; on a CPU bench_common's `matmul_peak` (the best single product within a second)."""
    out = {"n": n, "dtype": str(dtype).replace("torch.", "")}
    if device.type != "cuda":
        return {**out, "flops_per_s": matmul_peak(dtype, n, seconds=1.0) * 1e9,
                "timer": "time.perf_counter (no CUDA events on a CPU)"}
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / 10)
    return {**out, "flops_per_s": 2 * n**3 / best, "timer": "CUDA events"}


def copy_bandwidth(device: torch.device, nbytes: int) -> dict:
    """Bytes read + written per second by a device-to-device copy (the convention of the device notes)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / 10
        timer = "CUDA events"
    else:
        seconds = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            dst.copy_(src)
            seconds = min(seconds, time.perf_counter() - t)
        timer = "time.perf_counter (no CUDA events on a CPU)"
    return {"bytes": nbytes, "bytes_per_s": 2 * nbytes / seconds, "timer": timer}


# ---- inputs: the checkpoint, the tokenizer, the sentences ---------------------------------------------
def resolve_tokenizer(given: str | None) -> Path:
    """The folder holding the default model's tokenizer files: --tokenizer, else the local registry
    folder, else the registry fetch (which needs the internet the GPU machine lacks)."""
    def has_tokenizer(folder: Path) -> bool:
        return (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file()

    if given:
        folder = Path(given)
        if not has_tokenizer(folder):
            raise SystemExit(f"--tokenizer {folder}: no tokenizer.json and tokenizer_config.json there; pass the "
                             f"default model's folder ({DEFAULT_MODEL}) or a copy of those two files")
        return folder
    from minidecoder.sources.registry import ensure_model, model_dir
    local = model_dir(DEFAULT_MODEL)
    if has_tokenizer(local):
        return local
    try:
        return Path(ensure_model(DEFAULT_MODEL, progress=False))
    except Exception as error:
        raise SystemExit(f"no tokenizer: {local} has none and fetching {DEFAULT_MODEL} failed ({error_text(error)}); "
                         "pass --tokenizer DIR holding its tokenizer.json and tokenizer_config.json") from None


def special_id(tokenizer_dir: Path, key: str) -> int | None:
    """The id of tokenizer_config.json's `key` token (bos_token, eos_token, pad_token) in tokenizer.json."""
    import tokenizers
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    token = config.get(key)
    if isinstance(token, dict):  # an AddedToken written out
        token = token.get("content")
    if not token:
        return None
    return tokenizers.Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).token_to_id(token)


def build_checkpoint(folder: Path, shape: str, tokenizer_dir: Path, device: torch.device) -> dict:
    """A random bfloat16 checkpoint of `shape` in `folder`, written once (reused when its marker matches)."""
    import tokenizers
    vocab = tokenizers.Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    wanted = {"shape": shape, **SHAPES[shape], "vocab_size": vocab, "dtype": "bfloat16", "seed": 0}
    marker = folder / "bench_shape.json"
    if marker.is_file() and json.loads(marker.read_text()) == wanted and (folder / "config.json").is_file():
        return {"folder": str(folder), "reused": True, "build_seconds": 0.0, **wanted}
    from transformers import LlamaConfig, LlamaForCausalLM

    start = time.perf_counter()
    building = folder / "bench_shape.building"  # written first: the folder is this tool's from then on
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()) and not (marker.is_file() or building.is_file()):
        raise SystemExit(f"--work {folder} holds files this tool did not write; give an empty or new folder")
    for stale in folder.iterdir():  # an earlier build of another shape, or one cut off half-way
        if stale.is_file():
            stale.unlink()
    building.write_text(json.dumps(wanted))
    config = LlamaConfig(vocab_size=vocab, **SHAPES[shape], rms_norm_eps=1e-5, hidden_act="silu",
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         tie_word_embeddings=False, attention_bias=False, mlp_bias=False, dtype="bfloat16",
                         bos_token_id=special_id(tokenizer_dir, "bos_token"),
                         eos_token_id=special_id(tokenizer_dir, "eos_token"),
                         pad_token_id=special_id(tokenizer_dir, "pad_token"))
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:  # initialised where the matmuls will run: 6.7e9 normal draws take seconds on a GPU
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(before)
    init_seconds = time.perf_counter() - start
    model.to("cpu").save_pretrained(folder)
    del model
    free_device_memory()
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy2(tokenizer_dir / name, folder / name)
    marker.write_text(json.dumps(wanted))
    building.unlink()
    return {"folder": str(folder), "reused": False, "build_seconds": time.perf_counter() - start,
            "init_seconds": init_seconds, **wanted}


def resolve_sts(given: str | None) -> Path:
    """--sts, else STSBenchmark/sts-test.csv under minidecoder's STS folder ($MINIDECODER_STS_DATA, else
    ../shared/data/sts), the one variable every tool and command reads."""
    from minidecoder.sources.paths import sts_data_dir
    folders = [sts_data_dir()]
    candidates = [Path(given)] if given else [Path(f) / "STSBenchmark" / "sts-test.csv" for f in folders if f]
    path = next((f for f in candidates if f.is_file()), None)
    if path is None:
        raise SystemExit(f"STS-B test file not found ({', '.join(map(str, candidates)) or 'no STS folder set'}); "
                         "pass --sts PATH/TO/STSBenchmark/sts-test.csv")
    return path


# ---- the transformers side -----------------------------------------------------------------------------
def load_transformers(folder: Path, device: torch.device):
    """(model, tokenizer): bench_common's `reference_model` (sdpa, left padding, pad = eos if unset) in bfloat16."""
    import transformers
    transformers.logging.set_verbosity_error()
    try:  # straight onto the device where this transformers can; else through host memory
        tok, model = reference_model(str(folder), "bfloat16", device_map=str(device))
    except Exception:
        tok, model = reference_model(str(folder), "bfloat16")
        model = model.to(device)
    return model, tok


def prompts_of(texts: list[str]) -> list[str]:
    from minidecoder.methods.text import senteval_sentence
    return [PROMPTEOL.replace("{text}", senteval_sentence(t)) for t in texts]


def reference_embed(hf, tok, texts: list[str], batch: int) -> torch.Tensor:
    """The reference approach as the reference scripts batch it (tools/bench.py's `worker_ref`): dataset
    order, left padding, every hidden state returned, the last layer's last token, to the host per batch."""
    out = []
    for i in range(0, len(texts), batch):
        inputs = tok(prompts_of(texts[i:i + batch]), return_tensors="pt", padding=True).to(hf.device)
        with torch.no_grad():
            hidden = hf(**inputs, output_hidden_states=True, return_dict=True).hidden_states
        out.append(hidden[-1][:, -1, :].float().cpu())
    return torch.cat(out)


def sorted_embed(hf, tok, texts: list[str], batch: int) -> torch.Tensor:
    """transformers at its best for this job: batches of similar length, the base model only (no logits, no
    hidden-state tuple), results left on the device until the end."""
    ids = tok(prompts_of(texts))["input_ids"]
    order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    out = torch.empty(len(texts), hf.config.hidden_size, dtype=torch.float32, device=hf.device)
    for first in range(0, len(order), batch):
        index = order[first:first + batch]
        inputs = tok.pad({"input_ids": [ids[i] for i in index]}, return_tensors="pt").to(hf.device)
        with torch.inference_mode():
            h = hf.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
        out[torch.tensor(index, device=hf.device)] = h[:, -1, :].float()
    return out.cpu()


# ---- work counting ---------------------------------------------------------------------------------------
def work_as_run(model, fn: Callable[[], Any]) -> float:
    """Useful FLOPs of what one call of `fn` ran on `model`: every block call's real new tokens and causal
    query-key pairs (cached keys included), read from the context it was given, so a prompt prefix that ran once
    per batch counts once and padding never counts."""
    tokens = pairs = 0

    def count(module, args) -> None:
        nonlocal tokens, pairs
        block_tokens, block_pairs = args[1].counted_work
        tokens, pairs = tokens + block_tokens, pairs + block_pairs

    hooks = [block.register_forward_pre_hook(count) for block in model.layers]
    counting_context(model, "counted_work")
    try:
        fn()
    finally:
        del model.context
        for hook in hooks:
            hook.remove()
    return float(useful_flops(model, tokens, pairs))


def method_work(model, method, texts: list[str], chunk: int = 256) -> dict:
    """Useful FLOPs of `method` on `texts`, from the passes it runs: per pass, real tokens x blocks run x 2 x
    block params + 4 H D x causal pairs x blocks run (tools/bench.py's count), a shared prompt prefix counted in
    every row (what the plain loop computes; MetaEOL's instruction prefix included). What a call really ran,
    a prefix run once counted once, is `work_as_run`'s."""
    tokens = pairs = 0
    passes, blocks = 0, set()
    for first in range(0, len(texts), chunk):
        for p in method.passes(model, texts[first:first + chunk]):
            n = p.batch.attention_mask.bool().sum(dim=1).long()  # (B,) real tokens per row
            tokens += int(n.sum()) * p.blocks
            pairs += int((n * (n + 1) // 2).sum()) * p.blocks
            if first == 0:
                passes += 1
                blocks.add(p.blocks)
    return {"flops": float(useful_flops(model, tokens, pairs)), "token_blocks": tokens, "pair_blocks": pairs,
            "passes_per_batch": passes, "blocks_run": sorted(blocks)}


# ---- the run --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:7]))
    parser.add_argument("--device", default="cuda", help="cuda (cuda:N) or cpu (default cuda)")
    parser.add_argument("--shape", default="llama2-7b", choices=sorted(SHAPES),
                        help="checkpoint shape (default llama2-7b)")
    parser.add_argument("--work", default=None, help="folder for the checkpoint, kept and reused (default: a temp "
                        "folder removed at the end)")
    parser.add_argument("--tokenizer", default=None, help=f"folder with {DEFAULT_MODEL}'s tokenizer.json and "
                        "tokenizer_config.json (default: the local registry folder, else fetched)")
    parser.add_argument("--sts", default=None, help="STSBenchmark/sts-test.csv (default: under "
                        "$MINIDECODER_STS_DATA, else ../shared/data/sts)")
    parser.add_argument("--limit", type=int, default=None, help="first N sentences (default all 2,758)")
    parser.add_argument("--method-limit", type=int, default=1024, help="sentences for the methods table (default 1024)")
    parser.add_argument("--configs", default=None, help="throughput: time only the default and the configurations "
                        "whose names match this regular expression (a shortened run)")
    parser.add_argument("--compile-row", action="store_true", help="also time PromptEOL with compile=True (prefix "
                        "cache off: torch.compile reaches no cached call); its compile falls in the warm-up")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per configuration, after its warm-up; "
                        "median kept")
    parser.add_argument("--budget-s", type=float, default=0, help="stop starting new sections and repeats after this "
                        "many seconds (0: no limit); leave room under a device call's limit")
    parser.add_argument("--skip", default="", help=f"comma-separated sections to leave out ({', '.join(SECTIONS)})")
    parser.add_argument("--json", type=Path, default=None, help="write every number here (rewritten per section)")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    args.command = "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *given])

    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device}: use cuda (cuda:N) or cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"--device {args.device}: torch {torch.__version__} sees no CUDA device here; for a smoke run on a CPU "
              "use --device cpu --shape tiny --limit 32 --repeat 1", file=sys.stderr)
        return 2
    if device.type not in ("cuda", "cpu"):
        parser.error(f"--device {args.device}: use cuda or cpu")
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(SECTIONS):
        parser.error(f"--skip {sorted(skip - set(SECTIONS))}: unknown; sections are {', '.join(SECTIONS)}")
    record = Record(args.json, args.budget_s, skip)
    temp = None if args.work else Path(tempfile.mkdtemp(prefix="minidecoder-bench-"))
    folder = Path(args.work) if args.work else temp / "checkpoint"
    try:
        run(args, device, record, folder)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    return 0


def run(args, device: torch.device, record: Record, folder: Path) -> None:
    import minidecoder
    import transformers
    from minidecoder.fast.forward import executor
    from minidecoder.fast.options import fast_paths_overridden
    from minidecoder.methods import build_method

    cuda = device.type == "cuda"
    no_cuda = "needs CUDA (this run is on the CPU)"
    torch.manual_seed(0)
    record.data["header"] = header = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"), device=str(device),
        card=torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine()),
        torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
        python=platform.python_version(), shape=args.shape, dtype="bfloat16", repeat=args.repeat,
        commit=git_commit(), cpus=os.cpu_count(), threads=torch.get_num_threads(), command=args.command)
    print(f"# {header['command']}\n# {header['date']}  {header['card']} ({device}), torch {header['torch']} "
          f"(CUDA {header['cuda']}), transformers {header['transformers']}, commit {header['commit']}, "
          f"shape {args.shape}, bfloat16, median of {args.repeat} runs per configuration", flush=True)
    if not cuda:
        print("# on a CPU: no CUDA events (time.perf_counter instead), no GPU memory, and the profiler's kernel "
              "time and sync debug mode are skipped", flush=True)

    tokenizer_dir = resolve_tokenizer(args.tokenizer)
    sts_path = resolve_sts(args.sts)
    sentences = sts_sentences(args.limit, sts_path)[0][:args.limit]  # the first `limit`, odd or even
    header.update(tokenizer=str(tokenizer_dir), sts=str(sts_path), sentences=len(sentences))
    with record.section("checkpoint") as out:
        out.update(build_checkpoint(folder, args.shape, tokenizer_dir, device))
        print(f"\n# checkpoint: {out['folder']} ({'reused' if out['reused'] else 'built'} in "
              f"{out['build_seconds']:.1f} s)", flush=True)
    if "error" in record.data["checkpoint"]:
        raise SystemExit(f"the checkpoint could not be built: {record.data['checkpoint']['error']}")

    start = time.perf_counter()
    model = minidecoder.load(folder, device=str(device), dtype="bfloat16", progress=False)
    md_load = time.perf_counter() - start
    hf = tok = None
    hf_error = None
    try:
        start = time.perf_counter()
        hf, tok = load_transformers(folder, device)
        hf_load = time.perf_counter() - start
    except Exception as error:
        hf_error, hf_load = error_text(error), None
    per_block = block_params(model)
    header.update(load_seconds={"minidecoder": md_load, "transformers": hf_load}, transformers_error=hf_error,
                  block_params=per_block, blocks=model.num_layers)
    if cuda:
        header["resident_gb"] = torch.cuda.memory_allocated(device) / 2**30
        header["free_gb_at_start"] = torch.cuda.mem_get_info(device)[0] / 2**30
    record.save()
    print(f"# loaded: minidecoder {md_load:.1f} s, transformers "
          f"{'error: ' + hf_error if hf_error else f'{hf_load:.1f} s'}; {model.num_layers} blocks of "
          f"{per_block / 1e6:.1f}M parameters; {len(sentences)} sentences from {sts_path}", flush=True)
    need_hf = "transformers did not load: " + (hf_error or "")

    def fresh() -> None:  # before each configuration: minidecoder's model as if just loaded
        drop_captures(model)
        free_device_memory()

    # ---- fast paths and per-device choices -----------------------------------------------------------
    with record.section("fast_paths") as out:
        if out is not None:
            out.update(fast_paths_report(model))
            rows = [["model.fast_paths", out["fast_paths"]]]
            rows += [[f"fast.options.describe: {k}", v] for k, v in out["describe"].items()]
            rows += [["running.memory.token_budget (default batch, padded tokens)", out["token_budget"]],
                     ["free memory read by the default batching",
                      "-" if out["free_bytes"] is None else f"{out['free_bytes'] / 2**30:.1f} GiB"]]
            table("Fast paths and per-device choices (read from the model at run time)", ["what", "value"], rows)

    # ---- rates -----------------------------------------------------------------------------------------
    with record.section("rates") as out:
        if out is not None:
            out["matmul"] = matmul_rate(device, 8192 if cuda else (512 if args.shape == "tiny" else 2048))
            out["copy"] = copy_bandwidth(device, 2**30 if cuda else 2**26)
            table("Measured rates", ["what", "value", "timer"], [
                [f"bf16 matmul {out['matmul']['n']}^3", f"{out['matmul']['flops_per_s'] / 1e12:.3g} TFLOP/s",
                 out["matmul"]["timer"]],
                [f"copy of {out['copy']['bytes'] / 2**20:.0f} MiB (read + written)",
                 f"{out['copy']['bytes_per_s'] / 1e9:.3g} GB/s", out["copy"]["timer"]]])
    matmul = record.data.get("rates", {}).get("matmul", {}).get("flops_per_s")

    # ---- throughput --------------------------------------------------------------------------------------
    with record.section("throughput") as out:
        if out is not None:
            def with_graphs() -> torch.Tensor:  # buckets and CUDA graphs, opt-in (load(graphs=True))
                with fast_paths_overridden(model, graphs=True):
                    return minidecoder.embed(model, sentences, "prompteol")

            def with_paths(**changes) -> Callable[[], torch.Tensor]:
                def run() -> torch.Tensor:
                    with fast_paths_overridden(model, **changes):
                        return minidecoder.embed(model, sentences, "prompteol")
                return run

            configs: dict[str, Callable] = {
                "minidecoder default": lambda: minidecoder.embed(model, sentences, "prompteol"),
                "minidecoder fused=False (plain blocks)": with_paths(fused=False),
                "minidecoder graphs=True": with_graphs,
                "minidecoder prefix cache off": with_paths(prefix_cache=False)}
            if args.compile_row:  # torch.compile reaches no call through a KV cache (fast/compiled.py), so
                # without the prefix cache; its warm-up compiles for a minute or more
                configs["minidecoder compile=True, prefix cache off"] = with_paths(compiled=True, prefix_cache=False)
            at_batch: dict[str, Callable[[list[str], int], torch.Tensor]] = {
                "minidecoder": lambda texts, b: minidecoder.embed(model, texts, "prompteol", batch_size=b)}
            if hf is not None:
                at_batch["reference"] = lambda texts, b: reference_embed(hf, tok, texts, b)
                at_batch["transformers sorted"] = lambda texts, b: sorted_embed(hf, tok, texts, b)
            for who, embed_at in at_batch.items():
                for b in BATCHES:
                    configs[f"{who} batch {b}"] = lambda e=embed_at, b=b: e(sentences, b)
            if args.configs:  # a shortened run: the default and the rows named
                keep = re.compile(args.configs)
                configs = {name: fn for name, fn in configs.items() if name == "minidecoder default" or keep.search(name)}
            results = each_fresh(configs, args.repeat, device, record, "throughput", fresh)
            anchor = results["minidecoder default"].get("value")
            n = len(sentences)
            rows = []
            for name, r in results.items():
                vectors = r.pop("value", None)
                if "seconds" in r:
                    r["sentences_per_s"] = n / r["seconds"]
                if anchor is not None and vectors is not None and name != "minidecoder default":
                    r["min_cosine_vs_default"] = float(torch.nn.functional.cosine_similarity(
                        vectors.float(), anchor.float(), dim=-1).min())
                cosine = r.get("min_cosine_vs_default")
                rows.append([name, r.get("sentences_per_s"), r.get("seconds"),
                             " ".join(f"{s:.2f}" for s in r["runs_s"]), r.get("peak_gb"), r.get("above_resident_gb"),
                             None if cosine is None else f"{cosine:.4f}", r.get("error", "")])
            out["configs"] = results
            out["sentences"] = n
            note = ("peak GB: torch.cuda.max_memory_allocated during the run; above weights: that minus what was "
                    "allocated before it (both models' weights)" if cuda else f"peak GPU memory: {no_cuda}")
            if hf is None:
                note += f"\nreference and sorted transformers left out: {need_hf}"
            table(f"PromptEOL throughput, {n} STS-B test sentences (median of {args.repeat})",
                  ["configuration", "sentences/s", "s", "runs s", "peak GB", "above weights GB",
                   "min cos vs md default", "error"], rows, note)

    # ---- the floor --------------------------------------------------------------------------------------
    with record.section("floor", skip=None if matmul else "needs the matmul rate (rates skipped or failed)") as out:
        if out is not None:
            work = method_work(model, build_method("prompteol"), sentences)
            floor_s = work["flops"] / matmul
            out.update(work, matmul_flops_per_s=matmul, floor_seconds=floor_s,
                       floor_sentences_per_s=len(sentences) / floor_s,
                       prompt_tokens=work["token_blocks"] // max(model.num_layers, 1), block_params=per_block,
                       all_block_params=per_block * model.num_layers)
            configs = record.data.get("throughput", {}).get("configs", {})
            out["fraction_of_floor"] = {name: floor_s / r["seconds"] for name, r in configs.items() if "seconds" in r}
            rows = [["prompt tokens (real, every row's whole prompt)", out["prompt_tokens"]],
                    ["block parameters x blocks",
                     f"{per_block:,} x {model.num_layers} = {per_block * model.num_layers:.3g}"],
                    ["useful FLOPs (blocks' matmuls + attention 4 H D x causal pairs)", f"{work['flops']:.4g}"],
                    ["measured bf16 matmul rate", f"{matmul / 1e12:.3g} TFLOP/s"],
                    ["floor", f"{floor_s:.3g} s = {out['floor_sentences_per_s']:,.0f} sentences/s"]]
            rows += [[f"fraction of the floor: {name}", f"{100 * f:.0f}%"]
                     for name, f in out["fraction_of_floor"].items()]
            table("Matrix-work floor (PromptEOL, the sentences above)", ["what", "value"], rows)

    # ---- GPU busy ----------------------------------------------------------------------------------------
    with record.section("gpu_busy", skip=None if cuda else no_cuda) as out:
        if out is not None:
            texts = sentences  # every sentence: several batches at the default token budget, not one
            fresh()
            out["minidecoder default"] = gpu_busy(lambda: minidecoder.embed(model, texts, "prompteol"), device)
            if hf is not None:
                out["reference batch 128"] = gpu_busy(lambda: reference_embed(hf, tok, texts, 128), device)
            rows = [[name, len(texts), r["batches"], r["kernel_busy_s"], r["wall_s"],
                     f"{100 * r['busy_fraction']:.0f}%",
                     r["plain_wall_s"], f"{100 * r['busy_fraction_plain_wall']:.0f}%", r["aten_ops"],
                     r["kernel_launches"], r["graph_launches"], r["kernels"]]
                    for name, r in out.items() if isinstance(r, dict)]
            table(f"GPU busy (torch.profiler, {len(texts)} sentences, after a warm-up on them)",
                  ["configuration", "sentences", "batches", "kernel busy s", "profiled wall s", "busy", "plain wall s",
                   "busy (plain wall)", "aten ops", "kernel launches", "graph launches", "kernels"], rows,
                  "busy: the union of CUDA kernel intervals over the profiled wall time (the target's measure); "
                  "'plain wall' is the same call timed without the profiler.")
            print("\nTop host-side ops of minidecoder's profiled call (self CPU time):\n"
                  + out["minidecoder default"].get("top_cpu_ops", ""), flush=True)
            print("\nTop device-side ops of minidecoder's profiled call (self device time):\n"
                  + out["minidecoder default"].get("top_device_ops", ""), flush=True)

    # ---- sync -----------------------------------------------------------------------------------------------
    with record.section("sync", skip=None if cuda else no_cuda) as out:
        if out is not None:
            texts = sentences[:64]
            method = build_method("prompteol")

            def loop_only() -> torch.Tensor:
                with torch.inference_mode():
                    return method.embed_batch(model, texts, forward=executor(model.fast_paths))

            def whole_call() -> torch.Tensor:
                return minidecoder.embed(model, texts, "prompteol")

            for name, fn in (("block loop (method.embed_batch, one batch)", loop_only),
                             ("minidecoder.embed (one batch of 64)", whole_call)):
                out[name] = sync_check(fn, device)
            table('Host-device synchronisation: torch.cuda.set_sync_debug_mode("error") around one batch',
                  ["call", "result", "error", "raised at"],
                  [[name, "pass" if r["passed"] else "fail", r.get("error", ""), r.get("where", "")]
                   for name, r in out.items() if isinstance(r, dict)])

    # ---- methods ----------------------------------------------------------------------------------------------
    with record.section("methods") as out:
        if out is not None:
            texts = sentences[:args.method_limit]
            configs, works = {}, {}
            for label, name, options in METHODS:
                configs[label] = lambda name=name, options=options: minidecoder.embed(model, texts, name, **options)
                try:
                    works[label] = method_work(model, build_method(name, **options), texts)
                except Exception as error:
                    works[label] = {"error": error_text(error)}
            results = each_fresh(configs, args.repeat, device, record, "methods", fresh)
            for label, fn in configs.items():  # what each call ran, counted once more, untimed
                if "seconds" in results[label]:
                    works[label]["flops_as_run"] = work_as_run(model, fn)
            base_s = results["prompteol"].get("seconds")
            base_w = works["prompteol"].get("flops_as_run")
            rows = []
            for label, _, _ in METHODS:
                r = results[label]
                r.pop("value", None)
                r["work"] = works[label]
                if base_s and "seconds" in r:
                    r["time_ratio"] = r["seconds"] / base_s
                if base_w and "flops_as_run" in works[label]:  # judged: the work each call ran
                    r["work_ratio"] = works[label]["flops_as_run"] / base_w
                if "flops" in works[label] and "flops" in works["prompteol"]:
                    r["work_ratio_every_row"] = works[label]["flops"] / works["prompteol"]["flops"]
                if "time_ratio" in r and "work_ratio" in r:
                    r["time_over_work"] = r["time_ratio"] / r["work_ratio"]
                    r["met"] = r["time_over_work"] <= METHOD_SLACK
                rows.append([label, r.get("seconds"), r.get("time_ratio"), r.get("work_ratio"),
                             r.get("work_ratio_every_row"), r.get("time_over_work"),
                             ("met" if r["met"] else "not met") if "met" in r else "-",
                             "+".join(map(str, works[label].get("blocks_run", []))),
                             works[label].get("passes_per_batch"), r.get("peak_gb"),
                             r.get("error", "") or works[label].get("error", "")])
            out["configs"] = results
            out["sentences"] = len(texts)
            table(f"Every method at its default settings, {len(texts)} sentences (median of {args.repeat})",
                  ["method", "s", "time / PromptEOL", "work as run / PromptEOL's", "work, every row's template",
                   "time ratio / work ratio",
                   f"<= {METHOD_SLACK:.2f}", "blocks per pass", "passes", "peak GB", "error"], rows,
                  "work: real tokens x blocks run x 2 x block params + 4 H D x causal pairs. Judged: the work "
                  "each call ran, counted block call by block call (a prompt prefix that ran once per batch "
                  "counts once, as it ran); the next column counts every row's template in full (method.passes, "
                  "what the plain loop computes). A method faster than its work ratio is not held against it.")

    # ---- ReBA batch 2 vs 8 ------------------------------------------------------------------------------------
    with record.section("reba_batch") as out:
        if out is not None:
            # on a CPU, a smoke run: bfloat16 there without AVX-512 BF16 runs at a fraction of a GFLOP/s
            texts = long_texts(model.tokenizer, rows=8, tokens=320 if cuda else 64, path=sts_path)
            lengths = [len(model.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
            configs = {f"batch {b}": lambda b=b: minidecoder.embed(model, texts, "reba", batch_size=b) for b in (2, 8)}
            configs["default"] = lambda: minidecoder.embed(model, texts, "reba")
            results = each_fresh(configs, args.repeat, device, record, "reba", fresh)
            for r in results.values():
                r.pop("value", None)
                if "seconds" in r:
                    r["seconds_per_text"] = r["seconds"] / len(texts)
            out.update(configs=results, texts=len(texts), text_tokens=lengths)
            if "seconds" in results["batch 2"] and "seconds" in results["batch 8"]:
                out["batch2_over_batch8"] = results["batch 2"]["seconds"] / results["batch 8"]["seconds"]
            table(f"ReBA per text, {len(texts)} texts of {min(lengths, default=0)}-{max(lengths, default=0)} tokens "
                  f"(repeated twice inside ReBA)",
                  ["batch", "s", "s per text", "peak GB", "error"],
                  [[name, r.get("seconds"), r.get("seconds_per_text"), r.get("peak_gb"), r.get("error", "")]
                   for name, r in results.items()],
                  f"batch 2 / batch 8 per text: {fmt(out.get('batch2_over_batch8'))}")

    # ---- generation ------------------------------------------------------------------------------------------
    with record.section("generation") as out:
        if out is not None:
            out.update(generation(model, hf, tok, sentences, device, args.repeat, record,
                                  record.data.get("rates", {}).get("copy", {}).get("bytes_per_s"), fresh))
            table("Greedy generation, batch 1, 128 new tokens",
                  ["configuration", "tokens/s", "s", "new tokens", "decode steps made", "captures", "error"],
                  [[name, r.get("tokens_per_s"), r.get("seconds"), r.get("new_tokens"), r.get("decode_steps_made"),
                    r.get("captures"), r.get("error", "")] for name, r in out["configs"].items()],
                  f"weights read per token {out['weight_bytes'] / 1e9:.3g} GB; memory-bandwidth limit "
                  f"{fmt(out.get('bandwidth_limit_tokens_per_s'))} tokens/s (weight bytes / measured copy bandwidth); "
                  f"minidecoder and transformers agree on the first {out.get('same_prefix')} tokens")

    targets(record, cuda and args.shape == "llama2-7b", f"{device.type}, {args.shape}")
    record.save()


def git_commit() -> str | None:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return (commit + ("+changes" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def fast_paths_report(model) -> dict:
    """model.fast_paths as set, what each path means on the model's device (`fast.options.describe`), and
    the token budget the default batching fills (`running.memory.token_budget` of the free memory now)."""
    from minidecoder.fast.options import describe
    from minidecoder.running import memory

    free = memory.available_bytes(model.device)
    return {"fast_paths": repr(model.fast_paths), "describe": describe(model),
            "token_budget": memory.token_budget(model, free), "free_bytes": free}


def gpu_busy(fn: Callable[[], Any], device: torch.device) -> dict:
    """Kernel time over wall time for one call over several batches, from torch.profiler (after one warm-up
    call on the same inputs); `batches`: the batches minidecoder ran in the profiled call (0: not minidecoder)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from minidecoder.running import embedding

    fn()
    _, plain_wall, _ = measure(fn, device)
    sync(device)
    run_batch, batches = embedding._run_batch, []

    def counted(*args, **kwargs):
        batches.append(1)
        return run_batch(*args, **kwargs)

    embedding._run_batch = counted
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            fn()
            sync(device)
            wall = time.perf_counter() - start
    finally:
        embedding._run_batch = run_batch
    events = prof.events()
    intervals, kernels, copies = [], 0, 0.0
    for e in events:
        if getattr(e, "device_type", None) != DeviceType.CUDA:
            continue
        begin, end = e.time_range.start, e.time_range.end
        if e.name.startswith(("Memcpy", "Memset")):
            copies += (end - begin) / 1e6
            continue
        kernels += 1
        intervals.append((begin, end))
    busy, reach = 0.0, -math.inf  # union of kernel intervals (us): overlapping streams count once
    for begin, end in sorted(intervals):
        if end > reach:
            busy += end - max(begin, reach)
            reach = end
    busy /= 1e6
    measured_by = "union of CUDA kernel intervals"
    if not intervals:  # this torch lists no device events: fall back on the per-op device-time totals
        busy = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
                   for e in prof.key_averages()) / 1e6
        measured_by = "sum of self device time per op (no kernel events listed)"
    cpu_names = [e.name for e in events if getattr(e, "device_type", None) != DeviceType.CUDA]
    try:
        top = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    except Exception as error:
        top = f"(no table: {error_text(error)})"
    try:  # where the GPU's time goes: what is left to fuse or speed up
        top_device = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=20)
    except Exception as error:
        top_device = f"(no table: {error_text(error)})"
    return {"kernel_busy_s": busy, "wall_s": wall, "batches": len(batches), "busy_fraction": busy / wall,
            "plain_wall_s": plain_wall,
            "busy_fraction_plain_wall": busy / plain_wall, "memcpy_s": copies, "kernels": kernels,
            "measured_by": measured_by,
            "aten_ops": sum(n.startswith("aten::") for n in cpu_names),
            "kernel_launches": sum(n.startswith(("cudaLaunchKernel", "cuLaunchKernel")) for n in cpu_names),
            "graph_launches": sum(n.startswith("cudaGraphLaunch") for n in cpu_names),
            "top_cpu_ops": top, "top_device_ops": top_device}


def sync_check(fn: Callable[[], Any], device: torch.device) -> dict:
    fn()  # warm-up outside the mode (first-call set-up is not the question)
    sync(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        result = {"passed": True}
    except Exception as error:
        result = {"passed": False, "error": error_text(error), "where": where_raised(error)}
    finally:
        torch.cuda.set_sync_debug_mode(0)
        sync(device)
    return result


def generation(model, hf, tok, sentences: list[str], device: torch.device, repeat: int, record: Record,
               bandwidth: float | None, fresh: Callable[[], None]) -> dict:
    import minidecoder
    from minidecoder.fast.static_cache import kept_step
    ids = model.tokenizer.encode(prompts_of(sentences[:1])[0])
    steps: dict[int, int] = {}  # the decode steps the static configuration used -> their captures (1 step, made
    #                             and captured once in its warm-up, is the aim)

    def static_generate() -> list[int]:
        new = minidecoder.generate(model, ids, 128, stop_at_eos=False, static=True)
        step = kept_step(model)
        steps[id(step)] = step.captures
        return new

    # the default settings (what the target is read from: on a GPU the static cache with its captured decode
    # step, kept across calls, so the timed runs replay the warm-up's capture) and the dynamic cache
    configs: dict[str, Callable] = {
        "minidecoder.generate": lambda: minidecoder.generate(model, ids, 128, stop_at_eos=False),
        "minidecoder.generate static=True": static_generate,
        "minidecoder.generate static=False (dynamic cache)": lambda: minidecoder.generate(
            model, ids, 128, stop_at_eos=False, static=False)}
    if hf is not None:
        prompt = torch.tensor([ids], device=hf.device)

        def hf_generate(n: int) -> list[int]:
            with torch.no_grad():
                out = hf.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
            return out[0, prompt.shape[1]:].tolist()

        configs["transformers generate(do_sample=False)"] = lambda: hf_generate(128)
    results = each_fresh(configs, repeat, device, record, "generation", fresh)
    results["minidecoder.generate static=True"].update(decode_steps_made=len(steps), captures=sum(steps.values()))
    outputs = {}
    for r_name, r in results.items():
        tokens = r.pop("value", None)
        if tokens is not None:
            outputs[r_name] = tokens
            r["new_tokens"] = len(tokens)
            r["tokens_per_s"] = len(tokens) / r["seconds"]
    # One token's forward reads every block weight, the final norm and the output matrix once.
    weight_bytes = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                       if "embed_tokens" not in name or model.config.tie_word_embeddings)
    out = {"configs": results, "prompt_tokens": len(ids), "weight_bytes": weight_bytes}
    if bandwidth:
        out["bandwidth_limit_tokens_per_s"] = bandwidth / weight_bytes
    theirs = outputs.get("transformers generate(do_sample=False)")
    if theirs is not None and "minidecoder.generate" in outputs:
        ours = outputs["minidecoder.generate"]
        differ = [i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y]
        out["same_prefix"] = differ[0] if differ else min(len(ours), len(theirs))
    return out


def targets(record: Record, applies: bool, setting: str) -> None:
    """The targets against this run's numbers."""
    data = record.data
    rows, out = [], []

    def add(name: str, value: str, met: bool | None, why_missing: str = "") -> None:
        status = "met" if met else ("not measured" + (f": {why_missing}" if why_missing else "") if met is None
                                    else "not met")
        out.append({"target": name, "value": value, "met": met, "status": status})
        rows.append([name, value, status])

    md = data.get("throughput", {}).get("configs", {}).get("minidecoder default", {})
    floor = data.get("floor", {})
    sps = md.get("sentences_per_s")
    floor_sps = floor.get("floor_sentences_per_s")
    refs = [r["sentences_per_s"] for n, r in data.get("throughput", {}).get("configs", {}).items()
            if n.startswith("reference") and "sentences_per_s" in r]
    if sps is not None:
        value = f"{sps:,.0f} sentences/s"
        if floor_sps:
            value += (f" = {100 * sps / floor_sps:.0f}% of the floor ({floor_sps:,.0f}); {TARGET_SPS:,} is "
                      f"{100 * TARGET_SPS / floor_sps:.0f}% of it")
        if refs:
            value += f"; {sps / max(refs):.2f}x the reference's best batch"
        value += f"; {max(TARGET_SPS - sps, 0):,.0f} sentences/s to go"
        add(f"PromptEOL default settings >= {TARGET_SPS:,} sentences/s", value, sps >= TARGET_SPS)
    else:
        add(f"PromptEOL default settings >= {TARGET_SPS:,} sentences/s", "-", None, "throughput")
    methods = data.get("methods", {}).get("configs", {})
    judged = {n: r for n, r in methods.items() if "met" in r}
    if judged:
        missed = [f"{n} {r['time_over_work']:.2f}" for n, r in judged.items() if not r["met"]]
        unjudged = [n for n in methods if n not in judged]
        add(f"every method's time ratio <= {METHOD_SLACK:.2f} x its work ratio",
            ("over: " + ", ".join(missed) if missed else f"all {len(judged)} within")
            + (f"; not judged: {', '.join(unjudged)}" if unjudged else ""), not missed and not unjudged)
    else:
        add(f"every method's time ratio <= {METHOD_SLACK:.2f} x its work ratio", "-", None, "methods")
    ratio = data.get("reba_batch", {}).get("batch2_over_batch8")
    add(f"ReBA per text at batch 2 <= {REBA_SLACK:.2f} x batch 8", fmt(ratio) if ratio else "-",
        None if ratio is None else ratio <= REBA_SLACK, "reba_batch")
    gen = data.get("generation", {}).get("configs", {}).get("minidecoder.generate", {}).get("tokens_per_s")
    limit = data.get("generation", {}).get("bandwidth_limit_tokens_per_s")
    add(f"greedy generation, batch 1 >= {TARGET_TOKENS} tokens/s",
        "-" if gen is None else f"{gen:.1f} tokens/s" + (f" ({100 * gen / limit:.0f}% of the bandwidth limit "
                                                         f"{limit:.0f})" if limit else ""),
        None if gen is None else gen >= TARGET_TOKENS, "generation")
    busy = data.get("gpu_busy", {}).get("minidecoder default", {}).get("busy_fraction")
    add(f"GPU busy >= {100 * TARGET_BUSY:.0f}% (PromptEOL default)", "-" if busy is None else f"{100 * busy:.0f}%",
        None if busy is None else busy >= TARGET_BUSY, data.get("gpu_busy", {}).get("skipped", "gpu_busy"))
    checks = {n: r for n, r in data.get("sync", {}).items() if isinstance(r, dict)}
    add('no host-device sync inside a batch (set_sync_debug_mode("error"))',
        "; ".join(f"{n}: {'pass' if r['passed'] else 'fail'}" for n, r in checks.items()) or "-",
        None if not checks else all(r["passed"] for r in checks.values()), data.get("sync", {}).get("skipped", "sync"))
    data["targets"] = {"applies": applies, "setting": setting, "rows": out}
    note = ("" if applies else f"These targets are set for an H100 and the llama2-7b shape; this run is {setting}, "
            "so the absolute ones say nothing here.")
    table("Targets", ["target", "this run", "status"], rows, note)


if __name__ == "__main__":
    sys.exit(main())
