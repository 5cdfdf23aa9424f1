"""`SentenceEncoder.encode` keeps sentence-transformers' contract: checked against a real
`SentenceTransformer` wrapping the same method (`MinidecoderModule`), argument combination by
argument combination (types, shapes, dtypes, values), and against `minidecoder.embed`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import InputError

TEXTS = ["A man plays a guitar.", "Someone plays music.", "Stocks fell.", "A chef cooks pasta in a kitchen."]
INPUTS = {
    "list": TEXTS,
    "tuple": tuple(TEXTS),
    "numpy": np.array(TEXTS),
    "single string": TEXTS[2],
    "one-element list": TEXTS[:1],
    "empty list": [],
}
OPTIONS = [
    {},
    {"convert_to_tensor": True},
    {"convert_to_numpy": False},
    {"convert_to_numpy": True, "convert_to_tensor": True},  # tensor wins, as in sentence-transformers
    {"normalize_embeddings": True},
    {"normalize_embeddings": True, "convert_to_tensor": True, "batch_size": 1},
]


@pytest.fixture(scope="module")
def encoder(tiny_llama: Path):
    return minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean")


@pytest.fixture(scope="module")
def sentence_transformer(encoder):
    from sentence_transformers import SentenceTransformer

    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    return SentenceTransformer(modules=[MinidecoderModule(encoder)], device="cpu")


def _same(ours, theirs) -> None:
    assert type(ours) is type(theirs)
    if isinstance(theirs, list):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    if isinstance(theirs, torch.Tensor):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
@pytest.mark.parametrize("kind", list(INPUTS))
def test_encode_contract_equals_sentence_transformers(encoder, sentence_transformer, kind: str, options: dict):
    ours = encoder.encode(INPUTS[kind], show_progress_bar=False, **options)
    theirs = sentence_transformer.encode(INPUTS[kind], show_progress_bar=False, **options)
    _same(ours, theirs)


def test_encode_values_shapes_and_normalization(encoder, tiny_llama: Path):
    reference = minidecoder.embed(encoder.model, TEXTS, "mean")  # (N, E) torch
    vectors = encoder.encode(TEXTS)
    assert isinstance(vectors, np.ndarray) and vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), encoder.embedding_dim) == (4, 32)
    np.testing.assert_array_equal(vectors, reference.numpy())
    single = encoder.encode(TEXTS[1])
    assert single.shape == (32,)
    np.testing.assert_allclose(single, reference[1].numpy(), rtol=1e-5, atol=1e-6)  # batch composition: tolerance
    unit = encoder.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0)  # so normalizing did something
    rows = encoder.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(rows, list) and all(isinstance(r, torch.Tensor) and r.shape == (32,) for r in rows)


def test_similarity_equals_sentence_transformers(encoder, sentence_transformer):
    a, b = encoder.encode(TEXTS[:3]), encoder.encode(TEXTS[1:])
    ours = encoder.similarity(a, b)
    assert ours.shape == (3, 3)
    torch.testing.assert_close(ours, sentence_transformer.similarity(a, b))
    torch.testing.assert_close(encoder.similarity(a[0], b[0]), sentence_transformer.similarity(a[0], b[0]))
    torch.testing.assert_close(encoder.similarity_pairwise(a, b), sentence_transformer.similarity_pairwise(a, b))
    assert abs(float(encoder.similarity(a[1], a[1])) - 1.0) < 1e-6


def test_encoder_options_and_errors(tiny_llama: Path, encoder):
    built = minidecoder.SentenceEncoder(tiny_llama, "mean", layer=2)  # a folder is loaded; options by name
    assert built.method.layer == 2 and built.name.endswith("/mean")
    assert not np.allclose(built.encode(TEXTS[:2]), encoder.encode(TEXTS[:2]))
    with pytest.raises(InputError, match="has no option"):
        minidecoder.SentenceEncoder(encoder.model, "mean", depth=3)
    with pytest.raises(InputError, match="out of range|layer"):
        minidecoder.SentenceEncoder(encoder.model, "mean", layer=99)  # checked at construction
    with pytest.raises(InputError, match="load it there"):
        encoder.encode(TEXTS, device="meta")


def test_encode_takes_the_models_device_by_any_of_its_names(encoder):
    """'cpu:0' is the model's 'cpu' (as 'cuda' is its 'cuda:0'), though torch.device compares them unequal."""
    want = encoder.encode(TEXTS[:2])
    for name in ("cpu", "cpu:0", torch.device("cpu", 0)):
        np.testing.assert_array_equal(encoder.encode(TEXTS[:2], device=name), want)
    with pytest.raises(InputError, match="is not a device"):
        encoder.encode(TEXTS, device="gpu0")


