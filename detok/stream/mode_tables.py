"""Every byte-table decode mode a StreamTable uses, concatenated into the per-id records the
compiled step reads (and the arrays its numpy fallback gathers from)."""

from __future__ import annotations

import numpy as np

from detok.stream.byte_text import ByteTables

# The compiled step's record of one (decode mode, id), as `TokenEntry` in _plainstep.c.
_INLINE = 7
TOKEN_ENTRY = np.dtype([("off", "<u4"), ("nbytes", "<u2"), ("nchars", "<u2"), ("flags", "u1"), ("inline", f"S{_INLINE}")])
_T_WHOLE, _T_BYTE_OK, _T_EOS, _T_NEXT, _T_PREV = 1, 2, 4, 8, 16
assert TOKEN_ENTRY.itemsize == 16



class ModeTables:
    """Every byte-table mode in use, concatenated (mode m's id t at m * vocab + t) for numpy gathers."""

    def __init__(self, vocab: int, eos: np.ndarray) -> None:
        self.vocab = vocab
        self.eos = eos  # bool per id: an end-of-sequence id
        self.index: dict[object, int] = {}
        self.texts: list[str | None] = []
        self.entries = np.zeros(0, dtype=TOKEN_ENTRY)  # the compiled step's view of every id
        self.utf8 = b""  # the bytes of the ids too long to fit in their entry
        self.pieces: list[list[bytes]] = []  # each mode's bytes per id
        self.whole = np.empty(0, dtype=bool)  # the id's bytes are whole characters
        self.lengths = np.empty(0, dtype=np.int64)
        # byte_ok False: never a plain row (an added token in raw-added mode, whose text depends on
        # the token before it, or an id past the tokenizer's byte table); `restricted`: some id is not byte_ok
        self.byte_ok = np.empty(0, dtype=bool)
        self.restricted = False
        # per (mode, id): +1 / -1 when the slot's mode becomes the next / previous one after the
        # id (`restricted_pair`); `switching` once any does
        self.shift = np.empty(0, dtype=np.int8)
        self.switching = False

    def restricted_mode(self, tables: ByteTables, slow: np.ndarray, key: object, shift: np.ndarray | None = None) -> int:
        """A mode with the text of `tables`'s in which the ids where `slow` (bool per id) is True
        are never plain rows (typed output's marker and trigger ids), named by `key`; `shift`
        (int8 per id, +1 / -1 / 0) switches a slot to the next / previous mode after the id. A
        copy of the base mode's records: milliseconds, no pass over the vocabulary in Python."""
        index_key = (id(tables), key)
        m = self.index.get(index_key)
        if m is not None:
            return m
        base = self.mode_of(tables)
        n = self.vocab
        m = self.index[index_key] = len(self.index)
        span = slice(base * n, (base + 1) * n)
        self.texts = self.texts + self.texts[span]
        self.pieces.append(self.pieces[base])
        self.whole = np.concatenate([self.whole, self.whole[span]])
        self.lengths = np.concatenate([self.lengths, self.lengths[span]])
        byte_ok = self.byte_ok[span] & ~slow[:n]
        self.restricted = self.restricted or not byte_ok.all()
        self.byte_ok = np.concatenate([self.byte_ok, byte_ok])
        entries = self.entries[span].copy()  # the same spilled bytes in `utf8`
        entries["flags"] &= np.where(byte_ok, 0xFF, 0xFF ^ _T_BYTE_OK).astype(np.uint8)
        shift_m = np.zeros(n, dtype=np.int8) if shift is None else shift[:n].astype(np.int8)
        entries["flags"] |= ((shift_m > 0) * _T_NEXT + (shift_m < 0) * _T_PREV).astype(np.uint8)
        self.switching = self.switching or bool(shift_m.any())
        self.shift = np.concatenate([self.shift, shift_m])
        self.entries = np.concatenate([self.entries, entries])
        return m

    def restricted_pair(self, tables: ByteTables, first: tuple[np.ndarray, np.ndarray],
                        second: tuple[np.ndarray, np.ndarray], key: object) -> int:
        """Two restricted modes, the second right after the first (a state of two values the
        compiled step switches between by `T_NEXT` / `T_PREV`), each given as (slow, shift); the
        first one's index."""
        m = self.index.get((id(tables), (key, 0)))
        if m is not None:
            return m
        self.mode_of(tables)  # (the base first: nothing may come between the two)
        m = self.restricted_mode(tables, first[0], (key, 0), first[1])
        m2 = self.restricted_mode(tables, second[0], (key, 1), second[1])
        assert m2 == m + 1
        return m

    def mode_of(self, tables: ByteTables) -> int:
        index_key = id(tables)
        m = self.index.get(index_key)
        if m is None:
            m = self.index[index_key] = len(self.index)
            # each mode spans exactly `vocab` ids (mode m's id t is at m * vocab + t)
            n = self.vocab
            texts = (list(tables.texts) + [None] * n)[:n]
            pieces = (list(tables.pieces) + [b""] * n)[:n]
            self.texts = self.texts + texts
            self.pieces.append(pieces)
            self.whole = np.concatenate([self.whole, np.array([t is not None for t in texts], dtype=bool)])
            lengths = np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)
            self.lengths = np.concatenate([self.lengths, lengths])
            byte_ok = np.ones(len(texts), dtype=bool)
            byte_ok[len(tables.pieces) :] = False  # its stream reports them as out of the vocabulary
            if tables.raw_added:
                byte_ok[[i for i in tables.raw_added if 0 <= i < len(texts)]] = False
            self.restricted = self.restricted or not byte_ok.all()
            self.byte_ok = np.concatenate([self.byte_ok, byte_ok])
            self.shift = np.concatenate([self.shift, np.zeros(n, dtype=np.int8)])
            self._add_entries(pieces, texts, lengths, byte_ok)
        return m

    def _add_entries(self, pieces: list[bytes], texts: list[str | None], lengths: np.ndarray, byte_ok: np.ndarray) -> None:
        nbytes = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        whole = np.array([t is not None for t in texts], dtype=bool) & (lengths < 2**16)
        fits = nbytes < 2**16  # else: never on the compiled plain path
        entries = np.zeros(len(pieces), dtype=TOKEN_ENTRY)
        entries["flags"] = (whole & fits) * _T_WHOLE + (byte_ok & fits) * _T_BYTE_OK + self.eos * _T_EOS
        entries["nbytes"] = np.where(fits, nbytes, 0)
        entries["nchars"] = np.where(whole, lengths, 0)
        entries["inline"] = [b if len(b) <= _INLINE else b"" for b in pieces]
        spilled = np.flatnonzero(fits & (nbytes > _INLINE))
        spill_len = nbytes[spilled]
        entries["off"][spilled] = len(self.utf8) + np.cumsum(spill_len) - spill_len
        self.utf8 += b"".join([pieces[i] for i in spilled.tolist()])
        if len(self.utf8) >= 2**32:
            raise ValueError("token bytes too long for the compiled step")
        self.entries = np.concatenate([self.entries, entries])
