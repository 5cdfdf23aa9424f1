"""The audit view (minidecoder.audit.explain, `minidecoder explain`, docs/tour.md) on the tiny llama:
the record describes the method's own computation (same embedding as `embed`, same fused matrix as
`reba.fused_attention`, positions that are the tokenization) and its baselines are what they claim."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import minidecoder
from minidecoder.cli import main
from minidecoder.methods.inputs import encode_prompts
from minidecoder.methods.layers import resolve_output_layer
from minidecoder.fast.forward import executor
from minidecoder.methods.reba import encode_repeated, fused_attention
from minidecoder.methods.text import fill_template
from minidecoder.methods.tp import PST, tp_templates

from repo_paths import REPO as ROOT
TEXT = "a man plays a flute."
TINY = {  # 4 blocks: small ranges
    "tp": dict(layer=-1, start=1, end=3),
    "htp": dict(layer=-2, start=1, end=3),
    "cp": dict(layer=-1, steer_layer=1, alpha=0.7),
    "reba": dict(),
    "prompteol": dict(),
    "metaeol": dict(),
}


@pytest.fixture(scope="module")
def model(tiny_llama: Path):
    return minidecoder.load(tiny_llama, progress=False)


@pytest.mark.parametrize("method", list(TINY) + ["cp+tp"])
def test_explained_embedding_equals_embed(model, method: str) -> None:
    name, options = ("cp", dict(TINY["cp"], tp=True, start=0, end=1)) if method == "cp+tp" else (method, TINY[method])
    record = minidecoder.explain(model, TEXT, name, **options)
    expected = minidecoder.embed(model, [TEXT], name, **options)[0]
    torch.testing.assert_close(record.embedding, expected, rtol=0, atol=0)


def test_positions_are_the_tokenization(model) -> None:
    tokenizer = model.tokenizer
    record = minidecoder.explain(model, TEXT, "tp", **TINY["tp"])
    (tp_pass,) = record.passes
    ids = [i for _, i, _ in tp_pass.tokens]
    assert [q for q, _, _ in tp_pass.tokens] == list(range(len(ids)))
    (template,) = tp_templates("prompteol", 1)
    with_pst = tokenizer.with_placeholders(PST)
    assert ids == with_pst.encode(fill_template(template, record.text))  # the filled prompt, tokenized anew
    pst = with_pst.token_to_id(PST)
    (act,) = tp_pass.acts_on
    assert ids[act["position"]] == pst and act["source"] == len(ids) - 1  # <PST> <- the last token
    assert [(e["block"], e["target"], e["source"]) for e in tp_pass.interventions] == [
        (1, act["position"], len(ids) - 1), (2, act["position"], len(ids) - 1)]
    assert tp_pass.blocks_run == [0, 1, 2, 3]

    prompt_pass = minidecoder.explain(model, TEXT, "prompteol").passes[0]
    batch = encode_prompts(tokenizer, 'This sentence : "{text}" means in one word:"', [TEXT])
    assert [i for _, i, _ in prompt_pass.tokens] == batch.input_ids[0].tolist()

    reba = minidecoder.explain(model, TEXT, "reba").passes[0]
    batch = encode_repeated(tokenizer, [TEXT], 2)
    assert [i for _, i, _ in reba.tokens] == batch.input_ids[0].tolist()


def test_copy_written_row_is_the_source_row(model) -> None:
    """Each recorded copy's written row is the source's row, so its norm equals the source's norm in
    hidden_states[block] of the same forward."""
    record = minidecoder.explain(model, TEXT, "tp", layer=-1, start=1, end=2)
    (event,) = record.passes[0].interventions
    # the source row before block 1 is hidden_states[1][last]; TP with no copies (end=start) reads it
    source = minidecoder.embed(model, [TEXT], "tp", layer=1, start=1, end=1)[0]
    assert event["block"] == 1 and event["written_norm"] == pytest.approx(float(source.norm()), rel=1e-5)
    assert event["written_norm"] != pytest.approx(event["replaced_norm"], rel=1e-3)  # a row really changed
    assert -1 <= event["cosine"] < 0.999


def test_empty_tp_range_writes_nothing_and_equals_its_baseline(model) -> None:
    record = minidecoder.explain(model, TEXT, "tp", layer=-1, start=2, end=2)
    assert record.passes[0].interventions == []
    assert record.net_cosine == pytest.approx(1.0, abs=1e-6)
    assert "PromptEOL with the placeholder" in record.baseline
    assert record.to_dict()["net_effect"]["cosine"] == 1.0


def test_cp_alpha_zero_reports_a_zero_steering_term(model) -> None:
    record = minidecoder.explain(model, TEXT, "cp", layer=-1, steer_layer=1, alpha=0.0)
    (steering,) = record.passes[1].interventions
    assert steering["block"] == 1 and steering["site"] == "z"
    assert steering["total"]["steering_norm"] == 0.0 and steering["total"]["a_norm"] > 0
    assert len(steering["heads"]) == model.config.num_heads
    assert all(h["steering_norm"] == 0.0 for h in steering["heads"])
    aux = record.passes[0]
    assert aux.role == "auxiliary prompt" and aux.blocks_run == [0, 1]  # the auxiliary pass stops after block l


def test_cp_steering_term_is_alpha_times_the_contrast(model) -> None:
    record = minidecoder.explain(model, TEXT, "cp", layer=-1, steer_layer=1, alpha=0.5)
    for head in record.passes[1].interventions[0]["heads"]:
        assert head["steering_norm"] == pytest.approx(0.5 * head["a_minus_b_norm"], rel=1e-5)


def test_reba_fused_matrix_is_the_methods_own(model) -> None:
    record = minidecoder.explain(model, TEXT, "reba")
    batch = encode_repeated(model.tokenizer, [TEXT], 2)
    with torch.inference_mode():  # as `embed` runs it
        A, _ = fused_attention(model, batch, resolve_output_layer(-1, model.num_layers), executor(model.fast_paths))
    assert torch.equal(record.details["fused_attention"], A[0])
    folds = record.passes[0].interventions
    assert [e["block"] for e in folds] == list(range(model.num_layers))
    assert all(e["max_increase"] >= 0 for e in folds) and folds[0]["raised"] > 0
    assert float(record.details["weights"].sum()) == pytest.approx(1.0, abs=1e-5)  # pooled weights sum to 1


def test_early_exit_is_recorded(model) -> None:
    record = minidecoder.explain(model, TEXT, "tp", layer=2, start=0, end=1)
    assert record.passes[0].blocks_run == [0, 1]
    assert "early exit: blocks 2..3 never run" in record.format()


def test_json_record_is_stable_and_rounded(model) -> None:
    first = minidecoder.explain(model, TEXT, "cp", **TINY["cp"]).to_dict()
    second = minidecoder.explain(model, TEXT, "cp", **TINY["cp"]).to_dict()
    assert json.dumps(first) == json.dumps(second)
    assert list(first) == ["model", "method", "text", "layer_convention", "passes", "embedding", "net_effect",
                           "notes"]
    assert list(first["passes"][1]["interventions"][0]) == ["block", "site", "position", "total", "heads"]
    assert all(len(str(x).split(".")[-1]) <= 4 for x in first["embedding"]["first"])


def test_cli_text_json_and_plot(tiny_llama: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    args = ["explain", "--model", str(tiny_llama), "--method", "reba", TEXT]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "hidden_states[4]" in text and "net effect: cosine" in text and "blocks run: 0..3" in text
    png = tmp_path / "reba.png"
    assert main([*args, "--json", "--plot", str(png)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["method"]["method"] == "reba" and len(record["details"]["fused_attention"]) == len(record["passes"][0]["tokens"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for method, opts in (("tp", ["--opt", "layer=-1", "--opt", "end=2"]), ("cp", ["--opt", "steer_layer=1"])):
        png = tmp_path / f"{method}.png"
        assert main(["explain", "--model", str(tiny_llama), "--method", method, *opts, "--plot", str(png), TEXT]) == 0
        assert png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()


def test_cli_bad_option_is_an_error(tiny_llama: Path, capsys) -> None:
    assert main(["explain", "--model", str(tiny_llama), "--method", "cp", "--opt", "steer_layer=9", TEXT]) == 2
    assert "steer_layer 9" in capsys.readouterr().err


@pytest.mark.real
def test_tour_is_current(smollm2: Path) -> None:
    """docs/tour.md is what tools/make_tour.py prints now (words exactly, numbers to the printed precision);
    about 25 CPU seconds: three explains and their baselines on the default model."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "make_tour.py"), "--check"], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_tour_check_catches_a_change() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from make_tour import same
    finally:
        sys.path.pop(0)
    page = "w[  6] 0.0992  '.'\nnet effect: cosine 0.9783"
    assert same(page, "w[  6] 0.0995  '.'\nnet effect: cosine 0.9783") == []  # rounding on another CPU
    assert same(page, "w[  6] 0.1992  '.'\nnet effect: cosine 0.9783")  # a real change
    assert same(page, "w[  6] 0.0992  ','\nnet effect: cosine 0.9783")  # a different token


