"""`SchedulerClient`: what a scheduler embeds to hand token ids to the detok workers.

    client = pool.client()                       # or SchedulerClient(endpoints, notify_endpoint)
    client.add_request(generate_request)         # registration, sent with the next step
    full = client.send_step(rids, tokens)        # one message per worker, never blocks
    client.send_step(rids, tokens, logprobs=LogprobColumns(rows, sampled, top_counts, top_ids, top_lps))
    for stopped in client.poll():                # rids finished by the workers (stop strings, errors)
        scheduler.stop(stopped.rid)

Logprobs (`LogprobColumns`, optional): for the rows of requests that asked, the sampled token's
logprob and its top-k alternatives per token, as packed columns; the workers turn the ids into
strings. A step without them costs nothing extra; sharding splits them with numpy, per worker.

How sharding, back-pressure and replay work: see `detok.scheduler` (the package docstring).
"""

from __future__ import annotations

import collections
import logging
import os
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Self

import msgspec
import numpy as np
import zmq

from detok import wire
from detok.scheduler.client_notices import NOTICE_CHECK_S, REPLAY_RETRY_S, WorkerNotices  # noqa: F401 (re-exported)
from detok.scheduler.notices import Staged, Stopped, WorkerState
from detok.scheduler.replay_book import ReplayBook
from detok.scheduler.replay_journal import Columns
from detok.scheduler.sharding import shard_array, shard_of
from detok.scheduler.step_logprobs import LogprobArrays, LogprobColumns
from detok.scheduler.worker_queues import WorkerQueues
from detok.wire.endpoints import make_socket
from detok.wire.security import CurveKeys, SocketSecurity
from detok.wire.to_scheduler import GenerateRequest
from detok.wire.to_workers import EndRequest, Registration

log = logging.getLogger("detok.client")

# add_request of a rid the client still holds live waits this long for the worker's notice that
# finished it (a stop string, seen by the frontend before the notice reached the scheduler)
# before refusing the request id as in use.
REUSE_NOTICE_WAIT_S = 0.5


class RequestIdInUse(ValueError):
    """add_request of a rid whose earlier request is still live (neither ended by the scheduler
    nor finished by its worker). A rid may be used again once its request finished."""


EndLike = EndRequest | tuple[int, str] | tuple[int, str, int | None]
_EMPTY_STEP = (np.empty(0, np.uint64), np.empty(0, np.uint32), None, np.empty(0, np.uint32))


