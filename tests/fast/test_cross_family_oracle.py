"""The plain loop is the oracle across families and shapes: seeded random cases of every registered method,
with options other than the defaults, run by the executor with fast paths alone and in pairs, equal the
same passes run by the plain `Forward` (minidecoder.methods.loop); and a sweep's shared, forked forwards
(fast.forking) equal each point run alone by the plain loop.

tests/fast/test_executor_oracle.py forces each `Plan` field alone on one tiny Llama with four fixed texts;
here the five families of tests/tiny_models.py (sliding windows of 5 tokens, shorter than the inputs), batches
of 1 to 7 rows mixing one-character, empty and long texts (large padding), texts that share their first
words (the shared run reaches into the text), rows short enough to fit a window (where the prefix cache may
run on a windowed model), TP's hidden <PST> (mask_pst_first_layer), and paths combined (prefix cache with
buckets, fused calls or blocked fusion; buckets with graphs, fused calls and the explicit kernel).

CP's contrast a - b is skipped where it is rounding: on a windowed tiny model the last token at the steered
block sees only the last few tokens, which the normal and auxiliary prompts share (`" means in one word:"`),
so a equals b up to rounding, NR rescales that rounding to |a|, and any two summation orders disagree; the
rest of CP's cases take test_graphs.py's CP tolerance, for the same reason at a smaller scale. (For that reason
the sweeps below steer nothing: tests/evaluation/test_sweep.py sweeps CP.)
"""
from __future__ import annotations

import dataclasses
import functools
import random

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.fast import attention, graphs as graphs_module
from minidecoder.fast.forking import embed_points
from minidecoder.fast.forward import FastForward
from minidecoder.fast.options import FastPaths, fast_paths_overridden
from minidecoder.methods import METHODS, build_method
from minidecoder.methods.cp import SITE_NAMES
from minidecoder.methods.loop import Forward, last_token, run_passes
from tiny_models import FAMILIES, checkpoint

ATOL = RTOL = 2e-5  # as test_executor_oracle.py
CP_TOLERANCE = 1e-3  # as test_graphs.py: CP's steered contrast carries rounding further
CP_MIN_CONTRAST = 1e-3  # ||a - b|| / ||a|| below this is rounding (the module docstring)
CASES_PER_FAMILY = 40
OFF = FastPaths(prefix_cache=False, explicit_attention=False, compiled=False, buckets=False, graphs=False,
                blocked_fusion_from=None)
PATHS = {
    "default": FastPaths(),
    "prefix": dataclasses.replace(OFF, prefix_cache=True),
    "buckets": dataclasses.replace(OFF, buckets=True),
    "explicit": dataclasses.replace(OFF, explicit_attention=True),
    "blocked": dataclasses.replace(OFF, blocked_fusion_from=0),
    "graph": dataclasses.replace(OFF, buckets=True, graphs=True),
    "fused": dataclasses.replace(OFF, fused=True),
    "prefix+buckets": dataclasses.replace(OFF, prefix_cache=True, buckets=True),
    "prefix+blocked": dataclasses.replace(OFF, prefix_cache=True, blocked_fusion_from=0),
    "prefix+fused": dataclasses.replace(OFF, prefix_cache=True, fused=True),
    "buckets+blocked": dataclasses.replace(OFF, buckets=True, blocked_fusion_from=0),
    "buckets+fused+explicit": dataclasses.replace(OFF, buckets=True, fused=True, explicit_attention=True),
    "all": FastPaths(prefix_cache=True, buckets=True, graphs=True, blocked_fusion_from=0, fused=True),
}
WORDS = ["a", "cat", "the", "sat", "It", "purred", "Rain", "x", '"', "'", ".", "!", ",", "This", "sentence", ":",
         "means", "  ", '"quoted"', "One.", "Two.", "3"]


@functools.cache
def tiny(name: str):
    return minidecoder.load(checkpoint(name)[1], progress=False)


# ---- the cases ---------------------------------------------------------------------------------------
def random_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.05:
        return ""  # read by the prompt methods (the prompt around nothing), refused by the text poolings
    if roll < 0.15:
        return rng.choice(["a", ".", '"', " "])
    return " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 2, 4, 6, 12, 25]))).strip()


def random_texts(rng: random.Random) -> list[str]:
    texts = [random_text(rng) for _ in range(rng.choice([1, 2, 3, 4, 7]))]
    roll = rng.random()
    if roll < 0.25 and len(texts) > 1:  # a shared start: the run every row shares reaches into the text
        head = rng.choice(["the cat", "One. Two.", '"', "a"])
        texts = [f"{head} {text}" for text in texts]
    elif roll < 0.35 and len(texts) > 1:
        texts = [texts[0]] * len(texts)  # identical rows: one token of each is left to run
    elif roll < 0.45:  # rows within a window of 5: the prefix cache may run on a windowed model too
        head = rng.choice(["ab", "abc"])
        texts = [head + "".join(rng.choice("xyz") for _ in range(rng.randint(0, 4 - len(head))))
                 for _ in range(rng.randint(2, 4))]
    return texts


