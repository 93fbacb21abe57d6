"""All live requests of one worker, stepped one scheduler batch at a time.

Most rids in most steps carry one token whose bytes are whole characters, for a stream with nothing
held and no stop strings ("plain" rows): their text is precomputed per token id, so the step only
copies it and advances a few per-slot counters. Every other rid goes through its own
`DecodeStream.step`, which gives the same text; the table keeps the two paths' counters in step.

Parsed requests (typed output) step their `TypedStream`, except in a steady parser state, where
their ids take the compiled path too (`detok.stream.typed_fast`: a decode mode of their own, the
kind of text in the tag's top bits, which `step_packed` returns as the `kinds` column).

`step_packed` is the worker's entry: packed wire columns in, the frontend's packed columns out
(`PackedStep`), done by the compiled loop in `_plainstep.c` when it is built. `step` takes and
returns Python sequences (same results); without the extension both run on numpy gathers.

The per-slot state is one object, `StreamColumns` (`detok.stream.columns`), which the compiled step
and the numpy step (`NumpyStep`, `numpy_step`) both take; the stop-id marks and stop strings' first
characters are a `StopMarks` (`stop_marks`), typed output's slots a `TypedFastPath` (`typed_fast`),
each composed here. The batch entries are `packed_step`'s and a plain request's compiled set-up and
end `plain_opening`'s (the table's two bases); this module opens, loads, finishes and closes
requests.
"""

from __future__ import annotations

import codecs
from array import array
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from detok.stream.byte_text import ByteTables, ByteTextDecoder, context_held
from detok.stream.decode_stream import CONTEXT_TOKENS, DecodeStream
from detok.stream.mode_tables import ModeTables
from detok.stream.columns import PENDING_WIDTH as _MAX_PENDING
from detok.stream.columns import NOT_PLAIN as _NOT_PLAIN
from detok.stream.columns import UNKNOWN as _UNKNOWN
from detok.stream.columns import StreamColumns
from detok.stream.numpy_step import NumpyStep
from detok.wire.params import EMPTY_DELTA, DecodeParams, Finish
from detok.stream.step_results import unknown_finish
from detok.stream.strategy import Strategy, prepare_decoding
from detok.stream.typed_fast import TAG_MASK, TypedFastPath, TypedModes
from detok.tokenizer.base import Tokenizer

if TYPE_CHECKING:
    from detok.parsing.output import OutputParser
    from detok.wire.to_frontends import TypedRow

from detok.stream.packed_step import CompiledArgs, PackedStepping, _RidMap, _compiled_step_packed
from detok.stream.plain_opening import PlainOpening
from detok.stream.stop_marks import StopMarks


utf8_decode = codecs.utf_8_decode  # (text, bytes consumed)
_DEFAULT_PARAMS = DecodeParams()


def _indexable(rid: Hashable) -> bool:
    if type(rid) is int:  # the wire's rids (the common case, checked first)
        return 0 <= rid < 2**64
    return isinstance(rid, (int, np.integer)) and not isinstance(rid, bool) and 0 <= rid < 2**64


class DuplicateRequest(KeyError):
    pass


