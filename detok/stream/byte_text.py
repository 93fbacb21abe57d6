"""Byte-table text decoding: id -> bytes, then one incremental UTF-8 decoder per request.

Exact wherever the tokenizer's decoder is a per-token byte map (verified at load by
`detok.stream.strategy`). Cost per token is O(1): a table lookup, and on the fast path (nothing
held, no leading-space strip or special-token spacing pending) not even a UTF-8 decode, because the
text of every token whose bytes are whole characters is precomputed.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from detok.tokenizer.base import ByteDecoding

_utf8_decode = codecs.utf_8_decode  # (text, bytes consumed); with final=False an incomplete tail stays


class OutOfVocabulary(Exception):
    def __init__(self, token_id: int) -> None:
        self.token_id = token_id
        super().__init__(f"token id {token_id} is outside the vocabulary")


class ByteTables:
    """The per-tokenizer tables, shared by all streams of one decode mode."""

    __slots__ = ("pieces", "texts", "special", "strip_leading_space", "spaced", "vocab_size")

    def __init__(self, decoding: ByteDecoding, skip_special: bool, spaces_between_special: bool) -> None:
        special = decoding.special_ids
        self.special = special
        self.strip_leading_space = decoding.strip_leading_space
        # Special tokens kept with spacing become their own space-separated segments (see Tokenizer.decode)
        self.spaced = (not skip_special) and spaces_between_special and bool(special)
        pieces = list(decoding.pieces)
        if skip_special:
            for i in special:
                if 0 <= i < len(pieces):
                    pieces[i] = b""
        texts: list[str | None] = []
        for i, piece in enumerate(pieces):
            if self.spaced and i in special:
                texts.append(None)
                continue
            try:
                texts.append(piece.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)  # partial or invalid bytes: only the incremental decoder knows
        self.pieces = pieces
        self.texts = texts
        self.vocab_size = len(pieces)


class ByteTextDecoder:
    """Incremental text of one request under the byte-table strategy."""

    __slots__ = ("_t", "_texts", "_pending", "_fast", "_strip", "_after_special", "_started")

    def __init__(self, tables: ByteTables, context_ids: Sequence[int]) -> None:
        self._t = tables
        self._texts = tables.texts
        self._pending = b""  # bytes of an incomplete character
        self._strip = tables.strip_leading_space  # a leading space of the whole text is dropped
        self._after_special = False  # the next segment is preceded by " " (spaced special tokens)
        self._started = False  # any token seen (spacing applies only between tokens)
        self._fast = not self._strip
        if context_ids:
            self.push(context_ids)  # the prompt tail's text is discarded; its held bytes carry over

    @property
    def holding(self) -> bool:
        return bool(self._pending)

    def _decode(self, data: bytes, final: bool = False) -> str:
        if self._pending:
            data = self._pending + data
        text, used = _utf8_decode(data, "replace", final)
        self._pending = data[used:]
        return text

    def push(self, ids: Sequence[int]) -> str:
        """Text completed by these ids. Raises OutOfVocabulary before consuming anything."""
        if not ids:
            return ""
        if self._fast:
            texts = self._texts
            try:
                if len(ids) == 1:
                    i = ids[0]
                    if i >= 0:
                        t = texts[i]
                        if t is not None:
                            self._started = True
                            return t
                else:
                    if min(ids) >= 0:
                        parts = [texts[i] for i in ids]
                        if None not in parts:
                            self._started = True
                            return "".join(parts)
            except IndexError:
                pass
        return self._push_slow(ids)

    def _push_slow(self, ids: Sequence[int]) -> str:
        t = self._t
        n = t.vocab_size
        for i in ids:
            if not 0 <= i < n:
                raise OutOfVocabulary(i)
        pieces = t.pieces
        if not t.spaced:
            data = b"".join([pieces[i] for i in ids])
            if data and self._strip:
                self._strip = False
                if data[:1] == b" ":
                    data = data[1:]
            self._started = True
            text = self._decode(data)
        else:
            text = self._push_spaced(ids)
        self._fast = not (self._strip or self._after_special or self._pending)
        return text

    def _push_spaced(self, ids: Sequence[int]) -> str:
        """Segments joined by one space: each special token alone, each run of others together."""
        t = self._t
        special = t.special
        out: list[str] = []
        for i in ids:
            piece = t.pieces[i]
            if i in special:
                if self._started:
                    # the run before ends here: its held bytes become U+FFFD, as a separate decode would
                    out.append(self._decode(b"", True))
                    out.append(" ")
                if t.strip_leading_space and piece[:1] == b" ":
                    piece = piece[1:]  # each segment is decoded on its own, leading-space rule included
                out.append(self._decode(piece, True))
                self._after_special = True
                self._strip = t.strip_leading_space  # the next run is decoded on its own
            else:
                if self._after_special:
                    out.append(" ")
                    self._after_special = False
                if piece and self._strip:
                    self._strip = False
                    if piece[:1] == b" ":
                        piece = piece[1:]
                out.append(self._decode(piece))
            self._started = True
        return "".join(out)

    def flush(self) -> str:
        """End of the request: held incomplete bytes become U+FFFD."""
        self._fast = False
        return self._decode(b"", True)
