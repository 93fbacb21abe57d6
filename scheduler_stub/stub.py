"""The stand-in scheduler: admits requests, "generates" tokens step by step, hands them to the
detok workers through `SchedulerClient` exactly as a real scheduler would.

Each step: take frontend messages (GenerateRequest, Abort, AbortRange), take the client's stop notices
(stop strings and errors the workers found), admit waiting requests up to `max_batch` (their
registration goes with this step), draw `tokens_per_step` tokens for every running request, end
those that hit EOS / a stop token / max_tokens, send the step. Requests are served first come,
first served; a worker whose queue is full holds admission back until it drains.

Nothing a frontend sends stops the loop: a request the stub cannot run (`validation.py`) is
finished with an error at its frontend, and an unexpected error while handling one message or one
request's tokens fails that request only (and is logged).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable

import msgspec
import zmq

from detok import wire
from detok.scheduler.client import SchedulerClient
from detok.wire.to_scheduler import Abort, AbortRange, GenerateRequest
from detok.wire.to_workers import EndRequest
from detok.wire.security import SocketSecurity
from scheduler_stub.generation import RequestGeneration
from scheduler_stub.logprobs import step_logprobs
from scheduler_stub.rid_ranges import DeadRanges, range_error
from scheduler_stub.validation import request_error, rid_error
from scheduler_stub.workload import Workload

log = logging.getLogger("scheduler_stub")

_IDLE_POLL_S = 0.1  # how soon a stop is noticed while nothing is running


@dataclasses.dataclass(frozen=True)
class StepPolicy:
    step_interval_s: float = 0.02
    max_batch: int = 256
    tokens_per_step: int = 1
    # set: each request gets a random count in [tokens_per_step, max_tokens_per_step] each step,
    # drawn from its own seeded generator (the same request always gets the same counts)
    max_tokens_per_step: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens_per_step is not None and self.max_tokens_per_step < self.tokens_per_step:
            raise ValueError("max_tokens_per_step must be >= tokens_per_step")
        if self.step_interval_s < 0:
            raise ValueError("step_interval_s must be >= 0")
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.tokens_per_step < 1:
            raise ValueError("tokens_per_step must be >= 1")


@dataclasses.dataclass
class StubStats:
    steps: int = 0
    tokens: int = 0
    admitted: int = 0
    finished: int = 0
    aborted: int = 0
    stopped_by_workers: int = 0
    held_back_steps: int = 0  # steps that admitted nothing because a worker queue was full
    rejected: int = 0  # requests finished with an error by the stub (invalid, or failed while running)


class SchedulerStub:
    def __init__(
        self,
        client: SchedulerClient,
        workload: Workload,
        eos_ids: frozenset[int],
        policy: StepPolicy = StepPolicy(),
        end_id: int | None = None,
    ) -> None:
        """`end_id`: the id a request that runs out of text ends on (the primary eos id)."""
        self.client = client
        self.workload = workload
        self.eos_ids = eos_ids
        self.end_id = end_id
        self.policy = policy
        self.waiting: collections.deque[GenerateRequest] = collections.deque()
        self._waiting_rids: set[int] = set()
        self.running: dict[int, RequestGeneration] = {}
        self._logprobs: dict[int, tuple[int, int]] = {}  # running rids that asked: (seed, k)
        self.stats = StubStats()
        self._full_workers: list[int] = []
        self.dead_ranges = DeadRanges()  # rid spaces of frontends that died lately

    # ---- requests in ------------------------------------------------------------------------------
    def submit(self, request: GenerateRequest) -> None:
        error = request_error(request)
        if error is not None:
            self.reject(request.rid, request.reply_to, f"the scheduler rejected the request: {error}")
            return
        if self.dead_ranges.holds(request.rid):  # its frontend died after sending it: no one waits
            self._count_finished(aborted=True)
            return
        if request.rid in self.running or request.rid in self._waiting_rids:
            log.warning("ignoring a second request with rid %d", request.rid)
            return
        self.waiting.append(request)
        self._waiting_rids.add(request.rid)

    def abort(self, rid: int) -> None:
        self._logprobs.pop(rid, None)
        if self.running.pop(rid, None) is not None:
            # counted before the worker hears of it: the request's end reaches its frontend from
            # the worker, and who saw that end may read these stats at once (a test did, and raced)
            self._count_finished(aborted=True)
            self.client.abort(rid)  # tells the worker now, so it frees the request
            return
        if rid in self._waiting_rids:
            self._waiting_rids.discard(rid)
            self.waiting.remove(next(r for r in self.waiting if r.rid == rid))
            self._count_finished(aborted=True)  # never registered: nothing to tell the worker

    def abort_range(self, first: int, end: int) -> int:
        """Abort every rid in [first, end) (a dead frontend's), and refuse the range's requests
        still on their way for a while (`DeadRanges`). Returns how many were aborted."""
        self.dead_ranges.add(first, end)
        running = [rid for rid in self.running if first <= rid < end]
        for rid in running:  # the workers are told in one flush, not one message per rid
            del self.running[rid]
            self._logprobs.pop(rid, None)
            self.client.end(rid, "abort")
            self._count_finished(aborted=True)
        if running:
            self.client.flush()
        kept = [r for r in self.waiting if not first <= r.rid < end]
        waiting = len(self.waiting) - len(kept)
        if waiting:  # never registered: nothing to tell the workers (one pass, not one per rid)
            self.waiting.clear()
            self.waiting.extend(kept)
            self._waiting_rids = {r.rid for r in kept}
            for _ in range(waiting):
                self._count_finished(aborted=True)
        return len(running) + waiting

    def handle(self, message: GenerateRequest | Abort | AbortRange) -> None:
        try:
            if isinstance(message, GenerateRequest):
                self.submit(message)
            elif isinstance(message, AbortRange):
                error = range_error(message)
                if error is None:
                    log.info("aborted %d requests of rids [%#x, %#x)", self.abort_range(message.first, message.end),
                             message.first, message.end)
                else:
                    log.warning("ignored an abort of a rid range: %s", error)
            elif rid_error(message.rid) is None:
                self.abort(message.rid)
        except Exception as e:  # noqa: BLE001 - one message must never stop the scheduler
            log.exception("scheduler stub: handling a %s failed", type(message).__name__)
            if isinstance(message, GenerateRequest):
                self._waiting_rids.discard(message.rid)
                self.reject(message.rid, message.reply_to, f"the scheduler failed the request: {type(e).__name__}: {e}")

    def reject(self, rid: int, reply_to: str, message: str) -> None:
        """Finish a request with an error at its frontend (best effort: a rid or endpoint that
        cannot even travel on the wire is only logged)."""
        self.stats.rejected += 1
        log.warning("rid %s: %s", rid, message)
        try:
            self.client.fail(rid, message, reply_to)
        except Exception as e:  # noqa: BLE001
            log.warning("could not tell the frontend of rid %s: %s", rid, e)

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # ---- one step ---------------------------------------------------------------------------------
    def step(self) -> int:
        """One scheduler step; returns how many requests got tokens."""
        for stopped in self.client.poll():
            self._logprobs.pop(stopped.rid, None)
            if self.running.pop(stopped.rid, None) is not None:
                self.stats.stopped_by_workers += 1
                self._count_finished()
        self._admit()
        if not self.running:
            if self._full_workers:
                self._full_workers = self.client.flush()
            return 0
        rids: list[int] = []
        starts: list[int] = []
        counts: list[int] = []
        tokens: list[int] = []
        ends: list[EndRequest] = []
        per_step = self.policy.tokens_per_step
        top = self.policy.max_tokens_per_step
        failed: list[tuple[int, Exception]] = []
        for rid, gen in self.running.items():
            try:
                got, end = gen.next_tokens(per_step if top is None else gen.draw_count(per_step, top))
            except Exception as e:  # noqa: BLE001 - this request's error, not the step's
                failed.append((rid, e))
                continue
            if got:
                rids.append(rid)
                starts.append(gen.generated - len(got))  # index of got[0] in the output
                counts.append(len(got))
                tokens.extend(got)
            if end is not None:
                ends.append(end)
        logprobs = None
        if self._logprobs:  # requests that asked for logprobs get them with their tokens
            logprobs = step_logprobs(rids, starts, counts, tokens, self._logprobs, self.workload.vocab_size)
        for end in ends:
            del self.running[end.rid]
            self._logprobs.pop(end.rid, None)
            self._count_finished()
        for rid, e in failed:
            gen = self.running.pop(rid)
            self._count_finished()
            self.reject(rid, gen.request.reply_to, f"the scheduler failed the request: {type(e).__name__}: {e}")
        self._full_workers = self.client.send_step(
            rids, tokens, None if per_step == 1 and top is None else counts, starts=starts, ends=ends, logprobs=logprobs
        )
        self.stats.steps += 1
        self.stats.tokens += len(tokens)
        return len(rids)

    def _admit(self) -> None:
        if self._full_workers:
            self.stats.held_back_steps += 1
            return
        room = self.policy.max_batch - len(self.running)
        while room > 0 and self.waiting:
            request = self.waiting.popleft()
            self._waiting_rids.discard(request.rid)
            self.client.add_request(request)
            self.running[request.rid] = RequestGeneration(request, self.workload, self.eos_ids, self.end_id)
            if request.logprobs is not None and request.logprobs >= 0:
                self._logprobs[request.rid] = (request.seed or 0, request.logprobs)
            self.stats.admitted += 1
            room -= 1

    def _count_finished(self, aborted: bool = False) -> None:
        self.stats.finished += 1
        self.stats.aborted += aborted


class RequestInbox:
    """The PULL socket frontends send GenerateRequest / Abort / AbortRange to (bound by the scheduler)."""

    def __init__(self, ctx: zmq.Context, endpoint: str, hwm: int = 100_000, security: SocketSecurity | None = None) -> None:
        """`security`: CURVE keys for a tcp endpoint (a tcp endpoint without them is refused
        unless it is explicitly insecure; see detok.wire.security)."""
        from detok.wire.endpoints import bound_endpoint, connectable, make_socket

        self.security = security or SocketSecurity()
        self.security.check(endpoint)
        self.socket = make_socket(ctx, zmq.PULL, hwm=hwm)
        try:
            self.security.bind(self.socket, endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self.endpoint = connectable(bound_endpoint(self.socket))
        self._decoder = wire.scheduler_request_decoder()
        self.malformed = 0

    def drain(self, stub: SchedulerStub, limit: int = 10_000) -> int:
        handled = 0
        while handled < limit:
            try:
                raw = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            handled += 1
            try:
                message = self._decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:  # (a schema nested too deep)
                self.malformed += 1
                log.warning("dropped a malformed frontend message (%d bytes): %s", len(raw), e)
                continue
            stub.handle(message)
        return handled

    def close(self) -> None:
        self.socket.close()
        self.security.close()


def run_loop(stub: SchedulerStub, inbox: RequestInbox, should_stop: Callable[[], bool]) -> None:
    """Step at the policy's interval while there is work; sleep on the inbox while there is none."""
    interval = stub.policy.step_interval_s
    next_step = time.monotonic()
    while not should_stop():
        inbox.drain(stub)
        if stub.idle:
            inbox.socket.poll(int(_IDLE_POLL_S * 1000))
            stub.client.poll()  # keep notices flowing (worker events) while idle
            next_step = time.monotonic()
            continue
        now = time.monotonic()
        if now < next_step:
            # wait for the step time, but take frontend messages (aborts) as they come
            inbox.socket.poll(max(1, int((next_step - now) * 1000)))
            continue
        try:
            stub.step()
        except Exception:  # a step's own failure (e.g. a socket error) is logged; the loop goes on
            log.exception("scheduler stub: a step failed")
        # a step that ran late does not make the next ones come faster (no catch-up bursts)
        next_step = max(next_step + interval, time.monotonic())
