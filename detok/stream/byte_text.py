"""Byte-table text decoding: id -> bytes, then one incremental UTF-8 decoder per request.

Exact wherever the tokenizer's decoder is a per-token byte map (verified at load by
`detok.stream.strategy`). Cost per token is O(1): a table lookup, and on the fast path (nothing
held, no leading-space strip pending, not right after an added token in raw-added mode) not even a
UTF-8 decode, because the text of every token whose bytes are whole characters is precomputed.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence

from detok.tokenizer.base import ByteDecoding

_utf8_decode = codecs.utf_8_decode  # (text, bytes consumed); with final=False an incomplete tail stays


class OutOfVocabulary(Exception):
    def __init__(self, token_id: int) -> None:
        self.token_id = token_id
        super().__init__(f"token id {token_id} is outside the vocabulary")


class ByteTables:
    """The per-tokenizer tables, shared by all streams of one decode mode.

    `raw_added` (special tokens kept, spaces_between_special_tokens=False, and only where it changes
    text): added-token id -> raw content. An added token right after another added token is emitted
    as that content (vLLM's rule); those ids never take the precomputed path."""

    __slots__ = ("pieces", "texts", "deltas", "special", "strip_leading_space", "raw_added", "vocab_size", "__weakref__")

    def __init__(self, decoding: ByteDecoding, skip_special: bool, raw_added: Mapping[int, str] | None = None) -> None:
        special = decoding.special_ids
        self.special = special
        self.strip_leading_space = decoding.strip_leading_space
        self.raw_added = dict(raw_added) if raw_added else None
        pieces = list(decoding.pieces)
        if skip_special:
            for i in special:
                if 0 <= i < len(pieces):
                    pieces[i] = b""
        texts: list[str | None] = []
        for piece in pieces:
            try:
                texts.append(piece.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)  # partial or invalid bytes: only the incremental decoder knows
        if self.raw_added:
            for i in self.raw_added:
                if 0 <= i < len(texts):
                    texts[i] = None  # its text depends on the token before it
        # tuples: of atomic objects, the cycle collector stops tracking them (a list of every id's
        # bytes or str is walked, and the cache evicted, at each full collection of the process)
        self.pieces: tuple[bytes, ...] = tuple(pieces)
        self.texts: tuple[str | None, ...] = tuple(texts)
        # a whole token's Delta, made at its first step by any stream of these tables (immutable)
        self.deltas: list[object] = [None] * len(texts)
        self.vocab_size = len(pieces)


def raw_added_changes_text(decoding: ByteDecoding, added: Mapping[int, str]) -> bool:
    """Whether vLLM's raw-content rule can give other text than the byte map: only where an added
    token's content differs from its bytes (or is empty / starts with the space a strip removes)."""
    pieces = decoding.pieces
    for i, content in added.items():
        if not 0 <= i < len(pieces) or pieces[i] != content.encode("utf-8"):
            return True
        if decoding.strip_leading_space and (not content or content[0] == " "):
            return True
    return False


def _ends_whole(tables: ByteTables, ids: Sequence[int]) -> bool:
    """Whether pushing these ids would leave nothing held: all in the vocabulary and the last
    one's bytes non-empty whole characters (valid UTF-8 never begins with a continuation byte,
    so whatever came before is decoded or replaced before them). Spares a prompt tail's decode."""
    return ends_whole(tables.texts, ids, tables.vocab_size)


def ends_whole(texts: Sequence[str | None], ids: Sequence[int], n: int) -> bool:
    """`_ends_whole` over a mode's texts and its n ids (what `_plainstep.whole_tail` compiles)."""
    if min(ids) < 0 or max(ids) >= n:
        return False
    return bool(texts[ids[-1]])


def context_held(tables: ByteTables, context_ids: Sequence[int]) -> bytes | None:
    """The bytes of an incomplete character a prompt tail leaves held (as ByteTextDecoder's
    push of it would), or None where a stream must take the tail itself: an id out of the
    vocabulary, or a leading space still to strip (a tail with no bytes)."""
    if not context_ids:
        return None if tables.strip_leading_space else b""
    if _ends_whole(tables, context_ids):
        return b""
    pieces = tables.pieces
    n = len(pieces)
    for i in context_ids:
        if not 0 <= i < n:
            return None
    data = b"".join([pieces[i] for i in context_ids])
    if not data and tables.strip_leading_space:
        return None
    return data[_utf8_decode(data, "replace", False)[1] :]


class ByteTextDecoder:
    """Incremental text of one request under the byte-table strategy."""

    __slots__ = ("_t", "_texts", "_pending", "_fast", "_strip", "_after_added")

    def __init__(self, tables: ByteTables, context_ids: Sequence[int]) -> None:
        self._t = tables
        self._texts = tables.texts
        self._pending = b""  # bytes of an incomplete character
        self._strip = tables.strip_leading_space  # a leading space of the whole text is dropped
        self._after_added = False  # the last generated token was an added token (raw_added mode)
        self._fast = not self._strip
        if context_ids:
            if _ends_whole(tables, context_ids):
                self._strip = False  # (what the push would leave: its bytes are not empty)
            else:
                self.push(context_ids)  # the prompt tail's text is discarded; its held bytes carry over
            self._after_added = False  # as vLLM: the prompt never makes the first token raw
            self._fast = not (self._strip or self._pending)

    @classmethod
    def holding_nothing(cls, tables: ByteTables) -> ByteTextDecoder:
        """A decoder past a prompt tail that left nothing held and no leading space to strip (what
        `__init__` gives for such a tail, without looking at it again)."""
        dec = cls.__new__(cls)
        dec._t = tables
        dec._texts = tables.texts
        dec._pending = b""
        dec._strip = dec._after_added = False
        dec._fast = True
        return dec

    @property
    def holding(self) -> bool:
        return bool(self._pending)

    def _decode(self, data: bytes, final: bool = False) -> str:
        if self._pending:
            data = self._pending + data
        text, used = _utf8_decode(data, "replace", final)
        self._pending = data[used:]
        return text

    def _decode_run(self, data: bytes) -> str:
        if data and self._strip:
            self._strip = False
            if data[:1] == b" ":
                data = data[1:]
        return self._decode(data)

    def take_kept(self, data: bytes) -> str:
        """Text of `data`: the raw bytes of ids a compiled step kept for this decoder's stream,
        beginning with the bytes of an incomplete character it held when they were handed out (so
        they replace its own). An incomplete character at the end stays held."""
        text, used = _utf8_decode(data, "replace", False)
        self._pending = data[used:]
        self._fast = not (self._strip or self._after_added or self._pending)
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
                            return t
                else:
                    if min(ids) >= 0:
                        parts = [texts[i] for i in ids]
                        if None not in parts:
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
        if t.raw_added is None:
            text = self._decode_run(b"".join([pieces[i] for i in ids]))
        else:
            text = self._push_raw_added(ids, t.raw_added)
        self._fast = not (self._strip or self._after_added or self._pending)
        return text

    def _push_raw_added(self, ids: Sequence[int], added: dict[int, str]) -> str:
        """vLLM's rule: an added token after an added token is its raw content; its bytes still
        go through the decoder (as DecodeStream still steps), their text is not used."""
        pieces = self._t.pieces
        out: list[str] = []
        run: list[bytes] = []
        for i in ids:
            content = added.get(i)
            if content is not None and self._after_added:
                if run:
                    out.append(self._decode_run(b"".join(run)))
                    run = []
                self._decode_run(pieces[i])
                out.append(content)
            else:
                run.append(pieces[i])
            self._after_added = content is not None
        if run:
            out.append(self._decode_run(b"".join(run)))
        return "".join(out)

    def flush(self) -> str:
        """End of the request: held incomplete bytes become U+FFFD."""
        self._fast = False
        return self._decode(b"", True)