def random_options(rng: random.Random, name: str, L: int) -> dict:
    """Options other than the defaults, within the model's L blocks (invalid mixes are refused, and skipped)."""
    if name in ("tp", "cp+tp"):
        start = rng.randint(0, L - 1)
        options = {"start": start, "end": rng.randint(start, L - 1)}
        if name == "tp":
            options.update(layer=rng.choice([None, -1, -2, L]), pooling=rng.choice(["last", "last", "mean"]),
                           prompt=rng.choice(["prompteol", "knowledge", "metaeol", 'Hi <PST> "{text}" x']),
                           pst_init=rng.choice(["gaussian", "zeros", "mean"]),
                           mask_pst_first_layer=rng.random() < 0.25, num_pst=rng.choice([1, 1, 2]))
            if options["num_pst"] == 2 and "<PST>" in options["prompt"]:
                options["num_pst"] = 1
            if rng.random() < 0.2 and options["end"] < L - 1:
                options["resume_at"] = rng.randint(options["end"], L - 2)
        return {**options, **(cp_options(rng, L, options) if name == "cp+tp" else {})}
    if name == "cp":
        return cp_options(rng, L, {})
    if name == "htp":
        start = rng.randint(0, 2)
        return {"layer": rng.choice([-1, -2]), "start": start, "end": rng.randint(start, L - 2),
                "template": rng.choice(["{text}", "Summarize : {text}"]), "padding_side": rng.choice(["left", "right"]),
                "every_n_tokens": rng.choice([None, None, 1, 3]), "local_only": rng.random() < 0.2,
                "last_block_source": rng.choice(["last_text_token", "after_text"]),
                "sentences_per_block": rng.choice([1, 2])}
    if name == "reba":
        pooling = rng.choice(["mean", "last"])
        return {"repetitions": rng.choice([1, 2, 3]), "separator": rng.choice(["", " | "]),
                "layer": rng.choice([-1, -2, 1]), "pooling": pooling,
                "weights": rng.choice(["pooled", "normalized", "raw", "uniform"]),
                **({"last_row": rng.choice(["full", "backward"])} if pooling == "last" else
                   {"first_half_split": rng.random() < 0.3})}
    if name == "metaeol":
        return {"tasks": rng.sample(range(8), rng.randint(1, 2)), "layer": rng.choice([-1, 2, 0])}
    if name in ("mean", "last"):
        template = rng.choice(["{text}", 'This sentence : "{text}" means in one word:"', "A: {text} B: {text}"])
        options = {"template": template, "layer": rng.choice([-1, 0, 1, -2])}
        if name == "mean":
            options["over"] = rng.choice(["text", "all"])
            if template.count("{text}") == 2 and options["over"] == "text":
                options["occurrence"] = rng.choice([0, 1])
        return options
    if name == "echo":
        return {"pooling": rng.choice(["mean", "last"]), "layer": rng.choice([-1, 1, 2])}
    if name == "prompt":
        return {"layer": rng.choice([-1, 1, 0]), "template": rng.choice(["{text} x", "X is {text}"])}
    return {"layer": rng.choice([-1, -2, 1, 0])}  # prompteol, knowledge, pretended_cot


def cp_options(rng: random.Random, L: int, tp: dict) -> dict:
    site = rng.choice(list(SITE_NAMES))
    options = {"steer_layer": rng.randint(0, L - 2), "site": site,
               "mode": rng.choice(["ns", "nr", "nr_scaled"] + (["nr_head"] if site == "head" else [])),
               "layer": rng.choice([None, -1, L - 1]), "prompt": rng.choice(["prompteol", "ck", 'Say "{text}" now']),
               "aux_prompt": rng.choice(["irrelevant", "background"])}
    return {**options, **({"tp_aux": rng.random() < 0.5} if tp else {})}


# On every family, whatever the draw: a prefix run once (BOS + 3 shared tokens, rows within a window of 5),
# a blocked fusion and graphs.
SURE = [("mean", {"over": "all", "layer": 2}, ["abcx", "abcy", "abcz"], "prefix+fused"),
        ("reba", {"pooling": "last"}, ["a cat", "the cat sat. It purred.", "x"], "blocked"),
        ("prompteol", {"layer": 2}, ["a cat", "the cat sat. It purred.", "x"], "graph")]


def cases(family: str) -> list[tuple[str, dict, list[str], str]]:
    """(method, options, texts, paths) valid on `family`, the same on every run (seeded by the family)."""
    rng, L = random.Random(f"cross-family {family}"), tiny(family).num_layers
    found = list(SURE)
    while len(found) < len(SURE) + CASES_PER_FAMILY:
        name = rng.choice(sorted(METHODS))
        case = (name, random_options(rng, name, L), random_texts(rng), rng.choice(list(PATHS)))
        if passes_of(family, *case[:3]) is not None:
            found.append(case)
    return found


