"""`SchedulerClient`: what a scheduler embeds to hand token ids to the detok workers.

    client = pool.client()                       # or SchedulerClient(endpoints, notify_endpoint)
    client.add_request(generate_request)         # registration, sent with the next step
    full = client.send_step(rids, tokens)        # one message per worker, never blocks
    for stopped in client.poll():                # rids finished by the workers (stop strings, errors)
        scheduler.stop(stopped.rid)

Sharding: worker = the rid's Fibonacci hash scaled to N (`shard_of`), stable across processes and
restarts; consecutive rids spread evenly (three-distance theorem), random rids like a random hash.

Never blocking: each worker socket has a bounded queue; a send that would block is kept in that
worker's backlog (order preserved, retried first on the next call) and the worker is reported in
`send_step`'s return value, so the scheduler can throttle admission. Nothing is waited on.

Failure handling (until exact replay lands): when the supervisor reports a worker dead, the client
sends `FailRequests` for every request it had on that worker to the same endpoint - the replacement
process receives it first thing and tells each request's frontend (reason "error", naming the
cause) - and reports those rids from `poll()` so the scheduler stops generating them. Rids a
worker reports as unknown (registration lost) are failed the same way.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Self

import numpy as np
import zmq

from detok import protocol
from detok.endpoints import make_socket
from detok.protocol import EndRequest, GenerateRequest, Registration
from detok.security import CurveKeys, SocketSecurity
from detok.stream.params import Finish

log = logging.getLogger("detok.client")

_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: Fibonacci hashing
_MASK64 = (1 << 64) - 1
_NP_GOLDEN = np.uint64(_GOLDEN)


_ENDED_WINDOW_S = 30.0  # how long an ended request is remembered for failure handling
_ENDED_MAX = 200_000


def shard_of(rid: int, workers: int) -> int:
    """The worker index of a rid: Fibonacci hash, top 32 bits scaled to [0, workers)."""
    return ((((rid * _GOLDEN) & _MASK64) >> 32) * workers) >> 32


def shard_array(rids: np.ndarray, workers: int) -> np.ndarray:
    """`shard_of` for a uint64 array, vectorised (same values)."""
    with np.errstate(over="ignore"):
        top = (rids.astype(np.uint64, copy=False) * _NP_GOLDEN) >> np.uint64(32)
    return ((top * np.uint64(workers)) >> np.uint64(32)).astype(np.intp)


class Stopped(NamedTuple):
    """A request the detok side finished: the scheduler stops generating it."""

    rid: int
    finish: Finish


class _Tracked:
    __slots__ = ("reply_to", "sent", "worker")

    def __init__(self, worker: int, reply_to: str) -> None:
        self.worker = worker
        self.reply_to = reply_to
        self.sent = 0  # output tokens sent, when the client computes starts itself


EndLike = EndRequest | tuple[int, str] | tuple[int, str, int | None]


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
        endpoint without keys raises InsecureTransportError unless `insecure` (see detok.security)."""
        if not worker_endpoints:
            raise ValueError("at least one worker endpoint is needed")
        self._security = SocketSecurity(keys, insecure)
        for endpoint in (*worker_endpoints, *([notify_endpoint] if notify_endpoint else [])):
            self._security.check(endpoint)  # before any socket exists
        self._ctx = context or zmq.Context()
        self._own_ctx = context is None
        self._n = len(worker_endpoints)
        self._sockets: list[zmq.Socket] = []
        for endpoint in worker_endpoints:
            sock = make_socket(self._ctx, zmq.PUSH, hwm=hwm)
            self._security.connect(sock, endpoint)
            self._sockets.append(sock)
        self._notify: zmq.Socket | None = None
        if notify_endpoint:
            self._notify = make_socket(self._ctx, zmq.PULL, hwm=hwm)
            self._security.bind(self._notify, notify_endpoint)
        self._encoder = protocol.new_encoder()
        self._decoder = protocol.scheduler_notice_decoder()
        self._live: dict[int, _Tracked] = {}
        # Requests the scheduler ended recently: their last messages may die with a worker (or
        # reach its replacement, which never saw the registration), so they are failed too.
        self._ended: collections.OrderedDict[int, tuple[_Tracked, float]] = collections.OrderedDict()
        self._new: list[list[Registration]] = [[] for _ in range(self._n)]
        self._ends: list[list[EndRequest]] = [[] for _ in range(self._n)]
        self._backlog: list[collections.deque[bytes]] = [collections.deque() for _ in range(self._n)]
        self._seq = [0] * self._n
        self._stopped: list[Stopped] = []
        self.events: collections.deque[protocol.WorkerEvent] = collections.deque(maxlen=1000)

    # ---- requests -------------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._n

    def worker_of(self, rid: int) -> int:
        return shard_of(rid, self._n)

    def add_request(self, request: GenerateRequest | Registration) -> int:
        """Register a request; the registration goes with the next message to its worker."""
        reg = protocol.registration_for(request) if isinstance(request, GenerateRequest) else request
        worker = shard_of(reg.rid, self._n)
        self._live[reg.rid] = _Tracked(worker, reg.reply_to)
        self._new[worker].append(reg)
        return worker

    def end(self, rid: int, reason: str = "length", matched: int | None = None) -> None:
        """The scheduler ended a request (eos, stop token, length): sent with the next step."""
        self._stage_end(EndRequest(rid, reason, matched))  # type: ignore[arg-type]

    def abort(self, rid: int) -> list[int]:
        """Abort a request now (one message to its worker); returns workers with a full queue."""
        self._stage_end(EndRequest(rid, "abort"))
        return self.flush()

    def fail(self, rid: int, message: str, reply_to: str | None = None) -> list[int]:
        """Finish a request with reason "error" at its frontend (e.g. the scheduler rejects it)."""
        tracked = self._live.pop(rid, None)
        target = reply_to or (tracked.reply_to if tracked else None)
        if target is None:
            raise KeyError(f"rid {rid} is not live and no reply_to was given")
        worker = shard_of(rid, self._n)
        self._send(worker, self._encoder.encode(protocol.FailRequests([rid], [target], message)))
        return [worker] if self._backlog[worker] else []

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
    ) -> list[int]:
        """Send one scheduler step: `rids[i]` got `counts[i]` tokens (1 each when None), flattened
        in `tokens`. `starts[i]` is the index of rid i's first token here within its output; pass
        it if the scheduler knows it (cheaper), else the client counts. `ends` end requests after
        their tokens. Returns the workers whose queue is full (their message is kept and retried
        first on the next call)."""
        rid_arr = np.asarray(rids, dtype=np.uint64)
        tok_arr = np.asarray(tokens, dtype=np.uint32)
        cnt_arr = None if counts is None else np.asarray(counts, dtype=np.uint32)
        if (starts is not None and len(starts) != len(rid_arr)) or (cnt_arr is not None and len(cnt_arr) != len(rid_arr)):
            raise ValueError("rids, starts and counts must have one entry per rid")
        if len(tok_arr) != (len(rid_arr) if cnt_arr is None else int(cnt_arr.sum())):
            raise ValueError("tokens do not match the counts")
        if starts is None:
            start_arr = self._count_starts(rids, counts)
        else:
            start_arr = np.asarray(starts, dtype=np.uint32)
        # Ends apply after this step's tokens: staged only once the starts were counted, since
        # ending a request forgets its count (its last token would otherwise get start 0).
        for end in ends:
            self._stage_end(end if isinstance(end, EndRequest) else EndRequest(*end))  # type: ignore[arg-type]
        now = time.time()
        if self._n == 1:
            self._send_batch(0, now, rid_arr, start_arr, cnt_arr, tok_arr)
        else:
            shards = shard_array(rid_arr, self._n)
            tok_shards = shards if cnt_arr is None else np.repeat(shards, cnt_arr)
            for w in range(self._n):
                mask = shards == w
                tmask = tok_shards == w
                self._send_batch(
                    w, now, rid_arr[mask], start_arr[mask], None if cnt_arr is None else cnt_arr[mask], tok_arr[tmask]
                )
        return self._full_workers()

    def flush(self) -> list[int]:
        """Send staged registrations and ends now (no tokens); returns workers with a full queue."""
        now = time.time()
        empty64, empty32 = np.empty(0, np.uint64), np.empty(0, np.uint32)
        for w in range(self._n):
            if self._new[w] or self._ends[w]:
                self._send_batch(w, now, empty64, empty32, None, empty32)
            else:
                self._drain_backlog(w)
        return self._full_workers()

    def _count_starts(self, rids: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray | None) -> np.ndarray:
        live = self._live
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

    def _send_batch(
        self, w: int, now: float, rids: np.ndarray, starts: np.ndarray, counts: np.ndarray | None, tokens: np.ndarray
    ) -> None:
        new, ends = self._new[w], self._ends[w]
        if not (len(rids) or new or ends):
            self._drain_backlog(w)
            return
        self._new[w], self._ends[w] = [], []
        self._seq[w] += 1
        batch = protocol.DetokBatch(
            self._seq[w],
            now,
            new,
            rids.astype("<u8", copy=False).tobytes(),
            starts.astype("<u4", copy=False).tobytes(),
            b"" if counts is None else counts.astype("<u4", copy=False).tobytes(),
            tokens.astype("<u4", copy=False).tobytes(),
            ends,
        )
        self._send(w, self._encoder.encode(batch))

    def _send(self, w: int, message: bytes) -> None:
        backlog = self._backlog[w]
        if backlog:
            self._drain_backlog(w)
        if backlog:
            backlog.append(message)
            return
        try:
            self._sockets[w].send(message, zmq.NOBLOCK, copy=len(message) < 65536)
        except zmq.Again:
            backlog.append(message)

    def _drain_backlog(self, w: int) -> None:
        backlog, sock = self._backlog[w], self._sockets[w]
        while backlog:
            try:
                sock.send(backlog[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            backlog.popleft()

    def _full_workers(self) -> list[int]:
        return [w for w in range(self._n) if self._backlog[w]]

    def backlog(self, worker: int) -> int:
        """Messages waiting for room in a worker's queue."""
        return len(self._backlog[worker])

    def _stage_end(self, end: EndRequest) -> None:
        tracked = self._live.pop(end.rid, None)
        worker = tracked.worker if tracked is not None else shard_of(end.rid, self._n)
        self._ends[worker].append(end)
        if tracked is not None:
            now = time.monotonic()
            ended = self._ended
            ended[end.rid] = (tracked, now)
            while ended and (len(ended) > _ENDED_MAX or next(iter(ended.values()))[1] < now - _ENDED_WINDOW_S):
                ended.popitem(last=False)

    # ---- notices --------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> list[Stopped]:
        """Requests the detok side finished since the last call (stop strings and stop tokens the
        worker saw, errors, requests of a dead worker). Waits up to `timeout` seconds for the
        first notice; never longer."""
        sock = self._notify
        if sock is not None:
            if not self._stopped and timeout > 0:
                sock.poll(int(timeout * 1000))
            while True:
                try:
                    raw = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    self._on_notice(self._decoder.decode(raw))
                except Exception as e:  # noqa: BLE001 - a bad notice must not take the scheduler down
                    log.warning("dropped a malformed scheduler notice: %s", e)
        out, self._stopped = self._stopped, []
        return out

    def _on_notice(self, msg: Any) -> None:
        if isinstance(msg, protocol.StopNotice):
            for rid, finish in zip(msg.rids, msg.finishes):
                if self._live.pop(rid, None) is not None:
                    self._stopped.append(Stopped(rid, finish))
            if msg.unknown_rids:
                lost = [r for r in msg.unknown_rids if r in self._live or r in self._ended]
                self._fail_lost(msg.worker, lost, f"detok worker {msg.worker} has no registration for this request")
        else:
            self.events.append(msg)
            if msg.kind == "died":
                # live requests, and recently ended ones whose end may have died with the worker
                # (a frontend keeps the first finish of a request, so a duplicate error is harmless)
                lost = [r for r, t in self._live.items() if t.worker == msg.worker]
                lost += [r for r, (t, _) in self._ended.items() if t.worker == msg.worker]
                self._fail_lost(msg.worker, lost, msg.message)

    def _fail_lost(self, worker: int, rids: list[int], message: str) -> None:
        if not rids:
            return
        reply_to = []
        for r in rids:
            tracked = self._live.pop(r, None)
            if tracked is None:
                tracked = self._ended.pop(r)[0]
            reply_to.append(tracked.reply_to)
        log.warning("failing %d requests of detok worker %d: %s", len(rids), worker, message)
        self._send(worker, self._encoder.encode(protocol.FailRequests(rids, reply_to, message)))
        finish = Finish("error", None, message)
        self._stopped.extend(Stopped(r, finish) for r in rids)

    # ---- shutdown -------------------------------------------------------------------------------
    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        if self._notify is not None:
            self._notify.close()
        self._security.close()
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
