"""Token ids and decoded text equal transformers' AutoTokenizer for the tokenizer file layouts Hub checkpoints ship:
tokenizer_config.json's `added_tokens_decoder`, named special tokens, special_tokens_map.json and added_tokens.json,
next to a tokenizer.json or a tokenizer.model alone."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from minidecoder.core.tokenizer import Tokenizer
from minidecoder.errors import TokenizerError
from tiny_models import SPECIALS

CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello world, this is a test!",
          "A man is playing a guitar.", "Café naïve résumé 東京 😀", "def f(x):\n    return x**2"] * 20


def _entry(content: str, special: bool = True, **flags) -> dict:
    """One added_tokens_decoder entry, as transformers saves it."""
    return {"content": content, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
            "special": special, **flags}


def _char_json(added: list[str]) -> str:
    """A character-level tokenizer.json (ids 0-3 `SPECIALS`, then printable ASCII, then "<x>") whose added tokens are
    `added` only, with a template that puts <s> first."""
    from tokenizers import AddedToken, Tokenizer as FastTokenizer, models, processors

    vocab = {token: i for i, token in enumerate(SPECIALS)}
    vocab.update({chr(code): len(vocab) + i for i, code in enumerate(range(32, 127))})
    vocab["<x>"] = len(vocab)
    tokenizer = FastTokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                             special_tokens=[("<s>", 1)])
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in added])
    return tokenizer.to_str()


@pytest.fixture(scope="module")
def sentencepiece_model() -> bytes:
    import sentencepiece

    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=buffer, vocab_size=400, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, minloglevel=2)
    return buffer.getvalue()


def _folder(folder: Path, files: dict[str, object]) -> Path:
    folder.mkdir()
    for name, content in files.items():
        path = folder / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(
            content if isinstance(content, str) else json.dumps(content))
    return folder


def _assert_as_transformers(folder: Path, texts: list[str]) -> Tokenizer:
    import transformers

    ours, theirs = Tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (theirs.bos_token_id, theirs.eos_token_id, theirs.pad_token_id)
    assert ours.vocab_size == len(theirs)
    for text in texts:
        ids = theirs(text)["input_ids"]
        assert ours.encode(text) == ids, text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), (text, skip)
    return ours


LLAMA_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>", "pad_token": "<pad>"}


def test_added_tokens_decoder_entries_tokenizer_json_lacks_are_added_with_their_flags(tmp_path: Path) -> None:
    """transformers adds them (TokenizersBackend.__init__): "<extra>" in a text was spelled out character by
    character, its id decoded to nothing; lstrip / rstrip and `special` (dropped by skip_special_tokens) are kept,
    and a vocabulary entry listed there ("A") becomes an added token."""
    listed = {str(i): _entry(token) for i, token in enumerate(SPECIALS)} | {
        "37": _entry("A"), "100": _entry("<extra>"), "101": _entry("<tool>", special=False),
        "102": _entry("<l>", lstrip=True), "103": _entry("<r>", rstrip=True)}
    folder = _folder(tmp_path / "listed", {"tokenizer.json": _char_json(SPECIALS),
                                           "tokenizer_config.json": {**LLAMA_CONFIG, "added_tokens_decoder": listed}})
    ours = _assert_as_transformers(folder, ["x<extra>y", "a <tool> b", "a <l> b", "a <r> b", "<extra><tool>", "xAy"])
    assert ours.token_to_id("<r>") == 103


def test_listed_ids_transformers_would_not_give_are_an_error(tmp_path: Path) -> None:
    """transformers gives a listed token the tokenizer lacks the next free id (here 100 and 101), not the id listed:
    ids the checkpoint's embeddings never learned, silently."""
    listed = {str(i): _entry(token) for i, token in enumerate(SPECIALS)} | {
        "120": _entry("<far>"), "110": _entry("<mid>")}
    folder = _folder(tmp_path / "sparse", {"tokenizer.json": _char_json(SPECIALS),
                                           "tokenizer_config.json": {**LLAMA_CONFIG, "added_tokens_decoder": listed}})
    with pytest.raises(TokenizerError, match=r"lists '<mid>' at 110 \(transformers gives it 100\), '<far>' at 120"):
        Tokenizer(folder)


def test_named_special_tokens_are_added_tokens_as_in_transformers(tmp_path: Path) -> None:
    """bos, eos, pad and additional_special_tokens that tokenizer.json holds as plain vocabulary become special added
    tokens: "</s>" in a text is the EOS id, and decode(skip_special_tokens=True) drops them."""
    config = {**LLAMA_CONFIG, "additional_special_tokens": ["<x>"]}
    folder = _folder(tmp_path / "named", {"tokenizer.json": _char_json([]), "tokenizer_config.json": config})
    ours = _assert_as_transformers(folder, ["a</s>b", "<s>x", "<x>", "<x><pad>"])
    assert ours.pad_id == 0


def test_a_named_token_no_file_holds_is_not_invented(tmp_path: Path) -> None:
    """A pad_token the tokenizer files lack: transformers gives it the next id (99), past a model whose embedding the
    vocabulary fills, so that every padded batch fails there, and minidecoder refused such a model at load. Its id
    stays None (padding takes id 0, masked), and the model loads and embeds batches."""
    import minidecoder
    import transformers
    from tiny_models import _BASE, save_hf_model, save_tiny_tokenizer

    folder = tmp_path / "checkpoint"
    config = transformers.AutoConfig.for_model("llama", **{**_BASE, "vocab_size": 99})
    save_hf_model(transformers.AutoModelForCausalLM.from_config(config), folder)
    save_tiny_tokenizer(folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "pad_token": "[PAD]"}))
    assert transformers.AutoTokenizer.from_pretrained(folder).pad_token_id == 99
    model = minidecoder.load(folder, progress=False)
    assert model.tokenizer.pad_id is None and model.tokenizer.vocab_size == 99
    assert minidecoder.embed(model, ["a", "a longer text"], "mean").shape == (2, 32)


