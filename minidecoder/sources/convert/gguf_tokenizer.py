"""Rebuild `tokenizer.json` and `tokenizer_config.json` from the vocabulary stored in a GGUF.

A GGUF carries no tokenizer.json: it stores the tokens, their types, the merges (byte-level BPE) or
scores (SentencePiece), and the special-token ids under `tokenizer.ggml.*`. Two families:

- `tokenizer.ggml.model == "gpt2"`: byte-level BPE (SmolLM2, Qwen2, Llama 3). The split regex is
  not stored; `tokenizer.ggml.pre` names it, and the table below restates llama.cpp's
  (`src/llama-vocab.cpp`) in the form the `tokenizers` library runs.
- `tokenizer.ggml.model == "llama"`: SentencePiece vocabularies (Gemma, Llama 2, Mistral), rebuilt as
  a BPE with byte fallback whose merges are recovered from the vocabulary.

Reference for both: transformers `integrations/gguf/gguf_tokenizer_mapping.py` (the GGUF tokenizer
its `AutoTokenizer.from_pretrained(..., gguf_file=...)` builds, which the tests compare against) and
`GPT2Tokenizer` / `Qwen2Tokenizer` / `GemmaTokenizer` / `LlamaTokenizer` for the pipeline pieces.
One deliberate difference: Qwen2 gets the NFC normalizer of its original tokenizer.json, which
transformers' GGUF path drops (equal ids on any NFC text, i.e. on almost all real text).
"""
from __future__ import annotations

import warnings

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from minidecoder.errors import CheckpointError, is_whole_number
from minidecoder.sources.convert.gguf_reader import DAMAGED_FIX

# llama.cpp token types (`llama_token_type`): 3 = control (special), 4 = user-defined (added, not special).
_CONTROL, _USER_DEFINED = 3, 4

