"""`SchedulerClient.wait_for_workers`: a client bound after the workers started is reached at their
next reconnect; the call returns once each worker was heard (and says so), or False when one is
not heard in time (a stopped process)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import detok
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from detok.wire.endpoints import RECONNECT_MAX_MS
from detok.wire.params import DecodeParams
from detok.wire.to_workers import Registration
from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pool():
    with DetokPool(hf_qwen2_dir(), workers=2, spare=False, idle_timeout_s=60) as pool:
        yield pool


def test_a_later_client_hears_every_worker_and_then_gets_stop_notices(pool: DetokPool) -> None:
    with pool.client() as first:
        assert first.wait_for_workers(60)
    # the scenario, not a wait: the workers back off their reconnects to the gone client, to the
    # most (RECONNECT_MAX_MS) after ~1.3 s of tries
    time.sleep(RECONNECT_MAX_MS / 1000 + 0.5)
    with pool.client() as client, DeltaReceiver() as rx:
        since = time.monotonic()
        assert client.wait_for_workers(60)
        assert all(s.last_heard >= since for s in client.worker_states())
        rid = 7
        ids = detok.load_tokenizer(hf_qwen2_dir()).encode(" one two three")
        client.add_request(Registration(rid, rx.endpoint, [], DecodeParams(stop=[" two"])))
        client.send_step([rid], ids, [len(ids)])
        stopped = []
        deadline = time.monotonic() + 60
        while not stopped and time.monotonic() < deadline:
            stopped = client.poll(timeout=1.0)
        assert [(s.rid, s.finish.reason) for s in stopped] == [(rid, "stop")]


def test_false_when_a_worker_is_not_heard_in_time(pool: DetokPool) -> None:
    pid = pool.pids()[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        with pool.client() as client:
            assert not client.wait_for_workers(1.0)  # worker 0 sends nothing while stopped
            assert client.worker_states()[0].last_heard == 0
    finally:
        os.kill(pid, signal.SIGCONT)
