"""mistral-common backend: Tekken `.json` and versioned SentencePiece `.model.vN` files.

mistral-common (optional extra `mistral`, imported lazily) loads the file and renders chats: it has
no Jinja template, it turns a ChatCompletionRequest into tokens itself, so `apply_chat_template`
returns the text of those tokens (special tokens as text), which `encode` turns back into the same
ids; `encode_chat` returns mistral-common's ids directly.

Tekken is tiktoken-style byte-level BPE with `num_special_tokens` special ids first: id i >= that
count is BPE rank i - count, so the byte map is each rank's bytes behind the special tokens' text.
Versioned SentencePiece files decode exactly like `detok.tokenizer.spm` (they are plain models).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sentencepiece

from detok.tokenizer.base import ByteDecoding, SpecialTokens, StoredVocabularyTokenizer, Tokenizer, TokenizerLoadError
from detok.tokenizer.spm import SentencePieceTokenizer, SpecialTextEncoder, decode_byte_pieces, open_processor
from detok.tokenizer.tiktoken_backend import bytelevel_name, bytes_of_bytelevel_name

if TYPE_CHECKING:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer as MistralCommonTokenizer

_OPTIONS = frozenset({"version"})
_MISTRAL_SPM_NAME = re.compile(r"\.model(\.v\d+(m\d+)?)?$")  # the names mistral-common accepts
_INSTALL_HINT = "install it with: pip install 'detok[mistral]' (or pip install mistral-common)"


def looks_like_tekken(obj: dict[str, Any]) -> bool:
    """A parsed JSON object in Tekken's layout: config with a pattern and special count, vocab list."""
    config = obj.get("config") if isinstance(obj, dict) else None
    vocab = obj.get("vocab") if isinstance(obj, dict) else None
    return (
        isinstance(config, dict)
        and isinstance(config.get("pattern"), str)
        and isinstance(config.get("default_num_special_tokens"), int)
        and isinstance(vocab, list)
        and (not vocab or (isinstance(vocab[0], dict) and "token_bytes" in vocab[0]))
    )


# ---- chat through mistral-common --------------------------------------------------------------
class _MistralChat(StoredVocabularyTokenizer):
    """Chat prompts rendered by mistral-common unless a Jinja template was set explicitly."""

    _mistral: MistralCommonTokenizer

    @property
    def mistral_tokenizer(self) -> MistralCommonTokenizer:
        """The mistral-common tokenizer this wraps."""
        return self._mistral

    def encode_chat(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None, **kwargs: Any
    ) -> list[int]:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        from detok.tokenizer.chat import ChatTemplateError

        try:
            request = ChatCompletionRequest.from_openai(list(messages), tools=list(tools) if tools else None, **kwargs)
            return list(self._mistral.encode_chat_completion(request).tokens)
        except Exception as e:  # pydantic validation, mistral-common's own checks
            raise ChatTemplateError(f"mistral-common cannot encode this chat: {type(e).__name__}: {e}") from e

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """The text of mistral-common's tokens for this chat. mistral-common always ends a user turn
        with the generation prompt, so `add_generation_prompt` only matters for a Jinja override."""
        if self.chat_template is not None:
            return super().apply_chat_template(messages, add_generation_prompt, tools, **kwargs)
        keep = {k: v for k, v in kwargs.items() if k == "continue_final_message"}
        return self._chat_text(self.encode_chat(messages, tools, **keep))

    def _chat_text(self, ids: Sequence[int]) -> str:
        raise NotImplementedError


class MistralSentencePieceTokenizer(_MistralChat, SentencePieceTokenizer):
    backend = "mistral"

    def __init__(
        self, mistral: MistralCommonTokenizer, processor: sentencepiece.SentencePieceProcessor, source: str
    ) -> None:
        SentencePieceTokenizer.__init__(self, processor, source)
        self._mistral = mistral

    def _chat_text(self, ids: Sequence[int]) -> str:
        return self.decode_segments(ids)


