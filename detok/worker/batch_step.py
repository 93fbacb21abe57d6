"""`WorkerCore`'s step of a batch's token rows: the table's step, its columns to the frontends
(as they are when one frontend owns every live request), token strings for the rows that want
logprobs, and the rows that finished or whose rid is not open. A mixin: it works on the core's
live-request table, frontends and counters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from detok.wire.params import Finish
from detok.stream.step_results import PackedStep
from detok.stream.typed_stream import calls_emitted as _calls
from detok.wire.packing import unpack_u32
from detok.wire.to_workers import DetokBatch
from detok.worker import logprobs as lp_entries

# Unknown rids of one batch remembered as finished (their later tokens then count as late, not
# unknown); the rest of a flood is reported, not remembered, and reported again if it comes back.
UNKNOWN_REMEMBERED_PER_BATCH = 1024


def _stop_kind(finish: Finish) -> str | None:
    """DecodeStream.stop_kind from the finish: a stop token or EOS (int matched), a stop string."""
    if finish.reason != "stop":
        return None
    return "token" if isinstance(finish.matched, int) else "string" if isinstance(finish.matched, str) else None


class BatchStepping:
    if TYPE_CHECKING:  # the core's state this mixin reads and writes
        table: Any
        tokenizer: Any
        counts: Any
        live: dict[int, Any]
        _frontends: Any
        _recently_finished: Any
        _notice_unknown: list[int]
        _token_strings: Any
        _logprobs_wanted: dict[int, int]
        _logprobs_chat: set[int]

        def _holding(self) -> int: ...
        def _remember_finished(self, rid: int, gen: int = 0) -> None: ...
        def _unknown(self, rid: int) -> None: ...
        def _forget(self, rid: int, entry: Any, *, closed: bool = False) -> None: ...
        def _emit_finish(self, out: Any, rid: int, finish: Finish, num_tokens: int, gen: int = 0, calls: int = 0) -> None: ...
        def _notify(self, rid: int, finish: Finish, gen: int = 0) -> None: ...

    def _step(self, batch: DetokBatch) -> None:
        result = self.table.step_packed(batch.rids, batch.starts, batch.counts, batch.tokens)
        self.counts.tokens += len(batch.tokens) // 4
        self.counts.utf8_holds += self._holding()
        owners = self._frontends.owners()
        if len(owners) == 1:
            # One frontend owns every live request: the step's columns go out as they are, no
            # per-rid Python. Rows with empty text stay (most rows have text): unknown or late
            # rids among them are not open at that frontend, or already finished there, so its
            # receiver drops them.
            owners[0].add_packed(batch.rids, result.text, result.lengths, result.offsets, result.num_tokens, result.kinds)
        else:
            self._frontends.route(batch.rids, result)
        if batch.logprobs is not None:
            self._step_logprobs(batch, result)
        counts = unpack_u32(batch.counts) if batch.counts and (result.finished or len(result.unknown_rows)) else None
        if result.finished:
            num_tokens = unpack_u32(result.num_tokens)
            for row, rid, finish in result.finished:
                self._row_finished(rid, finish, num_tokens[row], counts[row] if counts is not None else 1)  # type: ignore[arg-type]
        if len(result.unknown_rows):
            if counts is not None:
                row_counts = np.frombuffer(batch.counts, dtype="<u4").astype(np.int64)[result.unknown_rows]
            else:
                row_counts = np.ones(len(result.unknown_rows), np.int64)
            self._unknown_rows(result.unknown_rids, row_counts)

    def _unknown_rows(self, rids: np.ndarray, row_counts: np.ndarray) -> None:
        """Rows whose rid is not open, as arrays (a flood of them builds no per-row objects that
        stay): late tokens of a rid finished recently are counted, the others reported once."""
        late = self._recently_finished.contains_many(rids)
        self.counts.late_tokens += int(row_counts[late].sum())
        fresh, fresh_counts = rids[~late], row_counts[~late]
        unique, first = np.unique(fresh, return_index=True)
        self.counts.late_tokens += int(fresh_counts.sum() - fresh_counts[first].sum())  # repeats in this batch
        self.counts.unknown_rids += len(unique)
        # remembered (so their further tokens count as late) up to a bound per batch: a flood of
        # a million rids must not fill the finished-rid memory with objects that outlive it
        for rid in unique[:UNKNOWN_REMEMBERED_PER_BATCH].tolist():
            self._remember_finished(rid)
        self._notice_unknown.extend(unique.tolist())

    def _step_logprobs(self, batch: DetokBatch, result: PackedStep) -> None:
        """Token strings of the rows that carry logprobs, to their frontends (before the rows'
        finishes are handled: finished requests are still live here)."""
        if self._token_strings is None:
            self._token_strings = lp_entries.TokenStrings.of(self.tokenizer)
        for tag, part in lp_entries.step_entries(
            self._token_strings, batch.logprobs, batch.rids, batch.starts, batch.counts, batch.tokens,  # type: ignore[arg-type]
            result.num_tokens, result.tags, self._logprobs_wanted, self._logprobs_chat,
        ):
            out = self._frontends.by_tag(tag)
            if out is not None:
                out.logprobs.append(part)

    def _row_finished(self, rid: int, finish: Finish, num_tokens: int, count: int) -> None:
        entry = self.live.get(rid)
        if entry is None:  # the table knows no such rid: late tokens, or never registered
            if rid in self._recently_finished:
                self.counts.late_tokens += count
            else:
                self._unknown(rid)
            return
        gen = entry.registration.gen
        self._forget(rid, entry, closed=True)
        self._remember_finished(rid, gen)
        kind = _stop_kind(finish)
        if finish.reason == "error":
            if finish.message and "vocabulary" in finish.message:
                self.counts.invalid_token_ids += 1
        elif kind is not None:
            self.counts.stops[kind] = self.counts.stops.get(kind, 0) + 1
        self._emit_finish(entry.out, rid, finish, num_tokens, gen, _calls(entry.stream))
        self._notify(rid, finish, gen)
