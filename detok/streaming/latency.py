"""The frontend's latency histograms, recorded per text delta without costing a metrics write each.

In prometheus_client's multiprocess mode one `Histogram.observe` is two mmap'd file
writes, per text delta a large share of the frontend's CPU under load. Observations are therefore kept as
plain per-bucket counts and handed to prometheus in bulk by `flush()`, a few times a second, which
`/metrics` readers see as at most one flush interval of delay. Histograms lacking the attributes
this relies on (a different prometheus_client) are observed one value at a time instead.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import Any

from detok.metrics import FrontendMetrics

try:  # the per-chunk clock in C (optional: the Python form below otherwise)
    from detok._native._latency import Buckets as _Buckets
    from detok._native._latency import TokenClock as _TokenClock
except ImportError:  # pragma: no cover - a build without its C extensions
    _Buckets = _TokenClock = None
if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":  # pragma: no cover
    _Buckets = _TokenClock = None  # (the compiled clock reads CLOCK_MONOTONIC; arrivals are perf_counter's)


class BatchedHistogram:
    def __init__(self, histogram: Any, compiled: bool = True) -> None:
        self._histogram = histogram
        self._bulk = all(hasattr(histogram, a) for a in ("_upper_bounds", "_buckets", "_sum"))
        self._bounds: list[float] = list(histogram._upper_bounds) if self._bulk else []
        self._counts = [0] * len(self._bounds)
        self._total = 0.0
        # the counts kept in C (a RequestTimer's compiled clock ticks into them), where built
        self.buckets: Any = _Buckets(self._bounds) if compiled and self._bulk and _Buckets is not None else None
        if self.buckets is not None:
            self.observe = self.buckets.observe  # type: ignore[method-assign]

    def observe(self, value: float) -> None:
        if not self._bulk:
            self._histogram.observe(value)
            return
        # prometheus puts a value in the first bucket whose upper bound is >= it (the last is +Inf)
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._total += value

    def flush(self) -> None:
        if not self._bulk:
            return
        if self.buckets is not None:
            self._counts, self._total = self.buckets.take()
        for i, count in enumerate(self._counts):
            if count:
                self._histogram._buckets[i].inc(count)
                self._counts[i] = 0
        if self._total:
            self._histogram._sum.inc(self._total)
            self._total = 0.0


class LatencyRecorder:
    """Time to first token, inter-token latency (between text-bearing deltas), end-to-end."""

    def __init__(self, metrics: FrontendMetrics) -> None:
        self._metrics = metrics
        self.ttft = BatchedHistogram(metrics.time_to_first_token_seconds)
        self.itl = BatchedHistogram(metrics.inter_token_latency_seconds)
        self.e2e = BatchedHistogram(metrics.e2e_request_latency_seconds)

    def finished(self, reason: str) -> None:
        self._metrics.requests_finished.labels(reason).inc()

    def flush(self) -> None:
        self.ttft.flush()
        self.itl.flush()
        self.e2e.flush()


class RequestTimer:
    """One request's clock: feeds a LatencyRecorder (or nothing, without metrics). `text()` at
    each text-bearing chunk (the compiled TokenClock's where the recorder's histograms keep
    their counts in C)."""

    __slots__ = ("_recorder", "_arrival", "_last", "text")

    def __init__(self, recorder: LatencyRecorder | None, arrival: float) -> None:
        self._recorder = recorder
        self._arrival = arrival
        self._last: float | None = None
        self.text: Callable[[], None] = self._text
        if recorder is not None and recorder.ttft.buckets is not None and recorder.itl.buckets is not None:
            self.text = _TokenClock(recorder.ttft.buckets, recorder.itl.buckets, arrival).text

    def _text(self) -> None:
        if self._recorder is None:
            return
        now = time.perf_counter()
        if self._last is None:
            self._recorder.ttft.observe(now - self._arrival)
        else:
            self._recorder.itl.observe(now - self._last)
        self._last = now

    def finish(self, reason: str) -> None:
        if self._recorder is not None:
            self._recorder.e2e.observe(time.perf_counter() - self._arrival)
            self._recorder.finished(reason)
