"""Bad checkpoints get a clear answer: a `MinidecoderError` whose message names the problem.

Each test breaks one thing in a copy of a tiny checkpoint and checks the words of the message (the
file, key, tensor or count at fault), not merely that something raised. Also: checkpoint loading
never executes code from a file (no pickle, ever).
"""
from __future__ import annotations

import json
import shutil
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import minidecoder
from minidecoder.errors import CheckpointError, ConfigError, InputError, MinidecoderError, TokenizerError

PACKAGE = Path(minidecoder.__file__).parent


@pytest.fixture
def folder(tiny_llama_copy: Path) -> Path:
    return tiny_llama_copy


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def edit_weights(folder: Path, edit) -> None:
    state = load_file(folder / "model.safetensors")
    edit(state)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def load_error(folder: Path, kind: type[MinidecoderError] = MinidecoderError, **kwargs) -> MinidecoderError:
    with pytest.raises(kind) as caught:
        minidecoder.load(folder, progress=False, **kwargs)
    assert caught.value.fix, "every error says how to get out"
    return caught.value


def test_the_pristine_copy_loads(folder: Path) -> None:
    assert minidecoder.load(folder).num_layers == 4  # so every failure below is the breakage's doing


# ---- the folder ----------------------------------------------------------------------------------------
def test_folder_without_config_json(folder: Path) -> None:
    (folder / "config.json").unlink()
    error = load_error(folder, ConfigError)
    assert "no config.json" in error.problem and str(folder) in error.problem


def test_folder_without_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    error = load_error(folder, CheckpointError)
    assert "no model.safetensors" in error.problem


def test_config_json_that_is_not_json_or_not_an_object(folder: Path) -> None:
    (folder / "config.json").write_text("{")
    assert "is not valid JSON" in load_error(folder, ConfigError).problem
    (folder / "config.json").write_text("[1, 2]")
    assert "config.json does not hold a JSON object" in load_error(folder, ConfigError).problem  # names the file


# ---- the weights ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_truncated_safetensors(folder: Path, cut: float) -> None:
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    error = load_error(folder, CheckpointError)
    assert "model.safetensors" in error.problem and "truncated or corrupt" in error.fix


@pytest.mark.parametrize("damage", ["header", "length", "tiny"])
def test_corrupt_safetensors(folder: Path, damage: str) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "header":
        data[8:24] = b"#" * 16  # the JSON header is garbage
    elif damage == "length":
        data[:8] = (1 << 40).to_bytes(8, "little")  # a header length far past the end of the file
    else:
        data = bytearray(b"abc")
    path.write_bytes(bytes(data))
    error = load_error(folder, CheckpointError)
    assert "is not a readable safetensors file" in error.problem


def test_shard_named_in_the_index_but_missing(folder: Path) -> None:
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(state)
    first, second = names[: len(names) // 2], names[len(names) // 2:]
    save_file({n: state[n] for n in first}, folder / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in second})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    error = load_error(folder, CheckpointError)
    assert "model-00002-of-00002.safetensors" in error.problem and "missing" in error.problem


def test_tensor_of_the_wrong_shape(folder: Path) -> None:
    edit_weights(folder, lambda s: s.update({"model.layers.1.mlp.up_proj.weight": torch.zeros(63, 32)}))
    error = load_error(folder, CheckpointError)
    assert "model.layers.1.mlp.up_proj.weight" in error.problem and "(63, 32)" in error.problem
    assert "(64, 32)" in error.problem


def test_tensor_of_the_wrong_dtype(folder: Path) -> None:
    edit_weights(folder, lambda s: s.update({"model.norm.weight": torch.ones(32, dtype=torch.int8)}))
    error = load_error(folder, CheckpointError)
    assert "model.norm.weight" in error.problem and "torch.int8" in error.problem


def test_missing_and_unexpected_tensors_are_listed(folder: Path) -> None:
    def edit(state):
        state["model.layers.9.extra.weight"] = state.pop("model.layers.3.self_attn.q_proj.weight")
    edit_weights(folder, edit)
    error = load_error(folder, CheckpointError)
    assert "missing: model.layers.3.self_attn.q_proj.weight" in error.problem
    assert "unexpected: model.layers.9.extra.weight" in error.problem


def test_config_that_does_not_match_the_weights(folder: Path) -> None:
    edit_config(folder, num_hidden_layers=5)
    error = load_error(folder, CheckpointError)
    assert "5 layers" in error.problem and "model.layers.4." in error.problem


