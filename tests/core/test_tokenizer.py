"""Token ids equal transformers' AutoTokenizer for the same folder, for both backends
(tokenizer.json via `tokenizers`, tokenizer.model via `sentencepiece`), placeholders included."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from minidecoder.core.tokenizer import Tokenizer
from tiny_models import save_tiny_tokenizer

SAMPLES = ["Hello world!", "The lazy  dog   runs", " leading space", "trailing space ", "a\nb\tc",
           "Café naïve résumé", "東京 😀 café", "def f(x):\n    return x**2  # code", "", "   "]
CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello world, this is a test!",
          "Sentence embeddings from decoders.", "A man is playing a guitar.", "Café naïve résumé 東京 😀",
          "def f(x):\n    return x**2"] * 20


LLAMA_SP_CONFIG = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "add_bos_token": True, "add_eos_token": False}


def _train_sentencepiece(**options) -> bytes:
    """A tiny Llama-style SentencePiece model (BPE, byte fallback, no normalization), trained on CORPUS here."""
    import sentencepiece

    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(**{
        "sentence_iterator": iter(CORPUS), "model_writer": buffer, "vocab_size": 400, "model_type": "bpe",
        "byte_fallback": True, "character_coverage": 1.0, "bos_id": 1, "eos_id": 2, "unk_id": 0, "pad_id": -1,
        "add_dummy_prefix": True, "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
        "minloglevel": 2, **options})
    return buffer.getvalue()


@pytest.fixture(scope="module")
def sentencepiece_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sp")
    (folder / "tokenizer.model").write_bytes(_train_sentencepiece(split_digits=True, allow_whitespace_only_pieces=True))
    (folder / "tokenizer_config.json").write_text(json.dumps(LLAMA_SP_CONFIG))
    return folder


@pytest.fixture(scope="module")
def char_folder(tmp_path_factory) -> Path:
    return save_tiny_tokenizer(tmp_path_factory.mktemp("char"))


@pytest.mark.parametrize("backend", ["sentencepiece", "tokenizers"])
def test_ids_equal_autotokenizer(backend: str, sentencepiece_folder: Path, char_folder: Path) -> None:
    import transformers

    folder = sentencepiece_folder if backend == "sentencepiece" else char_folder
    ours, theirs = Tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for text in SAMPLES:
        assert ours.encode(text) == theirs(text)["input_ids"], text


@pytest.mark.parametrize("backend", ["sentencepiece", "tokenizers"])
def test_placeholder_ids_equal_autotokenizer_after_add_tokens(backend: str, sentencepiece_folder: Path,
                                                              char_folder: Path) -> None:
    import transformers

    folder = sentencepiece_folder if backend == "sentencepiece" else char_folder
    base, theirs = Tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    before = base.encode("<PST>")
    theirs.add_tokens(["<PST>"])
    ours = base.with_placeholders("<PST>")
    pst = ours.token_to_id("<PST>")
    assert pst == theirs.convert_tokens_to_ids("<PST>")
    assert base.encode("<PST>") == before and base.token_to_id("<PST>") is None  # the original is untouched
    assert base.with_placeholders("<PST>") is ours  # one copy per set of placeholders
    for text in ['This sentence : <PST> "A man is playing." means in one word:"', "<PST>start", "end <PST>",
                 "two <PST><PST> in a row"]:
        assert ours.encode(text) == theirs(text)["input_ids"], text


def test_special_token_text_in_a_sentencepiece_text_is_its_id_as_in_transformers(tmp_path: Path) -> None:
    """transformers 5 makes a tokenizer.model's control, unknown and user-defined pieces added tokens, matched
    in a text before anything else: "<s>" in a text was spelled out as "<", "s", ">", and decoded to ""."""
    import transformers

    (tmp_path / "tokenizer.model").write_bytes(_train_sentencepiece(control_symbols=["<ctl>"],
                                                                    user_defined_symbols=["<user>"]))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(LLAMA_SP_CONFIG))
    ours, theirs = Tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ["<s>", "a</s>b", "Hello </s> world", "<unk>", "<s> Hello", "x<s>", "<ctl>dog", "<user>", "a <user> b"]:
        ids = theirs(text)["input_ids"]
        assert ours.encode(text) == ids, text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), (text, skip)


@pytest.fixture(scope="module")
def prefix_models() -> dict[bool, bytes]:
    """Two models with a user-defined piece, one with the dummy prefix ("▁" before a text, as Llama's) and one
    without (as Gemma's)."""
    return {prefix: _train_sentencepiece(add_dummy_prefix=prefix, user_defined_symbols=["<user>"])
            for prefix in (True, False)}


# Where add_prefix_space is absent, the model's own dummy prefix decides; transformers' LlamaTokenizer would put one
# before a text whose model has none (and its other classes drop it), so those cases are not transformers'.
FLAG_CASES = [(prefix, space, legacy) for prefix in (True, False) for space in (None, True, False)
              for legacy in (None, True, False) if prefix or space is not None]


@pytest.mark.parametrize("dummy_prefix, add_prefix_space, legacy", FLAG_CASES)
def test_add_prefix_space_and_legacy_act_as_in_transformers(dummy_prefix: bool, add_prefix_space: bool | None,
                                                            legacy: bool | None, prefix_models: dict[bool, bytes],
                                                            tmp_path: Path) -> None:
    """A tokenizer.model folder ignored both: add_prefix_space=false still put a "▁" before the text and decode
    dropped its first space; legacy=true put none after an added token ("<s>Hello": "<s>", "▁He", "llo" in
    transformers), where transformers' LlamaTokenizer builds its Metaspace from them. A "▁" the text begins with
    got a second one."""
    import transformers

    flags = {key: value for key, value in (("add_prefix_space", add_prefix_space), ("legacy", legacy))
             if value is not None}
    (tmp_path / "tokenizer.model").write_bytes(prefix_models[dummy_prefix])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**LLAMA_SP_CONFIG, **flags}))
    ours, theirs = Tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ["Hello world", " Hello", "  two", "▁Hello", "<s>Hello", "<s> Hello", "a</s>b", "a </s> b",
                 "x<user>y", "<user> dog", " ", "The lazy\ndog"]:
        ids = theirs(text)["input_ids"]
        assert ours.encode(text) == ids, text
        assert [ids[0], *ours.encode_with_offsets(text)[0]] == ids, text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), (text, skip)


