"""Greedy decoding with the KV cache equals transformers' greedy generate and a cache-free loop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import ArgumentTypeError, InputError
from tiny_models import checkpoint
from tiny_models import random_ids


def _without_cache(model, ids: torch.Tensor, steps: int) -> list[int]:
    ids = ids.clone()
    new = []
    for _ in range(steps):
        next_id = int(model(ids).logits[0, -1].argmax())
        new.append(next_id)
        ids = torch.cat([ids, torch.tensor([[next_id]])], dim=1)
    return new


@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3"])
def test_greedy_with_cache_equals_transformers_generate(name: str) -> None:
    hf, folder = checkpoint(name)
    model = minidecoder.load(folder)
    prompt = random_ids(1, 6, seed=3)  # 6 + 20 new tokens: past every sliding window (5)
    with torch.no_grad():
        ours = minidecoder.generate(model, prompt[0].tolist(), max_new_tokens=20, stop_at_eos=False)
        reference = hf.generate(prompt, max_new_tokens=20, do_sample=False, min_new_tokens=20,
                                pad_token_id=0)[0, prompt.shape[1]:].tolist()
        assert ours == _without_cache(model, prompt, 20)
    assert ours == reference


def test_cached_step_logits_equal_full_forward() -> None:
    _, folder = checkpoint("gemma2")
    model = minidecoder.load(folder)
    ids = random_ids(1, 12)
    cache = minidecoder.KVCache.empty(model.num_layers)
    with torch.no_grad():
        model(ids[:, :8], cache=cache)
        stepped = model(ids[:, 8:], cache=cache).logits
        full = model(ids).logits[:, 8:]
    torch.testing.assert_close(stepped, full, atol=5e-5, rtol=1e-5)


def test_logits_to_keep_gives_the_last_positions_logits_alone() -> None:
    """transformers' `logits_to_keep`: the last N positions' logits, those of the full forward (Gemma2's softcap
    included); 0 keeps every position."""
    _, folder = checkpoint("gemma2")
    model = minidecoder.load(folder)
    ids = random_ids(2, 9)
    with torch.no_grad():
        full = model(ids).logits
        assert model(ids, logits_to_keep=0).logits.shape == full.shape
        for kept in (1, 3):
            last = model(ids, logits_to_keep=kept).logits
            assert last.shape == (2, kept, model.config.vocab_size)
            torch.testing.assert_close(last, full[:, -kept:], atol=1e-6, rtol=1e-6)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InputError, match=f"logits_to_keep={bad!r} is not a count of positions"):
            model(ids, logits_to_keep=bad)


def test_a_next_token_call_computes_one_positions_logits(capsys) -> None:
    """`generate`'s prefill and `minidecoder logits` computed the (1, T, V) logits of the whole prompt to read the
    last row: a long prompt's are gigabytes on a large vocabulary (Gemma's 262,144 x 4 bytes a token). Each
    unembeds one position now."""
    from cli_runner import cli

    _, folder = checkpoint("llama")
    model = minidecoder.load(folder)
    positions = []
    unembed = type(model).unembed

    def counted(self, h):
        positions.append(h.shape[1])
        return unembed(self, h)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(model), "unembed", counted)
        minidecoder.generate(model, random_ids(1, 12, seed=2)[0].tolist(), max_new_tokens=3, stop_at_eos=False,
                             static=False)
        assert positions == [1, 1, 1]  # the prompt's last position, then each new token
        positions.clear()
        assert cli(capsys, "logits", "--model", str(folder), "a prompt of a few tokens")[0] == 0
        assert positions == [1]


@pytest.mark.parametrize("name", ["llama", "mistral_window", "qwen2_window", "gemma2", "gemma3"])
def test_static_cache_decoding_equals_the_dynamic_cache(name: str) -> None:
    """The static cache and its one-token step (what a GPU captures and replays): the same tokens as the
    dynamic cache, past every sliding window, and the same logits to float tolerance; a second, shorter call
    reuses the step, whose buffers still hold the first call's later keys (masked, never read)."""
    from minidecoder.fast.static_cache import DecodeStep, StaticKVCache, kept_step

    _, folder = checkpoint(name)
    model = minidecoder.load(folder)
    longer = random_ids(1, 11, seed=7)[0].tolist()
    first = minidecoder.generate(model, longer, max_new_tokens=20, stop_at_eos=False, static=True)
    assert first == minidecoder.generate(model, longer, max_new_tokens=20, stop_at_eos=False, static=False)
    step = kept_step(model)
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    plain = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=False)
    static = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=True)
    assert kept_step(model) is step
    assert static == plain
    with torch.inference_mode():
        cache = minidecoder.KVCache.empty(model.num_layers)
        model(torch.tensor([prompt]), cache=cache)
        step = DecodeStep(model, StaticKVCache.from_prefill(cache, len(prompt) + 3))
        got = step(plain[0], len(prompt))
        want = model(torch.tensor([prompt + plain[:1]])).logits[:, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_captured_decode_step_on_a_gpu_equals_the_dynamic_cache() -> None:
    model = minidecoder.load(checkpoint("gemma3")[1], device="cuda")
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    assert (minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=True)
            == minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False, static=False))