# ---- the config ----------------------------------------------------------------------------------------
def test_unsupported_model_type(folder: Path) -> None:
    edit_config(folder, model_type="gpt_neox")
    error = load_error(folder, ConfigError)
    assert "unsupported model_type 'gpt_neox'" in error.problem and "llama" in error.fix


def test_unknown_numerics_affecting_key_is_named(folder: Path) -> None:
    edit_config(folder, residual_multiplier=0.5)  # would change every hidden state if it were honoured
    error = load_error(folder, ConfigError)
    assert "residual_multiplier" in error.problem and "ignore_config_keys" in error.fix
    assert minidecoder.load(folder, ignore_config_keys=("residual_multiplier",)).num_layers == 4  # the way out


@pytest.mark.parametrize("key, value, words", [
    ("num_attention_heads", 0, "'num_attention_heads' is 0; it must be a positive integer"),
    ("num_key_value_heads", 0, "'num_key_value_heads' is 0; it must be a positive integer"),  # was: ZeroDivisionError
    ("head_dim", 0, "'head_dim' is 0; it must be a positive integer"),  # was: read as absent, and loaded
    ("head_dim", None, None),  # null: the default hidden_size // num_attention_heads, as transformers reads it
    ("hidden_size", "32", "hidden_size is '32' (a JSON string); it must be an integer"),  # a string is not a size
    ("hidden_size", "wide", "hidden_size is 'wide' (a JSON string); it must be an integer"),
    ("rope_parameters", {"rope_type": "linear", "factor": -2.0}, "RoPE factor"),
    ("rope_parameters", {"rope_type": "ntk-magic"}, "unsupported RoPE type 'ntk-magic'"),
])
def test_config_values_of_the_wrong_type_or_range(folder: Path, key: str, value, words: str | None) -> None:
    edit_config(folder, **{key: value})
    if words is None:
        minidecoder.load(folder)
        return
    assert words in load_error(folder, ConfigError).problem


# ---- the tokenizer -------------------------------------------------------------------------------------
def test_tokenizer_missing_loads_for_ids_only(folder: Path, capsys) -> None:
    """config.json + safetensors are enough for id-level use; text-level calls name the missing files."""
    import torch

    import minidecoder.cli as cli

    complete = minidecoder.load(folder)
    ids = torch.tensor([complete.tokenizer.encode("ids only")])
    (folder / "tokenizer.json").unlink()
    with pytest.warns(UserWarning, match="token ids only"):
        model = minidecoder.load(folder)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, complete(ids).logits, rtol=0, atol=0)
    assert minidecoder.generate(model, ids[0].tolist(), 4) == minidecoder.generate(complete, ids[0].tolist(), 4)
    for call in (lambda: model.tokenizer.encode("text"), lambda: minidecoder.embed(model, ["text"], "mean"),
                 lambda: minidecoder.SentenceEncoder(model, "mean").encode("text")):
        with pytest.raises(TokenizerError, match="no tokenizer.json or tokenizer.model") as caught:
            call()
        assert "copy the checkpoint's tokenizer files" in caught.value.fix
    with pytest.warns(UserWarning):
        assert cli.main(["generate", "text", "--model", str(folder)]) == 2
    assert "no tokenizer.json or tokenizer.model" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["more tokens", "an id past the end"])
def test_tokenizer_with_more_ids_than_the_vocabulary(folder: Path, how: str) -> None:
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    if how == "more tokens":  # 99 ids + 40 added tokens > 128 embedding rows
        tokenizer["added_tokens"] += [{"id": 99 + i, "content": f"<extra_{i}>", "single_word": False, "lstrip": False,
                                       "rstrip": False, "normalized": False, "special": True} for i in range(40)]
    else:  # few ids, but one of them indexes past the embedding table
        tokenizer["model"]["vocab"]["~~"] = 300
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    error = load_error(folder, TokenizerError)
    assert re.search(r"has \d+ ids \(the largest \d+\) but the model's embedding has 128 rows", error.problem), \
        error.problem


def test_tokenizer_json_unreadable(folder: Path) -> None:
    (folder / "tokenizer.json").write_text('{"version": ')
    assert "tokenizer.json could not be read" in load_error(folder, TokenizerError).problem


# ---- never unpickle ------------------------------------------------------------------------------------
def test_pickle_weights_are_never_loaded(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    marker = folder / "pwned"
    # A pickle that would create `marker` if anything unpickled it.
    import pickle

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Exploit()))
    error = load_error(folder, CheckpointError)
    assert "pytorch_model.bin" in error.fix and "never loads" in error.fix and "safetensors" in error.fix
    assert not marker.exists()