@pytest.mark.parametrize("key", ["add_prefix_space", "legacy"])
def test_a_prefix_flag_that_is_not_a_boolean_is_an_error(key: str, sentencepiece_folder: Path, tmp_path: Path) -> None:
    """transformers reads "false" as true."""
    from minidecoder.errors import TokenizerError

    (tmp_path / "tokenizer.model").write_bytes((sentencepiece_folder / "tokenizer.model").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**LLAMA_SP_CONFIG, key: "false"}))
    with pytest.raises(TokenizerError, match=f"{key} is 'false'; it must be true, false or null"):
        Tokenizer(tmp_path)


@pytest.mark.parametrize("backend", ["sentencepiece", "tokenizers"])
def test_an_id_the_tokenizer_lacks_is_an_error_unless_a_row_of_the_model(backend: str, sentencepiece_folder: Path,
                                                                        char_folder: Path, tmp_path: Path) -> None:
    """decode of an id past the tokenizer was sentencepiece's bare IndexError, and no text at all in the tokenizers
    backend (as in transformers), whether it was another tokenizer's id or a row of the model's embedding that no
    token has (Qwen2.5: 151936 rows for 151665 ids), which a model may choose. The one is now an error; the other
    still has no text, so that a model's own generation decodes. A negative id (-100, a label a loss ignores) is an
    error too, where transformers overflows."""
    import transformers

    from minidecoder.errors import ArgumentTypeError, InputError
    from minidecoder.running.generation import continuation_text

    for item in (sentencepiece_folder if backend == "sentencepiece" else char_folder).iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    alone, theirs = Tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    size, ids = alone.vocab_size, alone.encode("Hello world")
    for bad, problem in (size, rf"ids\[3\] is {size}, not an id of this tokenizer \(its largest is {size - 1}\)"), \
                        (-100, r"ids\[3\] is -100, and token ids are 0 or more"):
        with pytest.raises(InputError, match=problem):
            alone.decode([*ids[:3], bad])
    with pytest.raises(ArgumentTypeError, match=r"ids\[0\] is 1.0 \(float\), not a token id"):
        alone.decode([1.0])
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": size + 8}))  # the model's: 8 rows past the ids
    ours = Tokenizer(tmp_path)
    padded = [*ids[:3], size + 3, *ids[3:], size + 7]
    assert ours.decode(padded) == theirs.decode(padded) == ours.decode(ids)
    assert continuation_text(ours, ids[:3], [size + 3, *ids[3:]]) == continuation_text(ours, ids[:3], ids[3:])
    with pytest.raises(InputError, match=rf"is {size + 8}, not an id .* nor a row of the model's embedding "
                                         rf"\({size + 8} rows\)"):
        ours.decode([size + 8])
    with pytest.raises(InputError, match="0 or more"):
        ours.decode([-1])