def _tokens_and_step(model, prompt: list[int], **options) -> tuple[list[int], object]:
    from minidecoder.fast.static_cache import kept_step
    return minidecoder.generate(model, prompt, max_new_tokens=12, stop_at_eos=False, **options), kept_step(model)


def test_decode_step_is_made_once_across_calls_and_again_when_the_model_changes() -> None:
    """The captured decode step is the model's, not the call's: two calls share one (one capture on a GPU);
    a call needing more positions, a cast, or a replaced parameter gets a new one, with the same tokens as
    the dynamic cache each time."""
    from minidecoder.fast.static_cache import SIZE_STEP

    model = minidecoder.load(checkpoint("llama")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    want = minidecoder.generate(model, prompt, max_new_tokens=12, stop_at_eos=False, static=False)
    got, step = _tokens_and_step(model, prompt, static=True)
    again, same = _tokens_and_step(model, prompt[1:], static=True)
    assert got == want and same is step and step.captures == 0  # the CPU captures nothing
    assert again == minidecoder.generate(model, prompt[1:], max_new_tokens=12, stop_at_eos=False, static=False)

    long_prompt = random_ids(1, SIZE_STEP, seed=9)[0].tolist()  # SIZE_STEP + 12 positions: past the kept step
    _, bigger = _tokens_and_step(model, long_prompt, static=True)
    assert bigger is not step and bigger.cache.length >= SIZE_STEP + 12

    with torch.no_grad():  # a replaced parameter: a captured graph would read the old tensor's memory
        head = model.layers[1].mlp.down_proj
        head.weight = torch.nn.Parameter(head.weight * 2)
    got, replaced = _tokens_and_step(model, prompt, static=True)
    assert replaced is not bigger
    assert got == minidecoder.generate(model, prompt, max_new_tokens=12, stop_at_eos=False, static=False) != want

    model.to(torch.float64)  # another dtype: new buffers of that dtype
    got, cast = _tokens_and_step(model, prompt, static=True)
    assert cast is not replaced and cast.cache.keys[0].dtype == torch.float64
    assert got == minidecoder.generate(model, prompt, max_new_tokens=12, stop_at_eos=False, static=False)


def test_a_short_call_after_a_long_one_gets_a_step_of_its_own_size() -> None:
    """The kept step is bounded: a call needing at most half its positions makes a step of its own size
    instead of attending over the long call's positions for ever after."""
    from minidecoder.fast.static_cache import SIZE_STEP

    model = minidecoder.load(checkpoint("llama")[1])
    long_prompt = random_ids(1, 2 * SIZE_STEP, seed=9)[0].tolist()
    _, long_step = _tokens_and_step(model, long_prompt, static=True)
    assert long_step.cache.length == 3 * SIZE_STEP  # 2 x SIZE_STEP + 12 positions, rounded up
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    got, short_step = _tokens_and_step(model, prompt, static=True)
    assert short_step is not long_step and short_step.cache.length == SIZE_STEP
    assert got == minidecoder.generate(model, prompt, max_new_tokens=12, stop_at_eos=False, static=False)
    medium = random_ids(1, SIZE_STEP, seed=7)[0].tolist()  # 2 x SIZE_STEP positions: the kept step is too small
    _, medium_step = _tokens_and_step(model, medium, static=True)
    _, again = _tokens_and_step(model, prompt, static=True)  # 1 x SIZE_STEP needed, 2 x kept: within twice
    assert again is medium_step


def test_static_true_on_a_dynamic_ntk_model_says_it_decodes_over_the_dynamic_cache() -> None:
    """Found: `generate(model, ids, static=True)` on a dynamic-NTK model ran the dynamic cache, unsaid."""
    import warnings

    model = minidecoder.load(checkpoint("llama_rope_dynamic")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    with pytest.warns(UserWarning, match=r"static=True\): this model's dynamic-NTK RoPE .* dynamic cache"):
        got, step = _tokens_and_step(model, prompt, static=True)
    assert step is None and got == _tokens_and_step(model, prompt, static=False)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default (None) chose nothing it cannot do: no word
        _tokens_and_step(model, prompt)


def test_the_static_cache_is_taken_where_graphs_are_on_and_the_dynamic_one_where_off() -> None:
    from minidecoder.fast.options import fast_paths_overridden

    model = minidecoder.load(checkpoint("gemma3")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    for graphs in (None, False):  # the CPU's default and graphs off: the dynamic cache, no step made
        with fast_paths_overridden(model, graphs=graphs):
            assert _tokens_and_step(model, prompt)[1] is None
    with fast_paths_overridden(model, graphs=True):  # graphs forced on: the static step, kept
        got, step = _tokens_and_step(model, prompt)
    assert step is not None and got == _tokens_and_step(model, prompt, static=False)[0]


@pytest.mark.parametrize("given, problem", [
    (random_ids(2, 6), "a batch of 2 prompts"),  # (2, T): ran as one concatenated text
    (random_ids(2, 6).tolist(), "a list of 2 lists"),
    ([[5, 6, 7], [8, 9]], "a list of 2 lists"),  # ragged: torch's raw ValueError
    ([np.array([5, 6]), np.array([7, 8])], "a list of 2 lists"),  # was "input_ids[0] is array(...)"
    ([5, 6, 10_000], "token id 10000 is outside the model's vocabulary"),  # a raw IndexError
    (torch.tensor([[5, -1]]), "token id -1 is outside"),
    (np.array([5, 2**63 + 5], dtype=np.uint64), "token id 9223372036854775813 is outside"),  # was named as -2**63+5
    ([], "the prompt has no tokens"),
    (torch.tensor([[[5, 6, 7]]]), r"shape \(1, 1, 3\); one prompt is \(T,\) or \(1, T\)"),  # was "a batch of 1 prompts"
])
def test_generate_refuses_a_batch_a_ragged_list_and_ids_outside_the_vocabulary(given, problem: str) -> None:
    model = minidecoder.load(checkpoint("llama")[1])
    with pytest.raises(InputError, match=problem) as raised:
        minidecoder.generate(model, given, max_new_tokens=3)
    if "prompts" in raised.value.fix:  # the way out of a batch: one call per prompt
        assert "once per prompt" in raised.value.fix


@pytest.mark.parametrize("given", [torch.tensor([5.0, 6.0]), [5, 6.5], [5, "6"], "a text", [5, [6, 7]],
                                   np.array([5.0, 6.0]), np.array([True, False])])
def test_generate_refuses_ids_that_are_not_integers(given) -> None:
    model = minidecoder.load(checkpoint("llama")[1])
    with pytest.raises(ArgumentTypeError, match="input_ids"):
        minidecoder.generate(model, given, max_new_tokens=3)


def test_a_numpy_array_of_ids_is_one_prompt_as_a_list_is() -> None:
    """Found: `generate(model, np.array([5, 6]))` said "input_ids is a ndarray; generate takes token ids", and
    `[np.array(ids)]` (one prompt as a batch of one, as `[ids]` and `[tensor]` are taken) "input_ids[0] is array"."""
    model = minidecoder.load(checkpoint("llama")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    want = minidecoder.generate(model, prompt, max_new_tokens=4, stop_at_eos=False)
    for given in (np.array(prompt), np.array([prompt], dtype=np.int32), np.array(prompt, dtype=np.uint16),
                  [np.array(prompt)]):
        assert minidecoder.generate(model, given, max_new_tokens=4, stop_at_eos=False) == want


def test_the_forward_names_ids_embeddings_masks_and_caches_it_cannot_run_as_given() -> None:
    """`model(...)` is public: what a caller gets wrong is named, never run silently (ids that disagree with
    the embeddings replacing them, an additive mask read as 1/0) nor left to torch's IndexError."""
    model = minidecoder.load(checkpoint("llama")[1])
    ids = random_ids(1, 6, seed=5)
    cache = minidecoder.KVCache.empty(model.num_layers)
    model(torch.cat([ids, ids]), cache=cache)  # a cache of 2 rows
    wrong = [
        (dict(input_ids=ids, inputs_embeds=model.embed(ids[:, :3])), InputError, "describe different tokens"),
        (dict(input_ids=ids, attention_mask=torch.zeros(1, 6).index_fill(1, torch.tensor([0]), float("-inf"))),
         InputError, "values other than 0 and 1"),
        (dict(input_ids=torch.tensor([[5, 500]])), InputError, "token id 500 is outside the model's vocabulary"),
        (dict(input_ids=torch.tensor([[5, -1]])), InputError, "token id -1 is outside"),
        (dict(input_ids=ids[0]), InputError, r"input_ids has shape \(6,\); the model takes \(B, T\)"),
        (dict(input_ids=ids.float()), ArgumentTypeError, "token ids are integers"),
        (dict(input_ids=ids.tolist()), ArgumentTypeError, "input_ids is a list"),
        (dict(input_ids=ids, attention_mask=torch.ones(6)), InputError, r"attention_mask \(6,\) does not fit"),
        (dict(input_ids=ids, cache=minidecoder.KVCache.empty(2)), InputError, "the cache has 2 layers"),
        (dict(input_ids=ids, cache=cache), InputError, "the cache holds 2 rows; this call has 1"),
    ]
    for given, error, said in wrong:
        with pytest.raises(error, match=said):
            model(**given)


def test_sites_given_one_name_as_a_string_say_pass_a_set() -> None:
    with pytest.raises(ArgumentTypeError, match=r"Sites\(record='pattern'\) is one string"):
        minidecoder.Sites(record="pattern")  # was "unknown site(s) ['a', 'e', 'n', 'p', 'r', 't']"
    with pytest.raises(ArgumentTypeError, match="pass a set"):
        minidecoder.Sites(record="z")  # was taken, as the set of its one letter
    assert minidecoder.Sites(record={"pattern", "z"}).record == {"pattern", "z"}


def test_an_edit_that_is_not_a_function_or_changes_its_sites_shape_is_named() -> None:
    """Found: `Sites(edit={"z": 3})` failed as "'int' object is not callable" inside the block, and an edit
    returning another shape (or None) as a reshape error further on."""
    model = minidecoder.load(checkpoint("llama")[1])
    ids = random_ids(1, 5, seed=3)
    h, ctx = model.embed(ids), model.context(None, 5, 1)
    with pytest.raises(TypeError, match=r"Sites\(edit=...\) of \['z'\] is not a function"):
        minidecoder.Sites(edit={"z": 3})
    for wrong, said in ((lambda z: z[:, :1], r"returned torch.Size\(\[1, 1, 4, 8\]\)"), (lambda z: None, "NoneType")):
        with pytest.raises(ValueError, match=said + r".*must return a tensor of the site's shape \(1, 5, 4, 8\)"):
            model.layers[0](h, ctx, minidecoder.Sites(edit={"z": wrong}))
    doubled = model.layers[0](h, ctx, minidecoder.Sites(edit={"z": lambda z: 2 * z}))  # a same-shape edit runs
    assert not torch.equal(doubled, model.layers[0](h, ctx))


def test_sites_of_none_record_and_edit_nothing() -> None:
    """Found: `Sites(record=None)` and `Sites(edit=None)` failed as "'NoneType' object is not iterable"; None
    means none, as leaving the argument out does."""
    model = minidecoder.load(checkpoint("llama")[1])
    h, ctx = model.embed(random_ids(1, 5, seed=3)), model.context(None, 5, 1)
    sites = minidecoder.Sites(record=None, edit=None)
    assert torch.equal(model.layers[0](h, ctx, sites), model.layers[0](h, ctx)) and sites.store == {}


def test_a_numpy_integer_is_a_number_of_new_tokens() -> None:
    import numpy as np

    model = minidecoder.load(checkpoint("llama")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    want = minidecoder.generate(model, prompt, max_new_tokens=3, stop_at_eos=False)
    assert minidecoder.generate(model, prompt, max_new_tokens=np.int64(3), stop_at_eos=False) == want
    with pytest.raises(ArgumentTypeError, match="max_new_tokens=3.0 must be an integer"):
        minidecoder.generate(model, prompt, max_new_tokens=3.0)


def test_stop_at_eos_and_static_are_true_or_false() -> None:
    """`stop_at_eos="false"` is true to `if`: generate stopped at the EOS the caller asked it to run past, in
    silence (`load` refuses such switches already)."""
    model = minidecoder.load(checkpoint("llama")[1])
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    for name, value in (("stop_at_eos", "false"), ("stop_at_eos", None), ("static", "no"), ("static", 0)):
        with pytest.raises(ArgumentTypeError, match=f"generate\\({name}={value!r}\\): {name} is True or False"):
            minidecoder.generate(model, prompt, max_new_tokens=3, **{name: value})
    assert minidecoder.generate(model, prompt, max_new_tokens=3, static=None) \
        == minidecoder.generate(model, prompt, max_new_tokens=3, static=False)


def test_one_prompt_in_any_of_its_shapes_gives_the_same_tokens() -> None:
    import numpy as np

    model = minidecoder.load(checkpoint("llama")[1])
    ids = random_ids(1, 6, seed=5)
    want = minidecoder.generate(model, ids[0].tolist(), max_new_tokens=5, stop_at_eos=False)
    for given in (ids, ids[0], [ids[0].tolist()], tuple(ids[0].tolist()), list(np.array(ids[0].tolist()))):
        assert minidecoder.generate(model, given, max_new_tokens=5, stop_at_eos=False) == want


def test_the_continuation_keeps_the_space_a_sentencepiece_decoder_strips(tmp_path) -> None:
    """Llama-2 / Mistral tokenizer.json decoders strip the first space of a text; decoded alone, the new ids
    lost it, so `minidecoder generate "the"` printed "thethe the"."""
    import json

    from tokenizers import Tokenizer as FastTokenizer, decoders, models, pre_tokenizers

    from minidecoder.core.tokenizer import Tokenizer
    from minidecoder.running.generation import continuation_text

    fast = FastTokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, "▁the": 3, "▁cat": 4}, unk_token="<unk>"))
    fast.pre_tokenizer = pre_tokenizers.Metaspace()
    fast.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    fast.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                                "add_bos_token": True}))
    tokenizer = Tokenizer(tmp_path)
    prompt = tokenizer.encode("the")
    assert tokenizer.decode([3, 4], skip_special_tokens=True) == "the cat"  # alone: the first space stripped
    assert "the" + continuation_text(tokenizer, prompt, [3, 4]) == "the the cat"