_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split_then_bytes(regex: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(regex), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


def _byte_level_pre_tokenizer(pre: str) -> tuple[pre_tokenizers.PreTokenizer, normalizers.Normalizer | None]:
    """(pre-tokenizer, normalizer) for llama.cpp's pre-tokenizer name `pre` (`tokenizer.ggml.pre`)."""
    if pre in ("smollm", "starcoder", "refact"):
        # llama.cpp: "\p{N}" first, then the GPT-2 regex; i.e. SmolLM2's own tokenizer.json.
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        ), None
    if pre in ("gpt2", "default", "mpt", "olmo"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None
    if pre in ("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx", "falcon3"):
        return _split_then_bytes(_LLAMA3_REGEX), None
    if pre in ("qwen2", "deepseek-r1-qwen"):
        # Qwen's original tokenizer.json normalizes to NFC first; llama.cpp and transformers' GGUF loader skip it.
        return _split_then_bytes(_QWEN2_REGEX), normalizers.NFC()
    raise CheckpointError(
        f"GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported",
        "supported: smollm, gpt2/default, llama-bpe/llama3, qwen2; add its split regex (from llama.cpp's llama-vocab.cpp) to gguf_tokenizer.py",
    )


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table, the alphabet of byte-level vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _byte_level_tokenizer(metadata: dict[str, Any]) -> tuple[Tokenizer, list[str]]:
    """Byte-level BPE from the stored merges. Returns (tokenizer, tokens as spelled in the vocab)."""
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    # A token outside the byte alphabet (llama.cpp writes some added tokens in plain UTF-8) is respelled byte by byte.
    tokens = [
        token if set(token) <= alphabet else "".join(spelling[byte] for byte in token.encode("utf-8"))
        for token in metadata["tokenizer.ggml.tokens"]
    ]
    merges = _merges(metadata)
    vocab = {token: index for index, token in enumerate(tokens)}
    try:
        tokenizer = Tokenizer(
            BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="",
                fuse_unk=False, byte_fallback=False)
        )
    except Exception as error:  # tokenizers reports a merge of tokens outside the vocabulary as a plain Exception
        raise CheckpointError(f"the GGUF's merges (tokenizer.ggml.merges) do not fit its vocabulary: {error}",
                              DAMAGED_FIX) from None
    pre_tokenizer, normalizer = _byte_level_pre_tokenizer(metadata.get("tokenizer.ggml.pre", "default"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, tokens


def _merges(metadata: dict[str, Any]) -> list[tuple[str, str]]:
    """tokenizer.ggml.merges as (left, right) pairs: each stored as the two pieces and one space between."""
    stored = metadata.get("tokenizer.ggml.merges", [])
    if not isinstance(stored, list):
        raise CheckpointError(f"GGUF metadata 'tokenizer.ggml.merges' is a {type(stored).__name__}, not a list",
                              DAMAGED_FIX)
    for index, merge in enumerate(stored):
        if not isinstance(merge, str) or len(merge.split(" ")) != 2:
            raise CheckpointError(f"GGUF merge {index} (tokenizer.ggml.merges) is {merge!r}, not two pieces and a space",
                                  DAMAGED_FIX)
    return [tuple(merge.split(" ")) for merge in stored]


def sentencepiece_merges(vocab: dict[str, int], priority: dict[str, float]) -> list[tuple[str, str]]:
    """The BPE merges a SentencePiece vocabulary implies: every split of a token into two tokens,
    best `priority` first (ties: longer left piece, then longer right piece), as transformers'
    `generate_merges` orders them, so both tokenize alike."""
    merges: list[tuple[str, str, float]] = []
    for token, score in priority.items():
        pairs = [
            (token[:cut], token[cut:], score)
            for cut in range(1, len(token))
            if token[:cut] in vocab and token[cut:] in vocab
        ]
        merges.extend(sorted(pairs, key=lambda pair: (vocab[pair[0]], vocab[pair[1]])))
    merges.sort(key=lambda merge: (merge[2], len(merge[0]), len(merge[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


def _sentencepiece_tokenizer(metadata: dict[str, Any], architecture: str) -> tuple[Tokenizer, list[str]]:
    tokens = list(metadata["tokenizer.ggml.tokens"])
    if architecture in ("gemma2", "gemma3"):
        # Gemma GGUFs store runs of spaces as real spaces where the vocabulary means "▁▁"; and their
        # scores do not follow the merge order, the token order does (transformers `gemma_tokenizer`).
        tokens = ["\u2581" * len(token) if " " in token and not token.strip() else token for token in tokens]
        priority = {token: -index for index, token in enumerate(tokens)}
    else:
        if "tokenizer.ggml.scores" not in metadata:
            raise CheckpointError("the GGUF's SentencePiece vocabulary has no scores (tokenizer.ggml.scores)",
                                  DAMAGED_FIX)
        priority = dict(zip(tokens, metadata["tokenizer.ggml.scores"]))  # as long as tokens: _check_vocabulary
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        BPE(
            vocab=vocab,
            merges=sentencepiece_merges(vocab, priority),
            unk_token=_special_token(metadata, tokens, "unknown"),
            fuse_unk=True,
            byte_fallback=True,
            dropout=None,
        )
    )
    if architecture in ("gemma2", "gemma3"):
        # Gemma: no prefix space; every space becomes "▁" and stays attached to the word after it.
        tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
        tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:
        # Llama 2 / Mistral: a "▁" is prepended to the first word only (SentencePiece's add_dummy_prefix).
        prefix_space = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme="first" if prefix_space else "never", split=False
        )
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if prefix_space:
            steps.append(decoders.Strip(content=" ", left=1))
        tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer, tokens


SPECIAL_NAMES = ("bos", "eos", "unknown", "padding")  # tokenizer.ggml.<name>_token_id


def token_id(metadata: dict[str, Any], key: str) -> int | None:
    """The token id metadata key `key` holds; None where the file has no such key. Anything but a whole number of
    at least 0 (a string, a list, a float) is a damaged file, refused naming the key."""
    value = metadata.get(key)
    if value is None:
        return None
    if not is_whole_number(value, 0):
        raise CheckpointError(f"GGUF metadata {key!r} is {value!r}, not a token id", DAMAGED_FIX)
    return int(value)


def _special_token(metadata: dict[str, Any], tokens: list[str], name: str) -> str | None:
    """The token a special id names; None where the file names none, or one past its vocabulary (as llama.cpp
    reads it; `_warn_ids_past_vocabulary` says so)."""
    special = token_id(metadata, f"tokenizer.ggml.{name}_token_id")
    return tokens[special] if special is not None and special < len(tokens) else None


def _warn_ids_past_vocabulary(metadata: dict[str, Any], tokens: list[str]) -> None:
    """A special id past the vocabulary leaves the tokenizer without that token (with add_bos_token, every id
    sequence loses its BOS): converted as llama.cpp goes on, but said, once per id."""
    for name in SPECIAL_NAMES:
        key = f"tokenizer.ggml.{name}_token_id"
        special = token_id(metadata, key)
        if special is not None and special >= len(tokens):
            warnings.warn(f"the GGUF's {key} {special} is past its vocabulary of {len(tokens)} tokens: the "
                          f"converted tokenizer has no {name} token", stacklevel=3)


# The texts llama.cpp ends generation at whatever the metadata says: src/llama-vocab.cpp, `llama_vocab::impl::load`,
# "maintain a list of tokens that cause end-of-generation" (ggml-org/llama.cpp at 00ad355e). Its two workarounds
# that drop "<|end|>" (gpt-oss's harmony, solar-open) or "</s>" (Gemma 4) again concern architectures refused here.
_END_OF_GENERATION_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "[e~[",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's, with full-width bars
})
END_OF_GENERATION_NAMES = ("eos", "eot", "eom")  # tokenizer.ggml.<name>_token_id, each an end of generation


def end_of_generation_ids(metadata: dict[str, Any]) -> list[int]:
    """The ids llama.cpp ends generation at (its `special_eog_ids`), the EOS first: the file's eos, eot and eom
    ids, and every control token whose text llama.cpp takes for an end (<|im_end|>, <end_of_turn>, <|endoftext|>).

    llama.cpp stops at more, where the original checkpoints' generation_config.json does not, and those are left
    out here (the original Gemma 3 270M lists [1, 106], Qwen2.5-Coder-0.5B-Instruct [151645, 151643]):
    - a token of such a text that is not a control token: llama.cpp makes it one, warning that this is "probably
      a bug in the model"; in real vocabularies it is text ("</s>", an HTML tag, is 128247 in Qwen2.5's, a
      user-defined 212 in Gemma 3's);
    - the fill-in-the-middle pad, repository and file-separator tokens (<|fim_pad|>, <|repo_name|>, <|file_sep|>,
      SmolLM2's <reponame>), which end an infill in llama.cpp and are text to the checkpoint's generate.
    """
    tokens = metadata["tokenizer.ggml.tokens"]  # a list of strings: _check_vocabulary
    token_types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    stated: dict[str, int] = {}
    for name in END_OF_GENERATION_NAMES:
        key = f"tokenizer.ggml.{name}_token_id"
        stop = token_id(metadata, key)
        if stop is None:
            continue
        if stop < len(tokens):
            stated[name] = stop
        elif name != "eos":  # as llama.cpp, which goes on without it (the EOS is said by _warn_ids_past_vocabulary)
            warnings.warn(f"the GGUF's {key} {stop} is past its vocabulary of {len(tokens)} tokens: generation "
                          "does not stop at it", stacklevel=2)
    by_text = {index for index, (token, kind) in enumerate(zip(tokens, token_types))
               if kind == _CONTROL and token in _END_OF_GENERATION_TEXTS}
    eos = [stated["eos"]] if "eos" in stated else []
    return eos + sorted((set(stated.values()) | by_text) - set(eos))


def _check_vocabulary(metadata: dict[str, Any]) -> None:
    """The tokens are a non-empty list of strings, and their types and scores one per token.

    Both are read with `zip`, which stops at the shorter list: a damaged file would otherwise lose
    the types or scores of its last tokens in silence (control tokens no longer special, say)."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(token, str) for token in tokens):
        found = "missing" if tokens is None else f"{type(tokens).__name__} {str(tokens)[:60]}"
        raise CheckpointError(f"the GGUF's vocabulary (tokenizer.ggml.tokens) is {found}, not a non-empty list of "
                              "token strings", DAMAGED_FIX)
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        values = metadata.get(key, tokens)  # absent: nothing to disagree with
        if not isinstance(values, list) or len(values) != len(tokens):
            found = f"{len(values)} entries" if isinstance(values, list) else f"a {type(values).__name__}"
            raise CheckpointError(f"the GGUF's {key} holds {found} for {len(tokens)} tokens (tokenizer.ggml.tokens)",
                                  DAMAGED_FIX)


def build_tokenizer(metadata: dict[str, Any], architecture: str) -> tuple[Tokenizer, dict[str, Any]]:
    """(tokenizer for tokenizer.json, dict for tokenizer_config.json) from GGUF metadata."""
    _check_vocabulary(metadata)
    kind = metadata.get("tokenizer.ggml.model")
    if kind == "gpt2":
        tokenizer, tokens = _byte_level_tokenizer(metadata)
        alphabet = set(bytes_to_unicode().values())
    elif kind == "llama":
        tokenizer, tokens = _sentencepiece_tokenizer(metadata, architecture)
        alphabet = None
    else:
        raise CheckpointError(
            f"GGUF tokenizer model {kind!r} (tokenizer.ggml.model) is not supported",
            "supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)",
        )

    _warn_ids_past_vocabulary(metadata, tokens)
    special = {name: _special_token(metadata, tokens, name) for name in SPECIAL_NAMES}
    stored = metadata["tokenizer.ggml.tokens"]
    token_types = metadata.get("tokenizer.ggml.token_type") or [1] * len(stored)
    # Control tokens are matched whole and are special. In a byte-level vocabulary a "control" token
    # spelled outside the byte alphabet is a llama.cpp mislabel and is left out, as transformers does.
    control = [
        token for token, kind_id in zip(stored, token_types)
        if kind_id == _CONTROL and (alphabet is None or set(token) <= alphabet)
    ]
    control += [token for token in special.values() if token is not None and token not in control]
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in control])
    # User-defined tokens (Gemma's "\n\n", "<think>"-style markers) are matched whole, not special;
    # those the vocabulary respelled (Gemma's runs of spaces) are reached through merges instead.
    in_vocab = set(tokens)
    user_defined = [
        token for token, kind_id in zip(stored, token_types) if kind_id == _USER_DEFINED and token in in_vocab
    ]
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False) for token in user_defined])

    # llama.cpp adds BOS for SentencePiece vocabularies unless told otherwise, and not for BPE ones.
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")) and special["bos"] is not None
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False)) and special["eos"] is not None
    tokenizer.post_processor = _template(special["bos"] if add_bos else None, special["eos"] if add_eos else None, tokenizer)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special["bos"],
        "eos_token": special["eos"],
        "unk_token": special["unknown"],
        "pad_token": special["padding"],
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
    }
    template = metadata.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):  # copied as is, it failed only at load
        raise CheckpointError(f"GGUF metadata 'tokenizer.chat_template' is {type(template).__name__} {template!r:.40}, "
                              "not a Jinja template", DAMAGED_FIX)
    if template is not None:
        config["chat_template"] = template
    return tokenizer, config


def _template(bos: str | None, eos: str | None, tokenizer: Tokenizer) -> processors.TemplateProcessing:
    """BOS/EOS around each sequence, in the layout transformers' `update_post_processor` writes."""
    head = f"{bos}:0 " if bos else ""
    tail = f" {eos}:0" if eos else ""
    single = f"{head}$A:0{tail}"
    pair = f"{single}{f' {bos}:1' if bos else ''} $B:1{f' {eos}:1' if eos else ''}"
    special = [(token, tokenizer.token_to_id(token)) for token in (bos, eos) if token]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)