@pytest.mark.parametrize("backend", ["sentencepiece", "tokenizers"])
def test_split_special_tokens_in_the_config_spells_their_text_out_as_in_transformers(
        backend: str, sentencepiece_folder: Path, char_folder: Path, tmp_path: Path) -> None:
    """tokenizer_config.json's `split_special_tokens: true` was ignored: "<s>" in a text stayed the BOS id."""
    import transformers

    for item in (sentencepiece_folder if backend == "sentencepiece" else char_folder).iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "split_special_tokens": True}))
    ours, theirs = Tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ["<s>", "a</s>b", "Hello <s> world"]:
        assert ours.encode(text) == theirs(text)["input_ids"], text
        assert ours.with_placeholders("<PST>").encode(text) == ours.encode(text), text  # a copy keeps the setting


def test_special_token_policy_is_read_from_the_folder(char_folder: Path, tmp_path: Path) -> None:
    tokenizer = Tokenizer(char_folder)
    assert tokenizer.add_bos and not tokenizer.add_eos
    assert tokenizer.encode("ab")[0] == tokenizer.bos_id == 1
    assert tokenizer.encode("ab", add_special_tokens=False) == tokenizer.encode("ab")[1:]
    for item in char_folder.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": False,
                                                                "add_eos_token": True}))
    with pytest.warns(UserWarning, match="contradicts tokenizer.json's post-processor"):  # it adds <s>, no </s>
        changed = Tokenizer(tmp_path)
    assert not changed.add_bos and changed.add_eos
    assert changed.encode("ab") == [*tokenizer.encode("ab", add_special_tokens=False), changed.eos_id]
    assert "add_bos=False" in repr(changed)


@pytest.mark.parametrize("backend", ["sentencepiece", "tokenizers"])
def test_offsets_cover_the_characters_of_each_token(backend: str, sentencepiece_folder: Path,
                                                    char_folder: Path) -> None:
    tokenizer = Tokenizer(sentencepiece_folder if backend == "sentencepiece" else char_folder).with_placeholders("<PST>")
    text = 'Say <PST> "Café 東京" now'
    ids, offsets = tokenizer.encode_with_offsets(text)
    assert len(ids) == len(offsets)
    assert offsets == sorted(offsets) and all(0 <= s <= e <= len(text) for s, e in offsets)
    pst = ids.index(tokenizer.token_to_id("<PST>"))
    assert text[offsets[pst][0]:offsets[pst][1]] == "<PST>"


EOS_TEMPLATE = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                   "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}


EOS_ONLY_TEMPLATE = {**EOS_TEMPLATE,  # one text gets no <s>; only a pair's template names it
                     "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                     "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                              {"Sequence": {"id": "B", "type_id": 1}}]}


