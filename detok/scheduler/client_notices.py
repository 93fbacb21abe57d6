"""The scheduler client's side of the workers' notices and of replays (`WorkerNotices`, which
`SchedulerClient` holds): stop notices applied to the registration they name, worker status
(acknowledgements, "replay my shard"), and the replay of a shard to a new worker process."""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

import zmq

from detok import wire
from detok.scheduler.notices import Staged, Stopped, WorkerState
from detok.scheduler.replay_book import ReplayBook, Tracked
from detok.scheduler.replay_journal import EMPTY
from detok.scheduler.worker_queues import WorkerQueues
from detok.wire.params import Finish
from detok.wire.to_workers import EndRequest

log = logging.getLogger("detok.client")

# A worker that reports `synced=False` gets at most one replay per this interval (its status
# messages repeat until one arrives).
REPLAY_RETRY_S = 0.5
# send_step / flush take pending notices (replay requests, acknowledgements) at most this often;
# poll() always does.
NOTICE_CHECK_S = 0.001


class WorkerNotices:
    """The workers' notices as the client takes them (`poll`), the workers' states, and replays.
    It reads and updates the client's replay book and staged messages, and sends on its queues."""

    def __init__(self, workers: int, notify: zmq.Socket | None, book: ReplayBook, queues: WorkerQueues,
                 staged: Staged, encoder: Any) -> None:
        self._n = workers
        self._notify = notify
        self._book = book
        self._live: dict[int, Tracked] = book.live
        self._queues = queues
        self._staged = staged
        self._encoder = encoder
        self._decoder = wire.scheduler_notice_decoder()
        self._stopped: list[Stopped] = []
        self._states = [WorkerState(w, 0, True, 0, 0.0, False, 0) for w in range(workers)]
        self._replayed_at = [0.0] * workers
        self._notices_at = float("-inf")
        self.events: collections.deque[wire.WorkerEvent] = collections.deque(maxlen=1000)
        self.replays_sent = 0
        self.replayed_tokens = 0

    # ---- notices --------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> list[Stopped]:
        """Requests the detok side finished since the last call (stop strings and stop tokens the
        worker saw, errors). Waits up to `timeout` seconds for the first notice; never longer.
        Also answers workers that wait for a replay."""
        sock = self._notify
        if sock is not None and not self._stopped and timeout > 0:
            sock.poll(int(timeout * 1000))
        self.take()
        out, self._stopped = self._stopped, []
        return out

    def wait_for_workers(self, timeout: float) -> bool:
        """Wait until every worker was heard since this call (its notice connection is up); True if
        all were within `timeout` seconds. A client that binds after the workers started is reached
        only at their next reconnect (they back off up to RECONNECT_MAX_MS), so a scheduler that
        needs stop notices from its very first step waits here once."""
        if self._notify is None:
            return False
        since = time.monotonic()
        deadline = since + timeout
        while any(s.last_heard < since for s in self._states):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._notify.poll(max(1, int(min(left, 0.05) * 1000)))
            self.take()
        return True

    def worker_states(self) -> list[WorkerState]:
        """What the client knows of each worker (liveness for standalone workers: `last_heard`)."""
        return list(self._states)

    def forget_stopped(self, rid: int) -> None:
        """Drop the not yet polled Stopped of `rid` (the scheduler registers the rid again)."""
        self._stopped = [s for s in self._stopped if s.rid != rid]

    def take_soon(self) -> None:
        """Notices from the step path, at most every NOTICE_CHECK_S (an empty non-blocking receive
        costs microseconds: per step at full speed, and in a full-queue retry loop, that adds up)."""
        now = time.monotonic()
        if now - self._notices_at >= NOTICE_CHECK_S:
            self.take(now)

    def take(self, now: float | None = None) -> None:
        """Apply every notice waiting on the socket."""
        self._notices_at = time.monotonic() if now is None else now
        sock = self._notify
        if sock is None:
            return
        # EVENTS before each receive: an empty non-blocking receive raises zmq.Again, which
        # pyzmq builds at a cost of tens of microseconds
        while sock.get(zmq.EVENTS) & zmq.POLLIN:
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                self._on_notice(self._decoder.decode(raw))
            except Exception as e:  # noqa: BLE001 - a bad notice must not take the scheduler down
                log.warning("dropped a malformed scheduler notice: %s", e)
        self._book.prune(time.monotonic())

    def _on_notice(self, msg: Any) -> None:
        if not 0 <= msg.worker < self._n:
            log.warning("dropped a notice naming worker %d of %d", msg.worker, self._n)
            return
        if isinstance(msg, wire.WorkerStatus):
            self._on_status(msg)
        elif isinstance(msg, wire.StopNotice):
            self._on_stop_notice(msg)
        else:
            self.events.append(msg)
            # "died": nothing to do but wait - the slot's next process asks for its replay
            self._states[msg.worker] = self._states[msg.worker]._replace(down=msg.kind == "died")

    def _on_status(self, msg: wire.WorkerStatus) -> None:
        w = msg.worker
        now = time.monotonic()
        before = self._states[w]
        self._states[w] = before._replace(
            instance=msg.instance, synced=msg.synced, last_heard=now, down=False,
            acked_seq=msg.seq if msg.synced else before.acked_seq,
        )
        if not msg.synced:
            if msg.instance != before.instance or now - self._replayed_at[w] >= REPLAY_RETRY_S:
                self.send_replay(w, msg.instance, f"worker {w} process {msg.pid} asked for its shard")
            return
        self._book.acknowledged(w, msg.seq, now)

    def _on_stop_notice(self, msg: wire.StopNotice) -> None:
        gens = msg.gens if len(msg.gens) == len(msg.rids) else [0] * len(msg.rids)
        for rid, finish, gen in zip(msg.rids, msg.finishes, gens):
            tracked = self._book.stopped(rid, gen, self._staged.seq[msg.worker], msg.seq)
            if tracked is not None:
                self._stopped.append(Stopped(rid, finish))
                if finish.reason == "error":
                    # a replay cannot derive this finish (idle timeout, refused frontend...): it
                    # is replayed as an end, so a new process finishes the request the same way
                    tracked.end = EndRequest(rid, "error", None, finish.message)
        live = self._live
        # (a notice from before a rid's registration reached the worker is about an earlier request)
        lost = [self._book.forget(r) for r in msg.unknown_rids if r in live and self._book.is_current(live[r], 0, msg.seq)]
        if lost:
            # A worker that serves without the registration of a live request (never after a
            # replay, which carries every registration): the frontend is told through it.
            message = f"detok worker {msg.worker} has no registration for this request"
            log.warning("failing %d requests of detok worker %d: %s", len(lost), msg.worker, message)
            rids = [t.registration.rid for t in lost]
            self._queues.send(msg.worker, self._encoder.encode(wire.FailRequests(rids, [t.reply_to for t in lost], message)))
            self._stopped.extend(Stopped(rid, Finish("error", None, message)) for rid in rids)

    # ---- replay ---------------------------------------------------------------------------------
    def send_replay(self, w: int, instance: int, reason: str) -> None:
        """Everything worker `w`'s shard needs, to the process `instance` (0: any process)."""
        self._replayed_at[w] = time.monotonic()
        registrations, columns, ends = self._book.shard(w)
        # staged registrations and ends not sent yet go in the replay, not after it
        named = {reg.rid for reg in registrations}
        new, staged_ends, seq = self._staged.take(w)
        registrations += [reg for reg in new if reg.rid not in named]
        ends += [e for e in staged_ends if e not in ends]
        self._book.track_ends(w, seq, ends)
        c = columns or EMPTY
        batch = wire.DetokBatch(seq, time.time(), registrations, c.rids, c.starts, c.counts, c.tokens, ends, c.logprobs)
        self._queues.send(w, self._encoder.encode(wire.Replay(instance, batch, reason)))
        if instance:
            self.replays_sent += 1
            self.replayed_tokens += len(c.tokens) // 4
            state = self._states[w]
            self._states[w] = state._replace(replays=state.replays + 1)
            # a process starting with nothing to rebuild is normal; one that loses requests is not
            (log.warning if registrations else log.info)("replaying %d requests (%d token ids) to detok worker %d: %s",
                        len(registrations), len(c.tokens) // 4, w, reason)