def test_explain_runs_the_methods_own_passes(model, monkeypatch) -> None:
    """explain restates no method: it runs the method's own passes through the loop's runner, so a change in
    the method's step changes the record as it changes `embed`; nothing is left on the model."""
    from minidecoder.methods.tp import CopyRows

    plain = minidecoder.embed(model, [TEXT], "tp", **TINY["tp"])[0]
    original = CopyRows.before
    monkeypatch.setattr(CopyRows, "before", lambda self, i, h: original(self, i, h) * (1.5 if i in self.blocks else 1))
    record = minidecoder.explain(model, TEXT, "tp", **TINY["tp"])
    altered = minidecoder.embed(model, [TEXT], "tp", **TINY["tp"])[0]
    torch.testing.assert_close(record.embedding, altered, rtol=0, atol=0)
    assert (altered - plain).abs().max() > 1e-3
    assert vars(model).keys() == vars(minidecoder.load(model.source, progress=False)).keys()


def test_reba_reports_one_fold_event_a_block_however_its_heads_are_grouped(model) -> None:
    """The watcher is a step: with ReBA's fold handed a head at a time (blocked fusion) it still reports each
    block once, from A before the block's first head group to A after its last."""
    from minidecoder.fast.options import fast_paths_overridden

    with fast_paths_overridden(model, blocked_fusion_from=0):
        grouped = minidecoder.explain(model, TEXT, "reba")
        embedded = minidecoder.embed(model, [TEXT], "reba")[0]
    with fast_paths_overridden(model, blocked_fusion_from=None):
        whole = minidecoder.explain(model, TEXT, "reba")
    events, expected = grouped.passes[0].interventions, whole.passes[0].interventions
    assert [e["block"] for e in events] == list(range(model.num_layers))
    assert [e["raised"] for e in events] == [e["raised"] for e in expected]
    assert [e["total_increase"] for e in events] == pytest.approx([e["total_increase"] for e in expected], rel=1e-4)
    torch.testing.assert_close(grouped.embedding, embedded, rtol=0, atol=0)