class StreamTable(PlainOpening, PackedStepping):
    """Requests whose parameters and prompt tail leave them plain (no stop strings; a byte-table
    decode mode; a prompt tail in the vocabulary) are opened in the columns only: no DecodeStream
    exists for them until a row of theirs needs one (`_stream_at`: a stop id's row - their stop
    ids are marked, `detok.stream.stop_marks`, and `min_tokens` only matters there - several ids
    in one row, a replay) or they end (`finish`, which releases their held bytes from the
    columns). A request's set-up and end are then a few column stores, the same state the stream
    would have had."""

    def __init__(self, tokenizer: Tokenizer, strategy: Strategy | None = None, capacity: int = 1024) -> None:
        self.tokenizer = tokenizer
        self.plan = prepare_decoding(tokenizer, strategy)
        self._strategy = strategy
        self.compiled = _compiled_step_packed is not None  # False: the numpy/Python path (tests set it)
        self._vocab = tokenizer.vocab_size
        self._streams: dict[Hashable, DecodeStream] = {}  # the live requests that have a stream
        self._slot_of: dict[Hashable, int] = {}  # every live request
        # plain requests without a stream yet: what their stream is made of when one is needed
        self._deferred: dict[Hashable, tuple[DecodeParams, bool]] = {}
        # (skip_special_tokens, spaces_between_special_tokens) -> (mode, tables) of a decode mode
        # whose plain requests are deferred, or None where they cannot be (window decoding)
        self._plain_modes: dict[tuple[bool, bool], tuple[int, ByteTables] | None] = {}
        self._free: list[int] = list(range(capacity - 1, _UNKNOWN, -1))
        # Columnar state of the vectorized path, which the compiled and the numpy step both take;
        # the stream objects hold everything else. Bytes of an incomplete character held for a
        # slot: the columns are the truth (the step updates them); a stream's own decoder gets
        # them back before it steps (`_load`).
        self.columns = StreamColumns(capacity)
        # Unsigned 64-bit rids (the wire's) are also in a C hash map, for the compiled step's lookups.
        self._rid_map = _RidMap() if _RidMap is not None else None
        self._c_args: CompiledArgs | None = None  # (detok.stream.packed_step)
        self._cur_tokens = b""  # the step in progress (for `_slow_row`)
        self._cur_finished: list[tuple[int, Hashable, Finish]] = []
        self._cur_unknown_rows: array[int] = array("q")  # rows of unknown rids in the step in progress
        self._cur_unknown_rids: array[int] = array("Q")
        self._eos = frozenset(tokenizer.eos_token_ids)
        self._eos_mask = np.zeros(self._vocab, dtype=bool)
        for i in self._eos:
            if 0 <= i < self._vocab:
                self._eos_mask[i] = True
        self.stops = StopMarks(self._vocab, self._eos, self.columns)
        self._tables = ModeTables(self._vocab, self._eos_mask)
        self._typed = TypedModes(self._tables)
        self._typed_path = TypedFastPath(self.columns, self._typed, self._eos, strategy)
        self.typed_fast = True  # False: typed requests always step their own stream (tests, benchmarks)
        self._numpy = NumpyStep(self.columns, self._tables, self._slot_of, self._eos, self._eos_mask, self.stops,
                                self._step_one)
        self._numpy.typed_path = self._typed_path

    # ---- registration -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, rid: object) -> bool:
        return rid in self._slot_of

    def stream(self, rid: Hashable) -> DecodeStream:
        """The request's stream, with the columns' state (made now for a deferred request)."""
        slot = self._slot_of[rid]
        stream = self._stream_at(rid, slot)
        self._load(slot, stream)
        return stream

    def rids(self) -> list[Hashable]:
        return list(self._slot_of)

    def open(
        self,
        rid: Hashable,
        context_ids: Sequence[int] = (),
        params: DecodeParams | None = None,
        ignore_eos: bool = False,
        tag: int = 0,
        parser: OutputParser | None = None,
        emit: Callable[[TypedRow], None] | None = None,
    ) -> DecodeStream | None:
        """Start a request; `tag` (a uint32 of the caller's, e.g. which frontend owns it) comes
        back with each of its rows in `PackedStep.tags`. With a `parser`, the request's output goes
        to `emit` as typed rows (`detok.stream.typed_stream`) and its text rows stay empty.
        Returns the request's stream, or None for a deferred one (see the class docstring)."""
        if rid in self._slot_of:
            raise DuplicateRequest(rid)
        p = params or _DEFAULT_PARAMS
        if parser is None and self._open_compiled(rid, context_ids, p, ignore_eos, tag):
            return None
        held = None
        if parser is not None:
            from detok.stream.typed_stream import TypedStream

            assert emit is not None, "a parsed request needs an emit callback"
            stream: DecodeStream = TypedStream(self.tokenizer, context_ids, params, parser=parser, rid=rid,  # type: ignore[arg-type]
                                               emit=emit, ignore_eos=ignore_eos, strategy=self._strategy)
        else:
            # (stop ids: marked; stop strings: their first characters; see StopMarks. min_tokens only
            # matters at a stop's row)
            if not p.stop or self.stops.firsts_of(p.stop) is not None:
                plain_mode = self._plain_mode_of(p)
                if plain_mode is not None:
                    held = context_held(plain_mode[1], (context_ids if type(context_ids) is list else list(context_ids))[-CONTEXT_TOKENS:])
            if held is None:
                stream = DecodeStream(self.tokenizer, context_ids, p, ignore_eos=ignore_eos, strategy=self._strategy)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot_of[rid] = slot
        self.columns.v_tag[slot] = tag
        if self._rid_map is not None and _indexable(rid):
            self._rid_map.put(int(rid), slot)  # type: ignore[arg-type]
        if held is None:
            self._streams[rid] = stream
            self.stops.mark(rid, p, ignore_eos)
            dec = stream._text
            self.columns.v_mode[slot] = self._tables.mode_of(dec._t) if isinstance(dec, ByteTextDecoder) else 0
            self._sync(slot, stream)
            if parser is not None and self.typed_fast:
                self._typed_path.enter(slot, stream)  # type: ignore[arg-type]
            return stream
        # deferred: the columns as `_sync` would set them from the stream
        self._deferred[rid] = (p, ignore_eos)
        self.columns.v_mode[slot] = plain_mode[0]  # type: ignore[index]
        self.columns.v_expect[slot] = self.columns.v_ntok[slot] = self.columns.v_choff[slot] = 0
        self.columns.v_eos_stops[slot] = self.stops.mark(rid, p, ignore_eos)
        self.stops.set_firsts(slot, p.stop)
        self.columns.v_pend_len[slot] = len(held)
        if held:
            self.columns.pend[slot, : len(held)] = np.frombuffer(held, dtype=np.uint8)
        return None

    def _stream_at(self, rid: Hashable, slot: int) -> DecodeStream:
        """A live request's stream; a deferred one's is made now (its state is in the columns,
        which `_load` puts into it)."""
        stream = self._streams.get(rid)
        if stream is None:
            params, ignore_eos = self._deferred.pop(rid)
            stream = DecodeStream(self.tokenizer, (), params, ignore_eos=ignore_eos, strategy=self._strategy)
            stream._text._strip = False  # type: ignore[union-attr]  # deferred only where nothing strips
            self._streams[rid] = stream
        return stream

    def close(self, rid: Hashable) -> None:
        slot = self._slot_of.pop(rid, None)
        if slot is None:
            return
        stream = self._streams.pop(rid, None)
        if stream is None:
            del self._deferred[rid]
        elif not stream.columnar and stream._fast_at is not None:  # type: ignore[attr-defined]
            stream._fast_at = None  # type: ignore[attr-defined]
            self._typed.fast_slots -= 1
            self._typed_path.drop(slot)
            self.columns.v_tag[slot] &= TAG_MASK
        if self._rid_map is not None and _indexable(rid):
            self._rid_map.pop(int(rid))  # type: ignore[arg-type]
        if self.stops.by_rid:
            self.stops.unmark(rid)
        self.columns.v_expect[slot] = _NOT_PLAIN
        self.columns.v_pend_len[slot] = self.columns.v_firsts_len[slot] = 0
        self._free.append(slot)

    def _grow(self) -> None:
        old = len(self.columns)
        self._free.extend(range(2 * old - 1, old - 1, -1))
        self.columns.grow()
        self._c_args = None  # (over the old buffers)

    def _sync(self, slot: int, stream: DecodeStream) -> None:
        """Columnar state from the stream's own, after it stepped on its own."""
        dec = stream._text
        plain = (
            stream.columnar
            and not stream.finished
            and self.stops.rules_plain(slot, stream)  # (its stop ids marked, its stop strings' matcher idle)
            and isinstance(dec, ByteTextDecoder)
            and not dec._strip
            and not dec._after_added
        )
        self.columns.expect[slot] = stream.num_tokens if plain else _NOT_PLAIN
        self.columns.ntok[slot] = stream.num_tokens
        self.columns.choff[slot] = stream.char_offset
        self.columns.eos_stops[slot] = bool(stream._stop_ids)
        held = stream.held_bytes
        if len(held) >= _MAX_PENDING:  # never for a valid prefix: the stream keeps them, off the plain path
            self.columns.expect[slot] = _NOT_PLAIN
            held = b""
        self.columns.pend_len[slot] = len(held)
        if held:
            self.columns.pend[slot, : len(held)] = np.frombuffer(held, dtype=np.uint8)

    def _load(self, slot: int, stream: DecodeStream) -> None:
        """The columns' state into the stream, before it steps on its own (the plain rows advance
        the columns only)."""
        if not stream.columnar:  # typed output: its own counters, unless the compiled path has it
            if stream._fast_at is not None:  # type: ignore[attr-defined]
                self._typed_path.leave(slot, stream)  # type: ignore[arg-type]
            return
        stream._to_python()
        stream.num_tokens = int(self.columns.ntok[slot])
        stream.char_offset = int(self.columns.choff[slot])
        dec = stream._text
        if isinstance(dec, ByteTextDecoder) and self.columns.expect[slot] != _NOT_PLAIN:
            n = int(self.columns.pend_len[slot])
            dec._pending = self.columns.pend[slot, :n].tobytes() if n else b""
            dec._fast = not (dec._strip or dec._after_added or n)
        stream._refresh()

    # ---- stepping ---------------------------------------------------------------------------
    def _step_one(self, rid: Hashable, slot: int, start: int, ids_a: np.ndarray) -> tuple[str, int, int, Finish | None]:
        if slot == _UNKNOWN or self._slot_of.get(rid) != slot:  # (or finished by an earlier row of this batch)
            return "", 0, 0, unknown_finish(rid)
        stream = self._stream_at(rid, slot)
        self._load(slot, stream)
        done = stream.num_tokens
        if start > done:
            delta = stream.finish("error", f"tokens missing: expected start {done}, got {start}")
        else:
            # a replay: tokens this stream has already consumed are skipped
            new_ids = ids_a[done - start :].tolist() if done > start else ids_a.tolist()
            delta = stream.step(new_ids) if new_ids else EMPTY_DELTA
        offset = stream.char_offset - len(delta.text)
        if delta.finish is not None:
            self.close(rid)
        elif stream.columnar:
            self._sync(slot, stream)
        else:  # typed output: the progress column, and the compiled path again if steady
            self.columns.ntok[slot] = stream.num_tokens
            if self.typed_fast:
                self._typed_path.enter(slot, stream)  # type: ignore[arg-type]
        return delta.text, offset, stream.num_tokens, delta.finish

    def finish(self, rid: Hashable, reason: str, message: str | None = None) -> tuple[str, int, int, Finish | None]:
        """End a request from the scheduler side (length, abort, ...): text released, state freed."""
        slot = self._slot_of.get(rid)
        if slot is None:
            return "", 0, 0, None
        if rid in self._deferred and not (self.columns.v_firsts_len[slot] and self.columns.v_pend_len[slot]):
            # no stream: what its `finish` would give, from the columns (held bytes with stop
            # strings: the stream's, whose matcher sees their replacement character)
            if self.compiled and type(rid) is int and 0 <= rid < 2**64:  # (then it is in the rid map)
                text, offset, num_tokens = self._finish_compiled(rid, slot)
                return text, offset, num_tokens, Finish(reason, None, message)  # type: ignore[arg-type]
            n = self.columns.v_pend_len[slot]
            text = utf8_decode(self.columns.pend[slot, :n].tobytes(), "replace", True)[0] if n else ""
            offset, num_tokens = self.columns.v_choff[slot], self.columns.v_ntok[slot]
            self.close(rid)
            return text, offset, num_tokens, Finish(reason, None, message)  # type: ignore[arg-type]
        stream = self._stream_at(rid, slot)
        self._load(slot, stream)
        delta = stream.finish(reason, message)  # type: ignore[arg-type]
        self.close(rid)
        return delta.text, stream.char_offset - len(delta.text), stream.num_tokens, delta.finish