def test_two_threads_decoding_on_one_model_each_get_their_own_continuation() -> None:
    """The static decode step's buffers are the model's: two threads generating at once (a server's requests;
    the default on a GPU) loaded their prompts' caches into the same buffers and got each other's tokens. A
    thread now decodes on them alone; the other waits for the step, not for the prompt's forward."""
    import threading

    model = minidecoder.load(checkpoint("llama")[1])
    prompts = [random_ids(1, 6 + k, seed=k)[0].tolist() for k in range(4)]
    want = [minidecoder.generate(model, p, max_new_tokens=24, stop_at_eos=False, static=False) for p in prompts]
    got: dict[int, list[list[int]]] = {k: [] for k in range(len(prompts))}

    def run(k: int) -> None:
        for _ in range(6):
            got[k].append(minidecoder.generate(model, prompts[k], max_new_tokens=24, stop_at_eos=False, static=True))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(tokens == want[k] for k in got for tokens in got[k])


@pytest.mark.parametrize("given", [checkpoint("llama")[1], str(checkpoint("llama")[1]), None])
def test_a_model_name_instead_of_a_model_is_named(given) -> None:
    """Found: `generate("smollm2-135m-instruct", ids)` failed as "'str' object has no attribute 'config'"."""
    with pytest.raises(ArgumentTypeError, match=r"generate\(model=...\) got a .*, not a loaded model") as raised:
        minidecoder.generate(given, [5, 6], max_new_tokens=2)
    assert "minidecoder.load(" in raised.value.fix


