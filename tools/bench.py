"""Speed and memory of every embedding method, against the reference approach, in one run.

    python tools/bench.py --limit 256 --repeat 2                       # the table in docs/benchmarks.md
    python tools/bench.py --limit 64 --methods prompteol,tp --dtype float32
    python tools/bench.py --case docs --docs 1000 --repeat 1           # long documents (SciFact's corpus)
    python tools/bench.py --device cuda                                # the GPU benchmark: tools/bench_gpu.py

Each configuration runs in a fresh subprocess (so peak memory is its own) on STS-B test sentences in
dataset order (s1, s2 of the first limit/2 pairs), batch 32, after a one-batch warm-up:

    ref:prompteol     the reference approach: transformers AutoModelForCausalLM, padded batches in
                      dataset order (left padding), output_hidden_states=True, hidden_states[-1][:, -1]
                      (logits computed, as the reference scripts' CausalLM did); `ref:tp` adds TP by
                      forward pre-hooks on the decoder layers
    md:<method>       minidecoder.embed (token-length buckets, early exit, shared-prefix cache)
    md:prompteol!nocache   the same with the prefix cache off (the plain loop; `!nocache+pack+compile` too)
    md:*+compile      the same with `minidecoder.load(..., compile=True)` (blocks fused by torch.compile);
                      compiling happens in the warm-up, whose seconds are reported apart
    md:*+pack         the same with `minidecoder.load(..., pack_weights=True)` (block weights reordered
                      once into oneDNN's layout, minidecoder.fast.packed); `+pack+compile` both
    mem:*             peak memory at T = 512 (ReBA-2 of ~256-token texts, 4 rows): a plain forward of
                      the repeated input, ReBA (eager fusion), ReBA blocked, the reference approach
                      (transformers eager with every attention matrix returned, fused afterwards)

The long-document case (`--case docs`) embeds the first --docs SciFact documents (corpus order, a
document's title and text joined by a space, as BEIR does), each cut to its first 512 tokens as HTP did,
with every method at its default settings and the default batching (the token budget):

    docs:ref          the reference approach above (PromptEOL, batches of 32 in corpus order), on the same
                      512-token cuts (made with transformers' tokenizer)
    docs:<method>     minidecoder.embed(..., truncate=512): prompteol, mean (Vanilla Mean), htp, echo
    docmem:*          peak memory of ReBA-2 (the whole method, its defaults; `!fold` its fused-attention pass
                      alone) on four documents of 512 tokens, repeated (T ~ 2 x 512), against a plain
                      forward of the same repeated input

Reported per configuration (median of --repeat runs, configurations interleaved): sentences/s,
seconds, Spearman x100 on the pairs embedded (a check that methods agree, and the bfloat16 change),
peak RSS during the run above the RSS before it (sampled every 2 ms with psutil) and the process's
maxrss, the blocks that ran (early exit, CP's truncated auxiliary pass), and the fraction of the
machine's matmul peak (a 2048x2048 matmul measured in this run, per dtype) reached on useful work:

    useful FLOPs = sum over block calls of 2 * params_per_block * real tokens + 4 * H * D * causal pairs

counting only non-padding tokens that were computed (a cached prefix counts once per batch; the
`effective` column counts it once per row, as the plain loop computes it). Logits are never useful.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (DOCUMENT_TOKENS, PROMPTEOL, counting_context, cut_to_tokens,  # noqa: E402
                          long_texts, matmul_peak, reference_model, scifact_documents, sts_sentences, useful_flops)

BATCH = 32

# name -> (kind, dtype, method, options). Options put TP/HTP/CP at PromptEOL's depth (-1) so that the
# ratios compare equal work; their reference layers are Llama-2-7B's, not SmolLM2's.
CONFIGS: dict[str, tuple[str, str, str, dict]] = {
    "ref:prompteol": ("ref", "float32", "prompteol", {}),
    "ref:prompteol@bf16": ("ref", "bfloat16", "prompteol", {}),
    "ref:tp": ("ref", "float32", "tp", {}),
    "md:prompteol": ("md", "float32", "prompteol", {}),
    "md:prompteol!nocache": ("md", "float32", "prompteol", {}),
    "md:prompteol@bf16": ("md", "bfloat16", "prompteol", {}),
    "md:prompteol+compile": ("md", "float32", "prompteol", {}),
    "md:prompteol@bf16+compile": ("md", "bfloat16", "prompteol", {}),
    "md:prompteol+pack": ("md", "float32", "prompteol", {}),
    "md:prompteol@bf16+pack": ("md", "bfloat16", "prompteol", {}),
    "md:prompteol+pack+compile": ("md", "float32", "prompteol", {}),
    "md:prompteol!nocache+pack+compile": ("md", "float32", "prompteol", {}),
    "md:prompteol@bf16+pack+compile": ("md", "bfloat16", "prompteol", {}),
    "md:prompteol@layer15": ("md", "float32", "prompteol", {"layer": 15}),
    "md:pretended_cot": ("md", "float32", "pretended_cot", {}),
    "md:knowledge": ("md", "float32", "knowledge", {}),
    "md:metaeol": ("md", "float32", "metaeol", {}),
    "md:echo": ("md", "float32", "echo", {}),
    "md:mean": ("md", "float32", "mean", {}),
    "md:tp": ("md", "float32", "tp", {"layer": -1}),
    # HTP in PromptEOL's template, so that its extra tokens are its own placeholders (one <B-PST> and
    # one <PST> per single-sentence text); `!eos` adds the </s> of HTP's document template too.
    "md:htp": ("md", "float32", "htp", {"layer": -1, "template": PROMPTEOL, "append_eos": False}),
    "md:htp!eos": ("md", "float32", "htp", {"layer": -1, "template": PROMPTEOL}),
    "md:cp": ("md", "float32", "cp", {"layer": -1, "steer_layer": 4}),
    # TP and CP on the other prompts (Table 1's rows): each against its own prompt, so the ratio's floor is
    # the work ratio printed beside it (the placeholder's one token; CP's auxiliary prefix pass)
    **{f"md:{prompt}+{m}": ("md", "float32", m, {"prompt": prompt, "layer": -1, **extra})
       for prompt in ("pretended_cot", "knowledge", "metaeol")
       for m, extra in (("tp", {}), ("cp", {"steer_layer": 4}))},
    "md:reba": ("md", "float32", "reba", {}),  # eager fusion (every block's whole pattern)
    "md:reba!blocked": ("md", "float32", "reba", {}),  # blocked fusion (a head at a time)
    "mem:plain512": ("mem", "float32", "plain", {}),
    "mem:reba512": ("mem", "float32", "reba", {}),
    "mem:reba512!blocked": ("mem", "float32", "reba", {}),
    "mem:ref512": ("mem", "float32", "ref", {}),
    # the long-document case (--case docs)
    "docs:ref": ("ref", "float32", "prompteol", {}),
    **{f"docs:{m}": ("md", "float32", m, {}) for m in ("prompteol", "mean", "htp", "echo")},
    "docmem:plain": ("mem", "float32", "plain", {}),
    "docmem:reba": ("mem", "float32", "reba", {}),
    "docmem:reba!fold": ("mem", "float32", "reba", {}),  # the fused-attention pass alone (no pooling)
}
CASES = {"sts": [n for n in CONFIGS if not n.startswith("doc")],
         # the memory rows first: they are the shortest, so a run cut off at a time limit still has them
         "docs": sorted((n for n in CONFIGS if n.startswith("doc")), key=lambda n: not n.startswith("docmem:"))}


# ---- measurements shared by the workers ------------------------------------------------------------
def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class PeakRss:
    """Peak resident memory of this process while the block runs (a 2 ms sampling thread)."""

    def __enter__(self) -> "PeakRss":
        import psutil
        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.start) / 2**20


class FlopCounter:
    """Counts real (non-padding) tokens and causal query-key pairs per block call of a minidecoder model."""

    def __init__(self, model) -> None:
        self.model = model
        self.calls = [0] * model.num_layers
        self.tokens = 0  # block x real new tokens
        self.pairs = 0  # block x causal (query, key) pairs between real tokens
        counting_context(model, "bench")
        for i, block in enumerate(model.layers):
            block.register_forward_pre_hook(self._hook(i))

    def _hook(self, i: int):
        def hook(module, args):
            tokens, pairs = args[1].bench
            self.calls[i] += 1
            self.tokens += tokens
            self.pairs += pairs
        return hook

    def flops(self) -> float:
        return useful_flops(self.model, self.tokens, self.pairs)


def runs_of(calls: list[int]) -> str:
    """[2,2,1,1,0] -> '0-1x2 2-3x1 4x0': which blocks ran how often."""
    out, start = [], 0
    for i in range(1, len(calls) + 1):
        if i == len(calls) or calls[i] != calls[start]:
            out.append(f"{start}-{i - 1}x{calls[start]}" if i - 1 > start else f"{start}x{calls[start]}")
            start = i
    return " ".join(out)


def effective_flops(model, method: str, options: dict, sentences: list[str]) -> float:
    """Useful FLOPs with every row's template counted in full (what the plain loop computes)."""
    from minidecoder.methods.inputs import encode_one
    from minidecoder.methods.layers import resolve_output_layer
    from minidecoder.methods.prompts import TEMPLATES
    from minidecoder.methods.text import senteval_sentence
    if method not in TEMPLATES:
        return float("nan")
    depth = resolve_output_layer(options.get("layer", -1 if method == "prompteol" else -2), model.num_layers)
    depth = min(depth, model.num_layers)
    tokens = pairs = 0
    for text in sentences:
        n = len(encode_one(model.tokenizer, TEMPLATES[method], senteval_sentence(text))[0])
        tokens, pairs = tokens + n, pairs + n * (n + 1) // 2
    return float(useful_flops(model, depth * tokens, depth * pairs))


