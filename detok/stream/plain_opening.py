"""`StreamTable`'s plain requests: the decode mode they defer in (`_plain_mode_of`), and their
set-up and end in one compiled call each (`_plainstep.c`'s
`PlainOpener`, over the table's own columns): the prompt tail's held bytes, the slot's columns and
the rid map entry at `open`; the held bytes' text, the counters and the map entry's removal at
`finish`. A base of `StreamTable` (with `PackedStepping`): `open` and `finish` try it first, and do the same in Python where it declines
(a rid that is not a wire rid, a prompt tail it leaves to Python, the numpy path)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from detok.wire.params import Finish

from detok.stream.decode_stream import CONTEXT_TOKENS
from detok.stream.byte_text import ByteTables
from detok.wire.params import DecodeParams


class PlainOpening:
    if TYPE_CHECKING:  # the table's state this base reads and writes
        compiled: bool
        _c_args: Any
        _tables: Any
        _free: list[int]
        _eos: frozenset[int]
        _slot_of: dict[Any, int]
        _deferred: dict[Any, tuple[DecodeParams, bool]]
        stops: Any  # (detok.stream.stop_marks.StopMarks)
        columns: Any  # (detok.stream.columns.StreamColumns)
        _plain_modes: dict[tuple[bool, bool], tuple[int, ByteTables] | None]
        _strategy: Any
        plan: Any

        def _grow(self) -> None: ...
        def _current_args(self) -> Any: ...
        def open(self, rid: Any, context_ids: Sequence[int] = (), params: DecodeParams | None = None,
                 ignore_eos: bool = False, tag: int = 0) -> Any: ...
        def finish(self, rid: Any, reason: str, message: str | None = None) -> tuple[str, int, int, Finish | None]: ...

    def _plain_mode_of(self, p: DecodeParams) -> tuple[int, ByteTables] | None:
        """(mode, tables) of the decode mode a plain request of these parameters defers in, or None."""
        key = (p.skip_special_tokens, p.spaces_between_special_tokens)
        plain_mode = self._plain_modes.get(key, False)
        if plain_mode is False:
            plain_mode = self._plain_modes[key] = self._plain_mode(*key)
        return plain_mode

    def _plain_mode(self, skip_special: bool, spaces: bool) -> tuple[int, ByteTables] | None:
        if self._strategy == "window" or self.plan.strategy != "bytes":
            return None
        tables = self.plan.tables(skip_special, spaces)
        if tables is None:
            return None
        return self._tables.mode_of(tables), tables

    def _open_compiled(self, rid: Hashable, context_ids: Sequence[int], p: DecodeParams, ignore_eos: bool, tag: int) -> bool:
        """The deferred case of `open` in one compiled call (prompt tail, columns, rid map), for a
        wire rid and a list or tuple prompt tail; False, with nothing changed, where `open` must see to it."""
        if (
            not self.compiled or type(rid) is not int or not 0 <= rid < 2**64 or type(context_ids) not in (list, tuple)
            or (p.stop and self.stops.firsts_of(p.stop) is None)
        ):
            return False
        plain_mode = self._plain_mode_of(p)
        if plain_mode is None:
            return False
        if not self._free:
            self._grow()
        slot = self._free.pop()
        eos_stops = self.stops.mark(rid, p, ignore_eos)  # (its stop ids marked: detok.stream.stop_marks)
        if not self._current_args().opener.open(rid, slot, plain_mode[0], context_ids, CONTEXT_TOKENS, tag, eos_stops):
            self.stops.unmark(rid)
            self._free.append(slot)
            return False
        self._slot_of[rid] = slot
        self._deferred[rid] = (p, ignore_eos)
        if p.stop:
            self.stops.set_firsts(slot, p.stop)
        return True

    def _finish_compiled(self, rid: int, slot: int) -> tuple[str, int, int]:
        """A deferred request's end (its rid in the rid map): text of the held bytes, char offset,
        tokens; the slot is free again."""
        text, offset, num_tokens = self._current_args().opener.finish(rid, slot)
        del self._slot_of[rid], self._deferred[rid]
        if self.stops.by_rid:
            self.stops.unmark(rid)
        self.columns.v_firsts_len[slot] = 0
        self._free.append(slot)
        return text, offset, num_tokens

    # ---- a batch of requests: one compiled call for the plain ones -------------------------------
    def open_many(self, rids: Sequence[int], contexts: Sequence[Sequence[int]], params: DecodeParams | None = None,
                  ignore_eos: bool = False, tag: int = 0) -> list[Any]:
        """`open` for each (rid, prompt) with the same parameters and tag, in order: what `open`
        returns, per request (None for a deferred one). Plain requests (no stop ids or strings,
        wire rids, list or tuple prompts) are set up in one compiled call for the whole batch; any
        other request, and one the compiled call leaves (a prompt tail it declines, a duplicate:
        `open` raises DuplicateRequest, the requests before it stay open), through `open`."""
        if len(rids) != len(contexts):
            raise ValueError(f"{len(rids)} rids but {len(contexts)} prompts")
        p = params if params is not None else DecodeParams()
        out: list[Any] = [None] * len(rids)
        plain_mode = None
        if rids and self.compiled and not (p.stop or p.stop_token_ids or p.visible_stop_token_ids):
            plain_mode = self._plain_mode_of(p)
        if plain_mode is None:
            for i, (rid, context) in enumerate(zip(rids, contexts)):
                out[i] = self.open(rid, context, p, ignore_eos, tag)
            return out
        rids = rids if type(rids) in (list, tuple) else list(rids)
        contexts = contexts if type(contexts) in (list, tuple) else list(contexts)
        eos_stops, value, i = bool(self._eos) and not ignore_eos, (p, ignore_eos), 0
        while i < len(rids):
            # (the opener is the current columns': `open` below may have grown them)
            i = self._current_args().opener.open_many(rids, contexts, i, plain_mode[0], CONTEXT_TOKENS, tag, eos_stops,
                                                      self._free, self._slot_of, self._deferred, value)
            if i < len(rids):
                out[i] = self.open(rids[i], contexts[i], p, ignore_eos, tag)
                i += 1
        return out

    def finish_many(self, rids: Sequence[int], reason: str) -> list[tuple[str, int, int, Finish | None]]:
        """`finish(rid, reason)` for each rid, in order, and what it returns: plain requests' ends
        in one compiled call for the batch (they share one Finish), any other through `finish`."""
        out: list[tuple[str, int, int, Finish | None]] = []
        if not self.compiled:
            return [self.finish(rid, reason) for rid in rids]
        rids = rids if type(rids) in (list, tuple) else list(rids)
        finish, i = Finish(reason), 0  # type: ignore[arg-type]
        while i < len(rids):
            i = self._current_args().opener.finish_many(rids, i, out, self._slot_of, self._deferred, self.stops.by_rid,
                                                        self._free, self.columns.stop_firsts_len, finish)
            if i < len(rids):
                out.append(self.finish(rids[i], reason))
                i += 1
        return out
