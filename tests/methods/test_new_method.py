"""A new method touches only its own file: one defined here, registered, runs through `embed`, a sweep
and `explain` with no line of those modules changed (they read its passes, its step's declarations and
its baseline, never its class)."""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import minidecoder
from minidecoder.evaluation.sts import score_embeddings, unique_sentences
from minidecoder.evaluation.sts import load_tasks
from minidecoder.evaluation.sweep import BlockCounter, method_at, sweep_sts
from minidecoder.methods import METHODS, Method, option
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.methods.loop import Pass, Step, column_field, hidden_at, last_token

TEXTS = ["a man plays a flute.", "the cat sat on the mat.", "dogs run."]


@dataclass(frozen=True, eq=False, kw_only=True)
class EchoFirstToken(Step):
    """Before each block in `blocks`: h[b, last_b] <- h[b, last_b] + factor * h[b, first_b]."""

    blocks: frozenset[int]
    first: torch.Tensor = column_field()  # (B,) each row's first real token
    last: torch.Tensor = column_field()  # (B,) each row's last real token
    factor: float = 0.5

    def before(self, i: int, h: torch.Tensor) -> torch.Tensor:
        if i not in self.blocks:
            return h
        rows, out = torch.arange(h.shape[0], device=h.device), h.clone()
        out[rows, self.last] = h[rows, self.last] + self.factor * h[rows, self.first]
        return out

    def report(self, i: int, where: str, old, new, shift: int) -> list[dict]:
        row = int(self.last[0])
        return [{"block": i, "position": row + shift, "change_norm": float((new[0, row] - old[0, row]).norm())}]


@dataclass
class FirstTokenEcho(Method):
    name = "test_first_token_echo"
    summary = "a test method: the last token takes a multiple of the first token's row before some blocks"
    layer: int = option(-1, "output layer")
    start: int = option(1, "first block")
    end: int = option(3, "end of the block range")
    factor: float = option(0.5, "how much of the first token's row is added")

    def passes(self, model, texts: list[str]):
        batch = encode_prompts(model.tokenizer, 'This : "{text}" means in one word:"', texts)
        first = batch.attention_mask.shape[1] - batch.attention_mask.sum(dim=1)  # left padding
        step = EchoFirstToken(blocks=frozenset(range(self.start, self.end)), first=first, last=batch.last,
                              factor=self.factor)
        index = resolve_output_layer(self.layer, model.num_layers)
        return [Pass(batch, step, layer=index, reads="the last token",
                     pool=lambda run: last_token(run.hidden(index), batch))]

    def baseline(self, model) -> tuple[Method, str]:
        return dataclasses.replace(self, end=self.start), "no copies"


@pytest.fixture(scope="module")
def model(tiny_llama: Path):
    METHODS[FirstTokenEcho.name] = FirstTokenEcho
    yield minidecoder.load(tiny_llama, progress=False)
    del METHODS[FirstTokenEcho.name]


def test_embed_runs_the_new_methods_step(model) -> None:
    got = minidecoder.embed(model, TEXTS, FirstTokenEcho.name, start=1, end=3, factor=0.5)
    plain = minidecoder.embed(model, TEXTS, FirstTokenEcho.name, start=1, end=1)
    with torch.inference_mode():  # the same computation written out by hand, one text at a time
        for k, text in enumerate(TEXTS):
            batch = encode_prompts(model.tokenizer, 'This : "{text}" means in one word:"', [text])
            step = EchoFirstToken(blocks=frozenset({1, 2}), first=torch.tensor([0]), last=batch.last, factor=0.5)
            torch.testing.assert_close(got[k], last_token(hidden_at(model, batch, -1, step), batch)[0],
                                       atol=1e-5, rtol=1e-5)
    assert (got - plain).abs().max() > 1e-3


def test_a_sweep_shares_the_new_methods_blocks(model, tmp_path: Path) -> None:
    root = tmp_path / "STSBenchmark"
    root.mkdir()
    rnd = random.Random(0)
    words = "a man woman dog cat is plays runs on the".split()
    lines = [f"g\tf\ty\t{i}\t{rnd.uniform(0, 5):.2f}\t{' '.join(rnd.sample(words, 3))}\t{' '.join(rnd.sample(words, 4))}"
             for i in range(6)]
    (root / "sts-dev.csv").write_text("\n".join(lines) + "\n")
    method = FirstTokenEcho()
    axes = {"layer": [3, 4], "end": [2, 3], "factor": [0.5, 2.0]}
    from minidecoder.fast.options import fast_paths_overridden
    with fast_paths_overridden(model, prefix_cache=False):
        result = sweep_sts(model, method, axes, data_dir=tmp_path, batch_size=4, progress=False)
        (dev,) = load_tasks(["STSBenchmark-dev"], tmp_path)
        sentences = unique_sentences([dev])
        alone_blocks = 0
        for record in result.points:
            with BlockCounter(model) as counter:
                vectors = minidecoder.embed(model, sentences, method_at(method, record["options"]), batch_size=4)
            alone_blocks += counter.count
            score = score_embeddings([dev], sentences, vectors)["tasks"]["STSBenchmark-dev"]["score"]
            assert abs(score - record["score"]) < 1e-6, record
    assert result.cost["blocks_naive"] == alone_blocks
    assert result.cost["blocks_computed"] < alone_blocks / 2  # the trunk up to the first copy is shared


def test_explain_shows_the_new_methods_step(model) -> None:
    record = minidecoder.explain(model, TEXTS[0], FirstTokenEcho.name, start=1, end=3)
    torch.testing.assert_close(record.embedding, minidecoder.embed(model, [TEXTS[0]], FirstTokenEcho.name)[0],
                               rtol=0, atol=0)
    (p,) = record.passes
    assert [e["block"] for e in p.interventions] == [1, 2] and all(e["change_norm"] > 0 for e in p.interventions)
    assert record.baseline == "no copies" and record.net_cosine < 1
    assert "change_norm" in record.format()