# ---- workers (one configuration per fresh process) ----------------------------------------------------
def worker_md(name: str, folder: str, limit: int) -> dict:
    import minidecoder
    from minidecoder.fast.options import fast_paths_overridden

    kind, dtype, method, options = CONFIGS[name]
    sentences, gold = texts_of(name, limit)
    documents = name.startswith("docs:")
    if documents:  # cut as HTP cut them; the default batching (the token budget), as a user runs it
        options = {**options, "truncate": DOCUMENT_TOKENS}
    model = minidecoder.load(folder, dtype=dtype, progress=False, compile="+compile" in name,
                             pack_weights="+pack" in name)
    rss_loaded = maxrss_mb()
    # The switches cover the warm-up too: a compiled model must compile the very paths the timing runs.
    switches = fast_path_switches(name)
    with fast_paths_overridden(model, **switches):
        start = time.perf_counter()
        if documents:  # two documents of hundreds of tokens already run every kernel the timing runs
            minidecoder.embed(model, sentences[:2], method, batch_size=2, **options)
        else:
            minidecoder.embed(model, sentences[:8], method, batch_size=8, **options)  # warm-up (and compile)
            minidecoder.embed(model, sentences[8:24], method, batch_size=16, **options)  # a second shape
        warmup = time.perf_counter() - start
        counter = FlopCounter(model)
        batching = {} if documents else {"batch_size": BATCH}
        with PeakRss() as rss:
            start = time.perf_counter()
            vectors = minidecoder.embed(model, sentences, method, **batching, **options)
            seconds = time.perf_counter() - start
    return dict(seconds=seconds, warmup_seconds=warmup, n=len(sentences), spearman=spearman_x100(vectors, gold),
                flops=counter.flops(), tokens=counter.tokens // max(sum(c > 0 for c in counter.calls), 1),
                effective_flops=float("nan") if documents else effective_flops(model, method, options, sentences),
                blocks=runs_of(counter.calls), peak_delta_mb=rss.delta_mb, maxrss_mb=maxrss_mb(),
                loaded_mb=rss_loaded, dtype=dtype)


