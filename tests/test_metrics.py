"""Metrics in prometheus multiprocess mode: samples written by several processes are rendered
together. prometheus_client picks its value store at import, so each writer is a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from detok.metrics import render_metrics

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parent.parent

WRITER = """
import sys
from detok.metrics import use_metrics_dir
use_metrics_dir(sys.argv[1])
from detok.metrics import WorkerMetrics, frontend_metrics
m = WorkerMetrics(int(sys.argv[2]))
c = m.counts
c.tokens += 1000
c.utf8_holds += 3
c.invalid_token_ids += 1
c.malformed_messages += 2
c.stops["string"] = 4
c.finished["length"] = 7
m.batch_size.observe(256)
m.batch_seconds.observe(0.0004)
m.batch_seconds.observe(0.003)
m.queue_lag_seconds.observe(0.0001)
m.restarted()
m.flush(live=5)
assert c.tokens == 0 and c.stops == {}  # reset in place: the worker core keeps this object
f = frontend_metrics()
f.time_to_first_token_seconds.observe(0.02)
f.inter_token_latency_seconds.observe(0.001)
f.e2e_request_latency_seconds.observe(1.5)
f.requests_finished.labels("stop").inc()
"""


def _write(directory: Path, worker: int) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(WRITER), str(directory), str(worker)], check=True, cwd=REPO, timeout=30)


def test_samples_of_several_processes_are_rendered_together(tmp_path: Path) -> None:
    _write(tmp_path, 0)
    _write(tmp_path, 1)
    text = render_metrics(tmp_path).decode()
    for line in (
        'detok_worker_tokens_total{worker="0"} 1000.0',
        'detok_worker_tokens_total{worker="1"} 1000.0',
        'detok_worker_utf8_holds_total{worker="0"} 3.0',
        'detok_worker_invalid_token_ids_total{worker="1"} 1.0',
        'detok_worker_malformed_messages_total{worker="0"} 2.0',
        'detok_worker_stops_total{kind="string",worker="0"} 4.0',
        'detok_worker_requests_finished_total{reason="length",worker="1"} 7.0',
        'detok_worker_restarts_total{worker="0"} 1.0',
        'detok_worker_batch_size_count{worker="0"} 1.0',
        'detok_worker_batch_seconds_count{worker="1"} 2.0',
        'detok_worker_batch_seconds_bucket{le="0.0005",worker="1"} 1.0',  # cumulative buckets, as observe
        'detok_worker_batch_seconds_bucket{le="0.0025",worker="1"} 1.0',
        'detok_worker_batch_seconds_bucket{le="0.005",worker="1"} 2.0',
        'detok_worker_batch_seconds_sum{worker="1"} 0.0034',
        'detok_worker_queue_lag_seconds_count{worker="0"} 1.0',
        "detok_time_to_first_token_seconds_count 2.0",
        "detok_inter_token_latency_seconds_count 2.0",
        "detok_e2e_request_latency_seconds_count 2.0",
        'detok_frontend_requests_finished_total{reason="stop"} 2.0',
    ):
        assert line in text, line
    # the live-requests gauge of exited writers is summed until they are marked dead
    assert 'detok_worker_live_requests{worker="0"} 5.0' in text


def test_render_without_a_directory_says_what_to_set(monkeypatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR"):
        render_metrics()
