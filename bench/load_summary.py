"""`bench/load.py`'s samples (one per request) and their summary per load point: throughput,
TTFT / ITL / end-to-end percentiles, and the server's own latency means from its /metrics."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import msgspec
import numpy as np


class _Sample(msgspec.Struct):
    ok: bool
    ttft: float = 0.0
    e2e: float = 0.0
    itls: list[float] = msgspec.field(default_factory=list)
    output_tokens: int = 0
    error: str = ""
    resent: bool = False  # sent twice: the server closed the kept-alive connection under it


@dataclasses.dataclass
class PointResult:
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    requests_per_s: float
    output_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    e2e_p50_ms: float
    first_error: str = ""
    resent: int = 0  # requests sent again on a new connection (the server dropped a kept-alive one)
    # the server's own view (its /metrics histograms, means over the point), when it exports them:
    # the difference to the client's figures is HTTP and the load generator itself
    server_ttft_mean_ms: float | None = None
    server_itl_mean_ms: float | None = None
    text_chunks: int = 0  # text-bearing SSE chunks the clients received (ok requests)

    def line(self) -> str:
        return (
            f"c={self.concurrency:<4d} {self.requests_per_s:8.1f} req/s {self.output_tokens_per_s:10.0f} tok/s  "
            f"TTFT p50 {self.ttft_p50_ms:7.1f} ms p99 {self.ttft_p99_ms:7.1f} ms  "
            f"ITL p50 {self.itl_p50_ms:6.1f} ms p99 {self.itl_p99_ms:6.1f} ms  "
            f"({self.requests} requests, {self.errors} errors{f', {self.resent} resent' if self.resent else ''})"
            + (
                f"  server: TTFT {self.server_ttft_mean_ms:.1f} ms ITL {self.server_itl_mean_ms:.1f} ms (means)"
                if self.server_ttft_mean_ms is not None and self.server_itl_mean_ms is not None
                else ""
            )
        )


def _ms_percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if len(values) else float("nan")


_SERVER_HISTOGRAMS = {
    "server_ttft_mean_ms": "detok_time_to_first_token_seconds",
    "server_itl_mean_ms": "detok_inter_token_latency_seconds",
}


def _server_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    means = {}
    for field, (total, count) in after.items():
        prev_total, prev_count = before.get(field, (0.0, 0.0))
        if count > prev_count:
            means[field] = (total - prev_total) / (count - prev_count) * 1000.0
    return means


def summarize(concurrency: int, elapsed: float, samples: Sequence[_Sample]) -> PointResult:
    ok = [s for s in samples if s.ok]
    errors = [s for s in samples if not s.ok]
    itls = [x for s in ok for x in s.itls]
    return PointResult(
        concurrency=concurrency,
        duration_s=round(elapsed, 3),
        requests=len(ok),
        errors=len(errors),
        requests_per_s=len(ok) / elapsed if elapsed else 0.0,
        output_tokens_per_s=sum(s.output_tokens for s in ok) / elapsed if elapsed else 0.0,
        ttft_p50_ms=_ms_percentile([s.ttft for s in ok], 50),
        ttft_p99_ms=_ms_percentile([s.ttft for s in ok], 99),
        itl_p50_ms=_ms_percentile(itls, 50),
        itl_p99_ms=_ms_percentile(itls, 99),
        e2e_p50_ms=_ms_percentile([s.e2e for s in ok], 50),
        first_error=errors[0].error if errors else "",
        resent=sum(s.resent for s in samples),
        text_chunks=sum(len(s.itls) + 1 for s in ok if s.output_tokens),
    )