class SchedulerClient:
    def __init__(
        self,
        worker_endpoints: Sequence[str],
        notify_endpoint: str | None = None,
        *,
        hwm: int = 10_000,
        context: zmq.Context | None = None,
        keys: CurveKeys | str | os.PathLike[str] | None = None,
        insecure: bool = False,
    ) -> None:
        """`keys`: the deployment's CURVE keys (or their directory) for tcp endpoints; a tcp
        endpoint without keys raises InsecureTransportError unless `insecure` (see detok.wire.security)."""
        if not worker_endpoints:
            raise ValueError("at least one worker endpoint is needed")
        self._security = SocketSecurity(keys, insecure)
        for endpoint in (*worker_endpoints, *([notify_endpoint] if notify_endpoint else [])):
            self._security.check(endpoint)  # before any socket exists
        self._ctx = context or zmq.Context()
        self._own_ctx = context is None
        self._n = len(worker_endpoints)
        self._queues = WorkerQueues(self._ctx, worker_endpoints, self._security, hwm)
        self._notify: zmq.Socket | None = None
        if notify_endpoint:
            self._notify = make_socket(self._ctx, zmq.PULL, hwm=hwm)
            self._security.bind(self._notify, notify_endpoint)
        # closed by close(), by garbage collection or at interpreter exit, whichever comes first:
        # the authenticator thread stopped before the context is terminated (else term() hangs)
        self._finalizer = weakref.finalize(
            self, _close_client, self._queues, self._notify, self._security, self._ctx if self._own_ctx else None
        )
        self._encoder = wire.new_encoder()
        # registration generations: increasing, and across clients too (a receiver takes a
        # finish of a generation not above the last it saw for a rid as a replay of it)
        self._gen = time.time_ns() // 1000
        self._book = ReplayBook(self._n)  # every request a replay may have to rebuild
        self._live = self._book.live
        self._staged = Staged(self._n)
        self._notices = WorkerNotices(self._n, self._notify, self._book, self._queues, self._staged, self._encoder)
        if self._notify is not None:  # (replay needs the notices: without them, none is possible)
            # A new client owns the shards from now on: whatever an earlier client left is dropped.
            for w in range(self._n):
                self._notices.send_replay(w, 0, "a new scheduler client started")

    # ---- notices (WorkerNotices') ---------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> list[Stopped]:
        """Requests the detok side finished since the last call (stop strings and stop tokens the
        worker saw, errors). Waits up to `timeout` seconds for the first notice; never longer.
        Also answers workers that wait for a replay."""
        return self._notices.poll(timeout)

    def wait_for_workers(self, timeout: float) -> bool:
        """Wait until every worker was heard since this call; True if all were within `timeout`
        seconds (see WorkerNotices.wait_for_workers)."""
        return self._notices.wait_for_workers(timeout)

    def worker_states(self) -> list[WorkerState]:
        """What the client knows of each worker (liveness for standalone workers: `last_heard`)."""
        return self._notices.worker_states()

    @property
    def events(self) -> collections.deque[wire.WorkerEvent]:
        """The supervisors' worker events (started, died, ...), the last 1000."""
        return self._notices.events

    @property
    def replays_sent(self) -> int:
        return self._notices.replays_sent

    @property
    def replayed_tokens(self) -> int:
        return self._notices.replayed_tokens

    @property
    def kept_requests(self) -> int:
        """Requests the client can replay: live ones and recently ended ones."""
        return len(self._book)

    def journal_bytes(self) -> int:
        """Bytes of step columns the client keeps for replay, all workers."""
        return self._book.journal_bytes()

    # ---- requests -------------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._n

    def worker_of(self, rid: int) -> int:
        return shard_of(rid, self._n)

    def add_request(self, request: GenerateRequest | Registration) -> int:
        """Register a request; the registration goes with the next message to its worker.

        A rid may be used again once its earlier request finished (ended, aborted or failed by
        the scheduler, or finished by its worker: stop string, stop id, error); the new request
        is a new registration generation, and nothing of the earlier one (late notices, ends,
        replays after a worker's death) touches it. A rid whose request is still live raises
        `RequestIdInUse` (after up to REUSE_NOTICE_WAIT_S for a worker notice finishing it)."""
        reg = request if type(request) is Registration else (
            wire.registration_for(request) if isinstance(request, GenerateRequest) else request)
        rid = reg.rid
        worker = shard_of(rid, self._n) if self._n > 1 else 0
        book = self._book
        known = rid in book
        if known:
            self._reuse(worker, rid)
        self._gen += 1
        reg = msgspec.structs.replace(reg, gen=self._gen)
        # staged registrations go with the next message to their worker, whichever it is
        book.register(worker, reg, self._staged.seq[worker] + 1, known)
        self._staged.new[worker].append(reg)
        return worker

    def _reuse(self, worker: int, rid: int) -> None:
        """`rid` is registered again: its earlier request must be over, and whatever of it is
        still staged goes first (an end staged with the new registration would end the new one)."""
        if rid in self._live:
            self._notices.take()
            deadline = time.monotonic() + REUSE_NOTICE_WAIT_S
            while rid in self._live and self._notify is not None and (left := deadline - time.monotonic()) > 0:
                self._notify.poll(max(1, int(left * 1000)))
                self._notices.take()
            if rid in self._live:
                raise RequestIdInUse(
                    f"request id {rid} is still live (registered and not finished): a request id may "
                    "be used again only after its request finished (end, abort, fail, or a stop the worker reported)"
                )
        # the scheduler is done with the earlier request: a Stopped of it not polled yet would
        # otherwise stop the new one
        self._notices.forget_stopped(rid)
        if any(e.rid == rid for e in self._staged.ends[worker]) or any(r.rid == rid for r in self._staged.new[worker]):
            self._send_batch(worker, time.time(), *_EMPTY_STEP)

    def end(self, rid: int, reason: str = "length", matched: int | None = None) -> None:
        """The scheduler ended a request (eos, stop token, length): sent with the next step."""
        self._stage_end(EndRequest(rid, reason, matched))  # type: ignore[arg-type]

    def abort(self, rid: int) -> list[int]:
        """Abort a request now (one message to its worker); returns workers with a full queue."""
        self._stage_end(EndRequest(rid, "abort"))
        return self.flush()

    def fail(self, rid: int, message: str, reply_to: str | None = None) -> list[int]:
        """Finish a request with reason "error" at its frontend (e.g. the scheduler rejects it).
        A registered request ends like any other (and is replayed with its error if its worker
        dies first); an unknown one needs `reply_to`."""
        if rid in self._live:
            self._stage_end(EndRequest(rid, "error", None, message))
            return self.flush()
        if reply_to is None:
            raise KeyError(f"rid {rid} is not live and no reply_to was given")
        worker = shard_of(rid, self._n)
        self._queues.send(worker, self._encoder.encode(wire.FailRequests([rid], [reply_to], message)))
        return [worker] if self._queues.backlog(worker) else []

    def live_rids(self, worker: int | None = None) -> list[int]:
        return [r for r, t in self._live.items() if worker is None or t.worker == worker]

    # ---- steps ----------------------------------------------------------------------------------
    def send_step(
        self,
        rids: Sequence[int] | np.ndarray,
        tokens: Sequence[int] | np.ndarray,
        counts: Sequence[int] | np.ndarray | None = None,
        *,
        starts: Sequence[int] | np.ndarray | None = None,
        ends: Iterable[EndLike] = (),
        logprobs: LogprobColumns | None = None,
    ) -> list[int]:
        """Send one scheduler step: `rids[i]` got `counts[i]` tokens (1 each when None), flattened
        in `tokens`. `starts[i]` is the index of rid i's first token here within its output; pass
        it if the scheduler knows it (cheaper), else the client counts. `ends` end requests after
        their tokens. `logprobs`: the sampled and top-k logprobs of the rows of requests that
        asked (`LogprobColumns`). Returns the workers whose queue is full (their message is kept
        and retried first on the next call)."""
        self._notices.take_soon()
        rid_arr = np.asarray(rids, dtype=np.uint64)
        tok_arr = np.asarray(tokens, dtype=np.uint32)
        cnt_arr = None if counts is None else np.asarray(counts, dtype=np.uint32)
        if (starts is not None and len(starts) != len(rid_arr)) or (cnt_arr is not None and len(cnt_arr) != len(rid_arr)):
            raise ValueError("rids, starts and counts must have one entry per rid")
        if len(tok_arr) != (len(rid_arr) if cnt_arr is None else int(cnt_arr.sum())):
            raise ValueError("tokens do not match the counts")
        lp = None if logprobs is None else LogprobArrays.checked(logprobs, len(rid_arr), cnt_arr)
        if starts is None:
            start_arr = self._book.count_starts(rids, counts)
        else:
            start_arr = np.asarray(starts, dtype=np.uint32)
        # Ends apply after this step's tokens: staged only once the starts were counted, since
        # ending a request forgets its count (its last token would otherwise get start 0).
        for end in ends:
            self._stage_end(end if isinstance(end, EndRequest) else EndRequest(*end))  # type: ignore[arg-type]
        now = time.time()
        if self._n == 1:
            lp_w = None if lp is None or not len(lp.rows) else lp.packed(lp.rows)
            self._send_batch(0, now, rid_arr, start_arr, cnt_arr, tok_arr, lp_w)
        else:
            shards = shard_array(rid_arr, self._n)
            tok_shards = shards if cnt_arr is None else np.repeat(shards, cnt_arr)
            for w in range(self._n):
                mask = shards == w
                tmask = tok_shards == w
                self._send_batch(
                    w, now, rid_arr[mask], start_arr[mask], None if cnt_arr is None else cnt_arr[mask], tok_arr[tmask],
                    None if lp is None else lp.shard(mask),
                )
        return self._queues.full()

    def flush(self) -> list[int]:
        """Send staged registrations and ends now (no tokens); returns workers with a full queue."""
        self._notices.take_soon()
        now = time.time()
        for w in range(self._n):
            if self._staged.new[w] or self._staged.ends[w]:
                self._send_batch(w, now, *_EMPTY_STEP)
            else:
                self._queues.drain(w)
        return self._queues.full()

    def _send_batch(
        self, w: int, now: float, rids: np.ndarray, starts: np.ndarray, counts: np.ndarray | None, tokens: np.ndarray,
        logprobs: wire.StepLogprobs | None = None,
    ) -> None:
        if not (len(rids) or self._staged.new[w] or self._staged.ends[w]):
            self._queues.drain(w)
            return
        new, ends, seq = self._staged.take(w)
        columns = Columns(
            rids.astype("<u8", copy=False).tobytes(),
            starts.astype("<u4", copy=False).tobytes(),
            b"" if counts is None else counts.astype("<u4", copy=False).tobytes(),
            tokens.astype("<u4", copy=False).tobytes(),
            logprobs,
        )
        self._book.sent(w, seq, columns, ends)
        batch = wire.DetokBatch(seq, now, new, *columns[:4], ends, logprobs)
        self._queues.send(w, self._encoder.encode(batch))

    def backlog(self, worker: int) -> int:
        """Messages waiting for room in a worker's queue."""
        return self._queues.backlog(worker)

    def _stage_end(self, end: EndRequest) -> None:
        tracked = self._book.end(end)  # kept for replay until the worker acknowledges this end
        self._staged.ends[tracked.worker if tracked is not None else shard_of(end.rid, self._n)].append(end)

    # ---- shutdown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the sockets (queued messages get the bounded linger), stop the CURVE
        authenticator, terminate the context if the client made it. Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_client(queues: WorkerQueues, notify: zmq.Socket | None, security: SocketSecurity, ctx: zmq.Context | None) -> None:
    queues.close()
    if notify is not None:
        notify.close(linger=0)
    security.close()
    if ctx is not None:
        ctx.term()
