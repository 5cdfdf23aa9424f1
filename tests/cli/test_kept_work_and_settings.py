"""No job destroys another's kept work, nothing is saved or cached under the wrong settings.
docs/reliability.md rows 30-40 list these tests by their class numbers (the number in each test's
name); each fails on the code without its fix."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import InputError, MinidecoderError
from cli_runner import cli
from test_reliability_cli import NO_MODEL, ctrl_c, stalled, sts_data

NEVER = Path("/nonexistent/never")  # the stalled runs below stall for good (until signalled)


# ---- 1. an interrupted eval and a sweep on one --output -------------------------------------------------------
def test_1_an_eval_and_a_sweep_on_one_output_never_remove_each_others_kept_work(tiny_llama, tmp_path,
                                                                                capsys) -> None:
    data = sts_data(tmp_path / "sts", pairs=1100)  # eval: 2,200 sentences, three chunks of 1,024
    out, work = tmp_path / "x", tmp_path / ".x.json.partial"
    evaluate = ["eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress",
                "--batch-size", "64", "--output", str(out)]
    sweep = ["sweep", "--method", "mean", "--layers", "1,2", "--limit", "30", "--data", str(data), "--no-progress",
             "--output", str(out)]  # 60 dev sentences: two batches of 32
    model = ["--model", str(tiny_llama)]

    ctrl_c("minidecoder.running.embedding:embed_rows:1", NEVER, *evaluate, *model)  # one chunk of the eval kept
    kept = sorted(work.rglob("chunk-*.npy"))
    assert len(kept) == 1
    code, err = cli(capsys, *sweep, "--model", NO_MODEL)
    assert code == 2 and str(work) in err and "minidecoder eval sts" in err and f"delete {work}" in err, err
    assert NO_MODEL not in err  # refused before the model loads
    assert sorted(work.rglob("chunk-*.npy")) == kept
    assert cli(capsys, *evaluate, *model)[0] == 0  # the eval resumes from its own chunk
    assert json.loads((tmp_path / "x.json").read_text())["results"]["resumed_chunks"] == 1

    (tmp_path / "x.json").unlink()
    (tmp_path / "x.md").unlink()
    ctrl_c("minidecoder.evaluation.sweep:sweep_points:1", NEVER, *sweep, *model)  # one batch of the sweep kept
    kept = sorted(work.rglob("chunk-*.npy"))
    assert len(kept) == 1
    code, err = cli(capsys, *evaluate, "--model", NO_MODEL)
    assert code == 2 and str(work) in err and "minidecoder sweep" in err and NO_MODEL not in err, err
    assert sorted(work.rglob("chunk-*.npy")) == kept
    assert cli(capsys, *sweep, *model)[0] == 0
    assert json.loads((tmp_path / "x.json").read_text())["sweep"]["cost"]["resumed_batches"] == 1
    assert not work.exists()


# ---- 2. no output or sidecar is an input -------------------------------------------------------------------
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_2_an_output_or_sidecar_that_is_the_input_is_refused(tiny_llama, tmp_path, capsys, overwrite) -> None:
    texts = '{"text": "first"}\n{"text": "second"}\n'
    (tmp_path / "inp.npy.json").write_text(texts)  # the sidecar `--output inp.npy` writes
    (tmp_path / "link.txt").symlink_to(tmp_path / "inp.npy.json")
    for source, output in (("inp.npy.json", "inp.npy"), ("link.txt", "inp.npy"), ("inp.npy.json", "./inp.npy")):
        code, err = cli(capsys, "embed", "--method", "mean", "--input", str(tmp_path / source), "--output",
                        str(tmp_path / output), *overwrite, "--model", NO_MODEL)
        assert code == 2 and "is the input" in err and "--overwrite" not in err and NO_MODEL not in err, err
    from minidecoder.running.jobs import run_embedding_job
    with pytest.raises(MinidecoderError, match="is the input"):
        run_embedding_job(minidecoder.load(tiny_llama, progress=False), "mean", tmp_path / "inp.npy.json",
                          tmp_path / "inp.npy", overwrite=True)
    assert (tmp_path / "inp.npy.json").read_text() == texts and not (tmp_path / "inp.npy").exists()


# ---- 3, 4. one configuration, for MTEB's cache key and for the sentence-transformers save ---------------------
def test_3_mteb_keys_a_score_on_truncate_prompts_and_an_in_memory_edit(tiny_llama) -> None:
    pytest.importorskip("mteb")
    from minidecoder.integrations.mteb import MtebEncoder

    model = minidecoder.load(tiny_llama, progress=False)
    revision = lambda **kwargs: MtebEncoder(minidecoder.SentenceEncoder(model, "mean", **kwargs)).mteb_model_meta.revision
    plain = revision()
    assert revision() == plain  # the key is stable
    others = [revision(truncate=3), revision(prompts={"q": "query: "}, default_prompt_name="q")]
    with torch.no_grad():
        model.norm.weight[0] += 1.0  # edited in memory: the files on disk are unchanged
    others.append(revision())
    assert len({plain, *others}) == 4, others


def test_4_sentence_transformers_save_keeps_dtype_truncate_prompts_or_refuses(tiny_llama, tmp_path) -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    texts = ["a man plays a flute in the park today.", "The cat sat. It purred."]
    encoder = minidecoder.SentenceEncoder(tiny_llama, "mean", dtype="bfloat16", truncate=5,
                                          prompts={"q": "query: "}, default_prompt_name="q")
    original = SentenceTransformer(modules=[MinidecoderModule(encoder)], device="cpu")
    original.save(str(tmp_path / "saved"))
    reloaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    assert reloaded[0].encoder.model.dtype == torch.bfloat16 and reloaded[0].encoder.truncate == 5
    np.testing.assert_array_equal(reloaded.encode(texts), original.encode(texts))

    with torch.no_grad():
        encoder.model.norm.weight[0] += 1.0
    with pytest.raises(MinidecoderError, match="changed in memory"):
        original.save(str(tmp_path / "edited"))


# ---- 5. a folder with model.safetensors and a sharded index -----------------------------------------------------
def test_5_a_folder_with_a_single_file_and_shards_loads_what_transformers_loads_and_says_so(tiny_llama_copy) -> None:
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    folder = tiny_llama_copy
    stale = {name: tensor * 2 for name, tensor in load_file(folder / "model.safetensors").items()}  # other weights
    save_file(stale, folder / "model-00001-of-00001.safetensors", metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {name: "model-00001-of-00001.safetensors" for name in stale}}))
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with pytest.warns(UserWarning, match="both model.safetensors and model.safetensors.index.json"):
        ours = minidecoder.load(folder, progress=False)(ids).logits  # (1, T, V)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(ours, theirs(ids).logits, rtol=0, atol=1e-5)


# ---- 7. the truncate an error names fits, and is the largest that does ------------------------------------------
@pytest.fixture(scope="module")
def short(tmp_path_factory, tiny_llama: Path):
    """The tiny llama (one token per character) with a 128-token context, loaded."""
    import shutil
    folder = Path(shutil.copytree(tiny_llama, tmp_path_factory.mktemp("ctx") / "m"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    return minidecoder.load(folder, progress=False)


@pytest.mark.parametrize("method", ["tp", "reba", "echo", "prompteol", "mean"])
@pytest.mark.parametrize("length", [100, 400])  # past the context with the method's prompt only, or alone
def test_7_the_truncate_named_fits_and_is_the_largest_that_does(short, method, length) -> None:
    import re
    import warnings

    text = ("a cat is here. " * 60)[:length]
    options = {"tp": {"end": 3}}.get(method, {})
    calls = {"embed": lambda **k: minidecoder.embed(short, [text], method, **options, **k),
             "explain": lambda **k: minidecoder.explain(short, text, method, **options, **k)}
    for name, call in calls.items():
        if length == 100 and method == "mean":
            continue  # mean has no prompt: 100 tokens fit
        with pytest.raises(MinidecoderError) as error:
            call()
        fits = int(re.search(r"truncate=(\d+)", str(error.value)).group(1))
        if method in ("reba", "echo"):
            assert "repetition of the text" in str(error.value), str(error.value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(truncate=fits)  # fits
            with pytest.raises(MinidecoderError):
                call(truncate=fits + 1)  # and is the largest that does


# ---- 8. sweep grids --------------------------------------------------------------------------------------------
def test_8_grid_values_split_at_top_level_commas_and_keep_their_spaces() -> None:
    from minidecoder.evaluation.sweep import parse_values

    assert parse_values("[0,1],[2,3]") == [[0, 1], [2, 3]]
    assert parse_values('{"a": 1, "b": 2},3') == [{"a": 1, "b": 2}, 3]
    assert parse_values("token: ") == ["token: "]
    assert parse_values('"x, y", z') == ["x, y", "z"]
    assert parse_values("cot, pretended_cot") == ["cot", "pretended_cot"]
    assert parse_values("20, 25,-1") == [20, 25, -1]


def test_8_a_sweep_keeps_a_text_values_space(tiny_llama, tmp_path, capsys) -> None:
    data = sts_data(tmp_path / "sts")
    code, err = cli(capsys, "sweep", "--method", "tp", "--opt", "end=2", "--grid", "pst_init=token: ,uniform",
                    "--data", str(data), "--no-progress", "--output", str(tmp_path / "s"), "--model", str(tiny_llama))
    assert code == 0, err
    points = json.loads((tmp_path / "s.json").read_text())["sweep"]["points"]
    assert [p["options"]["pst_init"] for p in points] == ["token: ", "uniform"]


@pytest.mark.parametrize("argv, said", [
    (["--method", "prompteol", "--cp-steer", "4"], "--cp-steer 4 sweeps the option 'steer_layer'"),
    (["--method", "cp", "--grid", "nope=4"], "method cp has no option 'nope'"),
])
def test_8_an_axis_the_method_lacks_is_refused_before_the_model_loads(tmp_path, capsys, argv, said) -> None:
    code, err = cli(capsys, "sweep", *argv, "--data", str(sts_data(tmp_path / "sts")), "--output",
                    str(tmp_path / "s"), "--model", NO_MODEL)
    assert code == 2 and said in err and "its options are" in err and NO_MODEL not in err, err


@pytest.mark.parametrize("axis, said", [(["--cp-steer", "99"], "steer_layer 99"),
                                        (["--cp-alpha", "abc"], "alpha=0.5")])
def test_8_a_point_the_method_refuses_gets_the_methods_own_way_out(tiny_llama, tmp_path, capsys, axis, said) -> None:
    code, err = cli(capsys, "sweep", "--method", "cp", *axis, "--data", str(sts_data(tmp_path / "sts")),
                    "--output", str(tmp_path / "s"), "--model", str(tiny_llama))
    assert code == 2 and said in err and "layer rules" not in err, err


def test_8_a_negative_value_after_a_space_names_the_equals_form(capsys) -> None:
    code, err = cli(capsys, "sweep", "--method", "prompteol", "--layers", "-1,30")
    assert code == 2 and "write --layers=-1,30" in err, err


# ---- 9. one default batch ----------------------------------------------------------------------------------------
def test_9_minidecoder_embed_fills_batches_by_tokens_like_every_other_entry(tiny_llama, monkeypatch) -> None:
    import inspect

    from minidecoder.running import embedding

    model = minidecoder.load(tiny_llama, progress=False)
    seen = []
    real = embedding.plan_batches
    monkeypatch.setattr(embedding, "plan_batches", lambda order, lengths, batch_size, *rest:
                        seen.append(batch_size) or real(order, lengths, batch_size, *rest))
    minidecoder.embed(model, ["one text", "another"], "mean")
    minidecoder.SentenceEncoder(model, "mean").encode(["one text", "another"])
    embedding.embed(model, ["one text", "another"], "mean")
    assert seen == [None, None, None]  # the token budget, everywhere
    assert inspect.signature(minidecoder.embed).parameters["batch_size"].default is None


# ---- 10. the sweep's cost report -------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["prompteol", "mean"])  # a shared prompt prefix (run once per batch), or none
def test_10_a_one_point_sweep_costs_what_a_separate_run_costs(tiny_llama, tmp_path, capsys, method) -> None:
    data = sts_data(tmp_path / "sts")
    code, err = cli(capsys, "sweep", "--method", method, "--layers", "2", "--data", str(data), "--no-progress",
                    "--batch-size", "8", "--output", str(tmp_path / "s"), "--model", str(tiny_llama))
    assert code == 0, err
    cost = json.loads((tmp_path / "s.json").read_text())["sweep"]["cost"]
    assert cost["blocks_computed"] == cost["blocks_naive"]  # one point shares nothing: the same forwards
    assert "fewer" not in (tmp_path / "s.md").read_text()


def test_10_the_ratio_never_calls_a_larger_count_fewer() -> None:
    from minidecoder.evaluation.sweep import _ratio_text

    assert _ratio_text({"ratio": 0.5}) == "0.500 of the naive grid, 2.0x fewer"
    assert "fewer" not in _ratio_text({"ratio": 1.0}) and "fewer" not in _ratio_text({"ratio": 1.04})
    assert "more" in _ratio_text({"ratio": 1.04})


# ---- 11. raw or misdirected errors -------------------------------------------------------------------------------
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] + '\\n' }}{% endfor %}"


@pytest.mark.parametrize("messages, said", [
    ([{"role": 5, "content": "hi"}], "message 0 has the role 5, not a text"),
    ([{"role": "user", "content": "hi"}, {"role": None, "content": "x"}], "message 1 has the role None"),
    ([{"role": "user", "content": 5}], "could not render these messages"),
])
def test_11_chat_messages_of_the_wrong_type_are_named(tiny_llama, messages, said) -> None:
    tokenizer = minidecoder.load(tiny_llama, progress=False).tokenizer
    with pytest.raises(InputError, match=said):
        tokenizer.apply_chat_template(messages, chat_template=TEMPLATE)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=TEMPLATE, tokenize=False) \
        == "<user>hi\n"


def test_11_encode_of_a_generator_says_pass_a_list(tiny_llama) -> None:
    encoder = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama, progress=False), "mean")
    for inputs in ((t for t in ["a", "b"]), {"a", "b"}, range(2)):
        with pytest.raises(MinidecoderError, match=r"pass a list: encode\(list\(texts\)\)"):
            encoder.encode(inputs)
    assert encoder.encode(["a", "b"]).shape == (2, encoder.embedding_dim)


@pytest.mark.parametrize("value", [5, [{"name": "default"}], {"default": "x"}])
def test_11_a_chat_template_that_is_not_a_text_is_refused_at_load(tiny_llama_copy, value) -> None:
    path = tiny_llama_copy / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "chat_template": value}))
    with pytest.raises(MinidecoderError, match="chat_template is") as error:
        minidecoder.load(tiny_llama_copy, progress=False)
    assert "tokenizer_config.json" in str(error.value) and "fix or remove the key" in str(error.value)


def test_11_resuming_eval_with_another_limit_names_the_flag(tiny_llama, tmp_path, capsys) -> None:
    data = sts_data(tmp_path / "sts", pairs=1100)
    argv = ["eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress",
            "--batch-size", "64", "--output", str(tmp_path / "x")]
    ctrl_c("minidecoder.running.embedding:embed_rows:1", NEVER, *argv, "--model", str(tiny_llama))
    code, err = cli(capsys, *argv, "--limit", "1000", "--model", NO_MODEL)
    assert code == 2 and "--limit was None, now 1000" in err and "input." not in err, err
    assert f"--model was {str(tiny_llama)!r}, now {NO_MODEL!r}" in err, err  # refused before the model loads
    assert len(list((tmp_path / ".x.json.partial").rglob("chunk-*.npy"))) == 1


# ---- 12. leftovers -----------------------------------------------------------------------------------------------
def test_12_sigterm_leaves_no_lock_file_and_sigkills_are_cleaned_by_the_next_claim(tiny_llama, tmp_path) -> None:
    from minidecoder.output_files import claim_outputs

    data = sts_data(tmp_path / "sts")
    argv = ["eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress",
            "--model", str(tiny_llama), "--output"]
    run = stalled("minidecoder.running.jobs:embed_resumably:0", NEVER, *argv, str(tmp_path / "a"))
    assert sorted(p.name for p in tmp_path.glob(".*.lock")) == [".a.json.lock", ".a.md.lock"]
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143 and "Traceback" not in err, err
    assert not list(tmp_path.glob(".*.lock")) and not (tmp_path / ".a.json.partial").exists()

    (tmp_path / ".notes.lock").write_text("12345")  # another program's lock file: never ours to remove
    killed = stalled("minidecoder.running.jobs:embed_resumably:0", NEVER, *argv, str(tmp_path / "b"))
    live = stalled("minidecoder.running.jobs:embed_resumably:0", NEVER, *argv, str(tmp_path / "c"))
    try:
        killed.kill()
        killed.communicate(timeout=60)
        assert (tmp_path / ".b.json.lock").exists()  # SIGKILL: no `finally` ran
        with claim_outputs([tmp_path / "d.json"]):  # the next claim in that folder
            pass
        assert sorted(p.name for p in tmp_path.glob(".*.lock")) == [".c.json.lock", ".c.md.lock", ".notes.lock"]
    finally:
        live.kill()
        live.communicate(timeout=60)


def test_12_a_ctrl_c_that_kept_nothing_leaves_no_texts_behind(tiny_llama, tmp_path) -> None:
    data = sts_data(tmp_path / "sts")
    err = ctrl_c("minidecoder.running.embedding:embed_rows:0", NEVER, "eval", "sts", "--method", "mean", "--tasks",
                 "STSBenchmark", "--data", str(data), "--no-progress", "--output", str(tmp_path / "a"), "--model",
                 str(tiny_llama))
    assert "nothing was kept" in err
    assert not (tmp_path / ".a.json.partial").exists() and not list(tmp_path.glob(".*.lock"))


def test_12_sigterm_inside_an_embedding_job_keeps_its_chunks_and_exits_143(tiny_llama, tmp_path) -> None:
    """The job re-raises the stop as its own line (what it kept); the status still says SIGTERM, not Ctrl-C."""
    data = sts_data(tmp_path / "sts", pairs=1100)  # 2,200 sentences: three chunks of 1,024
    argv = ["eval", "sts", "--method", "mean", "--tasks", "STSBenchmark", "--data", str(data), "--no-progress",
            "--batch-size", "64", "--model", str(tiny_llama), "--output", str(tmp_path / "a")]
    run = stalled("minidecoder.running.embedding:embed_rows:1", NEVER, *argv)  # the first chunk is saved
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143 and "Traceback" not in err, err
    assert "1 of 3 chunks" in err, err
    assert len(list((tmp_path / ".a.json.partial").rglob("chunk-*.npy"))) == 1
