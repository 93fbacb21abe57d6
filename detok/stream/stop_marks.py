"""`StreamTable`'s stop rules on the compiled step: stop ids other than end-of-sequence ones,
marked per id, and the first characters of stop strings, per slot.

A request that stops on ids (`stop_token_ids`, `visible_stop_token_ids`) need not leave the plain
path: only a row carrying one of its stop ids must go to its stream, which applies the stop. So
the table counts, per token id, the live requests that stop on it besides the end-of-sequence ids
(`StopMarks.marks`, uint32 per id, read by the compiled and the numpy step), and a row of a slot that
stops on ids goes to its stream when its id is end-of-sequence or marked. A mark of another
request's costs that row a slow step, never a wrong text. Marks are taken at `open` and given back
when the request closes.

A request with stop strings keeps their first characters in its slot (`stop_firsts`, UTF-8, at
most FIRSTS_BYTES): while its matcher is idle (nothing partly matched), a row whose id is whole
characters with none of them cannot begin a stop string, and is plain; any other row goes to the
request's stream, whose matcher is then exactly as if it had seen the plain rows' text.
`StopMarks` holds the marks and writes the first characters into the table's columns."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from detok.stream.columns import FIRSTS_BYTES, StreamColumns
from detok.wire.params import DecodeParams


# stop lists whose first characters are remembered (then forgotten all at once), each of at most
# _FIRSTS_CACHED_CHARS chars (a longer one is not kept): at most ~4 MB of keys
_FIRSTS_CACHE = 1024
_FIRSTS_CACHED_CHARS = 1024


def firsts_bytes(firsts: Iterable[str]) -> bytes | None:
    """Stop strings' first characters as a slot holds them, or None if they do not fit."""
    data = "".join(sorted(set(firsts))).encode()
    return data if len(data) <= FIRSTS_BYTES else None


class StopMarks:
    """A table's stop-id marks (`marks`, `by_rid`: rid -> the ids it marked) and its slots' stop
    strings' first characters (in `columns.stop_firsts`)."""

    def __init__(self, vocab: int, eos: frozenset[int], columns: StreamColumns) -> None:
        self._vocab, self._eos, self._columns = vocab, eos, columns
        self._firsts_cache: dict[tuple[str, ...] | frozenset[str], bytes | None] = {}
        self.marks = np.zeros(vocab, dtype=np.uint32)
        self._v_marks = memoryview(self.marks)  # (a scalar store through it: tens of ns, not numpy's ~100)
        self.by_rid: dict[Hashable, list[int]] = {}  # rid -> the ids it marked

    def firsts_of(self, stops: Sequence[str] | frozenset[str]) -> bytes | None:
        """`firsts_bytes` of a stop list's first characters (or of a set of first characters),
        remembered per list: requests mostly share a few."""
        key = stops if isinstance(stops, (tuple, frozenset)) else tuple(stops)
        data = self._firsts_cache.get(key, False)
        if data is False:
            data = firsts_bytes(key if isinstance(key, frozenset) else (s[0] for s in key if s))
            if sum(map(len, key)) <= _FIRSTS_CACHED_CHARS:
                if len(self._firsts_cache) >= _FIRSTS_CACHE:
                    self._firsts_cache.clear()
                self._firsts_cache[key] = data
        return data

    def set_firsts(self, slot: int, stops: Sequence[str] | frozenset[str]) -> bool:
        """A slot's stop strings' first characters (none: no stop strings); False if they do not
        fit (its rows then all go to its stream)."""
        data = self.firsts_of(stops) if stops else b""
        if data is None:
            self._columns.v_firsts_len[slot] = 0
            return False
        self._columns.v_firsts_len[slot] = n = len(data)
        if n:
            self._columns.v_firsts[FIRSTS_BYTES * slot : FIRSTS_BYTES * slot + n] = data
        return True

    def rules_plain(self, slot: int, stream: Any) -> bool:
        """Whether a stream's stop rules let its slot's rows be plain now (its stop ids marked or
        end-of-sequence ones; its stop strings' matcher idle, their first characters in the slot)."""
        stop = stream._stop
        if stop is None:
            self._columns.v_firsts_len[slot] = 0
            return bool(stream._plain) and self.marked(stream._stop_ids)
        if not stop.idle or stream._pending_error is not None or not self.set_firsts(slot, stop.firsts):
            self._columns.v_firsts_len[slot] = 0
            return False
        return self.marked(stream._stop_ids)

    def mark(self, rid: Hashable, p: DecodeParams, ignore_eos: bool) -> bool:
        """Mark a new request's stop ids; whether it stops on any id (its `eos_stops` column)."""
        ids = (*p.stop_token_ids, *p.visible_stop_token_ids) if p.stop_token_ids or p.visible_stop_token_ids else ()
        if not ids:
            return bool(self._eos) and not ignore_eos
        eos, vocab, marks = self._eos, self._vocab, self._v_marks
        extra: list[int] = []
        for i in ids:
            if i not in eos and 0 <= i < vocab and i not in extra:
                marks[i] += 1
                extra.append(i)
        if extra:
            self.by_rid[rid] = extra
        return True

    def unmark(self, rid: Hashable) -> None:
        marks = self._v_marks
        for i in self.by_rid.pop(rid, ()):
            marks[i] -= 1

    def marked(self, stop_ids: frozenset[int]) -> bool:
        """Whether the compiled step sends every row of these stop ids to the stream: each is an
        end-of-sequence id, marked, or outside the vocabulary (never a plain row)."""
        if stop_ids <= self._eos:
            return True
        marks, vocab = self.marks, self._vocab
        return all(i in self._eos or not 0 <= i < vocab or marks[i] for i in stop_ids)
