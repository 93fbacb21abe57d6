"""A small deterministic tokenizer for tests and demos, with the whole protocol and a byte map.

Ids 0-2 are the specials `<pad>`, `<bos>`, `<eos>`; then a dozen words; then 256 byte tokens.
Text is split on whitespace; a known word is one token, any other word falls back to the byte
tokens of " word" (so any text encodes, and multi-byte characters span several tokens). Every word
piece carries its leading space and `decode` drops the first space of the text, so decoding joins
words with single spaces: decode(encode("Hello 北京 🫨")) == "Hello 北京 🫨". A one-line chat
template renders each message as `<bos> role: content <eos>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detok.tokenizer.base import ByteDecoding, SpecialTokens, StoredVocabularyTokenizer, Tokenizer, TokenizerLoadError
from detok.tokenizer.spm import decode_byte_pieces

SPECIALS = ("<pad>", "<bos>", "<eos>")
WORDS = ("Hello", "world", "test", "this", "is", "a", "the", "stop", "token", "北京", "欢迎", "你")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FIRST_WORD_ID = len(SPECIALS)
FIRST_BYTE_ID = FIRST_WORD_ID + len(WORDS)
VOCAB_SIZE = FIRST_BYTE_ID + 256
CHAT_TEMPLATE = (
    "{% for m in messages %}<bos> {{ m['role'] }}: {{ m['content'] }} <eos> {% endfor %}"
    "{% if add_generation_prompt %}<bos> assistant:{% endif %}"
)


def _byte_name(b: int) -> str:
    return f"<0x{b:02X}>"


class MockTokenizer(StoredVocabularyTokenizer):
    backend = "mock"

    def __init__(self, source: str = "mock") -> None:
        super().__init__(source)
        names = [*SPECIALS, *WORDS, *(_byte_name(b) for b in range(256))]
        self._names = names
        self._ids = {name: i for i, name in enumerate(names)}
        self._pieces = [
            *(f" {s}".encode() for s in SPECIALS),
            *(f" {w}".encode() for w in WORDS),
            *(bytes((b,)) for b in range(256)),
        ]
        self._special_ids = frozenset(range(len(SPECIALS)))
        self._special = SpecialTokens(bos="<bos>", eos="<eos>", pad="<pad>")
        self._vocab_size = VOCAB_SIZE
        self._eos_ids = frozenset((EOS_ID,))
        self.set_chat_template(CHAT_TEMPLATE)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = [BOS_ID] if add_special_tokens else []
        for word in text.split():
            known = self._ids.get(word)
            if known is not None and known < FIRST_BYTE_ID:
                ids.append(known)
            else:
                ids.extend(FIRST_BYTE_ID + b for b in f" {word}".encode())
        return ids

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return decode_byte_pieces(self._pieces, ids, self._special_ids, skip_special_tokens, strip_leading_space=True)

    def token_to_id(self, token: str) -> int | None:
        return self._ids.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._names[token_id] if 0 <= token_id < VOCAB_SIZE else None

    def byte_decoding(self) -> ByteDecoding:
        return ByteDecoding(pieces=self._pieces, special_ids=self._special_ids, strip_leading_space=True)


def load_mock(**options: Any) -> Tokenizer:
    """The mock tokenizer; it takes no options."""
    if options:
        raise TokenizerLoadError("mock", f"the mock tokenizer takes no options (got {sorted(options)})")
    return MockTokenizer()