@pytest.mark.parametrize("method", ["tp", "cp", "reba"])
def test_with_every_fast_path_off_explain_runs_the_plain_loop(model, monkeypatch, method: str) -> None:
    """No executor at all: the watched steps run in methods.loop.Forward, and the record is still embed's."""
    from minidecoder.fast import forward as executor_module
    from minidecoder.fast.options import fast_paths_overridden

    monkeypatch.setattr(executor_module.FastForward, "__init__", lambda *a, **k: pytest.fail("the executor ran"))
    with fast_paths_overridden(model, prefix_cache=False, explicit_attention=False, blocked_fusion_from=None):
        record = minidecoder.explain(model, TEXT, method, **TINY[method])
        expected = minidecoder.embed(model, [TEXT], method, **TINY[method])[0]
    torch.testing.assert_close(record.embedding, expected, rtol=0, atol=0)
    assert record.passes[-1].blocks_run and record.passes[-1].interventions  # the watcher saw the step act


def test_a_model_name_or_a_method_of_another_type_is_named(model, tiny_llama: Path) -> None:
    """Found: `explain("smollm2-135m-instruct", text)` failed as "'str' object has no attribute 'tokenizer'" and
    `explain(model, text, 5)` as "'int' object has no attribute 'check'"."""
    from minidecoder.errors import ArgumentTypeError

    for given in (tiny_llama, str(tiny_llama), None):
        with pytest.raises(ArgumentTypeError, match=r"explain\(model=...\) got a .*, not a loaded model") as raised:
            minidecoder.explain(given, TEXT, "mean")
        assert "minidecoder.load(" in raised.value.fix
    with pytest.raises(ArgumentTypeError, match=r"method=5 \(int\) is neither a method name nor a Method"):
        minidecoder.explain(model, TEXT, 5)


def test_cli_overwrite_or_wait_without_a_plot_is_refused(tiny_llama: Path, capsys) -> None:
    """Found: `minidecoder explain --overwrite TEXT` ran and printed, the flag acting on nothing."""
    for flags, said in ((["--overwrite"], "--overwrite acts on the --plot file"),
                        (["--overwrite", "--wait"], "--overwrite and --wait act on the --plot file")):
        assert main(["explain", "--model", str(tiny_llama), "--method", "mean", *flags, TEXT]) == 2
        err = capsys.readouterr().err
        assert said in err and "add --plot FILE.png" in err


def test_plot_explanation_names_a_taken_path_or_an_unknown_format(model, tmp_path: Path) -> None:
    """Found: from Python, `plot_explanation(record, existing)` said the file "appeared while this run was working
    (another program wrote it)", as it did of a folder, and a .txt name failed as matplotlib's ValueError."""
    pytest.importorskip("matplotlib")
    from minidecoder.audit.plot import plot_explanation
    from minidecoder.errors import MinidecoderError, OutputError

    record = minidecoder.explain(model, TEXT, "mean")
    kept = tmp_path / "kept.png"
    kept.write_bytes(b"mine")
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(OutputError, match="kept.png already exists; it is never overwritten silently"):
        plot_explanation(record, kept)
    assert kept.read_bytes() == b"mine"
    with pytest.raises(OutputError, match="folder.png is a folder"):
        plot_explanation(record, tmp_path / "folder.png", overwrite=True)
    with pytest.raises(MinidecoderError, match="matplotlib cannot write a .txt figure"):
        plot_explanation(record, tmp_path / "record.txt")
    assert plot_explanation(record, kept, overwrite=True).read_bytes()[:4] == b"\x89PNG"