def test_a_loaded_model_in_another_dtype_or_on_another_device_is_refused(encoder):
    """Found: `SentenceEncoder(model, dtype="bfloat16")` kept the float32 model, silently: dtype and device say
    how to load a model, and a loaded one is neither cast nor moved. Its own dtype and device are taken."""
    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    model = encoder.model
    for given in (dict(dtype="bfloat16"), dict(dtype=torch.float16)):
        with pytest.raises(InputError, match="but the model is loaded in float32; a loaded model is not cast"):
            minidecoder.SentenceEncoder(model, "mean", **given)
    with pytest.raises(InputError, match="but the model is loaded in float32"):
        MinidecoderModule(model, "mean", dtype="bfloat16")
    with pytest.raises(InputError, match="but the model is on cpu; a loaded model is not moved"):
        minidecoder.SentenceEncoder(model, "mean", device="meta")
    with pytest.raises(InputError, match=r"SentenceEncoder\(model, device='gpu0'\) is not a device"):
        minidecoder.SentenceEncoder(model, "mean", device="gpu0")
    same = minidecoder.SentenceEncoder(model, "mean", dtype=torch.float32, device="cpu:0")
    np.testing.assert_array_equal(same.encode(TEXTS[:2]), encoder.encode(TEXTS[:2]))
    MinidecoderModule(model, "mean")  # no dtype given: the model's own


def test_encode_takes_a_numpy_integer_as_truncate_dim(encoder):
    np.testing.assert_array_equal(encoder.encode(TEXTS[:2], truncate_dim=np.int64(8)),
                                  encoder.encode(TEXTS[:2], truncate_dim=8))


def test_a_truncate_dim_past_the_width_warns_that_it_keeps_every_dimension(encoder):
    """Found: `encode(truncate_dim=1024)` on a 32-wide encoder gave 32 dimensions without a word (as
    sentence-transformers does, so it is kept): the caller asked for a width it never got."""
    width = encoder.embedding_dim
    with pytest.warns(UserWarning, match=rf"encode\(truncate_dim={width + 1}\) is more than the {width} dimensions "
                                         rf"this encoder gives: every vector keeps all {width}"):
        got = encoder.encode(TEXTS[:2], truncate_dim=width + 1)
    np.testing.assert_array_equal(got, encoder.encode(TEXTS[:2]))


def test_similarity_of_vectors_of_two_widths_is_named(encoder):
    for a, b in ((np.zeros((2, 3)), np.zeros((2, 4))), (np.zeros((2, 3, 3)), np.zeros((2, 3, 3)))):
        with pytest.raises(InputError, match="similarity needs two sets of vectors of one width"):
            encoder.similarity(a, b)


def test_sentence_transformer_saves_and_reloads_the_module(sentence_transformer, tmp_path: Path):
    from sentence_transformers import SentenceTransformer

    sentence_transformer.save(str(tmp_path / "saved"))
    reloaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    np.testing.assert_array_equal(reloaded.encode(TEXTS), sentence_transformer.encode(TEXTS))
    assert reloaded.get_embedding_dimension() == 32


