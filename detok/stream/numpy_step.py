"""`StreamTable.step` without the compiled extension (`NumpyStep`): the plain rows by numpy
gathers over the table's columns (`StreamColumns`, the ones the compiled step takes), the rest
through each request's `DecodeStream` (the same results as the compiled step, property-tested)."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from itertools import repeat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from detok.stream.columns import PENDING_WIDTH as _MAX_PENDING
from detok.stream.columns import UNKNOWN as _UNKNOWN

from detok.stream.byte_text import _utf8_decode
from detok.wire.params import Finish
from detok.stream.step_results import StepResult

if TYPE_CHECKING:
    from detok.stream.columns import StreamColumns
    from detok.stream.mode_tables import ModeTables
    from detok.stream.stop_marks import StopMarks
    from detok.stream.typed_fast import TypedFastPath

_SMALL_BATCH = 8  # up to this many rows a batch is stepped row by row
# a row through its own stream: (rid, slot, start, ids) -> (text, char offset, tokens, finish)
StepOne = Callable[[Hashable, int, int, np.ndarray], tuple[str, int, int, Finish | None]]


def _as_list(values: np.ndarray | list[int]) -> list[int]:
    return values if isinstance(values, list) else values.tolist()


class NumpyStep:
    """The numpy step over a table's columns; `step_one` is the table's step of a row through its
    own stream (the same one the compiled step calls back)."""

    def __init__(self, columns: StreamColumns, tables: ModeTables, slot_of: dict[Any, int], eos: frozenset[int],
                 eos_mask: np.ndarray, stops: StopMarks, step_one: StepOne) -> None:
        self.columns, self._tables, self._slot_of, self._stops, self._step_one = columns, tables, slot_of, stops, step_one
        self._eos, self._eos_mask, self._vocab = eos, eos_mask, tables.vocab
        self._rows = np.arange(len(columns), dtype=np.int64)  # scratch for duplicate detection
        # the table's `TypedFastPath`: a slot in a held steady state (its `held`) has its rows go
        # through its stream here, which takes the kept bytes back first
        self.typed_path: TypedFastPath | None = None
        self._row_of = np.zeros(len(columns), dtype=np.int64)

    def step(
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
        if len(self._row_of) < len(self.columns):  # (the table grew)
            self._row_of = np.zeros(len(self.columns), dtype=np.int64)
        slots = np.fromiter(map(self._slot_of.get, rids, repeat(_UNKNOWN)), dtype=np.int64, count=n)
        if n <= _SMALL_BATCH:
            # a few rows: numpy's fixed cost per call would dominate; each row steps its own stream
            return self._rows_one_by_one(rids, slots, starts_a, counts_a, tokens_a)
        one_each = len(tokens_a) == n and counts_a.max() == 1
        firsts = None
        if one_each:
            tok1 = tokens_a
            elig = self.columns.expect[slots] == starts_a
        else:
            firsts = np.cumsum(counts_a) - counts_a
            tok1 = tokens_a[np.minimum(firsts, max(len(tokens_a) - 1, 0))] if len(tokens_a) else np.zeros(n, np.int64)
            elig = (self.columns.expect[slots] == starts_a) & (counts_a == 1)
        # Rows on the vectorized path: a plain stream, one id, in order, in the vocabulary, not a stop.
        if len(tok1) and (tok1.min() < 0 or tok1.max() >= self._vocab):
            elig &= (tok1 >= 0) & (tok1 < self._vocab)
            tok1 = np.where(elig, tok1, 0)
        marked = self._stops.by_rid
        if self._eos or marked:
            stops = self._eos_mask[tok1] | (self._stops.marks[tok1] != 0) if marked else self._eos_mask[tok1]
            elig &= ~(stops & self.columns.eos_stops[slots])
        elig &= self.columns.stop_firsts_len[slots] == 0  # stop strings: each row through its stream here
        if self.typed_path is not None and self.typed_path.held_slots:
            held = self.typed_path.held
            elig &= np.fromiter((s >= len(held) or held[s] is None for s in slots.tolist()), dtype=bool, count=n)
        tables = self._tables
        gi = tok1 if len(tables.index) <= 1 else self.columns.mode[slots] * tables.vocab + tok1
        if tables.restricted:
            elig &= tables.byte_ok[gi]
        # A rid twice in one batch (a replayed row): all its rows go, in order, through its stream.
        rows = self._rows[:n]
        self._row_of[slots] = rows  # the last row of each slot wins
        elig &= self._row_of[slots] == rows
        self._row_of[slots[::-1]] = rows[::-1]  # the first wins
        elig &= self._row_of[slots] == rows
        if elig.all():
            texts, offs, ntok = self._plain(slots, tok1, gi)
            return StepResult(texts, _as_list(offs), _as_list(ntok), [None] * n)

        texts = [""] * n
        offsets = np.zeros(n, dtype=np.int64)
        ntoks = np.zeros(n, dtype=np.int64)
        finishes: list[Finish | None] = [None] * n
        idx = np.flatnonzero(elig)
        if len(idx):
            plain, offsets[idx], ntoks[idx] = self._plain(slots[idx], tok1[idx], gi[idx])
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

    def _rows_one_by_one(
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

    def _plain(self, slots: np.ndarray, toks: np.ndarray, gi: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        tables = self._tables
        texts = list(map(tables.texts.__getitem__, gi.tolist()))
        lens = tables.lengths[gi]
        partial = np.flatnonzero(~tables.whole[gi] | (self.columns.pend_len[slots] > 0))
        if len(partial):
            # Held bytes or an id that is part of a character: the slot's incremental UTF-8
            # (each slot once here: repeated rids never take this path)
            pslots = slots[partial]
            held, pend = self.columns.pend_len[pslots].tolist(), self.columns.pend[pslots].tobytes()
            rests = []
            for j, (k, h, m, tok) in enumerate(zip(partial.tolist(), held, self.columns.mode[pslots].tolist(), toks[partial].tolist())):
                data = pend[_MAX_PENDING * j : _MAX_PENDING * j + h] + tables.pieces[m][tok]
                texts[k], used = _utf8_decode(data, "replace", False)
                lens[k] = len(texts[k])
                rests.append(data[used:])
            self.columns.pend_len[pslots] = np.fromiter(map(len, rests), dtype=np.uint8, count=len(rests))
            padded = b"".join(r.ljust(_MAX_PENDING, b"\0") for r in rests)
            self.columns.pend[pslots] = np.frombuffer(padded, dtype=np.uint8).reshape(-1, _MAX_PENDING)
        offs = self.columns.choff[slots]
        self.columns.choff[slots] = offs + lens
        ntok = self.columns.ntok[slots] + 1
        self.columns.ntok[slots] = ntok
        self.columns.expect[slots] = ntok
        if tables.switching:  # an id after which the slot's mode is the other of a pair (typed output)
            self.columns.mode[slots] += tables.shift[gi]
        return texts, offs, ntok  # type: ignore[return-value]  # every None was a partial row
