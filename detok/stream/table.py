"""All live requests of one worker, stepped one scheduler batch at a time.

Most rids in most steps carry one token whose bytes are whole characters, for a stream with nothing
held and no stop strings: for those the step is a few numpy gathers over the whole batch (the text of
every token id is precomputed). Every other rid goes through its own `DecodeStream.step`, which gives
the same text; the table keeps the two paths' counters in step.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Hashable, Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np

from detok.stream.byte_text import ByteTables, ByteTextDecoder, _utf8_decode
from detok.stream.decode_stream import DecodeStream
from detok.stream.params import EMPTY_DELTA, DecodeParams, Finish
from detok.stream.strategy import Strategy, prepare_decoding
from detok.tokenizer.base import Tokenizer

try:  # the compiled inner loop (optional extension); the numpy/Python path gives the same results
    from detok.stream._plainstep import step_one_each as _compiled_step_one_each
    from detok.stream._plainstep import step_plain as _compiled_step_plain
except ImportError:  # pragma: no cover - depends on the build
    _compiled_step_plain = _compiled_step_one_each = None

_UNKNOWN = 0  # slot 0 is never given out: unknown rids map to it, and it never matches a start
_NOT_PLAIN = -2
_SMALL_BATCH = 8
_NO_BYTES = np.zeros(0, dtype=bool)  # up to this many rows a batch is stepped row by row  # `_expect` of a slot whose next step must go through its DecodeStream


def _indexable(rid: Hashable) -> bool:
    return isinstance(rid, (int, np.integer)) and not isinstance(rid, bool) and 0 <= rid < 2**64


def _as_list(values: np.ndarray | list[int]) -> list[int]:
    return values if isinstance(values, list) else values.tolist()


class DuplicateRequest(KeyError):
    pass


class StepResult(NamedTuple):
    texts: list[str]
    offsets: list[int]
    num_tokens: list[int]
    finishes: list[Finish | None]


class _ModeTables:
    """Every byte-table mode in use, concatenated (mode m's id t at m * vocab + t) for numpy gathers."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.index: dict[int, int] = {}
        self.texts: list[str | None] = []
        self.pieces: list[list[bytes]] = []  # each mode's bytes per id
        self.whole = np.empty(0, dtype=bool)  # the id's bytes are whole characters
        self.lengths = np.empty(0, dtype=np.int64)
        self.byte_ok = np.empty(0, dtype=bool)  # not a special token that is its own spaced segment
        self.spaced = False

    def mode_of(self, tables: ByteTables) -> int:
        m = self.index.get(id(tables))
        if m is None:
            m = self.index[id(tables)] = len(self.index)
            texts = tables.texts
            self.texts = self.texts + list(texts)
            self.pieces.append(list(tables.pieces))
            self.whole = np.concatenate([self.whole, np.array([t is not None for t in texts], dtype=bool)])
            lengths = np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)
            self.lengths = np.concatenate([self.lengths, lengths])
            byte_ok = np.ones(len(texts), dtype=bool)
            if tables.spaced:
                self.spaced = True
                byte_ok[[i for i in tables.special if 0 <= i < len(texts)]] = False
            self.byte_ok = np.concatenate([self.byte_ok, byte_ok])
        return m