def texts_of(name: str, limit: int) -> tuple[list[str], list[float] | None]:
    """A configuration's inputs: STS-B test sentences and their gold scores, or `limit` SciFact documents
    (docs:*, no scores)."""
    return (scifact_documents(limit), None) if name.startswith("docs:") else sts_sentences(limit)


def spearman_x100(vectors: torch.Tensor, gold: list[float] | None) -> float:
    from minidecoder.evaluation.bootstrap import spearman
    if gold is None:
        return float("nan")
    v = torch.nn.functional.normalize(vectors.float(), dim=-1)
    cos = (v[0::2] * v[1::2]).sum(-1).tolist()
    return 100 * spearman(cos, gold[:len(cos)])


def fast_path_switches(name: str) -> dict:
    """The FastPaths changes a configuration's name asks for (`!nocache`, `!blocked`, ReBA's eager); the
    long-document case keeps every default."""
    switches = {}
    if "!nocache" in name:
        switches["prefix_cache"] = False
    if "reba" in name and not name.startswith("doc"):
        switches["blocked_fusion_from"] = 0 if "!blocked" in name else None
    return switches


def worker_ref(name: str, folder: str, limit: int) -> dict:
    """The reference approach, written as the reference scripts are (kongds/scaling_sentemb batcher)."""
    from minidecoder.methods.text import senteval_sentence

    kind, dtype, method, options = CONFIGS[name]
    sentences, gold = texts_of(name, limit)
    tok, model = reference_model(folder, dtype)
    if name.startswith("docs:"):
        sentences = cut_to_tokens(tok, sentences)  # the cut minidecoder's truncate=512 makes, by this tokenizer
    rss_loaded = maxrss_mb()
    L, E = model.config.num_hidden_layers, model.config.hidden_size
    template = PROMPTEOL
    if method == "tp":  # TP by forward pre-hooks: <PST> row <- last row before blocks 1..6 (docs/spec.md section 4)
        tok.add_tokens(["<PST>"])
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        pst = tok.convert_tokens_to_ids("<PST>")
        with torch.no_grad():
            model.get_input_embeddings().weight[pst] = torch.randn(E, generator=torch.Generator().manual_seed(0))
        template = 'This sentence : <PST> "{text}" means in one word:"'
        state = {}

        def pre_hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            h = h.clone()
            rows = torch.arange(h.shape[0])
            h[rows, state["pst"]] = h[:, -1]
            return ((h,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

        for i in range(1, 7):
            model.model.layers[i].register_forward_pre_hook(pre_hook, with_kwargs=True)
    real_tokens = 0

    def run(texts: list[str]) -> torch.Tensor:
        nonlocal real_tokens
        prompts = [template.replace("{text}", senteval_sentence(t)) for t in texts]
        inputs = tok(prompts, return_tensors="pt", padding=True)
        real_tokens += int(inputs["attention_mask"].sum())
        if method == "tp":
            state["pst"] = (inputs["input_ids"] == pst).int().argmax(dim=1)
        with torch.no_grad():
            out = model(**inputs, output_hidden_states=True, return_dict=True)
        return out.hidden_states[-1][:, -1, :].float()

    run(sentences[:2] if name.startswith("docs:") else sentences[:8])  # warm-up
    real_tokens = 0
    with PeakRss() as rss:
        start = time.perf_counter()
        vectors = torch.cat([run(sentences[i:i + BATCH]) for i in range(0, len(sentences), BATCH)])
        seconds = time.perf_counter() - start
    per_block = sum(p.numel() for p in model.model.layers[0].parameters())
    flops = L * 2 * per_block * real_tokens  # attention term left out here (small at these lengths)
    return dict(seconds=seconds, n=len(sentences), spearman=spearman_x100(vectors, gold), flops=flops,
                effective_flops=flops, tokens=real_tokens, blocks=f"0-{L - 1}x{-(-len(sentences) // BATCH)} +logits",
                peak_delta_mb=rss.delta_mb, maxrss_mb=maxrss_mb(), loaded_mb=rss_loaded, dtype=dtype)


def worker_mem(name: str, folder: str, limit: int) -> dict:
    """Peak memory of ReBA-2 at T ~ 512 against a plain forward of the same repeated input."""
    import minidecoder
    from minidecoder.fast.options import fast_paths_overridden
    from minidecoder.methods.loop import hidden_at
    from minidecoder.fast.forward import executor
    from minidecoder.methods.reba import encode_repeated, fused_attention

    kind, dtype, what, _ = CONFIGS[name]
    if what == "ref":
        tok, model = reference_model(folder, dtype, attn="eager")
        texts = long_texts(tok)
        inputs = tok([t + t for t in texts], return_tensors="pt", padding=True)
        with torch.no_grad():
            model(**tok(texts[:1], return_tensors="pt"))  # warm-up: page in every weight before measuring
        rss_loaded = maxrss_mb()
        with torch.no_grad(), PeakRss() as rss:
            start = time.perf_counter()
            out = model(**inputs, output_hidden_states=True, output_attentions=True)  # every matrix kept
            A = torch.zeros(out.attentions[0].shape[0], *out.attentions[0].shape[2:])  # (B, T, T)
            for P in out.attentions:  # folded one layer at a time, as gently as the returned tuple allows
                A = torch.maximum(A, ((P + P.transpose(-1, -2)) / 2).amax(dim=1).float())
            seconds = time.perf_counter() - start
        T = inputs["input_ids"].shape[1]
    else:
        model = minidecoder.load(folder, dtype=dtype, progress=False)
        texts = long_documents(model.tokenizer) if name.startswith("docmem:") else long_texts(model.tokenizer)
        batch = encode_repeated(model.tokenizer, texts, 2)
        T = batch.input_ids.shape[1]
        with torch.inference_mode():  # warm-up: weights are memory-mapped, page them in before measuring
            hidden_at(model, encode_repeated(model.tokenizer, texts[:1], 1), -1)
        rss_loaded = maxrss_mb()
        with torch.inference_mode(), fast_paths_overridden(model, **fast_path_switches(name)), PeakRss() as rss:
            start = time.perf_counter()
            if what == "plain":
                hidden_at(model, batch, -1)
            elif name == "docmem:reba":  # the whole method at its defaults, as a user runs it
                minidecoder.embed(model, texts, "reba", batch_size=len(texts))
            else:
                fused_attention(model, batch, model.num_layers, executor(model.fast_paths))
            seconds = time.perf_counter() - start
    return dict(seconds=seconds, n=len(texts), T=T, peak_delta_mb=rss.delta_mb, maxrss_mb=maxrss_mb(),
                loaded_mb=rss_loaded, dtype=dtype)


def long_documents(tokenizer, rows: int = 4) -> list[str]:
    """The first `rows` SciFact documents of at least DOCUMENT_TOKENS tokens, cut to that many."""
    from minidecoder.running.embedding import truncate_texts
    docs = [d for d in scifact_documents(400) if len(tokenizer.encode(d)) >= DOCUMENT_TOKENS][:rows]
    return truncate_texts(tokenizer, docs, DOCUMENT_TOKENS, None)


# ---- driver -------------------------------------------------------------------------------------------
def run_config(name: str, folder: str, limit: int, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--model", folder, "--limit", str(limit)]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        return {"error": (result.stderr or result.stdout).strip().splitlines()[-1][:200]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict]) -> dict:
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    out = dict(good[0])
    for key in ("seconds", "peak_delta_mb", "maxrss_mb", "spearman"):
        if key in out:
            out[key] = statistics.median(r[key] for r in good)
    out["runs_seconds"] = [round(r["seconds"], 2) for r in good]
    return out


def main(argv: list[str] | None = None) -> None:
    # `--device cuda` is a different benchmark (a 7B-shaped model on one GPU, tools/bench_gpu.py): hand
    # the whole command line over before this parser sees options only that one knows.
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--device", default="cpu")
    if pre.parse_known_args(argv)[0].device.startswith("cuda"):
        from bench_gpu import main as gpu_main
        sys.exit(gpu_main(argv))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu"], help="cpu: this benchmark (default); cuda: "
                        "tools/bench_gpu.py's GPU benchmark, which takes its own options (--device cuda --help)")
    parser.add_argument("--case", default="sts", choices=sorted(CASES), help="sts: STS-B sentences, every "
                        "method and fast path (default); docs: long documents (SciFact's corpus, 512 tokens)")
    parser.add_argument("--limit", type=int, default=256, help="STS-B test sentences (s1, s2 of limit/2 pairs)")
    parser.add_argument("--docs", type=int, default=1000, help="--case docs: the first N SciFact documents")
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration; the median is kept")
    parser.add_argument("--methods", default=None, help="comma-separated configuration names or method names "
                        "(default: every configuration of --case)")
    parser.add_argument("--dtype", default=None, help="keep only configurations of this dtype (float32, bfloat16)")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the registry's smollm2-135m-instruct)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None, help="also write every run's numbers here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.model is None:
        from minidecoder.sources.registry import ensure_model
        args.model = str(ensure_model("smollm2-135m-instruct", progress=False))
    if args.worker:
        kind = CONFIGS[args.worker][0]
        worker = {"md": worker_md, "ref": worker_ref, "mem": worker_mem}[kind]
        print(json.dumps(worker(args.worker, args.model, args.limit)))
        return

    names = CASES[args.case]
    if args.methods:
        wanted = args.methods.split(",")
        names = [n for n in names if n in wanted or CONFIGS[n][2] in wanted or n.split(":")[1].split("@")[0].split("!")[0] in wanted]
    if args.dtype:
        names = [n for n in names if CONFIGS[n][1] == args.dtype or n.startswith("mem:")]
    # the matmul peak of each dtype the chosen configurations run, and no other: a bfloat16 matmul on a CPU
    # without AVX-512 BF16 runs at a fraction of a GFLOP/s, over a minute a measurement
    dtypes = sorted({CONFIGS[name][1] for name in names})
    peaks = {dtype: matmul_peak(getattr(torch, dtype)) for dtype in dtypes}
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.repeat):  # interleaved, so that a burst of load hits every configuration alike
        for name in names:
            limit = args.docs if name.startswith("doc") else args.limit
            runs[name].append(run_config(name, args.model, limit, args.threads))
            print(f"  run {r + 1}/{args.repeat} {name}: {runs[name][-1].get('seconds', runs[name][-1].get('error'))}",
                  file=sys.stderr, flush=True)
            if args.json:  # every finished run kept, so a run cut off at a time limit leaves what it measured
                args.json.write_text(json.dumps({"partial": True, "runs": runs}, indent=1))
    peaks_after = {dtype: matmul_peak(getattr(torch, dtype)) for dtype in dtypes}
    results = {n: median_of(runs[n]) for n in names}
    header = dict(date=datetime.datetime.now().isoformat(timespec="minutes"), machine=platform.processor() or
                  platform.machine(), cpus=os.cpu_count(), threads=args.threads, torch=torch.__version__,
                  model=args.model, case=args.case, limit=args.docs if args.case == "docs" else args.limit,
                  repeat=args.repeat, loadavg_before=load_before,
                  loadavg_after=os.getloadavg(),
                  matmul_gflops={k: [round(peaks[k], 1), round(peaks_after[k], 1)] for k in peaks},
                  command="python tools/bench.py " + " ".join(sys.argv[1:] if argv is None else argv))
    report = report_docs if args.case == "docs" else report_sts
    print(report(header, results, {k: max(peaks[k], peaks_after[k]) for k in peaks}))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results, "runs": runs}, indent=1))