def test_an_edit_that_changes_its_sites_dtype_is_named() -> None:
    """Found: `Sites(edit={"z": lambda z: z.double()})` failed as torch's "expected m1 and m2 to have the same dtype"
    in the next projection, and one at `resid_post` handed the next block a float64 stream."""
    model = minidecoder.load(checkpoint("llama")[1])
    ids = random_ids(1, 5, seed=3)
    h, ctx = model.embed(ids), model.context(None, 5, 1)
    for site in ("z", "resid_post"):
        with pytest.raises(ValueError, match=f"the edit of site '{site}' returned a torch.float64 tensor on cpu; it "
                                             r"must return the site's torch.float32 on cpu \(end the edit with "
                                             r"\.to\(value\.dtype\)"):
            model.layers[0](h, ctx, minidecoder.Sites(edit={site: lambda x: x.double()}))


def test_generation_stops_at_generation_config_eos_as_transformers_does(tmp_path) -> None:
    """transformers' `generate` stops at generation_config.json's `eos_token_id` (Gemma 2's instruct models
    list `<end_of_turn>` there alone, Qwen2.5's `<|endoftext|>`); generate read config.json and the tokenizer
    only, so it ran past such a stop id into text transformers never writes."""
    import json
    import shutil

    from transformers import AutoModelForCausalLM

    from minidecoder.errors import CheckpointError

    folder = tmp_path / "tiny-llama"
    shutil.copytree(checkpoint("llama")[1], folder)
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    model = minidecoder.load(folder)
    free = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False)
    stop = next(token for k, token in enumerate(free) if k >= 3 and token not in free[:k] and token != 2)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, stop]}))
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    with torch.no_grad():
        reference = hf.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt):].tolist()
    ours = minidecoder.generate(model, prompt, max_new_tokens=20)
    assert ours == reference == free[:free.index(stop) + 1]
    assert minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False) == free
    for broken, problem in (("{", "is not valid JSON"), ('{"eos_token_id": "</s>"}', "eos_token_id='</s>'"),
                            ("[2]", "holds a JSON list")):
        (folder / "generation_config.json").write_text(broken)
        with pytest.raises(CheckpointError, match=problem):
            minidecoder.generate(model, prompt, max_new_tokens=3)


