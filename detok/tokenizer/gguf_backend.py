"""GGUF backend: the vocabulary in a llama.cpp model file, as a Hugging Face `tokenizers` tokenizer.

The metadata (read without the tensors) is converted into an in-memory `tokenizers.Tokenizer` for
every llama.cpp vocabulary type (SPM, BPE, WPM, UGM) and wrapped in `HFTokenizer`, so encode runs in
Rust and the streaming layer gets a byte map. Encode reproduces llama.cpp's own test vectors; decode
is HF's, except for BPE, which joins llama.cpp's per-token bytes (see `GGUFTokenizer`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import tokenizers
from gguf import TokenType

from detok.tokenizer.base import ByteDecoding, TokenizerLoadError
from detok.tokenizer.byte_pieces import bytelevel_char_to_byte, bytelevel_piece, spm_piece
from detok.tokenizer.gguf_convert import SPACE, build_tokenizer
from detok.tokenizer.gguf_metadata import GGUFFormatError, is_gguf, read_gguf_metadata
from detok.tokenizer.gguf_pretokenizers import PRE_TOKENIZERS
from detok.tokenizer.gguf_vocab import EOG_TEXTS, GGUFVocab, VocabError, vocab_from_metadata
from detok.tokenizer.hf import HFTokenizer

__all__ = ["GGUFTokenizer", "is_gguf", "load_gguf"]

_CONFIG_NAMES = ("bos", "eos", "unk", "pad", "sep", "cls", "mask")


class GGUFTokenizer(HFTokenizer):
    """An HFTokenizer built from GGUF metadata.

    BPE vocabularies decode through their per-token byte map rather than HF's ByteLevel decoder:
    llama.cpp prints control and user-defined tokens as their raw text (deepseek-llm stores 'ø' as
    a user-defined token), which the ByteLevel decoder would turn into U+FFFD. Joining the bytes in
    Python is also faster than HF's decode (a dict lookup per id and one join, no decoder chain).
    """

    backend = "gguf"

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str, vocab: GGUFVocab) -> None:
        config = {
            f"{name}_token": tokenizer.id_to_token(i)
            for name, i in vocab.special_ids.items()
            if name in _CONFIG_NAMES
        }
        super().__init__(
            tokenizer,
            source,
            config=config,
            chat_template=vocab.chat_template,
            extra_eos_ids=_end_of_generation_ids(vocab),
        )
        self.vocab_type = vocab.kind
        self._bpe_pieces = tuple(_bpe_pieces(vocab)) if vocab.kind == "bpe" else None  # (a tuple: see ByteDecoding)

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        pieces = self._bpe_pieces
        if pieces is None:
            return super()._decode_ids(ids, skip_special_tokens)
        n = len(pieces)
        dropped = self.special_ids if skip_special_tokens else frozenset()
        # ids outside the vocabulary are dropped, as HF's decode does
        data = b"".join([pieces[i] for i in ids if 0 <= i < n and i not in dropped])
        return data.decode("utf-8", "replace")

    def byte_decoding(self) -> ByteDecoding | None:
        if self._bpe_pieces is None:
            return super().byte_decoding()
        return ByteDecoding(pieces=self._bpe_pieces, special_ids=self.special_ids)


class _ByteLevelTable(dict[int, int]):
    """str.translate table from GPT-2's byte-level characters to the latin-1 character of their byte;
    any other character becomes U+FFFF, which then fails the latin-1 encode."""

    def __missing__(self, key: int) -> int:
        return 0xFFFF


def _bpe_pieces(vocab: GGUFVocab) -> list[bytes]:
    """llama.cpp's token_to_piece for BPE: normal tokens are GPT-2 byte-level text (SentencePiece-
    style vocabularies: their text with ▁ as a space), byte tokens <0xXX> their byte, control,
    unknown and user-defined tokens their raw text, any other type nothing."""
    table = _ByteLevelTable({ord(c): b for c, b in bytelevel_char_to_byte().items()})
    raw = (TokenType.CONTROL, TokenType.UNKNOWN, TokenType.USER_DEFINED)
    spm_style = PRE_TOKENIZERS[vocab.pre].spm_style
    pieces = []
    for tok, kind in zip(vocab.tokens, vocab.types):
        if kind in raw:
            pieces.append(tok.encode("utf-8"))
        elif kind == TokenType.BYTE:
            pieces.append(spm_piece(tok, byte_fallback=True) if spm_style else bytelevel_piece(tok))
        elif kind != TokenType.NORMAL:
            pieces.append(b"")
        elif spm_style:
            pieces.append(tok.replace(SPACE, " ").encode("utf-8"))
        else:
            try:
                pieces.append(tok.translate(table).encode("latin-1"))
            except UnicodeEncodeError:  # not byte-level text: HF's decoder keeps the token's UTF-8
                pieces.append(bytelevel_piece(tok))
    return pieces


def _end_of_generation_ids(vocab: GGUFVocab) -> list[int]:
    """eot / eom from the metadata, and the tokens llama.cpp treats as end of generation by text."""
    ids = [vocab.special_ids[k] for k in ("eot", "eom") if k in vocab.special_ids]
    control = TokenType.CONTROL
    return ids + [i for i, t in enumerate(vocab.tokens) if t in EOG_TEXTS and vocab.types[i] == control]


def load_gguf(
    path: str | os.PathLike[str], *, source: str | None = None, chat_template: str | None = None
) -> GGUFTokenizer:
    """Load the tokenizer of a GGUF file; `chat_template` overrides tokenizer.chat_template.

    Any failure (unreadable, truncated, not GGUF, unsupported vocabulary) is a TokenizerLoadError.
    """
    src = source or str(path)
    start = time.perf_counter()
    try:
        metadata: dict[str, Any] = read_gguf_metadata(path)
    except OSError as e:
        raise TokenizerLoadError(src, f"cannot read {os.fspath(path)}: {e.strerror or e}") from None
    except GGUFFormatError as e:
        raise TokenizerLoadError(src, f"not a valid GGUF file: {e}") from None
    try:
        vocab = vocab_from_metadata(metadata)
        hf = build_tokenizer(vocab)
    except VocabError as e:
        raise TokenizerLoadError(src, f"GGUF vocabulary: {e}") from None
    except Exception as e:  # the Rust builders raise plain Exceptions
        raise TokenizerLoadError(src, f"cannot build the GGUF tokenizer: {e}") from None
    tok = GGUFTokenizer(hf, src, vocab)
    if chat_template is not None:
        tok.set_chat_template(chat_template)
    tok.load_seconds = time.perf_counter() - start
    return tok