def report_header(header: dict) -> list[str]:
    return [f"# {header['command']}", f"# {header['date']}  {header['cpus']} CPUs ({header['machine']}), "
            f"{header['threads']} threads, torch {header['torch']}, load avg before {header['loadavg_before'][0]:.1f} "
            f"after {header['loadavg_after'][0]:.1f}",
            f"# matmul 2048^2 GFLOP/s (start, end of run): {header['matmul_gflops']}", ""]


def report_docs(header: dict, results: dict, peaks: dict) -> str:
    """The long-document table: documents/s, peak memory, and each method's time against the reference
    approach and Vanilla Mean; then ReBA-2's peak memory against a plain forward's, with the targets."""
    lines = report_header(header)
    lines.append("| configuration | docs/s | s (runs) | tokens / doc | useful GFLOP/s | % matmul peak | peak RSS +MB | "
                 "maxrss MB | time / docs:ref | time / docs:mean |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    good = {n: r for n, r in results.items() if "error" not in r}
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error']} |||||||||")
        elif name.startswith("docmem:"):
            lines.append(f"| {name} (B={r['n']}, T={r['T']}) | | {r['seconds']:.2f} {r['runs_seconds']} | | | | "
                         f"{r['peak_delta_mb']:.0f} | {r['maxrss_mb']:.0f} | | |")
        else:
            rate = r["flops"] / r["seconds"] / 1e9
            over = [f"{r['seconds'] / good[b]['seconds']:.2f}" if b in good else "" for b in ("docs:ref", "docs:mean")]
            lines.append(f"| {name} | {r['n'] / r['seconds']:.2f} | {r['seconds']:.1f} {r['runs_seconds']} | "
                         f"{r['tokens'] / r['n']:.0f} | {rate:.1f} | {100 * rate / peaks[r['dtype']]:.0f}% | "
                         f"{r['peak_delta_mb']:.0f} | {r['maxrss_mb']:.0f} | {over[0]} | {over[1]} |")
    lines += ["", "Targets (time of A / time of B):"]

    def target(a: str, b: str, key: str, limit: float, what: str) -> None:
        if a in good and b in good:
            value = good[a][key] / max(good[b][key], 1e-9)
            met = "met" if value <= limit else "NOT met"
            lines.append(f"- {a} / {b} {what}: {value:.2f} (target <= {limit}: {met})")

    target("docs:prompteol", "docs:ref", "seconds", 0.67, "time (>= 1.5x the reference's speed)")
    target("docs:mean", "docs:ref", "seconds", 0.67, "time (>= 1.5x the reference's speed)")
    target("docs:htp", "docs:mean", "seconds", 1.2, "time (the paper's 1.08-1.20x)")
    target("docs:echo", "docs:mean", "seconds", 3.5, "time (the paper's 2.85-3.45x)")
    target("docmem:reba", "docmem:plain", "peak_delta_mb", 1.5, "peak RSS above load (ReBA-2 at 2 x 512 tokens)")
    if "docmem:reba!fold" in good and "docmem:plain" in good:
        fold = good["docmem:reba!fold"]["peak_delta_mb"] / max(good["docmem:plain"]["peak_delta_mb"], 1e-9)
        lines.append(f"- docmem:reba!fold / docmem:plain peak RSS above load (the fused-attention pass alone): {fold:.2f}")
    return "\n".join(lines)


def report_sts(header: dict, results: dict, peaks: dict) -> str:
    lines = report_header(header)
    lines.append("| configuration | sent/s | s (runs) | STS-B x100 | useful GFLOP/s | % matmul peak | "
                 "% effective | peak RSS +MB | maxrss MB | blocks run |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error']} |||||||||")
            continue
        if name.startswith("mem:"):
            lines.append(f"| {name} (B={r['n']}, T={r['T']}) | | {r['seconds']:.2f} {r['runs_seconds']} | | | | | "
                         f"{r['peak_delta_mb']:.0f} | {r['maxrss_mb']:.0f} | |")
            continue
        rate = r["flops"] / r["seconds"] / 1e9
        eff = r["effective_flops"] / r["seconds"] / 1e9
        peak = peaks[r["dtype"]]
        eff_txt = "" if eff != eff else f"{100 * eff / peak:.0f}%"
        lines.append(f"| {name} | {r['n'] / r['seconds']:.1f} | {r['seconds']:.2f} {r['runs_seconds']} | "
                     f"{r['spearman']:.2f} | {rate:.1f} | {100 * rate / peak:.0f}% | {eff_txt} | "
                     f"{r['peak_delta_mb']:.0f} | {r['maxrss_mb']:.0f} | {r['blocks']} |")
    lines += ["", "Ratios (time of A / time of B; < 1 means A is faster):"]

    def ratio(a: str, b: str, target: str) -> None:
        if a in results and b in results and "error" not in results[a] and "error" not in results[b]:
            value = results[a]["seconds"] / results[b]["seconds"]
            work = ""
            if "flops" in results[a] and "flops" in results[b] and not a.startswith("ref:") and not b.startswith("ref:"):
                # the floor for a time ratio: how much more matrix work A does (its extra tokens)
                work = f"; work ratio (useful FLOPs) {results[a]['flops'] / results[b]['flops']:.2f}"
            lines.append(f"- {a} / {b}: {value:.2f}  ({target}{work})")

    ratio("md:prompteol", "ref:prompteol", "speed-up = 1/ratio; target >= 1.5x, i.e. ratio <= 0.67")
    ratio("md:prompteol!nocache", "ref:prompteol", "without the prefix cache")
    ratio("md:prompteol@bf16", "ref:prompteol", "bf16 vs fp32 reference; target >= 3.5x, i.e. ratio <= 0.29")
    ratio("md:prompteol@bf16", "md:prompteol", "bf16 vs fp32, both minidecoder")
    ratio("ref:prompteol@bf16", "ref:prompteol", "reference bf16 vs fp32")
    ratio("md:prompteol+compile", "ref:prompteol", "compiled blocks; target >= 1.5x, i.e. ratio <= 0.67")
    ratio("md:prompteol@bf16+compile", "ref:prompteol", "compiled bf16 vs fp32 reference; target ratio <= 0.29")
    ratio("md:prompteol+compile", "md:prompteol", "compiled / plain blocks, fp32")
    ratio("md:prompteol@bf16+compile", "md:prompteol@bf16", "compiled / plain blocks, bf16")
    ratio("md:prompteol+pack", "ref:prompteol", "packed weights; target >= 1.5x, i.e. ratio <= 0.67")
    ratio("md:prompteol@bf16+pack", "ref:prompteol", "packed bf16 vs fp32 reference; target ratio <= 0.29")
    ratio("md:prompteol+pack", "md:prompteol", "packed / plain weights, fp32")
    ratio("md:prompteol@bf16+pack", "md:prompteol@bf16", "packed / plain weights, bf16")
    ratio("md:prompteol+pack+compile", "ref:prompteol", "packed + compiled; target >= 1.5x, i.e. ratio <= 0.67")
    ratio("md:prompteol!nocache+pack+compile", "ref:prompteol", "packed + compiled, plain loop (no prefix cache)")
    ratio("md:prompteol@bf16+pack+compile", "ref:prompteol", "packed + compiled bf16 vs fp32 reference; "
          "target ratio <= 0.29")
    for name in ("md:prompteol+compile", "md:prompteol@bf16+compile", "md:prompteol+pack+compile",
                 "md:prompteol!nocache+pack+compile", "md:prompteol@bf16+pack+compile"):
        if name in results and "error" not in results[name]:
            lines.append(f"- {name} warm-up (compiling, 24 sentences): {results[name]['warmup_seconds']:.1f} s, "
                         "not in the timings above")
    ratio("md:prompteol@layer15", "md:prompteol", "early exit at 15 of 30; target about 0.5")
    ratio("md:prompteol", "md:prompteol!nocache", "prefix cache on / off")
    for m, target in (("tp", "<= 1.05"), ("htp", "<= 1.15"), ("htp!eos", "<= 1.15"), ("cp", "<= 1.2"), ("pretended_cot", "paper 1.18 on Llama-2"),
                      ("knowledge", ""), ("metaeol", "paper 8.17"), ("echo", "paper 1.67"), ("mean", ""),
                      ("reba", ""), ("reba!blocked", "")):
        ratio(f"md:{m}", "md:prompteol", f"vs PromptEOL; target {target}" if target else "vs PromptEOL")
    for prompt in ("pretended_cot", "knowledge", "metaeol"):
        for m in ("tp", "cp"):
            ratio(f"md:{prompt}+{m}", f"md:{prompt}", f"{m.upper()} on {prompt} vs {prompt} alone")
    ratio("md:tp", "ref:tp", "TP: minidecoder vs reference hooks")
    if "md:prompteol@bf16" in results and "md:prompteol" in results and "error" not in results["md:prompteol@bf16"]:
        d = results["md:prompteol@bf16"]["spearman"] - results["md:prompteol"]["spearman"]
        lines.append(f"- STS-B x100 change bf16 - fp32 (minidecoder PromptEOL, {header['limit'] // 2} pairs): {d:+.2f}")
    mem = {k: results[k]["peak_delta_mb"] for k in results if k.startswith("mem:") and "error" not in results[k]}
    if "mem:plain512" in mem:
        for k in ("mem:reba512", "mem:reba512!blocked", "mem:ref512"):
            if k in mem:
                lines.append(f"- peak RSS above load, {k} / mem:plain512: {mem[k] / max(mem['mem:plain512'], 1):.2f} "
                             f"({mem[k]:.0f} MB vs {mem['mem:plain512']:.0f} MB; target for ReBA <= 2)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