def test_generation_config_repetition_penalty_is_applied_as_transformers_does(tmp_path) -> None:
    """transformers' `generate(do_sample=False)` applies generation_config.json's `repetition_penalty` (Qwen2.5's
    instruct models set 1.05 or 1.1); generate took the plain argmax, so its tokens were not transformers'. A
    logits processor it does not run is said; a penalty that is not a number above 0 names the file."""
    import json
    import shutil

    from transformers import AutoModelForCausalLM

    from minidecoder.errors import CheckpointError

    folder = tmp_path / "tiny-llama"
    shutil.copytree(checkpoint("llama")[1], folder)
    prompt = random_ids(1, 6, seed=5)[0].tolist()
    model = minidecoder.load(folder)
    plain = minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False)
    (folder / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.3, "do_sample": True}))
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    with torch.no_grad():
        reference = hf.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt):].tolist()
    for static in (False, True):
        assert minidecoder.generate(model, prompt, max_new_tokens=20, static=static) == reference != plain
    (folder / "generation_config.json").write_text(json.dumps({"no_repeat_ngram_size": 3, "suppress_tokens": []}))
    with pytest.warns(UserWarning, match="sets no_repeat_ngram_size=3, which transformers' generate applies"):
        assert minidecoder.generate(model, prompt, max_new_tokens=20, stop_at_eos=False) == plain
    for penalty in (0, -1.0, "1.1", True):
        (folder / "generation_config.json").write_text(json.dumps({"repetition_penalty": penalty}))
        with pytest.raises(CheckpointError, match=f"repetition_penalty={penalty!r}; it must be a number above 0"):
            minidecoder.generate(model, prompt, max_new_tokens=3)