def test_integrations_are_not_imported_by_minidecoder():
    import subprocess
    import sys

    code = ("import sys, minidecoder; minidecoder.SentenceEncoder; "
            "print(any(m.split('.')[0] in ('sentence_transformers', 'mteb') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("variant", ["llama", "llama_mha_tied_bias", "gemma3"])
def test_a_checkpoint_read_tensor_by_tensor_hashes_as_its_loaded_model(variant: str):
    """The sentence-transformers save checks that the model's folder gives the model back by reading the
    folder one tensor at a time (no second model in memory): that read must hash as the loaded model does,
    tied embeddings and every family included, in each dtype, and differ once a parameter is edited."""
    from tiny_models import checkpoint

    from minidecoder.core.loading import checkpoint_parameters, resolve_dtype
    from minidecoder.running.encoder import parameters_sha256, tensors_sha256

    folder = checkpoint(variant)[1]
    for dtype in ("float32", "bfloat16"):
        model = minidecoder.load(folder, dtype=dtype, progress=False)
        read = tensors_sha256(checkpoint_parameters(model.config, folder, resolve_dtype(dtype)))
        assert read == parameters_sha256(model)
    with torch.no_grad():
        model.layers[0].mlp.down_proj.weight[0, 0] += 1.0
    assert parameters_sha256(model) != read


def test_the_sentence_transformers_save_loads_no_second_model(sentence_transformer, tmp_path: Path, monkeypatch):
    import minidecoder.core.loading as loading

    def second_model(*args, **kwargs):
        raise AssertionError("the save loaded the model's weights a second time")

    monkeypatch.setattr(loading, "load_weights", second_model)
    sentence_transformer.save(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "minidecoder_config.json").is_file()


PROMPTS = {"query": "query: ", "doc": "passage: "}


def test_a_prompt_goes_before_the_text_of_a_context_pair_too(tiny_llama: Path) -> None:
    """A (context, text) pair is the input `context=` gives; its text lost the prompt, silently."""
    encoder = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean", prompts=PROMPTS,
                                          default_prompt_name="query")
    pair = encoder.encode([("Find the topic.", TEXTS[0])], prompt="passage: ")
    np.testing.assert_array_equal(pair, encoder.encode([TEXTS[0]], prompt="passage: ", context="Find the topic."))
    assert np.abs(pair - encoder.encode([("Find the topic.", TEXTS[0])], prompt="")).max() > 1e-3
    np.testing.assert_array_equal(encoder.encode([("Find the topic.", TEXTS[0])]),  # the default prompt
                                  encoder.encode([TEXTS[0]], context="Find the topic."))


def test_in_sentence_transformers_a_prompt_replaces_the_modules_default(tiny_llama: Path) -> None:
    """The module's default prompt was put before sentence-transformers' own: "query: passage: text"."""
    from sentence_transformers import SentenceTransformer

    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    encoder = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean", prompts=PROMPTS,
                                          default_prompt_name="query")
    plain = SentenceTransformer(modules=[MinidecoderModule(encoder)], device="cpu")
    named = SentenceTransformer(modules=[MinidecoderModule(encoder)], device="cpu", prompts=PROMPTS,
                                default_prompt_name="query")
    for model in (plain, named):
        for options in ({}, {"prompt": "passage: "}, {"prompt": ""}):
            _same(model.encode(TEXTS, show_progress_bar=False, **options), encoder.encode(TEXTS, **options))
    _same(named.encode(TEXTS, prompt_name="doc", show_progress_bar=False), encoder.encode(TEXTS, prompt_name="doc"))