def test_a_listed_eos_that_tokenizer_json_lacks_is_the_eos(tmp_path: Path) -> None:
    """The EOS was looked up before the listed tokens were added: "<|im_end|>" listed at 100 was "not in the
    vocabulary", where transformers gives it 100."""
    listed = {str(i): _entry(token) for i, token in enumerate(SPECIALS)} | {"100": _entry("<|im_end|>")}
    config = {**LLAMA_CONFIG, "eos_token": "<|im_end|>", "added_tokens_decoder": listed}
    folder = _folder(tmp_path / "eos", {"tokenizer.json": _char_json(SPECIALS), "tokenizer_config.json": config})
    assert _assert_as_transformers(folder, ["a<|im_end|>b"]).eos_id == 100


@pytest.mark.parametrize("case", ["map fills the config", "map wins over the config", "a config with added tokens"])
def test_special_tokens_map_is_read_as_in_transformers(case: str, tmp_path: Path) -> None:
    """special_tokens_map.json was never read: without bos/eos/pad in tokenizer_config.json the EOS was None (generation
    ran to max_new_tokens) and "</s>" was spelled out. transformers reads it where tokenizer_config.json has no
    added_tokens_decoder, and its tokens then win over the config's."""
    config, mapped = {
        "map fills the config": ({"tokenizer_class": "PreTrainedTokenizerFast"},
                                 {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}),
        "map wins over the config": ({**LLAMA_CONFIG, "eos_token": "<pad>"}, {"eos_token": _entry("</s>")}),
        "a config with added tokens": ({**LLAMA_CONFIG, "eos_token": "<pad>", "added_tokens_decoder": {}},
                                       {"eos_token": "</s>"}),
    }[case]
    folder = _folder(tmp_path / "mapped", {"tokenizer.json": _char_json([]), "tokenizer_config.json": config,
                                           "special_tokens_map.json": mapped})
    ours = _assert_as_transformers(folder, ["a</s>b", "<s>x", "<pad>"])
    assert ours.eos_id == (0 if case == "a config with added tokens" else 2)


@pytest.mark.parametrize("layout", ["added_tokens.json", "added_tokens_decoder"])
def test_a_sentencepiece_folder_gets_the_tokens_its_model_lacks_as_in_transformers(
        layout: str, sentencepiece_model: bytes, tmp_path: Path) -> None:
    """The Alpaca-era layout, tokenizer.model with a "[PAD]" the model lacks: transformers gives it id 400 (the next),
    minidecoder spelled it out, its pad_id was None and decode([400]) was sentencepiece's raw IndexError."""
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True}
    mapped = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "[PAD]"}
    files = {"tokenizer.model": sentencepiece_model, "tokenizer_config.json": config, "special_tokens_map.json": mapped}
    if layout == "added_tokens.json":
        files["added_tokens.json"] = {"[PAD]": 400}
    if layout == "added_tokens_decoder":
        files = {"tokenizer.model": sentencepiece_model, "tokenizer_config.json": {
            **config, **mapped, "added_tokens_decoder": {"400": _entry("[PAD]"), "401": _entry("<tool>", False)}}}
    ours = _assert_as_transformers(_folder(tmp_path / "sp", files),
                                   ["x[PAD]y", "[PAD]<tool>[PAD]", "Hello</s>", "a<s>b"])
    assert ours.pad_id == 400 and ours.with_placeholders("<PST>").token_to_id("<PST>") == ours.vocab_size


@pytest.mark.parametrize("files", [{"tokenizer_config.json": {"added_tokens_decoder": {"5": "<x>"}}},
                                   {"added_tokens.json": {"<x>": "five"}}])
def test_added_tokens_that_are_not_id_to_token_are_an_error(files: dict, tmp_path: Path) -> None:
    folder = _folder(tmp_path / "bad", {"tokenizer.json": _char_json(SPECIALS), **files})
    with pytest.raises(TokenizerError, match="is not {id: {\"content\": text, ...}}"):
        Tokenizer(folder)


def test_tokenizer_json_keeps_its_own_flags_for_a_token_added_tokens_json_lists(tmp_path: Path) -> None:
    """A folder saved before transformers 4.34 lists tokenizer.json's own added tokens again in added_tokens.json;
    transformers lays tokenizer.json's entries over that file's. minidecoder re-added "<TOOL>" with that file's flags
    (not special, normalized): behind a lowercasing normalizer it was spelled out, and skip_special_tokens kept it."""
    from tokenizers import AddedToken, Tokenizer as FastTokenizer, normalizers

    tokenizer = FastTokenizer.from_str(_char_json([]))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.add_special_tokens([AddedToken("<TOOL>", normalized=False, special=True)])
    folder = _folder(tmp_path / "legacy", {"tokenizer.json": tokenizer.to_str(), "tokenizer_config.json": LLAMA_CONFIG,
                                           "added_tokens.json": {"<TOOL>": 100}})
    ours = _assert_as_transformers(folder, ["a <TOOL> b", "<TOOL>"])
    assert ours.encode("<TOOL>", add_special_tokens=False) == [100]