def passes_of(family: str, name: str, options: dict, texts: list[str]):
    """The method's passes on these texts, or None where the method refuses them (or its options)."""
    model = tiny(family)
    try:
        method = build_method(name, **options)
        method.check(model)
        return method.passes(model, texts)
    except InputError:
        return None


def cp_contrast(model, name: str, options: dict, passes) -> float:
    """The smallest ||a - b|| / ||a|| over rows and normal prompts at CP's steered site (plain loop)."""
    block, site = options["steer_layer"], SITE_NAMES[options["site"]]
    aux = passes[0].start(model).run_to(passes[0].blocks)
    b = last_token(aux.recorded(block, site), passes[0].batch).flatten(1)
    contrast = float("inf")
    for p in passes[1:]:
        run = dataclasses.replace(p, made=None, record={block: frozenset({site})}).start(model).run_to(block + 1)
        a = last_token(run.records[(block, site)], p.batch).flatten(1)
        contrast = min(contrast, float(((a - b).norm(dim=-1) / a.norm(dim=-1)).min()))
    return contrast


class Spy(FastForward):
    """Records which plan fields applied, so the cases are known to have run the fast paths."""

    applied: set[str] = set()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        plan = self.plan
        Spy.applied |= {field for field, on in [("prefix", plan.prefix > 0), ("bucket", plan.bucket is not None),
                                                ("explicit", plan.explicit), ("graph", plan.block_call == "graph"),
                                                ("fused", plan.fused), ("blocked", plan.heads_per_fold)] if on}


# ---- the tests ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_random_cases_across_families_equal_the_plain_loop(family: str, monkeypatch) -> None:
    model = tiny(family)
    # forced: the explicit kernel at any length, graphs for block calls of any size
    monkeypatch.setitem(attention.EXPLICIT_ATTENTION_MAX_KEYS, torch.float32, 1 << 20)
    monkeypatch.setattr(graphs_module, "GRAPH_MAX_TOKENS", 1 << 20)
    Spy.applied = set()
    for number, (name, options, texts, paths) in enumerate(cases(family)):
        with torch.inference_mode():
            passes = passes_of(family, name, options, texts)
            tolerance = ATOL
            if name in ("cp", "cp+tp"):
                if cp_contrast(model, name, options, passes) < CP_MIN_CONTRAST:
                    continue
                tolerance = CP_TOLERANCE
            plain = run_passes(model, passes, Forward)
            fast = run_passes(model, passes, functools.partial(Spy, paths=PATHS[paths]))
        assert_close(fast, plain, atol=tolerance, rtol=tolerance,
                     msg=lambda m: f"case {number}: {name} {options} {texts!r} paths={paths}: {m}")
    assert Spy.applied == {"prefix", "bucket", "explicit", "graph", "fused", "blocked"}, Spy.applied


SWEEPS = [  # (method, fixed options, points): points that share tokens, run by forked forwards
    ("tp", {"mask_pst_first_layer": True, "layer": -1, "end": 3},
     [{"start": 0}, {"start": 2}, {"start": 0, "end": 0}]),  # TP's baseline: hides <PST>, copies nothing
    ("tp", {"layer": -1}, [{"start": 0, "end": 2}, {"start": 1, "end": 3}, {"start": 1, "end": 3, "layer": 3}]),
    ("htp", {"layer": -1, "padding_side": "left"}, [{"start": 0, "end": 2}, {"start": 1, "end": 2}]),
    ("mean", {"template": 'This sentence : "{text}" means in one word:"'}, [{"layer": 1}, {"layer": -1}]),
]
SWEEP_TEXTS = ["a man plays a flute.", "the cat sat. It purred.", "x", "the cat ran far away from the old dog."]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("paths", ["default", "prefix+buckets"])
def test_sweep_points_equal_each_point_run_alone_by_the_plain_loop(family: str, paths: str) -> None:
    """A sweep point whose step hides <PST> from block 0 but copies nothing there (start > 0) once continued a
    trunk that had copied before block 0 (start = 0): fast.forking counted the hiding as acting at block 0."""
    model = tiny(family)
    for name, fixed, points in SWEEPS:
        methods = [build_method(name, **{**fixed, **point}) for point in points]
        with torch.inference_mode():
            plain = [run_passes(model, method.passes(model, SWEEP_TEXTS), Forward) for method in methods]
            with fast_paths_overridden(model, **dataclasses.asdict(PATHS[paths])):
                shared, _ = embed_points(model, methods, SWEEP_TEXTS)
        for point, got, want in zip(points, shared, plain):
            assert_close(got, want, atol=ATOL, rtol=ATOL, msg=lambda m: f"{name} {point}: {m}")
