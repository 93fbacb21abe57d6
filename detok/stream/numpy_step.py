"""`StreamTable.step` without the compiled extension: the plain rows by numpy gathers, the rest
through each request's `DecodeStream` (the same results as the compiled step, property-tested).
A mixin: it works on the table's per-slot columns."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from detok.stream.byte_text import _utf8_decode
from detok.wire.params import Finish
from detok.stream.step_results import StepResult

_UNKNOWN = 0  # slot 0 is never given out: unknown rids map to it, and it never matches a start
_SMALL_BATCH = 8  # up to this many rows a batch is stepped row by row
_NOT_PLAIN = -2  # `_expect` of a slot whose next step must go through its DecodeStream
_MAX_PENDING = 4  # held bytes of an incomplete UTF-8 character: at most 3


def _as_list(values: np.ndarray | list[int]) -> list[int]:
    return values if isinstance(values, list) else values.tolist()


class NumpyStepping:
    if TYPE_CHECKING:  # the table's state this mixin reads and writes
        _rows: np.ndarray
        _slot_of: dict[Any, int]
        _expect: np.ndarray
        _vocab: int
        _eos: frozenset[int]
        _eos_mask: np.ndarray
        _eos_stops: np.ndarray
        _stop_marks: np.ndarray
        _stop_marked: dict[Any, list[int]]
        _stop_firsts_len: np.ndarray
        _tables: Any
        _mode: np.ndarray
        _row_of: np.ndarray
        _pend_len: np.ndarray
        _pend: np.ndarray
        _choff: np.ndarray
        _ntok: np.ndarray

        def _step_one(self, rid: Hashable, slot: int, start: int, ids_a: np.ndarray) -> tuple[str, int, int, Finish | None]: ...

    def _step_numpy(
        self, rids: Sequence[Hashable], starts: Sequence[int], counts: Sequence[int], tokens: Sequence[int]
    ) -> StepResult:
        """`step` without the extension: the plain rows by numpy gathers, the rest per stream."""
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
        slots = np.fromiter(map(self._slot_of.get, rids, repeat(_UNKNOWN)), dtype=np.int64, count=n)
        if n <= _SMALL_BATCH:
            # a few rows: numpy's fixed cost per call would dominate; each row steps its own stream
            return self._step_rows(rids, slots, starts_a, counts_a, tokens_a)
        one_each = len(tokens_a) == n and counts_a.max() == 1
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
        if self._eos or self._stop_marked:
            stops = self._eos_mask[tok1] | (self._stop_marks[tok1] != 0) if self._stop_marked else self._eos_mask[tok1]
            elig &= ~(stops & self._eos_stops[slots])
        elig &= self._stop_firsts_len[slots] == 0  # stop strings: each row through its stream here
        tables = self._tables
        gi = tok1 if len(tables.index) <= 1 else self._mode[slots] * tables.vocab + tok1
        if tables.restricted:
            elig &= tables.byte_ok[gi]
        # A rid twice in one batch (a replayed row): all its rows go, in order, through its stream.
        rows = self._rows[:n]
        self._row_of[slots] = rows  # the last row of each slot wins
        elig &= self._row_of[slots] == rows
        self._row_of[slots[::-1]] = rows[::-1]  # the first wins
        elig &= self._row_of[slots] == rows
        if elig.all():
            texts, offs, ntok = self._step_plain_py(slots, tok1, gi)
            return StepResult(texts, _as_list(offs), _as_list(ntok), [None] * n)

        texts = [""] * n
        offsets = np.zeros(n, dtype=np.int64)
        ntoks = np.zeros(n, dtype=np.int64)
        finishes: list[Finish | None] = [None] * n
        idx = np.flatnonzero(elig)
        if len(idx):
            plain, offsets[idx], ntoks[idx] = self._step_plain_py(slots[idx], tok1[idx], gi[idx])
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

    def _step_plain_py(self, slots: np.ndarray, toks: np.ndarray, gi: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        tables = self._tables
        texts = list(map(tables.texts.__getitem__, gi.tolist()))
        lens = tables.lengths[gi]
        partial = np.flatnonzero(~tables.whole[gi] | (self._pend_len[slots] > 0))
        if len(partial):
            # Held bytes or an id that is part of a character: the slot's incremental UTF-8
            # (each slot once here: repeated rids never take this path)
            pslots = slots[partial]
            held, pend = self._pend_len[pslots].tolist(), self._pend[pslots].tobytes()
            rests = []
            for j, (k, h, m, tok) in enumerate(zip(partial.tolist(), held, self._mode[pslots].tolist(), toks[partial].tolist())):
                data = pend[_MAX_PENDING * j : _MAX_PENDING * j + h] + tables.pieces[m][tok]
                texts[k], used = _utf8_decode(data, "replace", False)
                lens[k] = len(texts[k])
                rests.append(data[used:])
            self._pend_len[pslots] = np.fromiter(map(len, rests), dtype=np.uint8, count=len(rests))
            padded = b"".join(r.ljust(_MAX_PENDING, b"\0") for r in rests)
            self._pend[pslots] = np.frombuffer(padded, dtype=np.uint8).reshape(-1, _MAX_PENDING)
        offs = self._choff[slots]
        self._choff[slots] = offs + lens
        ntok = self._ntok[slots] + 1
        self._ntok[slots] = ntok
        self._expect[slots] = ntok
        if tables.switching:  # an id after which the slot's mode is the other of a pair (typed output)
            self._mode[slots] += tables.shift[gi]
        return texts, offs, ntok  # type: ignore[return-value]  # every None was a partial row