def _variant(char_folder: Path, folder: Path, config: dict | None, post_processor: dict | None = None) -> Path:
    """`char_folder` with another tokenizer_config.json (None: none at all) and, if given, post-processor."""
    folder.mkdir()
    tokenizer = json.loads((char_folder / "tokenizer.json").read_text())
    if post_processor is not None:
        tokenizer["post_processor"] = post_processor
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("case", ["no tokenizer_config.json", "an empty one", "no bos_token", "no bos_token nor flag",
                                  "an EOS template, no config", "an EOS template, no flags",
                                  "a pair-only BOS, no flags"])
def test_where_the_config_is_silent_the_post_processor_decides_as_in_transformers(case: str, char_folder: Path,
                                                                                 tmp_path: Path) -> None:
    """Without `bos_token` in tokenizer_config.json the BOS the template adds was dropped: other ids, other logits."""
    import transformers

    config = json.loads((char_folder / "tokenizer_config.json").read_text())
    no_flags = {k: v for k, v in config.items() if k not in ("add_bos_token", "add_eos_token")}
    config, template = {"no tokenizer_config.json": (None, None), "an empty one": ({}, None),
                        "no bos_token": ({k: v for k, v in config.items() if k != "bos_token"}, None),
                        "no bos_token nor flag": ({k: v for k, v in no_flags.items() if k != "bos_token"}, None),
                        "an EOS template, no config": (None, EOS_TEMPLATE),
                        "an EOS template, no flags": (no_flags, EOS_TEMPLATE),
                        "a pair-only BOS, no flags": (no_flags, EOS_ONLY_TEMPLATE)}[case]
    folder = _variant(char_folder, tmp_path / "variant", config, template)
    ours, theirs = Tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for text in SAMPLES:
        assert ours.encode(text) == theirs(text)["input_ids"], text
    assert (ours.encode("ab")[0] == 1) == (template is not EOS_ONLY_TEMPLATE)  # the template's <s>, where it has one
    for text in SAMPLES:
        assert ours.encode(text) == theirs(text)["input_ids"], text


def test_a_flag_that_contradicts_the_template_is_followed_and_said(char_folder: Path, tmp_path: Path) -> None:
    config = {**json.loads((char_folder / "tokenizer_config.json").read_text()), "add_bos_token": False}
    folder = _variant(char_folder, tmp_path / "variant", config)
    with pytest.warns(UserWarning, match="add_bos_token=false contradicts tokenizer.json's post-processor"):
        tokenizer = Tokenizer(folder)
    assert not tokenizer.add_bos


def test_a_config_that_is_not_an_object_is_an_error(char_folder: Path, tmp_path: Path) -> None:
    from minidecoder.errors import TokenizerError

    folder = _variant(char_folder, tmp_path / "variant", [])  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match="holds a JSON list, not an object"):
        Tokenizer(folder)


def _byte_level_folder(folder: Path) -> Path:
    """A byte-level BPE tokenizer without merges (SmolLM2's and Qwen2's kind): a character of four UTF-8 bytes
    is four tokens, each with the character's offsets."""
    from tokenizers import Tokenizer as FastTokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer = FastTokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


def test_truncation_keeps_at_most_n_tokens_where_a_character_spans_several(tmp_path: Path) -> None:
    """Cut at the end of token N's character, a character split over byte tokens came back whole: up to N + 3."""
    from minidecoder.running.embedding import truncate_texts

    tokenizer = Tokenizer(_byte_level_folder(tmp_path / "bytes"))
    text = "🎸" * 20
    assert len(tokenizer.encode(text, add_special_tokens=False)) == 80
    for n in (10, 11, 13):
        (cut,) = truncate_texts(tokenizer, [text], n, None, name_row=None)
        assert n - 4 < len(tokenizer.encode(cut, add_special_tokens=False)) <= n and text.startswith(cut)
