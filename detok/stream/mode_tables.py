"""Every byte-table decode mode a StreamTable uses, concatenated into the per-id records the
compiled step reads (and the arrays its numpy fallback gathers from)."""

from __future__ import annotations

import dataclasses
import itertools
import weakref

import numpy as np

from detok.stream.byte_text import ByteTables

# The compiled step's record of one (decode mode, id), as `TokenEntry` in _plainstep.c.
_INLINE = 7
TOKEN_ENTRY = np.dtype([("off", "<u4"), ("nbytes", "<u2"), ("nchars", "<u2"), ("flags", "u1"), ("inline", f"S{_INLINE}")])
_T_WHOLE, _T_BYTE_OK, _T_EOS, _T_NEXT, _T_PREV, _T_NL_PREFIX, _T_SHIFT2, _T_SP_PREFIX = 1, 2, 4, 8, 16, 32, 64, 128
# what a prefix flag puts before an id's text: an escaped newline in a JSON string, a space
PREFIXES = {"\\n": _T_NL_PREFIX, " ": _T_SP_PREFIX}
assert TOKEN_ENTRY.itemsize == 16


@dataclasses.dataclass(frozen=True)
class ModeSpec:
    """How a restricted mode differs from its base: `slow` (bool per id) never plain rows;
    `shift` (int8 per id, -2..2) the slot's mode becomes the one that many after (before) it
    after the id; `rewrite` (id -> text) the id's text in this mode (whole characters);
    `prefix` (one of PREFIXES) goes out before the text of the ids where `prefixed` is True."""

    slow: np.ndarray
    shift: np.ndarray | None = None
    rewrite: dict[int, str] | None = None
    prefix: str = ""
    prefixed: np.ndarray | None = None


