"""A worker stopped by SIGTERM under load, with real processes and sockets (SIGKILL: test_replay_pool)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import detok
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from tests.helpers.pool_helpers import Collected, reference, workload
from tests.helpers.waiting import wait_until
from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer(hf_qwen2_dir())


@pytest.fixture(scope="module")
def pool():
    with DetokPool(hf_qwen2_dir(), workers=2, spare=True) as pool:
        yield pool


def _wait(predicate, timeout: float, what: str) -> None:
    wait_until(predicate, max(timeout, 60.0), 0.02, what)  # generous: a loaded box is slow


def test_sigterm_on_one_worker_hands_its_requests_to_the_next_process(tok, pool) -> None:
    """A worker stopped by a signal (not the pool closing) drains what is queued and leaves its
    live requests to the slot's next process, which gets them replayed: they go on, exactly."""
    assert pool.wait_ready(20)
    client = pool.client()
    rx = DeltaReceiver()
    try:
        requests = [r for r in workload(tok, 40, 10, seed=13, first_rid=12_000) if client.worker_of(r.rid) == 1]
        got = Collected(rx, [r.rid for r in requests])
        for r in requests:
            client.add_request(detok.wire.Registration(r.rid, rx.endpoint, r.context, r.params))
        client.send_step([r.rid for r in requests], [r.tokens[0] for r in requests], starts=[0] * len(requests))
        got_first = lambda: (got.pump(0.05), all(got.text[r.rid] for r in requests))[1]
        _wait(got_first, 10, "first deltas")
        restarts = pool.restarts
        victim = pool.pids()[1]
        os.kill(victim, signal.SIGTERM)
        _wait(lambda: pool.restarts == restarts + 1 and pool.pids()[1] not in (None, victim), 10, "restart")
        for i in range(1, 10):
            client.send_step([r.rid for r in requests], [r.tokens[i] for r in requests], starts=[i] * len(requests))
        for r in requests:
            client.end(r.rid, "length")
        client.flush()
        deadline = time.monotonic() + 60
        while len(got.finish) < len(requests) and time.monotonic() < deadline:
            client.poll(0.01)
            got.pump(0.01)
        got.wait_finished(timeout=1)
        for r in requests:
            assert got.finish[r.rid].reason == "length" and got.text[r.rid] == reference(tok, r)[0]
    finally:
        client.close()
        rx.close()
