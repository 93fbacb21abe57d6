"""The scheduler client's record of every request it may have to rebuild on a new worker process.

A request is *kept* from its registration until its end has been acknowledged by its worker and
`ACKED_KEEP_S` more have passed: live requests, and ended ones whose last deltas may still sit in a
dying process's socket queue. For each worker shard the book holds the kept requests'
registrations and ends, and a `ShardJournal` of the step columns they were sent; `shard()` turns
that into the contents of a `Replay`.

Ends are acknowledged through `WorkerStatus.seq`: an end carried by the batch numbered `seq` waits
in its shard's `unacked` queue until the worker reports having handled that batch, then in `acked`
for `ACKED_KEEP_S`. A request a worker finished by itself (a stop string, an error) is kept the
same way from the moment its StopNotice arrives, until the worker acknowledges a batch sent since.

A rid registered again is a new request (its earlier one, if still kept, is forgotten): the book
holds one `Tracked` per rid, and everything queued for an earlier registration (acknowledgement
queues, journal rows, the journal's low-water entries) names that `Tracked` or its first chunk, so
it never touches the later one.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np

from detok.scheduler.replay_journal import Columns, ShardJournal
from detok.wire.to_workers import EndRequest, Registration

log = logging.getLogger("detok.client")

# An ended request is kept for replay until its worker acknowledged the batch that ended it, and
# this long after (its last deltas may still sit in the dead process's socket queue).
ACKED_KEEP_S: Final = 0.25
# Ended requests whose worker has not acknowledged them (e.g. it is down): at most this many are
# kept per worker; older ones lose replay protection (logged).
UNACKED_ENDS_MAX: Final = 200_000


class Tracked:
    """One kept request."""

    __slots__ = ("end", "first", "registration", "sent", "seq", "worker")

    def __init__(self, worker: int, registration: Registration, first: int) -> None:
        self.worker = worker
        self.registration = registration
        self.first = first  # its first journal chunk
        self.sent = 0  # output tokens sent, when the client computes starts itself
        self.end: EndRequest | None = None  # the scheduler's end, once sent (replayed with it)
        # the batch that first carries its registration to the worker: a notice the worker sent
        # before handling that batch cannot be about this request
        self.seq = 0

    @property
    def gen(self) -> int:
        return self.registration.gen

    @property
    def reply_to(self) -> str:
        return self.registration.reply_to


class ReplayBook:
    def __init__(self, workers: int) -> None:
        self.live: dict[int, Tracked] = {}
        self._ended: dict[int, Tracked] = {}  # ended, still kept
        # (batch seq, request) waiting for the worker's acknowledgement; then (when, request)
        self._unacked: list[collections.deque[tuple[int, Tracked]]] = [collections.deque() for _ in range(workers)]
        self._acked: list[collections.deque[tuple[float, Tracked]]] = [collections.deque() for _ in range(workers)]
        self._journals = [ShardJournal() for _ in range(workers)]
        self._kept_lists = [functools.partial(self._kept_firsts, w) for w in range(workers)]
        self._warned_unacked = float("-inf")

    # ---- requests -------------------------------------------------------------------------------
    def register(self, worker: int, reg: Registration, seq: int = 0, known: bool = True) -> None:
        """A new request; its registration goes to the worker in batch `seq`. `known`: the book
        may hold an earlier request of this rid (False only where the caller just checked)."""
        if known:
            self.forget(reg.rid)  # a rid used again: its earlier request is not replayed any more
        tracked = self.live[reg.rid] = Tracked(worker, reg, self._journals[worker].register(reg.rid))
        tracked.seq = seq

    def end(self, end: EndRequest) -> Tracked | None:
        """The scheduler ends a live request: kept, with its end, until acknowledged."""
        tracked = self.live.pop(end.rid, None)
        if tracked is not None:
            tracked.end = end
            self._ended[end.rid] = tracked
        return tracked

    def stopped(self, rid: int, gen: int, last_seq: int, notice_seq: int = 0) -> Tracked | None:
        """A worker finished a live request (StopNotice): its finish left with the notice but may
        die in the worker's queue, so it is kept until the worker acknowledges `last_seq`, the
        last batch sent to it. Only the registration the notice names (`gen`; with gen 0, one the
        worker had received by `notice_seq`) is stopped."""
        tracked = self.live.get(rid)
        if tracked is None or not self.is_current(tracked, gen, notice_seq):
            return None
        del self.live[rid]
        self._ended[rid] = tracked
        self._unacked[tracked.worker].append((last_seq, tracked))
        return tracked

    @staticmethod
    def is_current(tracked: Tracked, gen: int, notice_seq: int) -> bool:
        """A worker's notice about (rid, gen) as of its batch `notice_seq` is about `tracked`."""
        if gen and tracked.gen:
            return gen == tracked.gen
        return not notice_seq or notice_seq >= tracked.seq

    def forget(self, rid: int) -> Tracked | None:
        """The request is not replayed any more."""
        tracked = self._ended.pop(rid, None) or self.live.pop(rid, None)
        if tracked is not None:
            self._journals[tracked.worker].release(tracked.first)
        return tracked

    def _forget_tracked(self, tracked: Tracked) -> None:
        """Forget this request if the book still holds it (not a later one with its rid)."""
        rid = tracked.registration.rid
        if self._ended.get(rid) is tracked or self.live.get(rid) is tracked:
            self.forget(rid)

    # ---- steps and acknowledgements -------------------------------------------------------------
    def sent(self, w: int, seq: int, columns: Columns, ends: list[EndRequest]) -> None:
        """Batch `seq` went to worker `w` with these step columns and ends."""
        journal = self._journals[w]
        if columns.rids:
            journal.append(columns)  # the bytes the message is made of: kept, not copied
        if ends:
            self.track_ends(w, seq, ends)
            if len(self._unacked[w]) > UNACKED_ENDS_MAX:
                self._forget_unacked(w)
        journal.trim(self._keeps, self._kept_lists[w])

    def _keeps(self, first: int, rid: int) -> bool:
        tracked = self.live.get(rid) or self._ended.get(rid)
        return tracked is not None and tracked.first == first

    def acknowledged(self, w: int, seq: int, now: float) -> None:
        """Worker `w` handled every batch up to `seq`."""
        unacked, acked = self._unacked[w], self._acked[w]
        while unacked and unacked[0][0] <= seq:
            acked.append((now, unacked.popleft()[1]))

    def prune(self, now: float) -> None:
        """Forget ended requests acknowledged more than ACKED_KEEP_S ago."""
        horizon = now - ACKED_KEEP_S
        for acked in self._acked:
            while acked and acked[0][0] < horizon:
                self._forget_tracked(acked.popleft()[1])

    def _forget_unacked(self, w: int) -> None:
        unacked = self._unacked[w]
        while len(unacked) > UNACKED_ENDS_MAX:
            self._forget_tracked(unacked.popleft()[1])
        now = time.monotonic()
        if now - self._warned_unacked >= 10.0:
            self._warned_unacked = now
            log.warning("detok worker %d acknowledges nothing (is it down, or without a notice endpoint?): "
                        "ended requests beyond %d lose replay protection", w, UNACKED_ENDS_MAX)

    # ---- replay ---------------------------------------------------------------------------------
    def shard(self, w: int) -> tuple[list[Registration], Columns | None, list[EndRequest]]:
        """What worker `w`'s shard needs rebuilt: the kept requests' registrations, every step
        column they were sent (one row per request), and the scheduler's ends among them."""
        kept = {r: t for r, t in self.live.items() if t.worker == w}
        kept.update((r, t) for r, t in self._ended.items() if t.worker == w)
        columns = self._journals[w].columns({r: t.first for r, t in kept.items()}) if kept else None
        ends = [t.end for t in kept.values() if t.end is not None]
        return [t.registration for t in kept.values()], columns, ends

    def track_ends(self, w: int, seq: int, ends: list[EndRequest]) -> None:
        """Ends sent (again, in a replay) in batch `seq` wait for that batch's acknowledgement."""
        unacked = self._unacked[w]
        for end in ends:
            tracked = self._ended.get(end.rid)
            if tracked is not None:
                unacked.append((seq, tracked))

    # ---- what the book holds --------------------------------------------------------------------
    def __contains__(self, rid: object) -> bool:
        return rid in self.live or rid in self._ended

    def __len__(self) -> int:
        return len(self.live) + len(self._ended)

    def _kept_firsts(self, w: int) -> dict[int, int]:
        return {r: t.first for r, t in self._all() if t.worker == w}

    def _all(self) -> Iterator[tuple[int, Tracked]]:
        yield from self.live.items()
        yield from self._ended.items()

    def journal_bytes(self) -> int:
        return sum(j.nbytes for j in self._journals)

    def count_starts(self, rids: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray | None) -> np.ndarray:
        live = self.live
        rid_list = rids.tolist() if isinstance(rids, np.ndarray) else rids
        out = np.empty(len(rid_list), dtype=np.uint32)
        if counts is None:
            for i, rid in enumerate(rid_list):
                t = live.get(rid)
                if t is not None:
                    out[i] = t.sent
                    t.sent += 1
                else:
                    out[i] = 0  # not live here: the worker ignores or reports it
        else:
            count_list = counts.tolist() if isinstance(counts, np.ndarray) else counts
            for i, (rid, c) in enumerate(zip(rid_list, count_list)):
                t = live.get(rid)
                if t is not None:
                    out[i] = t.sent
                    t.sent += c
                else:
                    out[i] = 0
        return out
