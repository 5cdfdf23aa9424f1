"""Every option of every registered method does something: no switch that changes nothing.

For each method in `minidecoder.methods.METHODS` and each option its `describe()` lists (plus the options that
build another method, `Method.extensions`: `cp tp=true`), the table `CASES` names a non-default value and
inputs under which the option is meant to matter, and says why. The test embeds the method's base
configuration (`BASE`, fitted to the tiny 4-block llama) and the same with that one option changed, and asserts
that the embedding moves by more than float noise. It does so on both forwards a model can take
(`minidecoder.methods.base.Method.embed_batch`'s `forward`): the executor (`fast.forward.FastForward`, with the
shared prefix, explicit attention, fused blocks and head-by-head fusion forced on) and the plain block loop
(`methods.loop.Forward`, every fast path off), and asserts that both give the same vectors, so an option read
on one path only is caught as well; a sweep (`evaluation.sweep.sweep_points`: both configurations in shared,
forked forwards) must give them too.

The model is the tiny llama: global attention and no norm after the attention branch. On the windowed tiny
models (Mistral, Qwen2: window 5 on ~4 blocks) a <PST> far from the last token cannot reach it, so TP's range
options legitimately change nothing there; on Gemma2/3 the post-attention RMSNorm divides out any rescaling of
z, so CP's alpha and ns/nr/nr_scaled barely matter at site=head.

Two other kinds of entry:
- `refused`: an option that is only meaningful in some combinations; a value where it could not act is an
  InputError (the test also checks that the base configuration itself embeds).
- `invariant`: an option documented to change the input layout and never the embedding (HTP's padding side):
  the method's token ids must differ and the embedding must stay within float tolerance.

`test_every_option_has_a_case` fails when a method gains an option (or loses one) without an entry here.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import minidecoder
from minidecoder.errors import InputError
from minidecoder.evaluation.sweep import sweep_points
from minidecoder.fast.options import fast_paths_overridden
from minidecoder.methods import METHODS, build_method
from tiny_models import checkpoint, save_tiny_tokenizer

DESCRIPTIVE = {"method", "pst_init_detail", "sentence_splitter"}  # describe() keys that are not options
MOVES = 1e-4  # an option "matters" when some entry moves by more than this (fp32, entries of order 1)
ATOL = RTOL = 1e-5  # executor vs plain loop: the same vectors up to rounding (relative to the largest entry)

# Different lengths (so every batch is padded), one text without a final '.' and one with '"' and '?' (the
# SentEval steps touch both), and several sentences in one text (HTP's blocks).
TEXTS = ("a cat sat on the mat", 'Dogs bark. The "old" cat sleeps? Birds sing loudly. It rains')
THREE = "One dog ran. Two cats sat. Three birds sang. Four fish swam."  # HTP: 4 sentences, K = 2 regroups them

# The tiny llama has 4 blocks (output layers -5..4, intervention blocks 0..3): the defaults `end=7` (TP, HTP,
# CP + TP) and `steer_layer=4` (CP) do not fit it, so each method's base configuration sets them.
BASE = {
    "tp": {"end": 3},  # layer None = round(27 * 4 / 32) = 3, so copies before blocks 1, 2
    "cp": {"steer_layer": 1},
    "cp+tp": {"steer_layer": 1, "end": 3},
    "htp": {"end": 3},  # layer -2 = hidden_states[3]
}

PROMPT_TEMPLATE = 'In one word, the sentence "{text}" is:"'
TP_TEMPLATE = 'Sentence <PST> "{text}" in a word:"'
AUX_TEMPLATE = 'Nothing about "{text}" matters here:"'


@dataclasses.dataclass(frozen=True)
class Case:
    method: str
    option: str
    value: object
    why: str  # the condition under which the option acts, where there is one
    base: dict = dataclasses.field(default_factory=dict)  # options of both runs, on top of BASE[method]
    texts: tuple = TEXTS
    model: str = "llama"  # "llama_no_bos": the tiny llama with a tokenizer that adds no BOS; "llama_merges": with
    # the merges ' a' and '"a' (`MERGES`), so that a template tokenized by pieces splits what one string merges
    expect: str = "changes"  # or "refused" / "invariant" (module docstring)

    @property
    def id(self) -> str:
        return f"{self.method}-{self.option}={self.value!r:.30}" + ("" if not self.base else f"[{self.base_id}]")

    @property
    def base_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.base.items())


MERGES = ((" ", "a"), ('"', "a"))  # TEXTS[0] opens with "a": after `: ` or `"` one string merges it, pieces do not
PIECES = "by pieces, the text's first token is not merged with the template's character before it"

# TP's copies: the same options, and the same reasons, in tp and in cp+tp
TP_COPY_CASES = [("start", 2, "one copy (before block 2) instead of two"),
                 ("end", 2, "one copy (before block 1) instead of two"),
                 ("pst_init", "zeros", "block 0 reads the <PST> input row (start >= 1)"),
                 ("seed", 1, "another N(0, I) row: only with a random pst_init (gaussian is the default)")]

C = Case
CASES = [
    # ---- plain pooling -------------------------------------------------------------------------------
    C("mean", "layer", -2, "another hidden state"),
    C("mean", "template", "Text: {text}!", "the text's tokens read the template before them"),
    C("mean", "senteval_text", True, "TEXTS[0] gains a '.', TEXTS[1] has '\"' and '?'"),
    C("mean", "over", "all", "BOS (and the template) enter the mean", base={"template": "Text: {text}"}),
    C("mean", "over", "after-first", "copies 1 and 2, not copy 2 alone: needs 3 copies (with 2 it is over=text)",
      base={"template": "{text}; {text}; {text}"}),
    C("mean", "occurrence", 0, "the first copy instead of the last: needs a template repeating {text}",
      base={"template": "{text}; {text}"}),
    C("last", "layer", -2, "another hidden state"),
    C("last", "template", "{text} means:", "another last token"),
    C("last", "senteval_text", True, "the last token becomes the appended '.'"),
    C("mean", "pieces", True, PIECES, base={"template": "Text: {text}"}, model="llama_merges"),
    C("last", "pieces", True, "the space before {eos} is a token of its own by pieces, the EOS read after it",
      base={"template": "{text} {eos}"}),
    # ---- prompts -------------------------------------------------------------------------------------
    C("prompteol", "layer", -2, "another hidden state"),
    C("prompteol", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("pretended_cot", "layer", -1, "another hidden state"),
    C("pretended_cot", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("knowledge", "layer", -1, "another hidden state"),
    C("knowledge", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("prompt", "layer", -2, "another hidden state"),
    C("prompt", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("prompt", "template", PROMPT_TEMPLATE, "another prompt"),
    C("metaeol", "layer", -2, "another hidden state"),
    C("metaeol", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("metaeol", "tasks", [4], "one prompt instead of the mean of eight"),
    *[C(name, "pieces", True, PIECES, model="llama_merges")
      for name in ("prompteol", "pretended_cot", "knowledge", "prompt", "metaeol")],
    C("echo", "pieces", True, PIECES, model="llama_merges"),
    C("echo", "layer", -2, "another hidden state"),
    C("echo", "template", "Say it: {text}. Again: {text}", "another prompt around both copies"),
    C("echo", "pooling", "last", "the second copy's last token instead of its mean"),
    C("echo", "senteval_text", True, "TEXTS need the SentEval steps"),
    # ---- TP ------------------------------------------------------------------------------------------
    C("tp", "prompt", "pretended_cot", "another template"),
    C("tp", "prompt", "metaeol", "eight templates averaged"),
    C("tp", "prompt", TP_TEMPLATE, "a custom template with <PST>"),
    C("tp", "layer", -1, "hidden_states[4] instead of the depth-scaled default 3"),
    *[C("tp", *case) for case in TP_COPY_CASES],
    C("tp", "num_pst", 2, "two <PST> before the quote"),
    C("tp", "seed", 1, "pst_init=zeros draws no row", base={"pst_init": "zeros"}, expect="refused"),
    C("tp", "mask_pst_first_layer", True, "no token attends to <PST> in block 0"),
    C("tp", "resume_at", 3, "copies before block 3 too: needs end <= resume_at < the output layer",
      base={"end": 2, "layer": -1}),
    C("tp", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("tp", "pooling", "mean", "the mean over the text tokens instead of the last token"),
    C("tp", "pieces", True, PIECES, model="llama_merges"),
    # ---- CP ------------------------------------------------------------------------------------------
    C("cp", "prompt", "pretended_cot", "another normal prompt (layer fixed, so the template alone differs)",
      base={"layer": -1}),
    C("cp", "prompt", "ck", "Knowledge and CoT averaged", base={"layer": -1}),
    C("cp", "prompt", "metaeol", "eight prompts averaged", base={"layer": -1}),
    C("cp", "prompt", PROMPT_TEMPLATE, "a custom template", base={"layer": -1}),
    C("cp", "aux_prompt", "redundant", "another b"),
    C("cp", "aux_prompt", AUX_TEMPLATE, "a custom auxiliary template"),
    C("cp", "layer", -2, "another output layer (None = -1 for PromptEOL)"),
    C("cp", "steer_layer", 2, "steer block 2 instead of block 1"),
    C("cp", "alpha", 2.0, "only where alpha is read: mode ns (the default) and nr_scaled"),
    C("cp", "alpha", 2.0, "nr_scaled = alpha * NR", base={"mode": "nr_scaled"}),
    C("cp", "alpha", 2.0, "nr rescales by norms alone: no coefficient", base={"mode": "nr"}, expect="refused"),
    C("cp", "alpha", 2.0, "nr_head, per head: no coefficient", base={"mode": "nr_head"}, expect="refused"),
    C("cp", "mode", "nr", "(a - b) at a's norm instead of alpha * (a - b)"),
    C("cp", "mode", "nr_head", "NR per head"),
    C("cp", "mode", "nr_scaled", "alpha * NR"),
    C("cp", "mode", "nr_head", "nr_head exists only at site=head", base={"site": "ffn"}, expect="refused"),
    C("cp", "site", "ffn", "the MLP output instead of z"),
    C("cp", "site", "hidden", "the block's output residual instead of z"),
    C("cp", "senteval_text", False, "TEXTS need the SentEval steps"),
    C("cp", "tp", True, "`cp tp=true` builds cp+tp: TP's copies in both forwards (`tp=false` takes and ignores "
      "the extension's `end`)", base={"tp": False, "end": 3}),
    # ---- CP + TP -------------------------------------------------------------------------------------
    C("cp+tp", "prompt", "pretended_cot", "another normal prompt", base={"layer": -1}),
    C("cp+tp", "aux_prompt", "redundant", "another b"),
    C("cp+tp", "layer", -2, "another output layer"),
    C("cp+tp", "steer_layer", 2, "steer block 2 instead of block 1"),
    C("cp+tp", "alpha", 2.0, "mode ns (the default)"),
    C("cp+tp", "mode", "nr", "(a - b) at a's norm"),
    C("cp+tp", "site", "hidden", "the block's output residual instead of z"),
    C("cp+tp", "senteval_text", False, "TEXTS need the SentEval steps"),
    *[C("cp+tp", *case) for case in TP_COPY_CASES],
    C("cp+tp", "seed", 1, "pst_init=mean draws no row", base={"pst_init": "mean"}, expect="refused"),
    C("cp+tp", "tp_aux", False, "the auxiliary prompt runs plain: another b"),
    # ---- HTP -----------------------------------------------------------------------------------------
    C("htp", "layer", -1, "another hidden state"),
    C("htp", "start", 2, "one copy (before block 2) instead of two"),
    C("htp", "end", 2, "one copy (before block 1) instead of two"),
    C("htp", "template", "Doc: {text} end", "the text reads the template's prefix"),
    C("htp", "literal_bos", False, "only on a tokenizer that adds no BOS: <B-PST>_1 then takes position 0",
      model="llama_no_bos"),
    C("htp", "append_eos", False, "the EOS follows the text, so no pooled token reads it (causal); it is read only "
      "as last_block_source=after_text's source, which then has no token to copy from",
      base={"last_block_source": "after_text"}, expect="refused"),
    C("htp", "sentences_per_block", 2, "needs >= 3 sentences: 4 sentences in 2 blocks instead of 4",
      texts=(THREE, TEXTS[1])),
    C("htp", "every_n_tokens", 5, "blocks of 5 tokens instead of sentences"),
    C("htp", "local_only", True, "no <B-PST>"),
    C("htp", "global_only", True, "no local <PST>"),
    C("htp", "last_block_source", "after_text", "the last block copies the EOS's row"),
    C("htp", "pst_init", "zeros", "block 0 reads the placeholders' input rows (start >= 1)"),
    C("htp", "seed", 1, "other rows: only with a random pst_init", base={"pst_init": "gaussian"}),
    C("htp", "seed", 1, "pst_init=mean (the default) draws no row", expect="refused"),
    C("htp", "padding_side", "left", "the batch's layout changes, the embedding must not (documented): a batch of "
      "texts of different lengths", expect="invariant"),
    # ---- ReBA ----------------------------------------------------------------------------------------
    C("reba", "repetitions", 3, "three copies: the first copy reads more through A"),
    C("reba", "separator", " | ", "the copies are separated"),
    C("reba", "layer", -2, "another hidden state aggregated"),
    C("reba", "pooling", "last", "the last token's row of A instead of the first copy's"),
    C("reba", "last_row", "backward", "only with pooling=last: e = h_last alone instead of the full row",
      base={"pooling": "last"}),
    C("reba", "weights", "normalized", "each row normalized (with one row, pooling=last, it equals pooled)"),
    C("reba", "weights", "raw", "the unnormalized sum"),
    C("reba", "weights", "uniform", "no fused attention: the plain mean"),
    C("reba", "first_half_split", True, "rows 0..T//2-1 (BOS in, the copy's last token out): with pooling=mean"),
    C("reba", "last_row", "backward", "pooling=mean always aggregates backward", expect="refused"),
    C("reba", "first_half_split", True, "pooling=last reads the last token's row", base={"pooling": "last"},
      expect="refused"),
]


# ---- models and the two forwards ------------------------------------------------------------------------
PATHS = {  # FastPaths settings: the executor with its CPU-testable paths forced on, and the plain loop
    "executor": {"prefix_cache": True, "explicit_attention": True, "fused": True, "blocked_fusion_from": 0},
    "plain": {"prefix_cache": False, "explicit_attention": False, "fused": False, "blocked_fusion_from": None},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    folder = checkpoint("llama")[1]
    no_bos = Path(shutil.copytree(folder, tmp_path_factory.mktemp("no-bos") / "tiny-llama"))
    save_tiny_tokenizer(no_bos, add_bos=False)
    merged = Path(shutil.copytree(folder, tmp_path_factory.mktemp("merges") / "tiny-llama"))
    save_tiny_tokenizer(merged, merges=MERGES)
    return {"llama": minidecoder.load(folder, progress=False), "llama_no_bos": minidecoder.load(no_bos, progress=False),
            "llama_merges": minidecoder.load(merged, progress=False)}


def embed(model, method: str, texts, path: str, options: dict) -> torch.Tensor:
    with fast_paths_overridden(model, **PATHS[path]):
        return minidecoder.embed(model, list(texts), method, batch_size=len(texts), **options)


def close(got: torch.Tensor, want: torch.Tensor, msg: str) -> None:
    assert_close(got, want, atol=ATOL * max(1.0, float(want.abs().max())), rtol=RTOL, msg=msg)


# ---- the tests ----------------------------------------------------------------------------------------
def test_every_option_has_a_case() -> None:
    """The table covers every option of every registered method, and names no option that does not exist."""
    options = {(name, option) for name, cls in METHODS.items()
               for option in [*build_method(name).describe(), *cls.extensions]
               if option not in DESCRIPTIVE}
    covered = {(case.method, case.option) for case in CASES}
    assert not options - covered, f"options without a case in CASES: {sorted(options - covered)}"
    assert not covered - options, f"cases of options that do not exist: {sorted(covered - options)}"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_option_changes_the_embedding_on_both_forwards(case: Case, models: dict) -> None:
    model = models[case.model]
    base = {**BASE.get(case.method, {}), **case.base}
    changed = {**base, case.option: case.value}
    if case.expect == "refused":
        embed(model, case.method, case.texts, "plain", base)  # the base itself is fine ...
        with pytest.raises(InputError):  # ... the option's value is what is refused
            embed(model, case.method, case.texts, "plain", changed)
        return
    got = {(which, path): embed(model, case.method, case.texts, path, options)
           for which, options in (("base", base), ("changed", changed)) for path in PATHS}
    for which in ("base", "changed"):
        close(got[which, "executor"], got[which, "plain"], msg=f"{which}: the executor and the plain loop differ")
    if case.option not in METHODS[case.method].extensions:  # an extension builds another method: no sweep axis
        with torch.inference_mode():
            swept, _ = sweep_points(build_method(case.method, **base), model, list(case.texts),
                                    [{}, {case.option: case.value}])
        close(swept[0], got["base", "plain"], msg="base: a sweep and a separate run differ")
        close(swept[1], got["changed", "plain"], msg="changed: a sweep and a separate run differ")
    for path in PATHS:
        moved = float((got["changed", path] - got["base", path]).abs().max())
        if case.expect == "invariant":
            assert moved < ATOL * max(1.0, float(got["base", path].abs().max())), f"{path}: moved by {moved:.2e}"
        else:
            assert moved > MOVES, f"{path}: {case.option}={case.value!r} moved the embedding by {moved:.2e} only"
    if case.expect == "invariant":  # it must still be read: the method's input differs
        ids = [build_method(case.method, **options).passes(model, list(case.texts))[0].batch.input_ids
               for options in (base, changed)]
        assert not torch.equal(*ids), f"{case.option}={case.value!r} changes neither the input nor the embedding"
