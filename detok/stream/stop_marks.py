"""`StreamTable`'s stop ids other than end-of-sequence ones, marked per id for the compiled step.

A request that stops on ids (`stop_token_ids`, `visible_stop_token_ids`) need not leave the plain
path: only a row carrying one of its stop ids must go to its stream, which applies the stop. So
the table counts, per token id, the live requests that stop on it besides the end-of-sequence ids
(`_stop_marks`, uint32 per id, read by the compiled and the numpy step), and a row of a slot that
stops on ids goes to its stream when its id is end-of-sequence or marked. A mark of another
request's costs that row a slow step, never a wrong text. Marks are taken at `open` and given back
when the request closes. A mixin over the table's state."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from detok.stream.params import DecodeParams


class StopMarks:
    if TYPE_CHECKING:  # the table's state this mixin reads and writes
        _vocab: int
        _eos: frozenset[int]

    def _init_stop_marks(self) -> None:
        self._stop_marks = np.zeros(self._vocab, dtype=np.uint32)
        self._v_marks = memoryview(self._stop_marks)  # (a scalar store through it: tens of ns, not numpy's ~100)
        self._stop_marked: dict[Hashable, list[int]] = {}  # rid -> the ids it marked

    def _mark_stops(self, rid: Hashable, p: DecodeParams, ignore_eos: bool) -> bool:
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
            self._stop_marked[rid] = extra
        return True

    def _unmark_stops(self, rid: Hashable) -> None:
        marks = self._v_marks
        for i in self._stop_marked.pop(rid, ()):
            marks[i] -= 1

    def _stops_marked(self, stop_ids: frozenset[int]) -> bool:
        """Whether the compiled step sends every row of these stop ids to the stream: each is an
        end-of-sequence id, marked, or outside the vocabulary (never a plain row)."""
        if stop_ids <= self._eos:
            return True
        marks, vocab = self._stop_marks, self._vocab
        return all(i in self._eos or not 0 <= i < vocab or marks[i] for i in stop_ids)
