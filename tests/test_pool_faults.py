"""Worker deaths under load: SIGKILL mid-stream and SIGTERM, with real processes and sockets."""

from __future__ import annotations

import os
import signal
import time

import pytest

import detok
from detok.metrics import render_metrics
from detok.pool import DetokPool
from detok.receiver import DeltaReceiver
from tests.pool_helpers import Collected, drive, reference, workload
from tests.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer(hf_qwen2_dir())


@pytest.fixture(scope="module")
def pool():
    with DetokPool(hf_qwen2_dir(), workers=2, spare=True) as pool:
        yield pool


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sigkill_mid_stream_fails_only_that_workers_requests_and_restarts_it(tok, pool) -> None:
    client = pool.client()
    rx = DeltaReceiver()
    try:
        requests = workload(tok, 80, 60, seed=11, first_rid=10_000)
        on_victim = {r.rid for r in requests if client.worker_of(r.rid) == 0}
        assert 10 < len(on_victim) < 70
        victim_pid = pool.pids()[0]
        got = Collected(rx, [r.rid for r in requests])

        def kill_at_step(step: int) -> None:
            if step == 20:
                os.kill(victim_pid, signal.SIGKILL)
            if step > 20:
                got.pump()

        stopped = drive(client, requests, rx.endpoint, between_steps=kill_at_step, step_sleep=0.01)
        _wait(lambda: (stopped.extend(client.poll()), len({s.rid for s in stopped}) >= len(on_victim))[1], 15, "stop reports")
        got.wait_finished(timeout=20)

        for r in requests:
            if r.rid in on_victim:
                finish = got.finish[r.rid]
                assert finish.reason == "error", (r.rid, finish)
                assert "SIGKILL" in finish.message and "worker 0" in finish.message
                # what arrived before the death is a prefix of the right text: nothing wrong, nothing twice
                assert reference(tok, r)[0].startswith(got.text[r.rid])
            else:
                assert got.finish[r.rid].reason == "length"
                assert got.text[r.rid] == reference(tok, r)[0]
        assert {s.rid for s in stopped} == on_victim
        assert all(s.finish.reason == "error" for s in stopped)

        assert pool.wait_ready(10)
        assert pool.restarts == 1
        assert pool.pids()[0] not in (None, victim_pid)
        assert pool.restart_seconds[0] < 1.0  # the spare took over
        assert [e.kind for e in client.events if e.worker == 0][-2:] == ["died", "ready"]

        # the restarted slot serves new requests
        fresh = [r for r in workload(tok, 30, 12, seed=12, first_rid=11_000) if client.worker_of(r.rid) == 0]
        got2 = Collected(rx, [r.rid for r in fresh])
        drive(client, fresh, rx.endpoint)
        got2.wait_finished()
        assert all(got2.text[r.rid] == reference(tok, r)[0] for r in fresh)
        _wait(lambda: b'detok_worker_restarts_total{worker="0"} 1.0' in render_metrics(pool.metrics_dir), 5, "restart metric")
    finally:
        client.close()
        rx.close()


def test_sigterm_drains_and_finishes_live_requests_with_an_error(tok, pool) -> None:
    assert pool.wait_ready(20)
    client = pool.client()
    rx = DeltaReceiver()
    try:
        requests = [r for r in workload(tok, 40, 10, seed=13, first_rid=12_000) if client.worker_of(r.rid) == 1]
        got = Collected(rx, [r.rid for r in requests])
        for r in requests:
            client.add_request(detok.protocol.Registration(r.rid, rx.endpoint, r.context, r.params))
        client.send_step([r.rid for r in requests], [r.tokens[0] for r in requests], starts=[0] * len(requests))
        got_first = lambda: (got.pump(0.05), all(got.text[r.rid] for r in requests))[1]
        _wait(got_first, 10, "first deltas")
        restarts = pool.restarts
        victim = pool.pids()[1]
        os.kill(victim, signal.SIGTERM)
        got.wait_finished(timeout=10)
        for r in requests:
            assert got.finish[r.rid].reason == "error" and "shut down (SIGTERM)" in got.finish[r.rid].message
        _wait(lambda: pool.restarts == restarts + 1 and pool.pids()[1] not in (None, victim), 10, "restart")
    finally:
        client.close()
        rx.close()
