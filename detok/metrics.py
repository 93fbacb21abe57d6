"""Prometheus metrics (docs/operations.md, "Metrics") in multiprocess mode.

Every process writes its samples to files in one directory, `PROMETHEUS_MULTIPROC_DIR`; the
frontend serves them all at `/metrics` with `render_metrics()`. prometheus_client chooses its
multiprocess value store when it is first imported, so a process must call `use_metrics_dir()`
before anything imports prometheus_client; this module imports it lazily for that reason.

Workers keep counts and histogram observations in plain ints and hand them to prometheus at most
every `FLUSH_INTERVAL_S` (an `inc` or `observe` in multiprocess mode is a locked write to an mmap'd
file; per token it would cost more than the decoding, per batch still a visible share).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from prometheus_client import Counter

ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
FLUSH_INTERVAL_S: Final = 0.25
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_BATCH_SIZE_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_FAST_SECONDS_BUCKETS: Final = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0,
)
_RECOVERY_SECONDS_BUCKETS: Final = (
    0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0,
)
_REQUEST_SECONDS_BUCKETS: Final = (
    1e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)


def use_metrics_dir(path: str | os.PathLike[str]) -> None:
    """Make this process write multiprocess metrics to `path` (call before prometheus is imported)."""
    os.makedirs(path, exist_ok=True)
    os.environ[ENV] = str(path)


def metrics_dir() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def mark_process_dead(pid: int, path: str | os.PathLike[str] | None = None) -> None:
    """Drop a dead process's live gauges (its counters and histograms keep counting)."""
    directory = path or os.environ.get(ENV)
    if directory:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(directory))