def test_the_package_has_no_pickle_load_call() -> None:
    pattern = re.compile(r"\b(torch\.load|pickle\.loads?|cPickle\.loads?|dill\.loads?|joblib\.load|numpy\.load|np\.load)\s*\(")
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = pattern.search(line)
            if match and not line.lstrip().startswith("#"):
                call = match.group(1)
                # numpy may load only with pickling off (its default, stated explicitly is better still)
                if call in ("np.load", "numpy.load") and "allow_pickle=True" not in line:
                    continue
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not offenders, "code that can unpickle a file:\n" + "\n".join(offenders)


# ---- GGUF (minidecoder convert) ------------------------------------------------------------------------
def test_gguf_of_an_unsupported_architecture_or_quantization(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny_gguf

    from minidecoder.sources.convert.converter import convert_gguf

    write_tiny_gguf(tmp_path / "phi3.gguf", "phi3")
    with pytest.raises(CheckpointError) as caught:
        convert_gguf(tmp_path / "phi3.gguf", tmp_path / "out-phi3")
    assert "GGUF architecture 'phi3' is not supported" in caught.value.problem
    write_tiny_gguf(tmp_path / "tq.gguf", "llama", quant="TQ1_0")
    with pytest.raises(CheckpointError) as caught:
        convert_gguf(tmp_path / "tq.gguf", tmp_path / "out-tq")
    assert "TQ1_0" in caught.value.problem and "Q4_K" in caught.value.fix
    assert not (tmp_path / "out-phi3").exists() and not (tmp_path / "out-tq").exists()  # nothing half-written


@pytest.mark.parametrize("device", ["meta", "gpu", "cuda:x"])
def test_unknown_device_is_named_before_any_file_is_read(folder: Path, device: str) -> None:
    with pytest.raises(MinidecoderError, match=re.escape(f"device {device!r} is not one minidecoder runs on")):
        minidecoder.load(folder, device=device, progress=False)


@pytest.mark.parametrize("option, value", [("compile", "false"), ("pack_weights", "no"), ("graphs", 1),
                                           ("fused", "0"), ("buckets", "true"), ("check_finite", None),
                                           ("ignore_config_keys", "rope_scaling"), ("ignore_config_keys", 5)])
def test_load_switches_of_another_type_are_refused(folder: Path, option: str, value) -> None:
    """compile="false" turned the path on (bool("false") is True); a key list given as one string was read as
    its characters, and an integer raised a bare TypeError."""
    with pytest.raises(MinidecoderError, match=rf"load\({option}="):
        minidecoder.load(folder, progress=False, **{option: value})


def test_a_config_key_vouched_for_must_be_one_the_file_holds_and_minidecoder_does_not_read(folder: Path,
                                                                                         tmp_path: Path) -> None:
    """Found: `--ignore-config-key typo` was taken and did nothing, and `ignore_config_keys=["rope_scaling"]` (the
    example the old message gave) neither dropped nor changed the key minidecoder reads."""
    odd = Path(shutil.copytree(folder, tmp_path / "odd"))
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "residual_multiplier": 1.0}))
    with pytest.raises(InputError, match=r"names 'residual_multiplyer', which .*config.json does not hold") as raised:
        minidecoder.load(odd, ignore_config_keys=["residual_multiplier", "residual_multiplyer"], progress=False)
    assert "it holds that minidecoder does not read: residual_multiplier" in raised.value.fix
    with pytest.raises(InputError, match="names 'rms_norm_eps', which minidecoder reads: ignoring it would not drop"):
        minidecoder.load(odd, ignore_config_keys=["rms_norm_eps", "residual_multiplier"], progress=False)
    assert minidecoder.load(odd, ignore_config_keys=["residual_multiplier"], progress=False).num_layers == 4


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_config_asking_for_a_billion_blocks_is_refused_before_anything_is_built(family: str, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """A num_hidden_layers of 10**9 built per-layer tuples (all the memory, for Gemma 3's) and a Decoder of that many
    blocks before the missing ones were named."""
    from minidecoder.core import loading
    from tiny_models import checkpoint

    folder = Path(shutil.copytree(checkpoint(family)[1], tmp_path / "checkpoint"))
    config = json.loads((folder / "config.json").read_text())
    config.pop("layer_types", None)  # Gemma 3's then follow sliding_window_pattern, one entry per layer
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1_000_000_000}))
    monkeypatch.setattr(loading, "Decoder", lambda config: pytest.fail("a Decoder was built"))
    error = load_error(folder, ConfigError)
    assert "'num_hidden_layers' is 1000000000, far past any model" in error.problem