class StreamTable:
    def __init__(self, tokenizer: Tokenizer, strategy: Strategy | None = None, capacity: int = 1024) -> None:
        self.tokenizer = tokenizer
        self.plan = prepare_decoding(tokenizer, strategy)
        self._strategy = strategy
        self.compiled = _compiled_step_plain is not None  # False: the numpy/Python path (tests set it)
        self._vocab = tokenizer.vocab_size
        self._streams: dict[Hashable, DecodeStream] = {}
        self._slot_of: dict[Hashable, int] = {}
        self._decoders: list[ByteTextDecoder | None] = [None] * capacity
        self._free: list[int] = list(range(capacity - 1, _UNKNOWN, -1))
        # Columnar state of the vectorized path; the stream objects hold everything else.
        self._expect = np.full(capacity, _NOT_PLAIN, dtype=np.int64)  # next start, if the slot is plain
        self._expect[_UNKNOWN] = -3
        self._hold = np.zeros(capacity, dtype=bool)  # incomplete UTF-8 bytes are held
        self._eos_stops = np.zeros(capacity, dtype=bool)  # the stream stops on end-of-sequence ids
        self._mode = np.zeros(capacity, dtype=np.int64)
        self._ntok = np.zeros(capacity, dtype=np.int64)
        self._choff = np.zeros(capacity, dtype=np.int64)
        self._tables = _ModeTables(self._vocab)
        # Integer rids (the wire's) are also kept sorted, so a batch's rids find their slots with
        # one vectorized binary search instead of a dict lookup per row.
        self._keys = np.empty(0, dtype=np.uint64)
        self._key_slots = np.empty(0, dtype=np.int64)
        self._keys_added: list[tuple[int, int]] = []  # merged into the sorted keys at the next step
        self._keys_removed: list[int] = []
        self._unindexed = 0  # live rids that are not unsigned 64-bit ints (then: dict lookups)
        self._rows = np.arange(capacity, dtype=np.int64)  # scratch for duplicate detection
        self._row_of = np.zeros(capacity, dtype=np.int64)
        self._eos = frozenset(tokenizer.eos_token_ids)
        self._eos_mask = np.zeros(self._vocab, dtype=bool)
        for i in self._eos:
            if 0 <= i < self._vocab:
                self._eos_mask[i] = True

    # ---- registration -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, rid: object) -> bool:
        return rid in self._streams

    def stream(self, rid: Hashable) -> DecodeStream:
        return self._streams[rid]

    def rids(self) -> list[Hashable]:
        return list(self._streams)

    def open(
        self, rid: Hashable, context_ids: Sequence[int] = (), params: DecodeParams | None = None, ignore_eos: bool = False
    ) -> DecodeStream:
        if rid in self._streams:
            raise DuplicateRequest(rid)
        stream = DecodeStream(self.tokenizer, context_ids, params, ignore_eos=ignore_eos, strategy=self._strategy)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._streams[rid] = stream
        self._slot_of[rid] = slot
        if _indexable(rid):
            self._keys_added.append((int(rid), slot))
        else:
            self._unindexed += 1
        dec = stream._text
        byte_dec = dec if isinstance(dec, ByteTextDecoder) else None
        self._decoders[slot] = byte_dec
        self._mode[slot] = self._tables.mode_of(byte_dec._t) if byte_dec is not None else 0
        self._sync(slot, stream)
        return stream

    def close(self, rid: Hashable) -> None:
        slot = self._slot_of.pop(rid, None)
        if slot is None:
            return
        del self._streams[rid]
        if _indexable(rid):
            self._keys_removed.append(int(rid))
        else:
            self._unindexed -= 1
        self._decoders[slot] = None
        self._expect[slot] = _NOT_PLAIN
        self._free.append(slot)

    def _grow(self) -> None:
        old = len(self._decoders)
        self._decoders.extend([None] * old)
        self._free.extend(range(2 * old - 1, old - 1, -1))
        for name in ("_hold", "_eos_stops", "_mode", "_ntok", "_choff"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))
        self._expect = np.concatenate([self._expect, np.full(old, _NOT_PLAIN, dtype=np.int64)])
        self._row_of = np.zeros(2 * old, dtype=np.int64)

    def _sync(self, slot: int, stream: DecodeStream) -> None:
        """Columnar state from the stream's own, after it stepped on its own."""
        dec = stream._text
        plain = (
            stream._plain
            and not stream.finished
            and stream._stop_ids <= self._eos  # the vectorized path checks end-of-sequence ids only
            and isinstance(dec, ByteTextDecoder)
            and not dec._strip
            and not dec._after_special
            and dec._started
        )
        self._expect[slot] = stream.num_tokens if plain else _NOT_PLAIN
        self._ntok[slot] = stream.num_tokens
        self._choff[slot] = stream.char_offset
        self._eos_stops[slot] = bool(stream._stop_ids)
        self._hold[slot] = isinstance(dec, ByteTextDecoder) and bool(dec._pending)

    # ---- stepping ---------------------------------------------------------------------------
    def step(
        self, rids: Sequence[Hashable], starts: Sequence[int], counts: Sequence[int], tokens: Sequence[int]
    ) -> StepResult:
        """One scheduler batch: rids[k] gets counts[k] ids from `tokens`, the first being its
        output token number starts[k] (earlier ones are a replay and skipped)."""
        n = len(rids)
        tokens_a = np.asarray(tokens)
        starts_a = np.asarray(starts)
        counts_a = np.asarray(counts)
        if counts_a.shape != (n,) or starts_a.shape != (n,) or counts_a.sum() != len(tokens_a):
            raise ValueError("rids, starts and counts must align and counts must sum to len(tokens)")
        if n == 0:
            return StepResult([], [], [], [])
        if n > len(self._rows):
            self._rows = np.arange(2 * n, dtype=np.int64)
        slots = self._slots_of(rids, n)
        if n <= _SMALL_BATCH:
            # a few rows: numpy's fixed cost per call would dominate; each row steps its own stream
            return self._step_rows(rids, slots, starts_a, counts_a, tokens_a)
        one_each = len(tokens_a) == n and counts_a.max() == 1
        if one_each and self.compiled:
            return self._step_one_each_compiled(rids, slots, starts_a, tokens_a)
        firsts = None
        if one_each:
            tok1 = tokens_a
            elig = self._expect[slots] == starts_a
        else:
            firsts = np.cumsum(counts_a) - counts_a
            tok1 = tokens_a[np.minimum(firsts, max(len(tokens_a) - 1, 0))] if len(tokens_a) else np.zeros(n, np.int64)
            elig = (self._expect[slots] == starts_a) & (counts_a == 1)
        # Rows on the vectorized path: a plain stream, one id, in order, in the vocabulary, not a stop.
        if len(tok1) and (tok1.min() < 0 or tok1.max() >= self._vocab):
            elig &= (tok1 >= 0) & (tok1 < self._vocab)
            tok1 = np.where(elig, tok1, 0)
        if self._eos:
            elig &= ~(self._eos_mask[tok1] & self._eos_stops[slots])
        tables = self._tables
        gi = tok1 if len(tables.index) <= 1 else self._mode[slots] * tables.vocab + tok1
        if tables.spaced:
            elig &= tables.byte_ok[gi]
        # A rid twice in one batch (a replayed row): all its rows go, in order, through its stream.
        self._row_of[slots] = self._rows[:n]
        elig &= self._row_of[slots] == self._rows[:n]
        if elig.all():
            texts, offs, ntok = self._step_plain(slots, tok1, gi)
            return StepResult(texts, _as_list(offs), _as_list(ntok), [None] * n)

        texts = [""] * n
        offsets = np.zeros(n, dtype=np.int64)
        ntoks = np.zeros(n, dtype=np.int64)
        finishes: list[Finish | None] = [None] * n
        idx = np.flatnonzero(elig)
        if len(idx):
            plain, offsets[idx], ntoks[idx] = self._step_plain(slots[idx], tok1[idx], gi[idx])
            deque(map(texts.__setitem__, idx.tolist(), plain), maxlen=0)
        slow = np.flatnonzero(~elig)
        if isinstance(rids, np.ndarray):
            rids = rids.tolist()  # plain ints for the stream dict and messages
        if firsts is None:
            firsts = np.arange(n)
        for k, slot, start, first, count in zip(
            slow.tolist(), slots[slow].tolist(), starts_a[slow].tolist(), firsts[slow].tolist(), counts_a[slow].tolist()
        ):
            texts[k], offsets[k], ntoks[k], finishes[k] = self._step_one(
                rids[k], slot, start, tokens_a[first : first + count]
            )
        return StepResult(texts, offsets.tolist(), ntoks.tolist(), finishes)

    def _step_one_each_compiled(
        self, rids: Sequence[Hashable], slots: np.ndarray, starts: np.ndarray, tokens: np.ndarray
    ) -> StepResult:
        """One id per row: eligibility and the plain rows in one compiled pass, the rest per stream."""
        tables = self._tables
        texts, offsets, counts, slow = _compiled_step_one_each(  # type: ignore[misc]
            slots, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(tokens, dtype=np.int64),
            self._vocab, self._eos_mask, self._eos_stops, tables.byte_ok if tables.spaced else _NO_BYTES,
            self._row_of, tables.texts, tables.lengths, tables.whole, self._hold, self._choff, self._ntok,
            self._expect, self._decoders, self._mode, tables.pieces,
        )
        finishes: list[Finish | None] = [None] * len(texts)
        if slow:
            if isinstance(rids, np.ndarray):
                rids = rids.tolist()
            for k in slow:
                texts[k], offsets[k], counts[k], finishes[k] = self._step_one(
                    rids[k], int(slots[k]), int(starts[k]), tokens[k : k + 1]
                )
        return StepResult(texts, offsets, counts, finishes)

    def _step_rows(
        self, rids: Sequence[Hashable], slots: np.ndarray, starts: np.ndarray, counts: np.ndarray, tokens: np.ndarray
    ) -> StepResult:
        if isinstance(rids, np.ndarray):
            rids = rids.tolist()
        out = StepResult([], [], [], [])
        first = 0
        for rid, slot, start, count in zip(rids, slots.tolist(), starts.tolist(), counts.tolist()):
            text, offset, ntok, finish = self._step_one(rid, slot, start, tokens[first : first + count])
            first += count
            out.texts.append(text)
            out.offsets.append(offset)
            out.num_tokens.append(ntok)
            out.finishes.append(finish)
        return out

    def _slots_of(self, rids: Sequence[Hashable], n: int) -> np.ndarray:
        if not self._unindexed and isinstance(rids, np.ndarray) and rids.dtype.kind in "ui":
            if self._keys_added or self._keys_removed:
                self._merge_keys()
            keys = self._keys
            if not len(keys):
                return np.zeros(n, dtype=np.int64)
            pos = np.minimum(np.searchsorted(keys, rids.astype(np.uint64, copy=False)), len(keys) - 1)
            return np.where(keys[pos] == rids, self._key_slots[pos], _UNKNOWN)
        return np.fromiter(map(self._slot_of.get, rids, repeat(_UNKNOWN)), dtype=np.int64, count=n)

    def _merge_keys(self) -> None:
        """Apply the registrations and closes since the last step to the sorted keys, in one go
        (per-request inserts into a numpy array cost more than the requests' whole decode)."""
        keys, slots = self._keys, self._key_slots
        if self._keys_removed and len(keys):
            removed = np.array(self._keys_removed, dtype=np.uint64)
            pos = np.minimum(np.searchsorted(keys, removed), len(keys) - 1)
            keep = np.ones(len(keys), dtype=bool)
            keep[pos[keys[pos] == removed]] = False  # keys are unique and sorted
            keys, slots = keys[keep], slots[keep]
        self._keys_removed = []
        live = self._slot_of
        added = [(r, s) for r, s in self._keys_added if live.get(r) == s]  # not closed meanwhile
        self._keys_added = []
        if added:
            keys = np.concatenate([keys, np.array([r for r, _ in added], dtype=np.uint64)])
            slots = np.concatenate([slots, np.array([s for _, s in added], dtype=np.int64)])
            order = np.argsort(keys, kind="stable")
            keys, slots = keys[order], slots[order]
        self._keys, self._key_slots = keys, slots

    def _step_plain(
        self, slots: np.ndarray, toks: np.ndarray, gi: np.ndarray
    ) -> tuple[list[str], np.ndarray | list[int], np.ndarray | list[int]]:
        """Rows of one plain id each: (texts, char offsets, tokens consumed), state advanced."""
        if self.compiled:
            tables = self._tables
            return _compiled_step_plain(  # type: ignore[misc]
                np.ascontiguousarray(slots, dtype=np.int64), np.ascontiguousarray(gi, dtype=np.int64),
                np.ascontiguousarray(toks, dtype=np.int64), tables.texts, tables.lengths, tables.whole,
                self._hold, self._choff, self._ntok, self._expect, self._decoders, self._mode, tables.pieces,
            )
        return self._step_plain_py(slots, toks, gi)

    def _step_plain_py(self, slots: np.ndarray, toks: np.ndarray, gi: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        tables = self._tables
        texts = list(map(tables.texts.__getitem__, gi.tolist()))
        lens = tables.lengths[gi]
        partial_mask = ~tables.whole[gi] | self._hold[slots]
        if partial_mask.any():
            # Held bytes or an id that is part of a character: the request's own UTF-8 bytes, in
            # C-level maps rather than a Python loop (byte-fallback runs make these common).
            partial = np.flatnonzero(partial_mask)
            pslots = slots[partial]
            decs = list(map(self._decoders.__getitem__, pslots.tolist()))
            datas = [d._pending + d._t.pieces[t] for d, t in zip(decs, toks[partial].tolist())]
            decoded = list(map(_utf8_decode, datas, repeat("replace"), repeat(False)))
            rests = [data[used:] for data, (_, used) in zip(datas, decoded)]
            ptexts = [text for text, _ in decoded]
            deque(map(setattr, decs, repeat("_pending"), rests), maxlen=0)
            deque(map(setattr, decs, repeat("_fast"), map(operator.not_, rests)), maxlen=0)
            deque(map(texts.__setitem__, partial.tolist(), ptexts), maxlen=0)
            lens[partial] = np.fromiter(map(len, ptexts), dtype=np.int64, count=len(ptexts))
            self._hold[pslots] = np.fromiter(map(len, rests), dtype=np.int64, count=len(rests)) > 0
        offs = self._choff[slots]
        self._choff[slots] = offs + lens
        ntok = self._ntok[slots] + 1
        self._ntok[slots] = ntok
        self._expect[slots] = ntok
        return texts, offs, ntok  # type: ignore[return-value]  # every None was a partial row

    def _step_one(self, rid: Hashable, slot: int, start: int, ids_a: np.ndarray) -> tuple[str, int, int, Finish | None]:
        if slot == _UNKNOWN:
            return "", 0, 0, Finish("error", None, f"unknown request id {rid!r} (not registered, or already finished)")
        stream = self._streams[rid]
        stream.num_tokens = done = int(self._ntok[slot])
        stream.char_offset = int(self._choff[slot])
        if start > done:
            delta = stream.finish("error", f"tokens missing: expected start {done}, got {start}")
        else:
            # a replay: tokens this stream has already consumed are skipped
            new_ids = ids_a[done - start :].tolist() if done > start else ids_a.tolist()
            delta = stream.step(new_ids) if new_ids else EMPTY_DELTA
        offset = stream.char_offset - len(delta.text)
        if delta.finish is not None:
            self.close(rid)
        else:
            self._sync(slot, stream)
        return delta.text, offset, stream.num_tokens, delta.finish

    def finish(self, rid: Hashable, reason: str, message: str | None = None) -> tuple[str, int, int, Finish | None]:
        """End a request from the scheduler side (length, abort, ...): text released, state freed."""
        slot = self._slot_of.get(rid)
        if slot is None:
            return "", 0, 0, None
        stream = self._streams[rid]
        stream.num_tokens = int(self._ntok[slot])
        stream.char_offset = int(self._choff[slot])
        delta = stream.finish(reason, message)  # type: ignore[arg-type]
        self.close(rid)
        return delta.text, stream.char_offset - len(delta.text), stream.num_tokens, delta.finish
