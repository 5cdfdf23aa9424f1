"""Text <-> ids for a checkpoint folder: `tokenizer.json` through `tokenizers`, else `tokenizer.model`
through `sentencepiece`.

Special tokens are added by an explicit, inspectable policy (`add_bos`, `add_eos`) read from
`tokenizer_config.json` (`add_bos_token` / `add_eos_token`), falling back to what `tokenizer.json`'s
post-processor does. Placeholders that methods insert (`<PST>`, `<B-PST>`) are added tokens: a
template is tokenized as one string in which each placeholder becomes one id and the text on each
side tokenizes as it would in the reference code after `tokenizer.add_tokens([...])`. A `tokenizer.model`'s
own control and user-defined pieces and its named special tokens are matched the same way, whole, before
sentencepiece runs, as transformers 5 does once it has converted the model (unless `split_special_tokens`).
"""
from __future__ import annotations

import copy
import json
import operator
import re
import warnings
from pathlib import Path

from minidecoder.core.config import check_types
from minidecoder.errors import ArgumentTypeError, InputError, TokenizerError, check_text, file_is_there
from minidecoder.output_files import sha256_files


class Tokenizer:
    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        self.folder = folder
        config = _with_legacy_token_files(folder, _read_json(folder / "tokenizer_config.json"))
        self._fast = None
        self._sp = None
        self._placeholders: dict[str, int] = {}  # sentencepiece backend only
        self._sp_added: dict[str, int] = {}  # sentencepiece backend: the model's own added tokens (below)
        self._sp_special: set[int] = set()  # ... of which special: dropped by decode(skip_special_tokens=True)
        self._sp_split: tuple[dict[str, int], re.Pattern | None] | None = None  # built on first use: _sp_matched
        self._sp_legacy = False  # sentencepiece backend: tokenizer_config.json's `legacy` (below)
        self._derived: dict[tuple[str, ...], Tokenizer] = {}  # `with_placeholders` copies
        if (folder / "tokenizer.json").is_file():
            from tokenizers import Tokenizer as FastTokenizer
            try:
                self._fast = FastTokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as error:
                raise TokenizerError(f"{folder / 'tokenizer.json'} could not be read: {error}",
                                     "re-download or re-convert the checkpoint") from None
            files = [folder / "tokenizer.json"]
        elif (folder / "tokenizer.model").is_file():
            # transformers' LlamaTokenizer builds its Metaspace from these (_get_prepend_scheme): add_prefix_space=false
            # puts no "▁" anywhere and its decoder strips no space; legacy=true puts one before every piece of text,
            # after an added token too, not only at the text's start. Absent, the model's own dummy prefix decides
            # (transformers 5 would put one where the model has none, or drop it for a class other than Llama's).
            for key in ("add_prefix_space", "legacy"):
                if config.get(key) is not None and not isinstance(config[key], bool):
                    raise TokenizerError(f"{folder / 'tokenizer_config.json'}: {key} is {config[key]!r}; it must be "
                                         "true, false or null", f"write {key} as a JSON boolean (transformers takes "
                                         f"any other value by its truth: {key}=\"false\" as true)")
            self._sp, self._sp_no_prefix, pieces = _load_sentencepiece(folder / "tokenizer.model",
                                                                       config.get("add_prefix_space"))
            self._sp_legacy = bool(config.get("legacy"))
            self._sp_size = self._sp.GetPieceSize()  # grows by the added tokens the model lacks (below)
            files = [folder / "tokenizer.model"]
        else:
            raise TokenizerError(f"no tokenizer.json or tokenizer.model in {folder}",
                                 "copy the tokenizer files of this checkpoint into the folder")
        # Where tokenizer_config.json names no BOS or EOS token, or does not say whether to add it, tokenizer.json's
        # post-processor decides, as transformers runs it: the special tokens its template puts around one text.
        template_bos, template_eos = self._template_specials()
        self.bos_token = _token_text(config.get("bos_token")) or template_bos
        self.eos_token = _token_text(config.get("eos_token")) or template_eos
        self.pad_token = _token_text(config.get("pad_token"))
        self.unk_token = _token_text(config.get("unk_token"))
        added = _transformers_added_tokens(config, folder / "tokenizer_config.json")
        absent = [(index, token["content"]) for index, token in added if self.token_to_id(token["content"]) is None]
        # A named special token that no file holds (a pad_token the vocabulary lacks) is not invented, where
        # transformers gives it the next id: an id past every file, and past the embedding where the vocabulary
        # fills it, so that every padded batch failed. Its id stays None (padding takes 0; a BOS or EOS is refused).
        invented = {text for index, text in absent if index is None}
        added = [(index, token) for index, token in added if index is not None or token["content"] not in invented]
        if self._fast is not None:
            self._add_fast_tokens(added)
        else:
            # transformers 5 converts tokenizer.model into a fast tokenizer whose added tokens are the model's control
            # pieces (special) and user-defined pieces (not), then added_tokens_decoder's and the named special tokens
            # (convert_slow_tokenizer.SentencePieceExtractor, TokenizersBackend.__init__); it matches them in a text
            # before anything else (split_special_tokens=False), so "<s>" in a text is the BOS id, where sentencepiece
            # spells it out. A listed one the model lacks ("[PAD]" in added_tokens.json) gets the next id past it.
            for piece, special in [*pieces, *((token["content"], token.get("special", False)) for _, token in added)]:
                if piece in self._sp_added:
                    continue
                found = self.token_to_id(piece)
                if found is None:
                    found, self._sp_size = self._sp_size, self._sp_size + 1
                self._sp_added[piece] = found
                if special:
                    self._sp_special.add(found)
        self._check_listed_ids(absent, folder)
        self.bos_id = self._special_id(self.bos_token, "bos")  # after the listed tokens: one may be the BOS or EOS
        self.eos_id = self._special_id(self.eos_token, "eos")
        self.pad_id = self._special_id(self.pad_token, None)
        # Types transformers' tokenizers do not check: read by its truth, "false" would be a BOS the checkpoint never had.
        check_types(config, {"add_bos_token": "bool?", "add_eos_token": "bool?", "model_max_length": "float?",
                             "split_special_tokens": "bool?"}, str(folder / "tokenizer_config.json"), TokenizerError,
                    "transformers does not check its type")
        # transformers reads split_special_tokens (default false) for every encode, a chat template's rendered text
        # included: a special token's text in a text is then spelled out as ordinary text, never its id.
        self.split_special_tokens: bool = bool(config.get("split_special_tokens"))
        processor_adds_bos = self._post_processor_adds_bos(template_bos)
        add_bos, add_eos = config.get("add_bos_token"), config.get("add_eos_token")  # null: not set
        self.add_bos: bool = (processor_adds_bos if add_bos is None else add_bos) and self.bos_id is not None
        processor_adds_eos = template_eos is not None and template_eos == self.eos_token
        self.add_eos: bool = (processor_adds_eos if add_eos is None else bool(add_eos)) and self.eos_id is not None
        contradicted = [f"{key}={json.dumps(said)}" for key, said, template in
                        (("add_bos_token", add_bos, processor_adds_bos), ("add_eos_token", add_eos, processor_adds_eos))
                        if self._fast is not None and said is not None and bool(said) != template]
        if contradicted:  # transformers 4's Llama and Gemma tokenizers follow the flag; transformers 5 the template
            warnings.warn(f"{folder}: tokenizer_config.json's {' and '.join(contradicted)} contradicts tokenizer.json's "
                          "post-processor; minidecoder follows tokenizer_config.json, as transformers 4 did (transformers "
                          "5 follows the post-processor): check the ids with `minidecoder logits`", stacklevel=2)
        # The context the checkpoint declares (tokenizer_config.json `model_max_length`, what transformers'
        # tokenizers check); None when absent or set to transformers' "no limit" sentinel (~1e30).
        declared = config.get("model_max_length")
        self.model_max_length: int | None = (int(declared) if isinstance(declared, (int, float))
                                             and not isinstance(declared, bool) and 0 < declared < 1e9 else None)
        # The model's embedding rows (config.json beside the tokenizer files; None where there is none): more than the
        # tokenizer's ids where a checkpoint pads them (Qwen2.5: 151936 rows, 151665 ids), so that a model may choose
        # an id no token has. decode gives such a row no text, and refuses an id past them.
        self.embedding_rows: int | None = _embedding_rows(folder)
        if self._fast is not None:
            # The policy above is the single source of truth: the post-processor adds nothing.
            self._fast.post_processor = None
            self._fast.encode_special_tokens = self.split_special_tokens
        self.checksum = sha256_files(files)
        from minidecoder.core.chat_template import find_chat_template
        self.chat_template: str | dict[str, str] | None = find_chat_template(folder, config)

    # ---- inspection ----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of ids this tokenizer can produce (added tokens included)."""
        if self._fast is not None:
            return self._fast.get_vocab_size(with_added_tokens=True)
        return self._sp_size + len(self._placeholders)

    @property
    def max_id(self) -> int:
        """The largest id this tokenizer can produce (ids may be sparse: added tokens can sit past the vocab)."""
        if self._fast is not None:
            return max(self._fast.get_vocab(with_added_tokens=True).values())
        return self._sp_size - 1 + len(self._placeholders)

    def __repr__(self) -> str:
        return (f"Tokenizer({self.folder.name}, backend={'tokenizers' if self._fast else 'sentencepiece'}, "
                f"add_bos={self.add_bos} ({self.bos_token!r}), add_eos={self.add_eos} ({self.eos_token!r}))")

    # ---- chat --------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = False, tokenize: bool = True,
                            chat_template: str | None = None, **kwargs) -> list[int] | str:
        """The checkpoint's chat template applied to `messages`: token ids (or the text with
        `tokenize=False`), equal to transformers' `apply_chat_template(..., return_dict=False)`.
        The template writes its own special tokens, so none are added here (as in transformers)."""
        from minidecoder.core.chat_template import choose_chat_template, render_chat

        # Arguments transformers' apply_chat_template takes itself: here they would reach the template as variables
        # it never reads, so continue_final_message=True still closed the final message, silently.
        unsupported = [f"{key}={value!r}" for key, value in kwargs.items() if key in _TRANSFORMERS_ONLY and value]
        if unsupported:
            raise InputError(f"apply_chat_template({', '.join(unsupported)}): minidecoder's returns the rendered text "
                             "or its ids (transformers' return_dict=False) and does not implement this",
                             "leave it out; edit the text from tokenize=False (e.g. cut it after the final message's "
                             "content to continue it), and pad, cut or make tensors of the ids yourself")
        template = choose_chat_template(self.chat_template, chat_template, kwargs.get("tools"), self.folder)
        special = {name: value for name, value in (("bos_token", self.bos_token), ("eos_token", self.eos_token),
                                                   ("unk_token", self.unk_token), ("pad_token", self.pad_token))
                   if value is not None}
        text = render_chat(template, messages, add_generation_prompt, special, **kwargs)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    # ---- encoding ------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        _refuse_lone_surrogate(text)
        if self._fast is not None:
            ids = self._fast.encode(text, add_special_tokens=False).ids
        else:
            ids = self.encode_with_offsets(text)[0]
        if add_special_tokens:
            ids = ([self.bos_id] if self.add_bos else []) + ids + ([self.eos_id] if self.add_eos else [])
        return ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        for text in texts:
            _refuse_lone_surrogate(text)
        if self._fast is not None:
            encoded = [e.ids for e in self._fast.encode_batch(texts, add_special_tokens=False)]
            if not add_special_tokens:
                return encoded
            head = [self.bos_id] if self.add_bos else []
            tail = [self.eos_id] if self.add_eos else []
            return [head + ids + tail for ids in encoded]
        return [self.encode(text, add_special_tokens) for text in texts]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids without special tokens, and each id's [start, end) character span in `text`."""
        _refuse_lone_surrogate(text)
        if self._fast is not None:
            encoding = self._fast.encode(text, add_special_tokens=False)
            return encoding.ids, [tuple(span) for span in encoding.offsets]
        ids, offsets, base = [], [], 0
        added, pattern = self._sp_matched()
        for piece, added_token in _split_on(text, pattern):
            char_of_byte = _char_index_of_bytes(piece)
            for token in self._sp_segment(piece, at_start=base == 0):  # begin/end are UTF-8 byte offsets
                ids.append(token.id)
                offsets.append((base + char_of_byte[token.begin], base + char_of_byte[token.end]))
            base += len(piece)
            if added_token is not None:
                ids.append(added[added_token])
                offsets.append((base, base + len(added_token)))
                base += len(added_token)
        return ids, offsets

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`. A row of the model's embedding past the tokenizer's ids has no text (as in transformers);
        a negative id, or one past both, is an InputError (transformers drops the one and overflows on the other)."""
        if self._fast is not None:
            ids = self._decodable(ids, lambda i: i < 2**32 and self._fast.id_to_token(i) is not None)  # takes u32
            return self._fast.decode(ids, skip_special_tokens=skip_special_tokens)
        inverse = {v: k for k, v in {**self._sp_added, **self._placeholders}.items()}
        ids = self._decodable(ids, lambda i: i < self._sp.GetPieceSize() or i in inverse)
        pieces, run = [], []
        for i in [*ids, None]:
            if i is None or i in inverse:
                if run:  # as transformers' decoder: only the first space of all it decodes is a dummy prefix
                    pieces.append((self._sp_no_prefix if pieces else self._sp).DecodeIds(run))
                pieces += [inverse[i]] if i is not None and not (skip_special_tokens and i in self._sp_special) else []
                run = []
            else:
                run.append(i)
        return "".join(pieces)

    def _decodable(self, ids, known) -> list[int]:
        """`ids` as ints, less the model's rows that no token has (they have no text). An id neither `known` (in this
        tokenizer) nor a row of the model's embedding is an error, never dropped: it is another tokenizer's, and its
        text would be lost unsaid."""
        kept = []
        for k, i in enumerate(ids):
            try:
                i = operator.index(i)  # a Python, NumPy or 0-d tensor integer, never a float cut to one
            except TypeError:
                raise ArgumentTypeError(f"decode: ids[{k}] is {i!r} ({type(i).__name__}), not a token id",
                                        "pass a list of ints, e.g. tokenizer.encode(text)") from None
            if i < 0:
                raise InputError(f"decode: ids[{k}] is {i}, and token ids are 0 or more",
                                 "leave the masked entries out first, e.g. [i for i in ids if i >= 0] (-100 marks "
                                 "the labels a loss ignores)")
            if known(i):
                kept.append(i)
            elif self.embedding_rows is None:
                raise InputError(f"decode: ids[{k}] is {i}, not an id of this tokenizer (its largest is {self.max_id})",
                                 "decode ids with the tokenizer that made them (a model's own ids past its tokenizer "
                                 "decode to no text where config.json sits beside the tokenizer files)")
            elif i >= self.embedding_rows:
                raise InputError(f"decode: ids[{k}] is {i}, not an id of this tokenizer (its largest is {self.max_id}) "
                                 f"nor a row of the model's embedding ({self.embedding_rows} rows)",
                                 "decode ids with the tokenizer that made them")
        return kept

    def token_to_id(self, token: str) -> int | None:
        if self._fast is not None:
            return self._fast.token_to_id(token)
        found = self._placeholders.get(token, self._sp_added.get(token))
        if found is not None:
            return found
        piece = self._sp.PieceToId(token)
        return None if piece == self._sp.unk_id() and token != self._sp.IdToPiece(piece) else piece

    def with_placeholders(self, *tokens: str) -> "Tokenizer":
        """This tokenizer with `tokens` added as unsplittable added tokens (as `tokenizer.add_tokens([...])`
        does in the reference code), each one id after the vocabulary, in order. A copy: this tokenizer
        is never changed, so a text that holds the literal string `<PST>` tokenizes everywhere else as in
        a fresh process. Copies are kept, one per tuple of tokens."""
        key = tuple(tokens)
        if key not in self._derived:
            derived = copy.copy(self)
            derived._derived, derived._sp_split = {}, None
            if self._fast is not None:
                from tokenizers import AddedToken
                from tokenizers import Tokenizer as FastTokenizer
                derived._fast = FastTokenizer.from_str(self._fast.to_str())
                derived._fast.encode_special_tokens = self.split_special_tokens  # a setting to_str does not keep
                # transformers' add_tokens(["<PST>"]) makes a non-special AddedToken; normalized=False keeps
                # byte-level normalizers from touching it, which is what its fast tokenizer stores.
                derived._fast.add_tokens([AddedToken(t, normalized=False, special=False) for t in tokens
                                          if self.token_to_id(t) is None])
            else:
                derived._placeholders = dict(self._placeholders)
                for t in tokens:
                    if derived.token_to_id(t) is None:
                        derived._placeholders[t] = self._sp_size + len(derived._placeholders)
            self._derived[key] = derived
        return self._derived[key]

    def _sp_matched(self) -> tuple[dict[str, int], re.Pattern | None]:
        """The texts matched whole before sentencepiece runs (the model's added tokens, its special ones unless
        split_special_tokens, and the placeholders), their ids, and one pattern for them, built once: a
        tokenizer.model can hold thousands, and building these per text would cost more than the encode."""
        if self._sp_split is None:
            added = {token: i for token, i in self._sp_added.items()
                     if not (self.split_special_tokens and i in self._sp_special)} | self._placeholders
            self._sp_split = added, _token_pattern(list(added))
        return self._sp_split

    def _sp_segment(self, piece: str, at_start: bool):
        """Encode one segment as transformers 5 does (Metaspace, prepend_scheme "first", or "always" where legacy):
        the "▁" dummy prefix at the very start of the text (after an added token too where legacy), and only if the
        segment does not begin with a space or a "▁" already."""
        prefixed = (at_start or self._sp_legacy) and not piece.startswith((" ", "▁"))
        processor = self._sp if prefixed else self._sp_no_prefix
        return processor.encode(piece, return_type="proto").pieces

    def _add_fast_tokens(self, added: list[tuple[int | None, dict]]) -> None:
        """tokenizer.json's added tokens, plus those transformers adds (`_transformers_added_tokens`) but for the named
        ones already among them: one that is already there keeps its id and flags, except that `special` sticks."""
        from tokenizers import AddedToken

        present = {token.content for token in self._fast.get_added_tokens_decoder().values()}
        self._fast.add_tokens([AddedToken(**token) for index, token in added
                               if index is not None or token["content"] not in present])

    def _check_listed_ids(self, absent: list[tuple[int | None, str]], folder: Path) -> None:
        """transformers gives a token of added_tokens_decoder that the vocabulary lacked the next free id, not the id
        listed: where they differ, its ids are not those the checkpoint was trained with."""
        moved = [f"{text!r} at {index} (transformers gives it {self.token_to_id(text)})"
                 for index, text in absent if index is not None and self.token_to_id(text) != index]
        if moved:
            raise TokenizerError(f"{folder / 'tokenizer_config.json'}'s added_tokens_decoder lists {', '.join(moved)}, "
                                 "ids the tokenizer file does not hold them at",
                                 "use the tokenizer files saved with this checkpoint: tokenizer.json's added_tokens "
                                 "(or tokenizer.model) should hold each listed token at its id")

    def _special_id(self, token: str | None, role: str | None) -> int | None:
        if token is None:
            return None
        found = self.token_to_id(token)
        if found is None and role is not None:
            raise TokenizerError(f"the {role} token {token!r} of tokenizer_config.json is not in the vocabulary",
                                 "the tokenizer files do not belong together: re-download or re-convert them")
        return found

    def _template_specials(self) -> tuple[str | None, str | None]:
        """The special tokens tokenizer.json's post-processor puts before and after a single text, found by running
        it on one text, as transformers 5 does, not by reading its JSON (a pair's template may name a BOS that one
        text never gets); None where it puts none."""
        if self._fast is None:
            return None, None
        probe, bare = next(((text, ids) for text in ("a", "Hello", "0")
                            if (ids := self._fast.encode(text, add_special_tokens=False).ids)), (None, []))
        if probe is None:  # no text of its own to find the added tokens around
            return None, None
        full = self._fast.encode(probe, add_special_tokens=True).ids
        start = next((k for k in range(len(full) - len(bare) + 1) if full[k:k + len(bare)] == bare), None)
        if start is None:  # a processor that edits the text's own ids: no tokens around it to name
            return None, None
        before, after = full[:start], full[start + len(bare):]
        return (self._fast.id_to_token(before[0]) if before else None,
                self._fast.id_to_token(after[-1]) if after else None)

    def _post_processor_adds_bos(self, template_bos: str | None) -> bool:
        if self._fast is None:
            return self._sp.bos_id() >= 0 and self.bos_id is not None
        return template_bos is not None and template_bos == self.bos_token


# transformers' apply_chat_template arguments that change its result and that Tokenizer.apply_chat_template lacks.
_TRANSFORMERS_ONLY = ("continue_final_message", "sanitize_control_tokens", "return_assistant_tokens_mask", "padding",
                      "truncation", "max_length", "return_tensors", "return_dict", "tokenizer_kwargs")


class MissingTokenizer:
    """Stands in for the tokenizer of a folder that has no tokenizer files: the model still runs on ids
    (`model(ids)`, `minidecoder.generate(model, ids)`), and anything that needs text raises one clear error."""

    eos_id = None  # generation stops at config.json's eos_token_id alone

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @staticmethod
    def present(folder: str | Path) -> bool:
        """Whether the folder has tokenizer files; a dangling link in their place is an error, not "no tokenizer"."""
        return any(file_is_there(Path(folder) / name, TokenizerError) for name in ("tokenizer.json", "tokenizer.model"))

    def __getattr__(self, name: str):
        raise TokenizerError(f"{self.folder} has no tokenizer.json or tokenizer.model, so this model works on token ids "
                             f"only (tokenizer.{name} was asked for)",
                             "copy the checkpoint's tokenizer files into the folder, or pass token ids yourself: "
                             "model(ids), minidecoder.generate(model, ids)")

    def __repr__(self) -> str:
        return f"MissingTokenizer({self.folder})"


def _split_on(text: str, pattern: re.Pattern | None) -> list[tuple[str, str | None]]:
    """'a<P>b' -> [('a', '<P>'), ('b', None)], for a `_token_pattern` that matches '<P>'."""
    out, start = [], 0
    for match in pattern.finditer(text) if pattern is not None else ():
        out.append((text[start:match.start()], match.group()))
        start = match.end()
    out.append((text[start:], None))
    return out


def _token_pattern(tokens: list[str]) -> re.Pattern | None:
    """One regular expression for the tokens, longest first, so that the longest matches at each position: a
    tokenizer.model can hold thousands of added pieces (unused slots, markup), and trying each one at every
    character costs their number times the text's length."""
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True)))) if tokens else None


def _refuse_lone_surrogate(text: str) -> None:
    """`check_text` for every caller of the tokenizer (`minidecoder generate`, `logits`, a method's template);
    `minidecoder.embed` and the job runner name the row first."""
    if isinstance(text, str):  # otherwise the backend's own TypeError names the type
        check_text(text, f"the text {text[:40]!r}")


def _load_sentencepiece(path: Path, dummy_prefix: bool | None):
    """The model with its dummy prefix ("▁" at the start) as stored, or on or off where `dummy_prefix` says; the same
    model with it off; and its pieces that transformers makes added tokens, each with whether it is special (control
    and unknown pieces; user-defined ones are not)."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    def processor(prefix: bool) -> sentencepiece.SentencePieceProcessor:
        proto.normalizer_spec.add_dummy_prefix = prefix
        return sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())

    try:
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(path.read_bytes())
        start = processor(proto.normalizer_spec.add_dummy_prefix if dummy_prefix is None else dummy_prefix)
    except Exception as error:
        raise TokenizerError(f"{path} could not be read: {error}", "re-download or re-convert the checkpoint") from None
    added = [(piece.piece, piece.type != piece.USER_DEFINED) for piece in proto.pieces
             if piece.type in (piece.UNKNOWN, piece.CONTROL, piece.USER_DEFINED)]
    return start, processor(False), added


def _embedding_rows(folder: Path) -> int | None:
    """config.json's vocab_size (its text_config's in a multimodal Gemma 3), or None where the folder holds no
    readable one: a tokenizer without its model."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    rows = config.get("vocab_size", text.get("vocab_size") if isinstance(text, dict) else None)
    return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 else None


def _char_index_of_bytes(text: str) -> list[int]:
    """For each UTF-8 byte offset 0..len(bytes), the index of the character it falls in."""
    index = []
    for i, char in enumerate(text):
        index += [i] * len(char.encode("utf-8"))
    return index + [len(text)]


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TokenizerError(f"{path} is not valid JSON: {error}", "re-download or re-convert the checkpoint") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path} holds a JSON {type(data).__name__}, not an object of settings",
                             "re-download or re-convert the checkpoint")
    return data


# transformers' named special tokens (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES), in its order.
_NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_ADDED_TOKEN_FLAGS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _with_legacy_token_files(folder: Path, config: dict) -> dict:
    """tokenizer_config.json as transformers' _from_pretrained reads it: one without `added_tokens_decoder` (saved
    before transformers 4.34) takes its special tokens from special_tokens_map.json, whose entries win over its own,
    and its added tokens from added_tokens.json ({text: id}; special where the text is a named special token), with
    tokenizer.json's own added tokens laid over them: a token both list keeps tokenizer.json's flags."""
    if "added_tokens_decoder" in config:
        return config
    config = {**config, **_read_json(folder / "special_tokens_map.json")}
    named = {_token_text(token) for token in _named_tokens(config)}
    listed = _read_json(folder / "added_tokens.json")
    decoder = {index: {"content": text, "special": text in named, "normalized": text not in named}
               for text, index in listed.items()}
    if listed:  # (read only then: re-adding tokenizer.json's own tokens as they are changes nothing)
        own = _read_json(folder / "tokenizer.json").get("added_tokens")
        own = {token["content"]: token for token in (own if isinstance(own, list) else []) if isinstance(token, dict)
               and isinstance(token.get("content"), str) and isinstance(token.get("id"), int)}
        decoder = {index: entry for index, entry in decoder.items() if entry["content"] not in own}
        decoder.update({token["id"]: _flags(token) for token in own.values()})
    return {**config, "added_tokens_decoder": decoder}


def _named_tokens(config: dict) -> list:
    """The special tokens transformers names, as the config gives them (text or AddedToken object), in its order:
    bos, eos, unk, sep, pad, cls, mask, any other "*_token" (Gemma 3's `image_token`), extra_special_tokens (or
    additional_special_tokens, its older name)."""
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    extra = list(extra.values()) if isinstance(extra, dict) else extra if isinstance(extra, list) else []
    other = [value for key, value in config.items() if key.endswith("_token") and key not in _NAMED_TOKENS]
    tokens = [config.get(key) for key in _NAMED_TOKENS] + other + extra
    return [token for token in tokens if _token_text(token)]


def _transformers_added_tokens(config: dict, path: Path) -> list[tuple[int | None, dict]]:
    """The tokens transformers' TokenizersBackend.__init__ adds to the tokenizer's own, in its order, as (id listed,
    AddedToken arguments): added_tokens_decoder's by id with their flags (`special` where it is a named token), then
    each named special token not listed, special (id None: transformers gives it the next free one where the vocabulary
    lacks it, which Tokenizer does not)."""
    listed = config.get("added_tokens_decoder") or {}
    if not isinstance(listed, dict) or not all(str(index).isdigit() and isinstance(token, dict)
                                               and isinstance(token.get("content"), str)
                                               for index, token in listed.items()):
        raise TokenizerError(f"{path}: added_tokens_decoder (or added_tokens.json) is not "
                             '{id: {"content": text, ...}} ({text: id})', "re-download or re-convert the checkpoint")
    named = _named_tokens(config)
    named_texts = {_token_text(token) for token in named}
    added = [(int(index), {**_flags(token), "special": bool(token.get("special")) or token["content"] in named_texts})
             for index, token in sorted(listed.items(), key=lambda item: int(item[0]))]
    taken = {token["content"] for _, token in added}
    for token in named:  # once each: the same text may be named twice (an EOS that is also the pad)
        if _token_text(token) not in taken:
            taken.add(_token_text(token))
            flags = _flags(token) if isinstance(token, dict) else {"content": token}
            added.append((None, {**flags, "special": True}))
    return added


def _flags(token: dict) -> dict:
    """A serialized AddedToken's arguments to `tokenizers.AddedToken`, without its id or other keys."""
    return {key: value for key, value in token.items() if key in _ADDED_TOKEN_FLAGS}


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):  # serialized AddedToken
        return value.get("content")
    return value if isinstance(value, str) else None
