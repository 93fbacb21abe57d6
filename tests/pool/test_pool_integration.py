"""The pool end to end with real processes and sockets: scheduler client -> workers -> receiver.

One pool (2 workers, qwen2 fixture; no spare: no test here kills a worker) serves every test of
this module; each test uses its own rids and its own receiver. Every wait has a timeout.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import uvloop
import zmq

import detok
from detok.scheduler.client import SchedulerClient
from detok.metrics import render_metrics
from detok.pool.pool import DetokPool
from detok.wire.to_workers import Registration
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import DecodeParams
from tests.helpers.pool_helpers import Collected, drive, reference, workload
from tests.helpers.tokenizers_available import hf_qwen2_dir
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer(hf_qwen2_dir())


@pytest.fixture(scope="module")
def pool():
    with DetokPool(hf_qwen2_dir(), workers=2, spare=False, idle_timeout_s=60) as pool:
        yield pool


@pytest.fixture(scope="module")
def client(pool: DetokPool):
    client = pool.client()
    yield client
    client.close()


@pytest.fixture
def rx():
    rx = DeltaReceiver()
    yield rx
    rx.close()


def test_hundreds_of_concurrent_requests_match_the_oracle(tok, pool, client, rx) -> None:
    requests = workload(tok, 300, 24, seed=1, first_rid=1_000)
    got = Collected(rx, [r.rid for r in requests])
    stopped = drive(client, requests, rx.endpoint, max_count=1)
    got.wait_finished()
    assert stopped == []
    used = {client.worker_of(r.rid) for r in requests}
    assert used == {0, 1}
    mismatches = [r.rid for r in requests if got.text[r.rid] != reference(tok, r)[0]]
    assert mismatches == []
    assert all(got.finish[r.rid].reason == "length" and got.num_tokens[r.rid] == 24 for r in requests)
    # the oracle itself, where both cut points are whole characters
    checked = 0
    for r in requests:
        full, head = tok.decode(r.context + r.tokens), tok.decode(r.context)
        if "\ufffd" not in full and full.startswith(head):
            assert got.text[r.rid] == full[len(head) :]
            checked += 1
    assert checked > 200


def test_multi_token_steps(tok, client, rx) -> None:
    requests = workload(tok, 120, 40, seed=2, first_rid=2_000)
    got = Collected(rx, [r.rid for r in requests])
    drive(client, requests, rx.endpoint, max_count=6, seed=3)
    got.wait_finished()
    assert [r.rid for r in requests if got.text[r.rid] != reference(tok, r)[0]] == []


def test_stop_strings_finish_the_request_and_notify_the_scheduler(tok, client, rx) -> None:
    requests = workload(tok, 60, 60, seed=4, first_rid=3_000)
    for r in requests:
        text = tok.decode(r.tokens)
        # a stop string from the middle of the request's own text, so it is sure to match
        word = next((w for w in text.split()[3:] if len(w) >= 3 and "\ufffd" not in w), None)
        r.params = DecodeParams(stop=(word,) if word else ("\x00never",))
    got = Collected(rx, [r.rid for r in requests])
    stopped = drive(client, requests, rx.endpoint, step_sleep=0.002)
    got.wait_finished()
    want_stopped = {r.rid for r in requests if got.finish[r.rid].reason == "stop"}

    def all_notices() -> bool:  # each StopNotice reaches the client (later than the delta, maybe)
        stopped.extend(client.poll(timeout=0.05))
        return want_stopped <= {s.rid for s in stopped}

    wait_until(all_notices, 60, 0.0, "a StopNotice never reached the scheduler client")
    expected_stops = 0
    for r in requests:
        text, finish = reference(tok, r)
        assert got.text[r.rid] == text, r.rid
        assert got.finish[r.rid].reason == finish.reason
        if finish.reason == "stop":
            expected_stops += 1
            assert got.finish[r.rid].matched == finish.matched
    assert expected_stops > 40
    stopped_rids = {s.rid for s in stopped}
    assert all(s.finish.reason == "stop" and isinstance(s.finish.matched, str) for s in stopped)
    assert stopped_rids == {r.rid for r in requests if got.finish[r.rid].reason == "stop"}


def test_abort_mid_stream(tok, client, rx) -> None:
    requests = workload(tok, 20, 30, seed=5, first_rid=4_000)
    got = Collected(rx, [r.rid for r in requests])
    aborted = {r.rid for r in requests[:10]}

    def abort_some(step: int) -> None:
        if step == 10:
            for rid in aborted:
                client.abort(rid)

    drive(client, requests, rx.endpoint, between_steps=abort_some)
    got.wait_finished()
    for r in requests:
        if r.rid in aborted:
            assert got.finish[r.rid].reason == "abort"
            assert got.num_tokens[r.rid] == 11
            assert reference(tok, r)[0].startswith(got.text[r.rid])
        else:
            assert got.finish[r.rid].reason == "length"
            assert got.text[r.rid] == reference(tok, r)[0]


def _malformed(pool: DetokPool) -> float:
    found = re.search(rb'detok_worker_malformed_messages_total\{worker="0"\} (\S+)', render_metrics(pool.metrics_dir))
    return float(found.group(1)) if found else 0.0


def test_garbage_bytes_do_not_stop_a_worker(tok, pool, client, rx) -> None:
    before = _malformed(pool)  # the module's pool is shared: counted from here
    ctx = zmq.Context.instance()
    rogue = ctx.socket(zmq.PUSH)
    rogue.setsockopt(zmq.LINGER, 1000)
    rogue.connect(pool.endpoints[0])
    for junk in (b"", b"\xff" * 100, b"\x93\xa5batch\x01\x02", b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 40):
        rogue.send(junk)
    rogue.close()
    requests = [r for r in workload(tok, 40, 10, seed=6, first_rid=5_000) if client.worker_of(r.rid) == 0]
    assert requests
    got = Collected(rx, [r.rid for r in requests])
    drive(client, requests, rx.endpoint)
    got.wait_finished()
    assert all(got.text[r.rid] == reference(tok, r)[0] for r in requests)
    wait_until(lambda: _malformed(pool) >= before + 5, 60, 0.1, lambda: render_metrics(pool.metrics_dir).decode()[:3000])
    assert _malformed(pool) == before + 5


def test_lost_registration_is_failed_at_the_frontend(tok, client, rx) -> None:
    rid = 6_000
    got = Collected(rx, [rid])
    client.add_request(Registration(rid, rx.endpoint, [], DecodeParams()))
    client._staged.new[client.worker_of(rid)].clear()  # simulate a registration lost on the way
    client.send_step([rid], tok.encode(" hello"), starts=[0])
    deadline = time.monotonic() + 60
    stopped = []
    while not stopped and time.monotonic() < deadline:
        stopped = client.poll(timeout=0.1)
    assert [s.rid for s in stopped] == [rid] and stopped[0].finish.reason == "error"
    got.wait_finished()
    assert got.finish[rid].reason == "error" and "no registration" in got.finish[rid].message


def test_async_iterators_on_uvloop(tok, client) -> None:
    requests = workload(tok, 50, 16, seed=7, first_rid=7_000)

    async def main() -> dict[int, tuple[str, str]]:
        async with DeltaReceiver() as rx:
            streams = {r.rid: rx.open(r.rid) for r in requests}

            async def consume(rid: int) -> tuple[str, str]:
                parts, reason = [], ""
                async for delta in streams[rid]:
                    parts.append(delta.text)
                    if delta.finish is not None:
                        reason = delta.finish.reason
                return "".join(parts), reason

            tasks = {rid: asyncio.create_task(consume(rid)) for rid in streams}
            await asyncio.to_thread(drive, client, requests, rx.endpoint)
            done = await asyncio.wait_for(asyncio.gather(*tasks.values()), timeout=20)
            return dict(zip(tasks, done))

    assert isinstance(uvloop.new_event_loop(), asyncio.AbstractEventLoop)
    results = uvloop.run(main())
    for r in requests:
        assert results[r.rid] == (reference(tok, r)[0], "length")


def test_the_workers_publish_metrics(tok) -> None:
    """Its own pool: what it counts (tokens on both workers, a string stop, an abort) it caused
    itself, whatever ran before it."""
    with DetokPool(hf_qwen2_dir(), workers=2, spare=False, idle_timeout_s=60) as own, own.client() as client:
        rx = DeltaReceiver()
        try:
            requests = workload(tok, 8, 20, seed=8, first_rid=8_000)
            assert {client.worker_of(r.rid) for r in requests} == {0, 1}
            text = tok.decode(requests[0].tokens)
            requests[0].params = DecodeParams(stop=(text[len(text) // 2 :][:3],))
            got = Collected(rx, [r.rid for r in requests])

            def abort_one(step: int) -> None:
                if step == 5:
                    client.abort(requests[1].rid)

            drive(client, requests, rx.endpoint, between_steps=abort_one)
            got.wait_finished(timeout=60)
            assert got.finish[requests[0].rid].reason == "stop" and got.finish[requests[1].rid].reason == "abort"
            names = _METRIC_NAMES
            text = wait_until(lambda: (lambda t: t if all(n in t for n in names) else "")(
                render_metrics(own.metrics_dir).decode()), 60, 0.1, "some worker metric never appeared")
        finally:
            rx.close()
    for name in _METRIC_NAMES:
        assert name in text, name


_METRIC_NAMES = (
        'detok_worker_tokens_total{worker="0"}',
        'detok_worker_tokens_total{worker="1"}',
        "detok_worker_batch_size_bucket",
        "detok_worker_batch_seconds_bucket",
        "detok_worker_queue_lag_seconds_bucket",
        'detok_worker_stops_total{kind="string"',
        'detok_worker_requests_finished_total{reason="abort"',
        "detok_worker_live_requests",
)


def test_a_client_can_be_built_from_endpoints(pool, tok) -> None:
    # what an external scheduler does with the endpoints `detok pool` prints
    assert all(e.startswith("ipc://") for e in pool.endpoints)
    with SchedulerClient(pool.endpoints, None) as external:
        assert external.workers == 2
