"""`StreamTable`'s batch entries: `step_packed` (packed wire columns in, the frontend's packed
columns out; the compiled loop of `_plainstep.c` when it is built, numpy gathers otherwise) and
`step` (Python sequences, same results), with the compiled loop's call-back for the rows it hands
back. A base of `StreamTable` (with `PlainOpening`): it steps the table's columns and streams."""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from detok.stream.columns import UNKNOWN as _UNKNOWN
from detok.wire.params import Finish
from detok.stream.step_results import _NO_RIDS, _NO_ROWS, PackedStep, StepResult
from detok.wire.packing import join_texts, pack_u32, unpack_rids, unpack_u32

try:  # the compiled step (optional extension); the numpy/Python path gives the same results
    from detok._native._plainstep import RidMap as _RidMap
    from detok._native._plainstep import PlainOpener as _PlainOpener
    from detok._native._plainstep import step_packed as _compiled_step_packed
except ImportError:  # pragma: no cover - depends on the build
    _PlainOpener = _RidMap = _compiled_step_packed = None


_new_tuple = tuple.__new__


def _packed_columns(
    rids: Sequence[Hashable], starts: Sequence[int], counts: Sequence[int], tokens: Sequence[int]
) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The wire form of a step's columns, or None if a value does not fit it (a rid that is not an
    unsigned 64-bit int, a negative id or start): those batches take the numpy path."""
    arrays = []
    for values, limit in ((rids, 2**64), (starts, 2**32), (counts, 2**32), (tokens, 2**32)):
        arr = np.asarray(values)
        if arr.ndim != 1 or (len(arr) and (arr.dtype.kind not in "ui" or arr.min() < 0 or int(arr.max()) >= limit)):
            return None
        arrays.append(arr)
    rid_a, start_a, count_a, token_a = arrays
    one_each = len(count_a) == len(rid_a) and bool((count_a == 1).all())  # the wire's short form
    return (
        rid_a.astype("<u8", copy=False).tobytes(),
        start_a.astype("<u4", copy=False).tobytes(),
        b"" if one_each else count_a.astype("<u4", copy=False).tobytes(),
        token_a.astype("<u4", copy=False).tobytes(),
    )

class CompiledArgs(NamedTuple):
    entries: np.ndarray  # the token entries they were built over (a new mode replaces them)
    table: tuple[object, ...]  # (entries, utf8, vocab, stop_marks)
    slots: tuple[np.ndarray, ...]  # the per-slot columns
    opener: Any  # `_plainstep.PlainOpener` over the same buffers
    stop_firsts: tuple[np.ndarray, np.ndarray]  # the stop strings' first characters per slot


class PackedStepping:
    if TYPE_CHECKING:  # the table's state this base reads and writes
        compiled: bool
        _slot_of: dict[Any, int]
        _tag: np.ndarray
        _typed: Any
        _tables: Any
        _rid_map: Any
        _c_args: Any
        _cur_tokens: bytes
        _cur_finished: list[tuple[int, Any, Finish]]
        _cur_unknown_rows: array[int]
        _cur_unknown_rids: array[int]
        columns: Any  # (detok.stream.columns.StreamColumns)
        stops: Any  # (detok.stream.stop_marks.StopMarks)
        _numpy: Any  # (detok.stream.numpy_step.NumpyStep)
        _typed_path: Any  # (detok.stream.typed_fast.TypedFastPath)
        _vocab: int

        def _step_one(self, rid: Hashable, slot: int, start: int, ids_a: np.ndarray) -> tuple[str, int, int, Finish | None]: ...

    def step_packed(self, rids: bytes, starts: bytes, counts: bytes, tokens: bytes, row_texts: bool = False,
                    packed_text: bool = True) -> PackedStep:
        """One scheduler batch in wire form (`DetokBatch`'s packed columns: uint64 rids, uint32
        starts, counts - empty for one id per row - and ids) -> the frontend's packed columns, and
        with `row_texts` each row's text as a str too (`PackedStep.texts`: for an in-process
        caller; a row of one whole token is that token's own str, made once per vocabulary). With
        `row_texts` and not `packed_text`, `PackedStep.text` is empty (b""): the strs are the
        rows' text alone (every other column as with it), and a whole token's bytes are not
        copied. ValueError, before any state changes, if the columns do not fit together."""
        packed_text = packed_text or not row_texts
        if not self.compiled:
            rid_a = unpack_rids(rids)
            count_a = unpack_u32(counts) if counts else np.ones(len(rid_a), dtype=np.int64)
            slots = np.fromiter(map(self._slot_of.get, rid_a, repeat(_UNKNOWN)), dtype=np.int64, count=len(rid_a))
            tags = self.columns.tag[slots].astype("<u4").tobytes()  # read before rows close
            kinds = b""
            if self._typed.fast_slots:
                tags, kinds = self._typed_path.kinds(tags)
            result = self._numpy.step(np.frombuffer(rid_a, dtype=np.uint64), unpack_u32(starts), count_a, unpack_u32(tokens))
            text, lengths = join_texts(result.texts)
            if not packed_text:
                text = b""
            finished = [(k, rid_a[k], f) for k, f in enumerate(result.finishes) if f is not None]
            byte_lengths = pack_u32(map(len, map(str.encode, result.texts)))
            return PackedStep(text, lengths, pack_u32(result.offsets), pack_u32(result.num_tokens), byte_lengths, tags, finished,
                              kinds=kinds, texts=result.texts if row_texts else None)
        c_args = self._current_args()
        self._cur_tokens, self._cur_finished = tokens, []
        if self._cur_unknown_rows:  # (left by a step that raised; emptied after each step, below)
            self._cur_unknown_rows, self._cur_unknown_rids = array("q"), array("Q")
        # (the tags come back without kind bits, the kinds as their own column: detok.stream.typed_fast)
        held = self._typed_path.held if self._typed_path.held_slots else None  # (held steady states' bytes)
        if row_texts:
            out = _compiled_step_packed(self._rid_map, rids, starts, counts, tokens, c_args.table, c_args.slots,
                                        c_args.stop_firsts, self._slow_row, self._tables.texts, packed_text, held,
                                        self._typed_path.held_limit)
        elif held is not None:
            out = (*_compiled_step_packed(self._rid_map, rids, starts, counts, tokens, c_args.table, c_args.slots,
                                          c_args.stop_firsts, self._slow_row, None, True, held,
                                          self._typed_path.held_limit), None)
        else:
            out = (*_compiled_step_packed(self._rid_map, rids, starts, counts, tokens, c_args.table, c_args.slots,
                                          c_args.stop_firsts, self._slow_row), None)
        unknown_rows, unknown_rids = self._cur_unknown_rows, self._cur_unknown_rids
        if not unknown_rows:  # (cheaper than a NamedTuple's own constructor, a Python-level __new__)
            return _new_tuple(PackedStep, (*out[:6], self._cur_finished, _NO_ROWS, _NO_RIDS, *out[6:]))
        self._cur_unknown_rows, self._cur_unknown_rids = array("q"), array("Q")
        return PackedStep(*out[:6], self._cur_finished, np.frombuffer(unknown_rows, dtype=np.int64),
                          np.frombuffer(unknown_rids, dtype=np.uint64), *out[6:])

    def _current_args(self) -> CompiledArgs:
        """The compiled step's and the plain opener's arguments over the table's current columns
        and entries (rebuilt when a mode is added or the columns grow)."""
        c_args = self._c_args
        if c_args is None or c_args.entries is not self._tables.entries:
            tables = self._tables
            columns = self.columns
            slots = columns.step_buffers()
            table_args = (memoryview(tables.entries), memoryview(tables.utf8), self._vocab)
            all_ok = tables.byte_ok.reshape(-1, self._vocab).all(axis=1)  # per mode: every id has a byte entry
            c_args = self._c_args = CompiledArgs(tables.entries, (*table_args, memoryview(self.stops.marks)), slots,
                                                 _PlainOpener(self._rid_map, table_args, slots, all_ok),
                                                 tuple(map(memoryview, (columns.stop_firsts, columns.stop_firsts_len))))
        return c_args

    def _slow_row(self, k: int, rid: int, slot: int, start: int, first: int, count: int) -> tuple[str, int, int]:
        """A row the compiled step hands back (called by it, in row order): its own stream steps."""
        if slot == _UNKNOWN or self._slot_of.get(rid) != slot:  # (or finished by an earlier row of this batch)
            self._cur_unknown_rows.append(k)  # no Finish per row: a flood of unknown rids stays arrays
            self._cur_unknown_rids.append(rid)
            return "", 0, 0
        ids = np.frombuffer(self._cur_tokens, dtype="<u4", count=count, offset=4 * first)
        text, offset, ntok, finish = self._step_one(rid, slot, start, ids)
        if finish is not None:
            self._cur_finished.append((k, rid, finish))
        return text, offset, ntok

    def step(
        self, rids: Sequence[Hashable], starts: Sequence[int], counts: Sequence[int], tokens: Sequence[int]
    ) -> StepResult:
        """One scheduler batch: rids[k] gets counts[k] ids from `tokens`, the first being its
        output token number starts[k] (earlier ones are a replay and skipped)."""
        if self.compiled:
            packed = _packed_columns(rids, starts, counts, tokens)
            if packed is not None:
                return self.step_packed(*packed, row_texts=True, packed_text=False).unpacked()
        return self._numpy.step(rids, starts, counts, tokens)