def test_a_prompt_and_a_prompt_name_together_say_the_name_is_ignored(tiny_llama: Path) -> None:
    """`encode(texts, prompt="q: ", prompt_name="document")` used the prompt and dropped the name, silently;
    sentence-transformers does the same and says so (tests/cli/test_reliability_cli.py row 11 compares values)."""
    prompted = minidecoder.SentenceEncoder(minidecoder.load(tiny_llama), "mean", prompts={"document": "passage: "})
    with pytest.warns(UserWarning, match=r"got both prompt='q: ' and prompt_name='document': prompt_name is ignored"):
        both = prompted.encode(TEXTS[:2], prompt="q: ", prompt_name="document")
    np.testing.assert_array_equal(both, prompted.encode(TEXTS[:2], prompt="q: "))
    np.testing.assert_array_equal(prompted.encode(TEXTS[:2], prompt_name="document"),
                                  prompted.encode(TEXTS[:2], prompt="passage: "))


def test_a_module_option_given_twice_or_options_not_a_dict_are_named(encoder) -> None:
    """Found: `MinidecoderModule(model, "mean", options={"layer": 2}, layer=3)` ran layer 3, silently, and
    `options=[("layer", 2)]` failed as "'list' object is not a mapping"."""
    from minidecoder.errors import ArgumentTypeError
    from minidecoder.integrations.sentence_transformers import MinidecoderModule

    with pytest.raises(InputError, match="got layer both in options= and by name"):
        MinidecoderModule(encoder.model, "mean", options={"layer": 2}, layer=3)
    with pytest.raises(ArgumentTypeError, match=r"options=\[\('layer', 2\)\]\) must map option names to values"):
        MinidecoderModule(encoder.model, "mean", options=[("layer", 2)])
    assert MinidecoderModule(encoder.model, "mean", options={"layer": 2}).options["layer"] == 2


@pytest.mark.parametrize("prompts", ["query: ", ["query: "]])
def test_prompts_that_are_not_a_dict_are_named(encoder, prompts) -> None:
    """Found: `SentenceEncoder(model, "mean", prompts="query: ")` failed as dict()'s "dictionary update sequence
    element #0 has length 1; 2 is required"."""
    from minidecoder.errors import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="must map names to texts"):
        minidecoder.SentenceEncoder(encoder.model, "mean", prompts=prompts)


def test_tensors_come_back_on_the_models_device_as_in_sentence_transformers(encoder, monkeypatch):
    """sentence-transformers returns `convert_to_tensor`'s tensor and the per-sentence tensors on the model's device
    (numpy arrays and quantized vectors on the CPU); encode returned a GPU model's on the CPU. The model's device
    is faked here (torch's `meta`, with the CPU's vectors) so that CI, which has no GPU, checks the placement."""
    import minidecoder.running.embedding as embedding

    class OnMeta:  # the model, reporting another device
        device = torch.device("meta")

        def __getattr__(self, name):
            return getattr(model, name)

    model, vectors = encoder.model, encoder.encode(TEXTS[:2], convert_to_tensor=True)
    monkeypatch.setattr(embedding, "embed", lambda *args, **kwargs: vectors.clone())
    monkeypatch.setattr(encoder, "model", OnMeta())
    assert encoder.encode(TEXTS[:2], convert_to_tensor=True).device.type == "meta"
    assert encoder.encode(TEXTS[0], convert_to_tensor=True).device.type == "meta"
    assert {row.device.type for row in encoder.encode(TEXTS[:2], convert_to_numpy=False)} == {"meta"}
    assert encoder.encode([], convert_to_tensor=True).device.type == "meta"
    assert isinstance(encoder.encode(TEXTS[:2]), np.ndarray)  # numpy: from the CPU, as there
    pytest.importorskip("sentence_transformers")
    assert encoder.encode(TEXTS[:2], precision="int8", convert_to_tensor=True).device.type == "cpu"  # as there


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none; run on a lent GPU)")
def test_tensors_of_a_model_on_a_gpu_stay_there(tiny_llama: Path):
    encoder = minidecoder.SentenceEncoder(str(tiny_llama), "mean", device="cuda")
    assert encoder.encode(TEXTS[:2], convert_to_tensor=True).device.type == "cuda"
    assert isinstance(encoder.encode(TEXTS[:2]), np.ndarray)
