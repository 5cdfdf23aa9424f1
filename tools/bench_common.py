"""What the CPU benchmark (tools/bench.py) and the GPU benchmark (tools/bench_gpu.py) both use: the inputs
(STS-B test sentences, long texts, SciFact documents), the reference approach's loader, the matmul rate and
the useful-FLOP count. Both import this module and neither imports the other's measurements.

    useful FLOPs = sum over block calls of 2 * params_per_block * real tokens + 4 * H * D * causal pairs
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from minidecoder.sources.paths import sts_data_dir

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"  # ../shared/data beside the checkout, as the library looks for it
# SciFact: the same variable as `minidecoder eval retrieval` (sources/paths.py)
# STS-B: the library's own folder ($MINIDECODER_STS_DATA, else ../shared/data/sts), as `minidecoder eval sts` finds it
STS_TEST = (sts_data_dir() or SHARED_DATA / "sts") / "STSBenchmark" / "sts-test.csv"
SCIFACT_CORPUS = Path(os.environ.get("MINIDECODER_BEIR_DATA", SHARED_DATA / "beir")) / "scifact" / "corpus.jsonl"
PROMPTEOL = 'This sentence : "{text}" means in one word:"'
DOCUMENT_TOKENS = 512  # HTP's cut of a retrieval document (its Appendix B), and the long-document case's


def sts_sentences(limit: int | None, path: Path = STS_TEST) -> tuple[list[str], list[float]]:
    """s1, s2 of the first limit // 2 STS-B test pairs of `path` (dataset order; None: every pair) and
    their gold scores."""
    sentences, gold = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        cols = line.split("\t")
        if len(cols) < 7:
            continue
        sentences += [cols[5], cols[6]]
        gold.append(float(cols[4]))
        if limit is not None and len(sentences) >= limit:
            break
    return sentences, gold


def long_texts(tokenizer, rows: int = 4, tokens: int = 255, path: Path = STS_TEST) -> list[str]:
    """`rows` texts of about `tokens` tokens each, made of consecutive STS-B sentences of `path`."""
    sentences, _ = sts_sentences(2000, path)
    out, current = [], ""
    for s in sentences:
        candidate = (current + " " + s).strip()
        if len(tokenizer.encode(candidate, add_special_tokens=False)) > tokens:
            out.append(current)
            current = s
            if len(out) == rows:
                break
        else:
            current = candidate
    return out


def scifact_documents(limit: int | None, path: Path = SCIFACT_CORPUS) -> list[str]:
    """The first `limit` SciFact documents in corpus order (None: all 5,183), each its title and text joined
    by a space, as BEIR and MTEB embed a document."""
    if not path.is_file():
        raise SystemExit(f"SciFact corpus not found at {path}; set MINIDECODER_BEIR_DATA to the folder holding "
                         "scifact/corpus.jsonl (BEIR's layout)")
    docs = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if limit is not None and len(docs) >= limit:
                break
            row = json.loads(line)
            docs.append((row.get("title", "") + " " + row["text"]).strip())
    return docs


def cut_to_tokens(tokenizer, texts: list[str], tokens: int = DOCUMENT_TOKENS) -> list[str]:
    """Each text cut to its first `tokens` tokens, by a transformers tokenizer's character offsets (what
    `minidecoder.embed(..., truncate=N)` does with its own tokenizer)."""
    out = []
    for text in texts:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        out.append(text[:offsets[tokens - 1][1]] if len(offsets) > tokens else text)
    return out


def reference_model(folder: str, dtype: str, attn: str = "sdpa", device_map: str | None = None):
    """(tokenizer, model) of the reference approach: transformers' AutoModelForCausalLM, left padding,
    pad = eos where unset. device_map: load straight onto that device (the GPU benchmark); None: the CPU."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    placed = {} if device_map is None else {"device_map": device_map}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype),
                                                              attn_implementation=attn, **placed).eval()
    return tok, model


def matmul_peak(dtype: torch.dtype, n: int = 2048, seconds: float = 2.0) -> float:
    """GFLOP/s of an n x n matmul on this machine's CPU now (best of repeated timings)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def block_params(model) -> int:
    """Parameters of one block of a minidecoder model."""
    return sum(p.numel() for p in model.layers[0].parameters())


def useful_flops(model, token_blocks: int, pair_blocks: int) -> float:
    """2 x block params per (real token, block) + 4 H D per (causal query-key pair, block)."""
    cfg = model.config
    return 2 * block_params(model) * token_blocks + 4 * cfg.num_heads * cfg.head_dim * pair_blocks


def counting_context(model, attribute: str) -> None:
    """Wrap `model.context` (an instance attribute over the method: the loops call model.context(...)) so each
    context it makes carries, as `attribute`, (real new tokens, causal query-key pairs between real tokens,
    cached keys included) of the block calls it serves; `del model.context` undoes it."""
    original = model.context

    def context(attention_mask, num_new, batch_size, cache=None, position_ids=None, **options):
        ctx = original(attention_mask, num_new, batch_size, cache, position_ids, **options)
        key_mask = cache.key_mask if cache is not None else None
        if key_mask is None and attention_mask is not None:
            key_mask = attention_mask.bool()
        if key_mask is None:
            new, past = torch.full((batch_size,), num_new), torch.zeros(batch_size)
        else:
            key_mask = key_mask.expand(batch_size, -1)
            new, past = key_mask[:, -num_new:].sum(1), key_mask[:, :-num_new].sum(1)
        setattr(ctx, attribute, (int(new.sum()), int((new * past + new * (new + 1) / 2).sum())))
        return ctx

    model.context = context


def drop_captures(model) -> None:
    """Forget every CUDA graph and static buffer captured for `model` (its bank of block graphs, its kept
    decode step), so that the next configuration starts as a fresh model would, and its memory is not
    counted against the next one."""
    from minidecoder.fast import graphs, static_cache
    getattr(graphs, "_BANKS", {}).pop(model, None)  # otherwise the bank lives as long as the model (fast/graphs.py)
    static_cache.drop_step(model)