class ModeTables:
    """Every byte-table mode in use, concatenated (mode m's id t at m * vocab + t) for numpy gathers."""

    def __init__(self, vocab: int, eos: np.ndarray) -> None:
        self.vocab = vocab
        self.eos = eos  # bool per id: an end-of-sequence id
        self.index: dict[object, int] = {}
        # tuples, not lists: untracked by the cycle collector (see ByteTables)
        self._mode_texts: list[tuple[str | None, ...]] = []  # each mode's text per id
        self._texts: tuple[str | None, ...] | None = ()  # `texts`, joined at the first ask after a mode is added
        self.entries = np.zeros(0, dtype=TOKEN_ENTRY)  # the compiled step's view of every id
        self.utf8 = b""  # the bytes of the ids too long to fit in their entry
        self.pieces: list[tuple[bytes, ...]] = []  # each mode's bytes per id
        self.whole = np.empty(0, dtype=bool)  # the id's bytes are whole characters
        self.lengths = np.empty(0, dtype=np.int64)
        # byte_ok False: never a plain row (an added token in raw-added mode, whose text depends on
        # the token before it, or an id past the tokenizer's byte table); `restricted`: some id is not byte_ok
        self.byte_ok = np.empty(0, dtype=bool)
        self.restricted = False
        # per (mode, id): how many modes on (or back, < 0) the slot's mode moves after the id
        # (`restricted_chain`); `switching` once any does
        self.shift = np.empty(0, dtype=np.int8)
        self.switching = False
        # the per-(mode, id) arrays above are views of these, which keep room for more modes: a
        # mode added copies its own records only, not every mode's before it
        self._room: dict[str, np.ndarray] = {}

    def restricted_mode(self, tables: ByteTables, spec: ModeSpec, key: object) -> int:
        """A mode with the text of `tables`'s as `spec` changes it, named by `key`. A copy of the
        base mode's records: milliseconds, no pass over the vocabulary in Python (but over the
        ids `spec.rewrite` names)."""
        index_key = (id(tables), key)
        m = self.index.get(index_key)
        if m is not None:
            return m
        base = self.mode_of(tables)
        n = self.vocab
        span = slice(base * n, (base + 1) * n)
        texts = self._mode_texts[base]
        pieces = self.pieces[base]
        lengths = self.lengths[span].copy()
        entries = self.entries[span].copy()  # the same spilled bytes in `utf8`
        if spec.rewrite:
            texts, pieces = list(texts), list(pieces)
            spill: list[bytes] = []
            at = len(self.utf8)
            nbytes, nchars, inline, off = entries["nbytes"], entries["nchars"], entries["inline"], entries["off"]
            for i, text in spec.rewrite.items():
                data = text.encode()
                if len(data) >= 2**16:
                    raise ValueError("token bytes too long for the compiled step")
                texts[i], pieces[i], lengths[i] = text, data, len(text)
                nbytes[i], nchars[i] = len(data), len(text)
                if len(data) <= _INLINE:
                    inline[i] = data
                else:
                    off[i] = at
                    at += len(data)
                    spill.append(data)
            self.utf8 += b"".join(spill)
            if len(self.utf8) >= 2**32:
                raise ValueError("token bytes too long for the compiled step")
        flags = entries["flags"]
        byte_ok = self.byte_ok[span] & ~spec.slow[:n]
        flags &= np.where(byte_ok, 0xFF, 0xFF ^ _T_BYTE_OK).astype(np.uint8)
        shift = np.zeros(n, dtype=np.int8) if spec.shift is None else spec.shift[:n].astype(np.int8)
        if np.abs(shift).max(initial=0) > 2:
            raise ValueError("a mode switch is at most two modes")
        flags |= ((shift > 0) * _T_NEXT + (shift < 0) * _T_PREV + (np.abs(shift) == 2) * _T_SHIFT2).astype(np.uint8)
        if spec.prefixed is not None:
            prefix = spec.prefix
            prefixed = spec.prefixed[:n] & byte_ok
            flags |= (prefixed * PREFIXES[prefix]).astype(np.uint8)
            texts = [prefix + t if p and t is not None else t for t, p in zip(texts, prefixed.tolist())]
            lengths += prefixed * len(prefix)
        m = self.index[index_key] = len(self.index)
        self._add_texts(tuple(texts))
        self.pieces.append(tuple(pieces))
        self.restricted = self.restricted or not byte_ok.all()
        self.switching = self.switching or bool(shift.any())
        self._append(whole=self.whole[span], lengths=lengths, byte_ok=byte_ok, shift=shift, entries=entries)
        return m

    def restricted_chain(self, tables: ByteTables, specs: list[ModeSpec], key: object) -> int:
        """Restricted modes one right after the other (the values of a state the compiled step
        switches between by the entries' shifts); the first one's index."""
        m = self.index.get((id(tables), (key, 0)))
        if m is not None:
            return m
        self.mode_of(tables)  # (the base first: nothing may come between them)
        m = self.restricted_mode(tables, specs[0], (key, 0))
        for k, spec in enumerate(specs[1:], 1):
            assert self.restricted_mode(tables, spec, (key, k)) == m + k
        return m

    def mode_of(self, tables: ByteTables) -> int:
        index_key = id(tables)
        m = self.index.get(index_key)
        if m is None:
            m = self.index[index_key] = len(self.index)
            # each mode spans exactly `vocab` ids (mode m's id t is at m * vocab + t)
            block = mode_block(tables, self.eos)
            entries = block.entries
            if self.utf8:  # (the block's spilled bytes go after those already here)
                entries = entries.copy()
                entries["off"][block.spilled] += len(self.utf8)
            self.utf8 += block.utf8
            if len(self.utf8) >= 2**32:
                raise ValueError("token bytes too long for the compiled step")
            self._add_texts(block.texts)
            self.pieces.append(block.pieces)
            self.restricted = self.restricted or not block.byte_ok.all()
            if not m:  # the first mode: the block's arrays as they are (read-only, shared)
                self.whole, self.lengths, self.byte_ok, self.shift = block.whole, block.lengths, block.byte_ok, block.shift
                self.entries = entries
            else:
                self._append(whole=block.whole, lengths=block.lengths, byte_ok=block.byte_ok, shift=block.shift,
                             entries=entries)
        return m

    @property
    def texts(self) -> tuple[str | None, ...]:
        """Every mode's text per id, concatenated (mode m's id t at m * vocab + t; None: not whole
        characters). Joined when first asked for after a mode is added: a worker's steps never ask
        (only an in-process caller's row texts and the numpy path do), so adding a mode costs no
        pass over the modes before it."""
        if self._texts is None:
            self._texts = tuple(itertools.chain.from_iterable(self._mode_texts))
        return self._texts

    def _add_texts(self, texts: tuple[str | None, ...]) -> None:
        self._mode_texts.append(texts)
        self._texts = None

    def _append(self, **more: np.ndarray) -> None:
        """Each named per-(mode, id) array extended by a mode's records: written into the room
        kept after it (the room doubled when full), the attribute a view of what is in use."""
        for name, records in more.items():
            now: np.ndarray = getattr(self, name)
            used, need = len(now), len(now) + len(records)
            room = self._room.get(name)
            if room is None or len(room) < need:  # (the first mode's arrays are the block's own: no room)
                room = self._room[name] = np.empty(max(need, 2 * used), dtype=now.dtype)
                room[:used] = now
            room[used:need] = records
            setattr(self, name, room[:need])

    def block_of(self, tables: ByteTables) -> ModeBlock:
        """The records of a decode mode's tables over this vocabulary (as `mode_of` adds them)."""
        return mode_block(tables, self.eos)


