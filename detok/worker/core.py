"""The worker's request table and batch processing, without sockets (the hot path).

`WorkerCore.handle_batch` turns one `DetokBatch` into one `DeltaBatch` per frontend and the stop
notices for the scheduler. The decoding is the stream layer's `StreamTable.step_packed`, which takes
the batch's packed wire columns as they are and returns the frontend's (one UTF-8 text blob, char
lengths and offsets), stepping plain rows in compiled code and the rest through their
`DecodeStream`. Around it this module only routes: when one frontend owns every live request the
step's columns go out untouched, and per-rid work is limited to the rare rows that finished.

Error handling, per rid (no input ever raises out of here except a malformed batch, which is
rejected before any state changes):
- unknown rid (never registered, or lost with a dead worker): listed in the StopNotice's
  `unknown_rids`; the scheduler client, which holds the registration, has the frontend told.
- tokens for a rid finished a moment ago (e.g. by a stop string the scheduler has not yet seen):
  ignored and counted.
- start behind the stream (a replay): the tokens already consumed are skipped; start ahead of it
  (tokens lost): the request finishes with reason "error".
- duplicate registration of a live rid: identical -> ignored (idempotent replay) and counted;
  different -> the live request finishes with reason "error" (the rid was reused).
- a stream that cannot be created, or an out-of-vocabulary id: that request finishes with "error".
- parsing past `detok.parsing.limits`, an unknown parser, a raising parser (`TypedStream`): that request's error.

Replay (a process that may have lost its shard's state: `awaiting_replay`): token batches are
dropped until a `Replay` for this process arrives; it carries every request of the shard with all
of its ids from start 0, which are registered and stepped like any batch (live requests skip what
they already consumed). It is authoritative: a live request it does not name is finished with an
error. Requests this process already finished are not reopened (the same registration
generation; a later registration of the same rid is a new request and is opened).

The routing of a step's rows is `detok.worker.batch_step`'s functions; outputs, batch checks and
the finished-rid memory are their own modules too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from detok.metrics import WorkerCounts
from detok.parsing.tokens import request_parser, single_token_ids
from detok.stream.decode_stream import DecodeStream
from detok.wire.params import DecodeParams, Finish
from detok.stream.table import StreamTable
from detok.stream.typed_stream import calls_emitted as _calls
from detok.tokenizer.base import Tokenizer
from detok.wire.to_frontends import RequestFinished
from detok.wire.to_scheduler import StopNotice
from detok.wire.to_workers import DetokBatch, FailRequests, Registration, Replay
from detok.worker import logprobs as lp_entries
from detok.worker.batch_checks import MalformedBatch, check_batch
from detok.worker.batch_step import finished_rows, route_logprobs, route_step, unknown_rows
from detok.worker.finished_rids import FinishedRids
from detok.worker.outputs import FrontendColumns, Frontends, Outputs

log = logging.getLogger("detok.worker")



class _Live:
    """One live request: its stream (None for a plain one, whose state the table holds), its
    registration and where its deltas go."""

    __slots__ = ("idle_mark", "idle_since", "out", "registration", "stream")

    def __init__(self, stream: DecodeStream | None, registration: Registration, out: FrontendColumns, now: float) -> None:
        self.stream = stream
        self.registration = registration
        self.out = out
        self.idle_mark = -1  # tokens consumed at the last idle sweep
        self.idle_since = now


# Unknown rids of one batch remembered as finished (their later tokens then count as late, not
# unknown); the rest of a flood is reported, not remembered, and reported again if it comes back.
UNKNOWN_REMEMBERED_PER_BATCH = 1024


def _stop_kind(finish: Finish) -> str | None:
    """DecodeStream.stop_kind from the finish: a stop token or EOS (int matched), a stop string."""
    if finish.reason != "stop":
        return None
    return "token" if isinstance(finish.matched, int) else "string" if isinstance(finish.matched, str) else None


class WorkerCore:
    def __init__(
        self,
        tokenizer: Tokenizer,
        worker: int = 0,
        *,
        idle_timeout_s: float = 300.0,
        counts: WorkerCounts | None = None,
        table: StreamTable | None = None,
        admit_reply_to: Callable[[str], str | None] | None = None,
    ) -> None:
        """`admit_reply_to(endpoint)`: None if a new registration's frontend can be served, else
        why not (the request then finishes with that error, told to the scheduler only)."""
        self.tokenizer = tokenizer
        self.admit_reply_to = admit_reply_to
        self.worker = worker
        self.idle_timeout_s = idle_timeout_s
        self.counts = counts if counts is not None else WorkerCounts()
        self.table = table if table is not None else warmed_table(tokenizer)
        self.live: dict[int, _Live] = {}
        self._recently_finished = FinishedRids()
        self._frontends = Frontends()
        self._notice_rids: list[int] = []
        self._notice_finishes: list[Finish] = []
        self._notice_unknown: list[int] = []
        self._notice_gens: list[int] = []
        self.instance = 0  # this process, as the scheduler client's replays name it
        self.awaiting_replay = False  # drop token batches until a Replay for `instance` arrives
        self.last_seq = 0  # DetokBatch.seq of the last batch handled (acknowledged to the client)
        self._token_strings: lp_entries.TokenStrings | None = None  # built at the first logprobs
        self._logprobs_wanted: dict[int, int] = {}  # live rids that asked for logprobs: k
        self._logprobs_chat: set[int] = set()  # those of them whose entries go as chat JSON items
        self._token_id = single_token_ids(tokenizer)  # marker text -> id, for parsed requests

    # ---- messages ------------------------------------------------------------------------------
    def handle_batch(self, batch: DetokBatch, now: float | None = None) -> Outputs:
        if self.awaiting_replay:
            # what this batch holds is in the replay that will come (everything sent before it)
            self.counts.replay_dropped_batches += 1
            return Outputs([], None)
        return self._apply(batch, batch.new, now)

    def handle_replay(self, msg: Replay, now: float | None = None) -> Outputs:
        """Rebuild the shard from the scheduler client's replay (see the module docstring)."""
        if msg.instance and msg.instance != self.instance:
            self.counts.stale_replays += 1  # meant for an earlier process of this slot
            return Outputs([], None)
        batch = msg.batch
        check_batch(batch)  # before anything changes
        self.awaiting_replay = False
        named = {(reg.rid, reg.gen) for reg in batch.new}
        why = f"the scheduler client no longer holds this request ({msg.reason or 'replay'})"
        for rid in [r for r, e in self.live.items() if (r, e.registration.gen) not in named]:
            self._finish_live(rid, Finish("error", None, why), notify=True)
        finished = self._recently_finished
        new = [reg for reg in batch.new if not finished.finished(reg.rid, reg.gen)]
        if msg.instance:
            self.counts.replays += 1
            self.counts.replayed_requests += len(new)
            self.counts.replayed_tokens += len(batch.tokens) // 4
        return self._apply(batch, new, now)

    def _apply(self, batch: DetokBatch, new: list[Registration], now: float | None) -> Outputs:
        now = time.monotonic() if now is None else now
        check_batch(batch)
        if new:
            admitted: dict[str, tuple[str | None, FrontendColumns | None]] = {}  # a frontend's, once per batch
            for reg in new:
                self._register(reg, now, admitted)
        if batch.rids:
            self._step(batch)
        for end in batch.ends:
            self._end(end.rid, end.reason, end.matched, end.message)
        self.last_seq = batch.seq
        return self._take_outputs(batch.sent_at)

    def handle_fail(self, msg: FailRequests, sent_at: float = 0.0) -> Outputs:
        if len(msg.rids) != len(msg.reply_to):
            raise MalformedBatch("FailRequests: rids and reply_to differ in length")
        for rid, reply_to in zip(msg.rids, msg.reply_to):
            live = self.live.get(rid)
            num_tokens = gen = 0
            if live is not None:
                num_tokens = self._progress(rid)
                gen = live.registration.gen
                self._forget(rid, live)
            self._remember_finished(rid, gen)
            self._emit_finish(self._columns_for(reply_to), rid, Finish("error", None, msg.message), num_tokens, gen)
        return self._take_outputs(sent_at)

    def sweep_idle(self, now: float | None = None) -> Outputs:
        """Finish requests that got no token for `idle_timeout_s` (never evicts a live one silently)."""
        now = time.monotonic() if now is None else now
        expired: list[int] = []
        for rid, live in self.live.items():
            n = self._progress(rid)
            if n != live.idle_mark:
                live.idle_mark, live.idle_since = n, now
            elif now - live.idle_since >= self.idle_timeout_s:
                expired.append(rid)
        message = f"idle timeout: no tokens for {self.idle_timeout_s:g} s"
        for rid in expired:
            self.counts.idle_timeouts += 1
            self._finish_live(rid, Finish("error", None, message), notify=True)
        self._prune_finished(now)
        return self._take_outputs(0.0)

    def finish_all(self, message: str) -> Outputs:
        """Finish every live request with reason "error" (worker shutdown)."""
        for rid in list(self.live):
            self._finish_live(rid, Finish("error", None, message), notify=True)
        return self._take_outputs(0.0)

    # ---- registration ---------------------------------------------------------------------------
    def _register(self, reg: Registration, now: float, admitted: dict[str, tuple[str | None, FrontendColumns | None]] | None = None) -> None:
        """`admitted`: the batch's frontends, whether they can be served and their columns, filled
        as they come (a batch's registrations mostly share one)."""
        self.counts.registrations += 1
        rid = reg.rid
        current = self.live.get(rid)
        if current is not None:
            self.counts.duplicate_registrations += 1
            if current.registration == reg:
                return  # a replayed registration: the request goes on
            log.warning("worker %d: conflicting registration of live rid %d", self.worker, rid)
            self._finish_live(rid, Finish("error", None, "conflicting duplicate registration of this rid"), notify=True)
            return
        self._recently_finished.pop(rid)
        frontend = admitted.get(reg.reply_to) if admitted is not None else None
        if frontend is None:
            refused = self.admit_reply_to(reg.reply_to) if self.admit_reply_to is not None else None
            frontend = (refused, self._columns_for(reg.reply_to) if refused is None else None)
            if admitted is not None:
                admitted[reg.reply_to] = frontend
        refused, out = frontend
        if out is None:
            log.warning("worker %d: cannot serve rid %d: %s", self.worker, rid, refused)
            self._remember_finished(rid, reg.gen)
            self._notify(rid, Finish("error", None, refused), reg.gen)
            return
        try:
            parser = request_parser(reg.parsing, rid, self._token_id) if reg.parsing is not None else None
            stream = self.table.open(rid, reg.context, reg.params, reg.ignore_eos, out.tag,  # type: ignore[arg-type]
                                     parser, out.add_typed if parser is not None else None)
        except Exception as e:  # noqa: BLE001 - a bad registration is that request's error, never the worker's
            log.warning("worker %d: cannot start rid %d: %s", self.worker, rid, e)
            finish = Finish("error", None, f"cannot start decoding: {e}")
            self._remember_finished(rid, reg.gen)
            self._emit_finish(out, rid, finish, 0, reg.gen)
            self._notify(rid, finish, reg.gen)
            return
        self.live[rid] = _Live(stream, reg, out, now)
        out.live += 1
        if reg.logprobs is not None and reg.logprobs >= 0:
            self._logprobs_wanted[rid] = reg.logprobs
            if reg.logprobs_form == "chat":
                self._logprobs_chat.add(rid)

    # ---- ending ---------------------------------------------------------------------------------
    def _step(self, batch: DetokBatch) -> None:
        result = self.table.step_packed(batch.rids, batch.starts, batch.counts, batch.tokens)
        self.counts.tokens += len(batch.tokens) // 4
        self.counts.utf8_holds += self._holding()
        route_step(self._frontends, batch, result)
        if batch.logprobs is not None:
            if self._token_strings is None:
                self._token_strings = lp_entries.TokenStrings.of(self.tokenizer)
            route_logprobs(self._frontends, self._token_strings, batch, result, self._logprobs_wanted, self._logprobs_chat)
        for rid, finish, num_tokens, count in finished_rows(batch, result):
            self._row_finished(rid, finish, num_tokens, count)
        if len(result.unknown_rows):
            self._unknown_rows(*unknown_rows(batch, result))

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

    def _end(self, rid: int, reason: str, matched: int | None, message: str | None = None) -> None:
        entry = self.live.get(rid)
        if entry is None:
            if rid not in self._recently_finished:
                self._unknown(rid)
            return
        text, offset, num_tokens, finish = self.table.finish(rid, reason)  # type: ignore[arg-type]
        gen = entry.registration.gen
        self._forget(rid, entry, closed=True)
        self._remember_finished(rid, gen)
        if text:
            entry.out.add(rid, text, offset, num_tokens)
        if finish is not None and finish.reason == "stop" and type(finish.matched) is str:
            # the text released at the end (held bytes become U+FFFD) completed a stop string: the
            # request ends at it, as DecodeStream's finish says (its text is cut there; an error
            # stays an error there, its message is what the client must see)
            self.counts.stops["string"] = self.counts.stops.get("string", 0) + 1
        else:
            if message is None and finish is not None:
                message = finish.message
            finish = Finish(reason, matched, message)  # type: ignore[arg-type]
        self._emit_finish(entry.out, rid, finish, num_tokens, gen, _calls(entry.stream))

    def _finish_live(self, rid: int, finish: Finish, *, notify: bool) -> None:
        """End a live request for a reason of the worker's own (idle, shutdown, conflict)."""
        entry = self.live[rid]
        text, offset, num_tokens, _ = self.table.finish(rid, finish.reason, finish.message)  # type: ignore[arg-type]
        gen = entry.registration.gen
        self._forget(rid, entry, closed=True)
        self._remember_finished(rid, gen)
        if text:
            entry.out.add(rid, text, offset, num_tokens)
        self._emit_finish(entry.out, rid, finish, num_tokens, gen, _calls(entry.stream))
        if notify:
            self._notify(rid, finish, gen)

    def _unknown(self, rid: int) -> None:
        self.counts.unknown_rids += 1
        self._remember_finished(rid)  # report once, then treat its further tokens as late
        self._notice_unknown.append(rid)

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _progress(self, rid: int) -> int:
        """Output tokens the table consumed for a live rid (the table's columns are the truth:
        streams on its vectorised path are not updated token by token)."""
        table = self.table
        return int(table.columns.ntok[table._slot_of[rid]])  # type: ignore[index]

    def _holding(self) -> int:
        """Live requests holding an incomplete UTF-8 sequence after this step."""
        return int(np.count_nonzero(self.table.columns.pend_len))

    def _columns_for(self, reply_to: str) -> FrontendColumns:
        return self._frontends.columns_for(reply_to)

    def _emit_finish(self, out: FrontendColumns, rid: int, finish: Finish, num_tokens: int, gen: int = 0,
                     calls: int = 0) -> None:
        out.finished.append(RequestFinished(rid, finish, num_tokens, gen, calls))
        finished = self.counts.finished
        finished[finish.reason] = finished.get(finish.reason, 0) + 1

    def _notify(self, rid: int, finish: Finish, gen: int = 0) -> None:
        self._notice_rids.append(rid)
        self._notice_finishes.append(finish)
        self._notice_gens.append(gen)

    def _forget(self, rid: int, entry: _Live, *, closed: bool = False) -> None:
        del self.live[rid]
        entry.out.live -= 1
        if self._logprobs_wanted:
            self._logprobs_wanted.pop(rid, None)
            self._logprobs_chat.discard(rid)
        if not closed:
            self.table.close(rid)  # type: ignore[arg-type]

    def _remember_finished(self, rid: int, gen: int = 0) -> None:
        self._recently_finished.remember(rid, gen)

    def _prune_finished(self, now: float) -> None:
        self._recently_finished.prune(now)
        self._frontends.drop_idle()  # their sockets too, by the caller

    def _take_outputs(self, sent_at: float) -> Outputs:
        deltas = self._frontends.take(self.worker, sent_at)
        notice = None
        if self._notice_rids or self._notice_unknown:
            notice = StopNotice(
                self.worker, self._notice_rids, self._notice_finishes, self._notice_unknown, self._notice_gens, self.last_seq
            )
            self._notice_rids, self._notice_finishes, self._notice_unknown, self._notice_gens = [], [], [], []
        return Outputs(deltas, notice)

    def frontends(self) -> list[str]:
        return self._frontends.endpoints()

    def live_requests_of(self, reply_to: str) -> int:
        """Live requests whose deltas go to this frontend endpoint."""
        return self._frontends.live_requests_of(reply_to)


def warmed_table(tokenizer: Tokenizer, params: DecodeParams | None = None) -> StreamTable:
    """A StreamTable whose per-mode tables are built already: the first request would otherwise pay
    for them (tens of ms for a large vocabulary). Spares build theirs before they report loaded."""
    table = StreamTable(tokenizer)
    rid = -1  # never a real rid (rids are unsigned)
    table.open(rid, (), params or DecodeParams())  # type: ignore[arg-type]
    table.close(rid)  # type: ignore[arg-type]
    return table
