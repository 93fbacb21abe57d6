"""The serving worker's main loop: receive, hand to `WorkerCore`, send deltas and notices, report
status and heartbeats, sweep idle requests, shut down cleanly."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec
import zmq

from detok import wire
from detok.memory import trim_heap
from detok.stream.table import StreamTable
from detok.wire.endpoints import bound_endpoint, connectable, make_socket, unmapped
from detok.wire.security import SocketSecurity
from detok.worker.config import WorkerConfig
from detok.worker.core import MalformedBatch, Outputs, WorkerCore
from detok.worker.frontend_sockets import FrontendSockets
from detok.worker.lifecycle import (
    StopFlag,
    orphaned,
)
from detok.worker.status import StatusReporter

log = logging.getLogger("detok.worker")

POLL_MS = 100  # how soon a stop request or an idle sweep is noticed when no message comes
_DRAIN_MAX = 256  # messages handled per poll wake-up before checking timers again
_LOG_EVERY_S = 5.0  # rate limit for repeated warnings (malformed input, full peer queues)
# A message this large (a flood of rows) leaves freed memory glibc keeps: the heap is trimmed
# TRIM_DELAY_S after the last one (the burst over; a trim costs a few ms per 100 MB of heap).
TRIM_AFTER_BYTES: Final = 1024 * 1024
TRIM_DELAY_S: Final = 0.5
PROFILE_ENV = "DETOK_WORKER_PROFILE_DIR"  # set: each worker runs under cProfile and dumps its stats there
HEARTBEAT_INTERVAL_S: Final = 0.5  # how often a serving pool worker's loop tells the supervisor it runs
# A batch's queue lag is clamped to this: a sender's clock (or a NaN / infinite sent_at) must not
# poison the histogram's sum.
MAX_QUEUE_LAG_S: Final = 3600.0



class ServingLoop:
    def __init__(
        self,
        cfg: WorkerConfig,
        tokenizer: Any,
        worker: int,
        endpoint: str,
        stop: StopFlag,
        assignment: wire.AssignSlot | None = None,
        table: StreamTable | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        from detok.metrics import WorkerMetrics

        self.cfg = cfg
        self.worker = worker
        self.stop = stop
        self.heartbeat = heartbeat
        self.security = SocketSecurity(cfg.keys, cfg.insecure)
        self.metrics = WorkerMetrics(worker) if cfg.metrics_dir else None
        if self.metrics is not None and assignment is not None and assignment.generation > 1:
            self.metrics.restarted()
        counts = self.metrics.counts if self.metrics is not None else None
        self.core = WorkerCore(tokenizer, worker, idle_timeout_s=cfg.idle_timeout_s, counts=counts, table=table,
                               admit_reply_to=self._admit_frontend)
        # A pool slot's first process starts with nothing to rebuild; a replacement, or a standalone
        # worker (which cannot know whether it replaces one), waits for its shard's replay.
        self.core.instance = secrets.randbits(63) or 1
        self.core.awaiting_replay = bool(cfg.notify_endpoint) and (assignment is None or assignment.generation > 1)
        self._died_at = assignment.died_at if assignment is not None else 0.0
        self.status = StatusReporter(
            worker, self.core.instance, os.getpid(), assignment.generation if assignment else 0, self._died_at
        )
        for needed in (endpoint, cfg.notify_endpoint or ""):
            self.security.check(needed)  # refuse tcp without keys before binding anything
        self.ctx = zmq.Context()
        self.input = make_socket(self.ctx, zmq.PULL, hwm=cfg.hwm)
        try:
            self.security.bind(self.input, endpoint)
        except zmq.ZMQError:
            self.input.close(0)
            self.security.close()
            self.ctx.term()
            raise
        self.bound = unmapped(bound_endpoint(self.input))  # what it listens on (0.0.0.0 stays 0.0.0.0)
        self.endpoint = connectable(self.bound)  # what peers on this host connect to
        self.notify: zmq.Socket | None = None
        if cfg.notify_endpoint:
            self.notify = make_socket(self.ctx, zmq.PUSH, hwm=cfg.hwm)
            self.security.connect(self.notify, cfg.notify_endpoint)
        self.frontends = FrontendSockets(self.ctx, self.security, cfg.hwm, worker, self.core.live_requests_of)
        self.encoder = wire.new_encoder()
        self.decoder = wire.worker_inbound_decoder()
        self._last_warning: dict[str, float] = {}
        self._trim_at = 0.0  # when to give a burst's freed memory back (0: nothing to give)

    # ---- loop ---------------------------------------------------------------------------------
    def run(self) -> int:
        profile_dir = os.environ.get(PROFILE_ENV)
        if not profile_dir:
            return self._run()
        import cProfile  # where the time goes, per worker process (bench/pool.py --profile)

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(self._run)
        finally:
            profiler.dump_stats(os.path.join(profile_dir, f"worker-{self.worker}-{os.getpid()}.prof"))

    def _run(self) -> int:
        sweep_every = min(1.0, max(0.01, self.cfg.idle_timeout_s / 4))
        next_sweep = time.monotonic() + sweep_every
        next_beat = 0.0
        recv = self.input.recv
        self._report_status(time.monotonic())  # a replacement asks for its replay at once
        try:
            while not self.stop:
                if self.input.poll(POLL_MS):
                    for _ in range(_DRAIN_MAX):
                        try:
                            raw = recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._handle(raw)
                now = time.monotonic()
                if self._trim_at and now >= self._trim_at:
                    self._trim_at = 0.0
                    trim_heap(force=True)  # once per burst, when the queue is empty
                self._report_status(now)
                if now >= next_sweep:
                    self._send(self.core.sweep_idle(now))
                    self._close_idle_frontends()
                    next_sweep = now + sweep_every
                if self.heartbeat is not None and now >= next_beat:
                    self.heartbeat()
                    next_beat = now + HEARTBEAT_INTERVAL_S
                if self.metrics is not None:
                    self.metrics.maybe_flush(now, len(self.core.live))
            self._shutdown()
        except Exception:
            log.exception("worker %d: fatal error", self.worker)
            self._close()
            return 1
        return 0

    def _handle(self, raw: bytes) -> None:
        t0 = time.perf_counter()
        if len(raw) >= TRIM_AFTER_BYTES:
            self._trim_at = time.monotonic() + TRIM_DELAY_S
        try:
            msg = self.decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            # RecursionError: a tool schema (free JSON) nested past the decoder's depth
            self._malformed(f"undecodable message ({len(raw)} bytes): {e}")
            return
        try:
            if isinstance(msg, wire.DetokBatch):
                lag = time.time() - msg.sent_at
                outputs = self.core.handle_batch(msg)
                if self.metrics is not None:
                    self.metrics.queue_lag_seconds.observe(clamped_lag(lag))
                    self.metrics.batch_size.observe(len(msg.rids) // 8)  # packed uint64 rids
                    self.metrics.batch_seconds.observe(time.perf_counter() - t0)
            elif isinstance(msg, wire.Replay):
                rebuilding = self.core.awaiting_replay
                outputs = self.core.handle_replay(msg)
                if rebuilding and not self.core.awaiting_replay:
                    self._send(outputs)
                    self._recovered()
                    return
            else:
                outputs = self.core.handle_fail(msg)
        except MalformedBatch as e:
            self._malformed(f"malformed {type(msg).__name__}: {e}")
            return
        self._send(outputs)

    def _recovered(self) -> None:
        """The replay's deltas are out: the slot serves its shard again."""
        log.warning("worker %d: shard rebuilt from the scheduler client's replay", self.worker)
        if self._died_at and self.metrics is not None:
            self.metrics.recovery_seconds.observe(max(0.0, time.time() - self._died_at))
        self._report_status(time.monotonic())  # acknowledge at once

    def _report_status(self, now: float) -> None:
        if self.notify is None:
            return
        status = self.status.due(now, not self.core.awaiting_replay, self.core.last_seq)
        if status is not None:
            try:
                self.notify.send(self.encoder.encode(status), zmq.NOBLOCK)
            except zmq.Again:
                pass  # the client is not reading: it hears the next one

    def _malformed(self, what: str) -> None:
        self.core.counts.malformed_messages += 1
        self._warn("malformed", "worker %d: dropped %s", self.worker, what)

    # ---- output -------------------------------------------------------------------------------
    def _send(self, outputs: Outputs) -> None:
        encode = self.encoder.encode
        # The scheduler's notice first: a frontend that sees a finish should not learn of it
        # before the scheduler client does (a rid reused at once waits for that notice).
        if outputs.notice is not None and self.notify is not None:
            try:
                self.notify.send(encode(outputs.notice), zmq.NOBLOCK)
            except zmq.Again:
                self.core.counts.dropped_messages += 1
                self._warn("full:notify", "worker %d: scheduler notice queue full, StopNotice dropped", self.worker)
        for reply_to, batch in outputs.deltas:
            sock, error = self.frontends.get(reply_to)
            if sock is None:
                self.core.counts.dropped_messages += 1
                self._warn("bad:" + reply_to[:80], "worker %d: deltas for a frontend dropped: %s", self.worker, error)
                continue
            try:
                sock.send(encode(batch), zmq.NOBLOCK)
            except zmq.Again:
                self.core.counts.dropped_messages += 1
                self._warn("full:" + reply_to, "worker %d: frontend %s queue full, deltas dropped", self.worker, reply_to)

    def _admit_frontend(self, reply_to: str) -> str | None:
        """For a new registration: None if its frontend can be reached, else why not."""
        return self.frontends.get(reply_to)[1] or None

    def _close_idle_frontends(self) -> None:
        self.frontends.close_others(set(self.core.frontends()))

    def _warn(self, key: str, fmt: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last_warning.get(key, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._last_warning[key] = now
            log.warning(fmt, *args)

    # ---- shutdown -----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        """Handle what is already queued, then close. Live requests are finished with an error
        when nobody will rebuild them (the pool is closing or gone, or there is no scheduler
        client to replay them); a worker merely stopped by a signal leaves them to the next
        process of its slot, which gets them replayed."""
        log.info("worker %d: stopping (%s)", self.worker, self.stop.reason)
        while True:
            try:
                raw = self.input.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._handle(raw)
        replayable = (
            self.notify is not None
            and self.stop.reason in ("SIGTERM", "SIGINT")
            and not (self.cfg.parent_pid and orphaned(self.cfg.parent_pid))
        )
        if self.core.live and replayable:
            # (info: nothing is lost, and its supervisor says whether the exit was expected; a SIGTERM
            # to the whole process group, systemd's stop, reaches every worker as well)
            log.info("worker %d: %d live requests left to the slot's next process (replayed)", self.worker, len(self.core.live))
        elif self.core.live:
            self._send(self.core.finish_all(f"detok worker {self.worker} shut down ({self.stop.reason})"))
        self._close()

    def _close(self) -> None:
        if self.metrics is not None:
            self.metrics.flush(len(self.core.live))
        for sock in (self.input, self.notify):
            if sock is not None:
                sock.close()  # bounded linger (endpoints.LINGER_MS) lets the last deltas out
        self.frontends.close()
        self.security.close()
        self.ctx.term()


def clamped_lag(lag: float) -> float:
    """A batch's queue lag within [0, MAX_QUEUE_LAG_S]; NaN counts as 0."""
    if lag > MAX_QUEUE_LAG_S:
        return MAX_QUEUE_LAG_S
    return lag if lag > 0.0 else 0.0