class ModeBlock:
    """One decode mode's records over a vocabulary (`eos`: a bool per id), as `ModeTables`
    concatenates them (the spilled bytes' offsets are the block's own: shifted there after the
    first mode). Derived from immutable tables with a pass over every id in Python, so made once
    per tables and kept with them (`mode_block`): every StreamTable of a tokenizer (a worker's
    spares, a process's several tables) shares it, and a table's first mode is its arrays as they
    are. Its arrays are read-only."""

    def __init__(self, tables: ByteTables, eos: np.ndarray) -> None:
        n = self.vocab = len(eos)
        self.eos = eos.copy()
        # tuples, not lists: untracked by the cycle collector (see ByteTables)
        self.texts: tuple[str | None, ...] = (tuple(tables.texts) + (None,) * n)[:n]
        self.pieces: tuple[bytes, ...] = (tuple(tables.pieces) + (b"",) * n)[:n]
        texts, pieces = self.texts, self.pieces
        self.whole = np.array([t is not None for t in texts], dtype=bool)
        self.lengths = np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)
        byte_ok = self.byte_ok = np.ones(n, dtype=bool)
        byte_ok[len(tables.pieces) :] = False  # its stream reports them as out of the vocabulary
        if tables.raw_added:
            byte_ok[[i for i in tables.raw_added if 0 <= i < n]] = False
        self.shift = np.zeros(n, dtype=np.int8)
        nbytes = np.fromiter(map(len, pieces), dtype=np.int64, count=n)
        whole = self.whole & (self.lengths < 2**16)
        fits = nbytes < 2**16  # else: never on the compiled plain path
        entries = self.entries = np.zeros(n, dtype=TOKEN_ENTRY)
        entries["flags"] = (whole & fits) * _T_WHOLE + (byte_ok & fits) * _T_BYTE_OK + self.eos * _T_EOS
        entries["nbytes"] = np.where(fits, nbytes, 0)
        entries["nchars"] = np.where(whole, self.lengths, 0)
        entries["inline"] = [b if len(b) <= _INLINE else b"" for b in pieces]
        spilled = self.spilled = np.flatnonzero(fits & (nbytes > _INLINE))
        spill_len = nbytes[spilled]
        entries["off"][spilled] = np.cumsum(spill_len) - spill_len
        self.utf8 = b"".join([pieces[i] for i in spilled.tolist()])
        for array in (self.eos, self.whole, self.lengths, self.byte_ok, self.shift, self.entries, self.spilled):
            array.flags.writeable = False


_BLOCKS: weakref.WeakKeyDictionary[ByteTables, ModeBlock] = weakref.WeakKeyDictionary()


def mode_block(tables: ByteTables, eos: np.ndarray) -> ModeBlock:
    """The tables' records over the vocabulary of `eos` (a bool per id: an end-of-sequence id),
    made at the first ask and kept as long as the tables (one tokenizer's tables: one vocabulary)."""
    block = _BLOCKS.get(tables)
    if block is None or not np.array_equal(block.eos, eos):
        block = _BLOCKS[tables] = ModeBlock(tables, eos)
    return block