def render_metrics(path: str | os.PathLike[str] | None = None) -> bytes:
    """The samples of all processes in the metrics directory, in the Prometheus text format."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    directory = path or os.environ.get(ENV)
    if not directory:
        raise RuntimeError(f"no metrics directory: set {ENV} (the pool sets it for its workers)")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    return generate_latest(registry)


# ---------------------------------------------------------------------------------------------
# worker side
# ---------------------------------------------------------------------------------------------
class BatchedHistogram:
    """Observations kept in plain ints and added to a prometheus histogram child at `flush`.

    A multiprocess `observe` is two locked mmap writes; a worker observes three
    histograms per batch, thousands of batches a second. Here an observation is a bisect and two
    additions; `flush` adds each bucket's count at once, through the child's own value objects
    (prometheus_client keeps per-bucket, non-cumulative counts and a sum: the same numbers
    `observe` would have written)."""

    def __init__(self, child: Any) -> None:
        self._child = child
        self._bounds: list[float] = list(child._upper_bounds)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._pending = False

    def observe(self, value: float) -> None:
        self._sum += value
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._pending = True

    def flush(self) -> None:
        if not self._pending:
            return
        self._child._sum.inc(self._sum)
        for i, count in enumerate(self._counts):
            if count:
                self._child._buckets[i].inc(count)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._pending = False

@dataclass
class WorkerCounts:
    """What a worker counted since the last flush (plain ints: the hot path only adds)."""

    tokens: int = 0
    utf8_holds: int = 0
    invalid_token_ids: int = 0
    malformed_messages: int = 0
    unknown_rids: int = 0
    late_tokens: int = 0
    dropped_messages: int = 0
    idle_timeouts: int = 0
    registrations: int = 0
    duplicate_registrations: int = 0
    replays: int = 0  # replays that rebuilt this process's shard
    replayed_requests: int = 0
    replayed_tokens: int = 0
    replay_dropped_batches: int = 0  # token batches dropped while waiting for a replay
    stale_replays: int = 0  # replays meant for an earlier process of the slot
    finished: dict[str, int] = field(default_factory=dict)  # by finish reason
    stops: dict[str, int] = field(default_factory=dict)  # by kind: token | string

    def take(self) -> WorkerCounts:
        """A copy of the counts, which are reset in place (the worker core holds this object)."""
        snapshot = dataclasses.replace(self)
        for f in dataclasses.fields(self):
            setattr(self, f.name, {} if f.name in ("finished", "stops") else 0)
        return snapshot


class WorkerMetrics:
    """Prometheus metrics of one worker slot (label `worker`)."""

    def __init__(self, worker: int) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        w = str(worker)
        self.counts = WorkerCounts()
        self._last_flush = time.monotonic()

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, ["worker", *labels], registry=None)

        self._tokens = counter("detok_worker_tokens_total", "Token ids decoded").labels(w)
        self._registrations = counter("detok_worker_requests_total", "Requests registered").labels(w)
        self._finished = counter("detok_worker_requests_finished_total", "Requests finished, by reason", "reason")
        self._holds = counter(
            "detok_worker_utf8_holds_total", "Steps whose text ended on an incomplete UTF-8 sequence (held back)"
        ).labels(w)
        self._stops = counter("detok_worker_stops_total", "Stops detected by the worker, by kind", "kind")
        self._invalid = counter("detok_worker_invalid_token_ids_total", "Requests ended by an out-of-vocabulary id").labels(w)
        self._malformed = counter("detok_worker_malformed_messages_total", "Messages that failed to decode or validate").labels(w)
        self._unknown = counter("detok_worker_unknown_rids_total", "Token batches or ends for rids never registered").labels(w)
        self._late = counter("detok_worker_late_tokens_total", "Tokens for requests already finished (ignored)").labels(w)
        self._dropped = counter(
            "detok_worker_dropped_messages_total", "Messages dropped because a peer's queue was full"
        ).labels(w)
        self._idle = counter("detok_worker_idle_timeouts_total", "Requests finished by the idle timeout").labels(w)
        self._duplicates = counter(
            "detok_worker_duplicate_registrations_total", "Registrations of a rid already live"
        ).labels(w)
        self._restarts = counter("detok_worker_restarts_total", "Worker process restarts").labels(w)
        self._replays = counter("detok_worker_replays_total", "Replays that rebuilt a worker process's shard").labels(w)
        self._replayed_requests = counter(
            "detok_worker_replayed_requests_total", "Requests rebuilt from a replay"
        ).labels(w)
        self._replayed_tokens = counter("detok_worker_replayed_tokens_total", "Token ids decoded again in replays").labels(w)
        self._replay_dropped = counter(
            "detok_worker_replay_dropped_batches_total",
            "Token batches a process dropped while waiting for its replay (their ids come in the replay)",
        ).labels(w)
        self.recovery_seconds = Histogram(
            "detok_worker_recovery_seconds",
            "Previous process of the slot seen dead -> first replayed deltas sent",
            ["worker"], buckets=_RECOVERY_SECONDS_BUCKETS, registry=None,
        ).labels(w)
        self._live = Gauge(
            "detok_worker_live_requests", "Requests held by the worker", ["worker"], registry=None,
            multiprocess_mode="livesum",
        ).labels(w)
        self.batch_size = BatchedHistogram(Histogram(
            "detok_worker_batch_size", "Rids per batch", ["worker"], buckets=_BATCH_SIZE_BUCKETS, registry=None
        ).labels(w))
        self.batch_seconds = BatchedHistogram(Histogram(
            "detok_worker_batch_seconds", "Time to process one batch", ["worker"], buckets=_FAST_SECONDS_BUCKETS,
            registry=None,
        ).labels(w))
        self.queue_lag_seconds = BatchedHistogram(Histogram(
            "detok_worker_queue_lag_seconds", "Age of a batch (since the scheduler sent it) when the worker starts it",
            ["worker"], buckets=_FAST_SECONDS_BUCKETS, registry=None,
        ).labels(w))
        self._worker = w

    def restarted(self) -> None:
        self._restarts.inc()

    def maybe_flush(self, now: float, live: int) -> None:
        if now - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush(live)
            self._last_flush = now

    def flush(self, live: int) -> None:
        c = self.counts.take()
        pairs: tuple[tuple[Any, int], ...] = (
            (self._tokens, c.tokens),
            (self._registrations, c.registrations),
            (self._holds, c.utf8_holds),
            (self._invalid, c.invalid_token_ids),
            (self._malformed, c.malformed_messages),
            (self._unknown, c.unknown_rids),
            (self._late, c.late_tokens),
            (self._dropped, c.dropped_messages),
            (self._idle, c.idle_timeouts),
            (self._duplicates, c.duplicate_registrations),
            (self._replays, c.replays),
            (self._replayed_requests, c.replayed_requests),
            (self._replayed_tokens, c.replayed_tokens),
            (self._replay_dropped, c.replay_dropped_batches),
        )
        for metric, value in pairs:
            if value:
                metric.inc(value)
        for reason, value in c.finished.items():
            self._finished.labels(self._worker, reason).inc(value)
        for kind, value in c.stops.items():
            self._stops.labels(self._worker, kind).inc(value)
        for histogram in (self.batch_size, self.batch_seconds, self.queue_lag_seconds):
            histogram.flush()
        self._live.set(live)


class PoolMetrics:
    """The pool supervisor's view of its slots (label `worker`), written by the pool's own process.

    Recorded only when that process writes multiprocess metrics (`use_metrics_dir` before
    prometheus_client was imported, as `detok serve` does); `if_enabled` gives None otherwise."""

    def __init__(self, workers: int) -> None:
        from prometheus_client import Counter, Gauge

        self._stalled = Gauge(
            "detok_worker_stalled", "1 while the worker's process misses its heartbeats (stuck loop, SIGSTOP)",
            ["worker"], registry=None, multiprocess_mode="livemax",
        )
        self._replaced = Counter(
            "detok_worker_stall_replacements_total", "Stalled worker processes killed and replaced", ["worker"],
            registry=None,
        )
        for w in range(workers):  # every slot's series exists from the start, at 0
            self._stalled.labels(str(w)).set(0)
            self._replaced.labels(str(w))

    @classmethod
    def if_enabled(cls, workers: int) -> PoolMetrics | None:
        if not os.environ.get(ENV):
            return None
        from prometheus_client import values

        if not getattr(values.ValueClass, "_multiprocess", False):
            return None  # prometheus_client was imported before the directory was set: in-memory only
        return cls(workers)

    def stalled(self, worker: int, stalled: bool) -> None:
        self._stalled.labels(str(worker)).set(1 if stalled else 0)

    def replaced(self, worker: int) -> None:
        self._replaced.labels(str(worker)).inc()


# ---------------------------------------------------------------------------------------------
# frontend side (recorded by the frontend, defined here so names stay in one place)
# ---------------------------------------------------------------------------------------------
class FrontendMetrics:
    """Time to first token, inter-token latency and end-to-end latency, per the frontend."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.time_to_first_token_seconds = Histogram(
            "detok_time_to_first_token_seconds", "Request arrival to first text delta",
            buckets=_REQUEST_SECONDS_BUCKETS, registry=None,
        )
        self.inter_token_latency_seconds = Histogram(
            "detok_inter_token_latency_seconds", "Time between consecutive text deltas of a request",
            buckets=_FAST_SECONDS_BUCKETS, registry=None,
        )
        self.e2e_request_latency_seconds = Histogram(
            "detok_e2e_request_latency_seconds", "Request arrival to its finish",
            buckets=_REQUEST_SECONDS_BUCKETS, registry=None,
        )
        self.requests_finished = Counter(
            "detok_frontend_requests_finished_total", "Requests finished, by reason", ["reason"], registry=None
        )


_frontend_metrics: FrontendMetrics | None = None


def frontend_metrics() -> FrontendMetrics:
    """The process's frontend metrics (created once; call `use_metrics_dir` first)."""
    global _frontend_metrics
    if _frontend_metrics is None:
        _frontend_metrics = FrontendMetrics()
    return _frontend_metrics
