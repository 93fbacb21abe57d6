"""`DeltaReceiver`: the frontend side - text deltas from the detok workers, per request.

    receiver = DeltaReceiver()                  # binds a PULL socket; send receiver.endpoint as
    await receiver.start()                      # GenerateRequest.reply_to
    stream = receiver.open(rid)                 # before the request goes to the scheduler
    async for delta in stream:                  # RequestDelta(text, finish, num_tokens, logprobs)
        ...

Two ways to consume:
- per-rid async iterators (`open`): one wake-up per request per received batch at most; a slow
  consumer gets the texts of several batches joined in one delta;
- a bulk callback (`on_batch`): called with every DeltaBatch as it arrives, before per-rid dispatch,
  for consumers that do their own fan-out without per-rid asyncio work.

Replays are de-duplicated by char offset: a delta that starts before what a request already has
is cut, one that would leave a gap is kept and counted (`gaps`). The first finish of a rid wins.
A rid may be opened again once its stream finished: the finish carries its registration
generation, and a message that finishes an earlier generation of the rid again (a worker's replay
of the earlier request) is dropped whole for that rid, so it never reaches the new stream.
Logprob entries (requests that asked for them) are de-duplicated the same way, by token index.
Without asyncio (benchmarks, tests), `poll_blocking` receives and dispatches on the calling thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Self

import msgspec
import zmq

from detok import wire
from detok.wire.endpoints import IpcDir, bound_endpoint, connectable, make_socket
from detok.wire.to_frontends import DeltaBatch
from detok.wire.security import CurveKeys, SocketSecurity
from detok.wire.params import Finish
from detok.receiver.request_stream import PushQueue, RequestDelta, RequestStream  # noqa: F401 (re-exported)
from detok.receiver.token_logprobs import TokenLogprobs, split_logprobs

log = logging.getLogger("detok.receiver")

_DRAIN_MAX = 256  # messages dispatched per wake-up before yielding to the event loop
# Finished registration generations remembered (per rid, the latest), to drop replayed output of
# requests already finished; the oldest are forgotten beyond this many rids.
FINISHED_GENS_MAX = 65_536


DirectRows = Callable[[dict[int, RequestStream], type, list[int], list[str], list[int], list[int] | None, set[int] | None,
                       list[tuple[int, TokenLogprobs] | None] | None, bytes | None], list[int] | None]


class DeltaReceiver:
    def __init__(
        self,
        endpoint: str | None = None,
        *,
        on_batch: Callable[[DeltaBatch], None] | None = None,
        hwm: int = 100_000,
        keys: CurveKeys | str | os.PathLike[str] | None = None,
        insecure: bool = False,
    ) -> None:
        """Bind `endpoint` (default: an ipc file in a private temp dir, removed on close). A tcp
        endpoint needs the deployment's CURVE `keys` (workers must hold them to deliver), or an
        explicit `insecure=True` (see detok.wire.security)."""
        self._security = SocketSecurity(keys, insecure)
        if endpoint is not None:
            self._security.check(endpoint)
        self._dir = IpcDir(prefix="detok-rx-") if endpoint is None else None
        if self._dir is not None:  # removed at close, or at interpreter exit if never closed
            self._dir_finalizer = weakref.finalize(self, self._dir.remove)
        self._ctx = zmq.Context()
        self._sock: zmq.Socket = make_socket(self._ctx, zmq.PULL, hwm=hwm)
        try:
            self._security.bind(self._sock, endpoint or self._dir.endpoint("deltas"))  # type: ignore[union-attr]
        except zmq.ZMQError:
            _close_receiver(self._sock, self._security, self._ctx, self._dir_finalizer if self._dir is not None else None)
            raise
        self.endpoint = connectable(bound_endpoint(self._sock))
        self._finalizer = weakref.finalize(self, _close_receiver, self._sock, self._security, self._ctx,
                                           self._dir_finalizer if self._dir is not None else None)
        self._decoder = wire.frontend_inbound_decoder()
        self._streams: dict[int, RequestStream] = {}
        self.pushes = PushQueue()  # streams whose deltas go to their pushers (RequestStream.push_to)
        self._finished_gens: dict[int, int] = {}  # rid -> latest registration generation finished
        self.on_batch = on_batch
        # Rows written to their connections as they are dispatched, where the stream's pusher can
        # (the HTTP frontend installs `detok._native._chunkpush.push_rows`): called with the open
        # streams, the stream type, the row columns, the token counts (or None), the rids this
        # batch finishes or gives typed rows (or None), its logprob entry-rows (split_logprobs; or None; a
        # run it writes with its row, it sets to None) and its row kinds (or None); returns the
        # indices of the rows it left (None: none), which the dispatch then applies as usual.
        self.direct_rows: DirectRows | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop whose reader receives (start)
        self.batches = 0
        self.malformed = 0
        self.gaps = 0
        self.logprob_gaps = 0

    # ---- requests -------------------------------------------------------------------------------
    def open(self, rid: int) -> RequestStream:
        """The delta stream of `rid`; open it before the request is submitted. Opening a rid
        whose stream is open and not finished returns that stream; once it finished (even if its
        consumer has not taken the finish yet), a new stream for a new request."""
        stream = self._streams.get(rid)
        if stream is None or stream.finish is not None:
            stream = self._streams[rid] = RequestStream(rid, self)
        return stream

    def discard(self, rid: int) -> None:
        """Stop tracking a request (its client went away); later deltas for it are dropped."""
        self._streams.pop(rid, None)

    def fail(self, rid: int, message: str) -> None:
        """Finish `rid`'s open stream with reason "error" and `message` (its request never reached
        the scheduler). Call on the receiving event loop's thread."""
        stream = self._streams.get(rid)
        if stream is not None:
            stream._end(Finish("error", None, message), stream.num_tokens or 0)

    def fail_all(self, message: str) -> int:
        """Finish every open request with reason "error" and `message` (e.g. the scheduler died and
        no delta will ever come); returns how many. Call on the receiving event loop's thread."""
        finish = Finish("error", None, message)
        streams = list(self._streams.values())
        for stream in streams:
            stream._end(finish, stream.num_tokens or 0)
        return len(streams)

    @property
    def open_count(self) -> int:
        return len(self._streams)

    # ---- receiving ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start receiving on the running event loop (uvloop or asyncio)."""
        if self._loop is None and not self.closed:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._sock.get(zmq.FD), self._on_readable)
            self._loop.call_soon(self._on_readable)  # (what is already queued: the FD signals changes only)

    def _on_readable(self) -> None:
        """The socket's messages dispatched as the loop sees its FD readable. A plain socket on the
        loop's reader, not pyzmq's asyncio socket: that one costs the frontend much more per
        message (a future, a NOBLOCK try ending in a raised zmq.Again, enum flag arithmetic, a
        call_later(0) to look again), twice a step. Past _DRAIN_MAX messages (or a dispatch that
        raised) the rest is read at the loop's next turn: zmq's FD would not signal them again."""
        if self._loop is None or self._sock.closed:  # (a turn scheduled before close)
            return
        more = True
        try:
            more = self._take_queued() == _DRAIN_MAX
        finally:
            if more:
                self._loop.call_soon(self._on_readable)

    def poll_blocking(self, timeout: float) -> int:
        """Receive and dispatch on this thread (no event loop): waits up to `timeout` s for the
        first message, then takes what is queued. Returns the number of batches handled."""
        if not self._sock.poll(int(timeout * 1000)):
            return 0
        return self._take_queued()

    def _take_queued(self) -> int:
        """Dispatch the queued messages, at most _DRAIN_MAX; returns how many. zmq's FD is
        edge-triggered: the queue is read until EVENTS says it is empty, not until a recv raises."""
        sock = self._sock
        for handled in range(_DRAIN_MAX):
            if not sock.get(zmq.EVENTS) & zmq.POLLIN:
                return handled
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:  # (EVENTS said there was one: nothing to report)
                return handled
            self._dispatch_raw(raw)
        return _DRAIN_MAX

    def _dispatch_raw(self, raw: bytes) -> None:
        try:
            batch = self._decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.malformed += 1
            log.warning("dropped a malformed delta message (%d bytes): %s", len(raw), e)
            return
        self.dispatch(batch)

    def dispatch(self, batch: DeltaBatch) -> None:
        """Hand one DeltaBatch to the bulk callback and to the open request streams."""
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(batch)
        streams = self._streams
        stale = None
        if batch.finished:
            stale = self._stale(batch)
            gens = self._finished_gens
            for done in batch.finished:
                if done.gen and (stale is None or done.rid not in stale):
                    gens.pop(done.rid, None)  # re-inserted: the newest last, evicted last
                    gens[done.rid] = done.gen
            while len(gens) > FINISHED_GENS_MAX:
                del gens[next(iter(gens))]
        if not streams:
            return
        try:
            rids, texts, offsets = batch.columns()
            entries = split_logprobs(batch.logprobs) if batch.logprobs is not None else ()
            counts = batch.token_counts() if batch.num_tokens else None
            kinds = batch.kinds
            if kinds and len(kinds) != len(batch.rids) // 8:
                raise ValueError(f"{len(kinds)} kinds for {len(batch.rids) // 8} rows")
        except ValueError as e:
            self.malformed += 1
            log.warning("dropped a delta message whose columns do not fit together: %s", e)
            return
        get = streams.get
        if stale:
            streams = {r: s for r, s in streams.items() if r not in stale}
            get = streams.get
        rows: Iterable[tuple[int, str, int]] = zip(rids, texts, offsets)
        if self.direct_rows is not None:
            # (rids the batch finishes or gives typed rows, applied after the rows: theirs go out with those)
            later = {d.rid for d in batch.finished} if batch.finished else None
            if batch.typed:
                later = (later or set()) | {row.rid for row in batch.typed}
            left = self.direct_rows(streams, RequestStream, rids, texts, offsets, counts, later, entries or None,
                                    kinds or None)
            if left is None:
                rows = ()
            elif len(left) < len(rids):
                rows = [(rids[k], texts[k], offsets[k]) for k in left]
                counts = [counts[k] for k in left] if counts is not None else None
                kinds = bytes(kinds[k] for k in left) if kinds else kinds
        if kinds:  # typed requests' rows from the workers' compiled path among them
            for k, (rid, text, offset) in enumerate(rows):
                stream = get(rid)
                if stream is not None:
                    if counts is not None and (stream._tokens is None or counts[k] > stream._tokens):
                        stream._tokens = counts[k]
                    if kinds[k]:
                        stream._feed_kind(kinds[k], text, offset)
                    else:
                        stream._feed(text, offset)
        elif counts is None:
            for rid, text, offset in rows:
                stream = get(rid)
                if stream is not None:
                    stream._feed(text, offset)
        else:
            for (rid, text, offset), n in zip(rows, counts):
                stream = get(rid)
                if stream is not None:
                    if stream._tokens is None or n > stream._tokens:
                        stream._tokens = n
                    stream._feed(text, offset)
        for pair in entries:
            if pair is not None:  # (None: written with its row by direct_rows)
                stream = get(pair[0])
                if stream is not None:
                    stream._feed_logprobs(pair[1])
        if batch.typed:
            for row in batch.typed:
                stream = get(row.rid)
                if stream is not None:
                    stream._feed_typed(row)
        for done in batch.finished:
            stream = get(done.rid)
            if stream is not None:
                stream._end(done.finish, done.num_tokens, done.calls)

    def _stale(self, batch: DeltaBatch) -> set[int] | None:
        """Rids this message finishes again in a generation they already finished in: a replay
        of an earlier request with that rid (all its rows in the message are stale too)."""
        gens = self._finished_gens
        if not gens:
            return None
        stale = None
        for done in batch.finished:
            if done.gen and done.gen <= gens.get(done.rid, 0):
                if stale is None:
                    stale = set()
                stale.add(done.rid)
        return stale

    # ---- shutdown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop receiving, close the socket, stop the CURVE authenticator, terminate the context,
        remove the ipc directory. Idempotent; also run at garbage collection or interpreter exit."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed() and not self.closed:
            loop.remove_reader(self._sock.get(zmq.FD))
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _close_receiver(sock: zmq.Socket, security: SocketSecurity, ctx: zmq.Context, remove_dir: Callable[[], object] | None) -> None:
    sock.close(linger=0)
    security.close()
    ctx.term()
    if remove_dir is not None:
        remove_dir()