class MistralTekkenTokenizer(_MistralChat):
    backend = "mistral"

    def __init__(self, mistral: MistralCommonTokenizer, source: str) -> None:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        super().__init__(source)
        self._mistral = mistral
        tekken = mistral.instruct_tokenizer.tokenizer
        assert isinstance(tekken, Tekkenizer), type(tekken)
        self._tekken = tekken
        self._vocab_size = tekken.n_words
        count = tekken.num_special_tokens
        self._special_ids = frozenset(range(count))
        self._pieces = tuple(tekken.id_to_byte_piece(i, SpecialTokenPolicy.KEEP) for i in range(self._vocab_size))
        self._special_by_name = {tekken.id_to_piece(i): i for i in range(count)}
        names = {tid: name for name, tid in self._special_by_name.items()}
        named = {"bos": tekken.bos_id, "eos": tekken.eos_id, "unk": tekken.unk_id, "pad": tekken.pad_id}
        self._special = SpecialTokens(
            **{k: names.get(v) for k, v in named.items()},
            additional=tuple(names[i] for i in range(count) if i not in named.values()),
        )
        self._bos_id = tekken.bos_id
        self._id_by_bytes: dict[bytes, int] | None = None  # built on the first token_to_id
        self._eos_ids = frozenset((tekken.eos_id,))
        self._text_encoder = SpecialTextEncoder(
            self._special_by_name, lambda text: tekken.encode(text, bos=False, eos=False)
        )

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = self._text_encoder.encode(text)
        return [self._bos_id, *ids] if add_special_tokens else ids

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return decode_byte_pieces(self._pieces, ids, self._special_ids, skip_special_tokens)

    def _chat_text(self, ids: Sequence[int]) -> str:
        return self._decode_ids(ids, False)

    def token_to_id(self, token: str) -> int | None:
        """Special tokens by text, the others in the byte-level form `id_to_token` returns."""
        special = self._special_by_name.get(token)
        if special is not None:
            return special
        if self._id_by_bytes is None:
            count = len(self._special_ids)
            self._id_by_bytes = {p: i for i, p in enumerate(self._pieces[count:], count)}
        return self._id_by_bytes.get(bytes_of_bytelevel_name(token))

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id < self._vocab_size:
            return None
        if token_id in self._special_ids:
            return self._pieces[token_id].decode("utf-8")
        return bytelevel_name(self._pieces[token_id])

    def byte_decoding(self) -> ByteDecoding:
        return ByteDecoding(pieces=self._pieces, special_ids=self._special_ids)


# ---- loading ----------------------------------------------------------------------------------
def _import_mistral(source: str) -> type[MistralCommonTokenizer]:
    try:
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ImportError as e:
        raise TokenizerLoadError(source, f"mistral-common is not installed ({e}); {_INSTALL_HINT}") from None
    return MistralTokenizer


def _is_json(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(64).lstrip().startswith(b"{")


def _name_for_mistral(path: Path, is_json: bool, version: str | None) -> str | None:
    """mistral-common picks the format and version from the file name; None if this one works."""
    name = path.name
    if is_json:
        return None if "tekken" in name and name.endswith(".json") else "tekken.json"
    if version is not None:
        return f"tokenizer.model.{version}"
    return None if _MISTRAL_SPM_NAME.search(name) else "tokenizer.model"


def _from_file(mistral_cls: type[MistralCommonTokenizer], path: Path, rename: str | None) -> MistralCommonTokenizer:
    if rename is None:
        return mistral_cls.from_file(str(path))
    with tempfile.TemporaryDirectory(prefix="detok-mistral-") as tmp:
        link = Path(tmp) / rename
        os.symlink(path.resolve(), link)
        return mistral_cls.from_file(str(link))


def load_mistral(path: str | Path, **options: Any) -> Tokenizer:
    """A mistral-common tokenizer file. Option `version` ("v3", "v7", ...) names the version of a
    SentencePiece file whose name does not end in `.model.vN` (a bare `.model` is v1)."""
    source = str(path)
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TokenizerLoadError(source, f"unknown mistral option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    file = Path(path).expanduser()
    if not file.is_file():
        raise TokenizerLoadError(source, f"no such file: {file}")
    mistral_cls = _import_mistral(source)
    is_json = _is_json(file)
    if is_json and "version" in options:
        raise TokenizerLoadError(source, "the version option is for SentencePiece files; Tekken JSON names its own")
    # a clear error for a file that is not SentencePiece; Tekken JSON is checked by mistral-common
    processor = None if is_json else open_processor(file, source)
    try:
        mistral = _from_file(mistral_cls, file, _name_for_mistral(file, is_json, options.get("version")))
    except Exception as e:  # TokenizerException, ValueError, AssertionError, KeyError from a bad file
        kind = "a Tekken tokenizer file" if is_json else "a mistral-common SentencePiece file"
        raise TokenizerLoadError(
            source, f"{file.name} is not {kind}: mistral-common says {type(e).__name__}: {e}"
        ) from None
    if processor is None:
        return MistralTekkenTokenizer(mistral, source)
    return MistralSentencePieceTokenizer(mistral, processor, source)
