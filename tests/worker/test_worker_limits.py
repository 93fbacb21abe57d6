"""A real worker process against registrations naming 1,100+ distinct frontends, malformed
reply_to endpoints and a NaN / infinite `sent_at`: bounded sockets, clear errors, no crash, and
every legitimate request still streams."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
import zmq

import detok
from detok.metrics import render_metrics
from detok.pool.pool import DetokPool
from detok.wire.codec import new_encoder
from detok.wire.to_workers import DetokBatch, Registration
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import DecodeParams
from detok.worker.frontend_sockets import MAX_FRONTENDS
from detok.worker.serving_loop import MAX_QUEUE_LAG_S, clamped_lag as _clamped_lag
from tests.helpers.pool_helpers import Collected, drive, poll_until, reference, workload

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer("mock")


@pytest.fixture(scope="module")
def pool():
    with DetokPool("mock", workers=1, spare=False) as pool:
        yield pool


def _poll_until(client, want: int, timeout: float) -> list:
    return poll_until(client, lambda stopped: len(stopped) >= want, timeout)


def test_1100_distinct_frontends_are_bounded_and_refused_cleanly(tok, pool) -> None:
    client = pool.client()
    rx = DeltaReceiver()
    pid = pool.pids()[0]
    try:
        legit = workload(tok, 10, 30, seed=3, first_rid=1)
        got = Collected(rx, [r.rid for r in legit])
        for r in legit:
            client.add_request(Registration(r.rid, rx.endpoint, r.context, r.params))
        client.flush()
        # 1,100 requests from distinct frontends (ipc paths nobody binds: a connect still takes a socket)
        many = list(range(100_000, 101_100))
        for rid in many:
            client.add_request(Registration(rid, pool.receiver_endpoint(f"fe-{rid}"), [], DecodeParams()))
        bad = {200_001: "udp://10.0.0.1:5", 200_002: "tcp://" + "h" * 400 + ":1", 200_003: "tcp://nohostport",
               200_004: "ipc://" + "p" * 200}
        for rid, endpoint in bad.items():
            client.add_request(Registration(rid, endpoint, [], DecodeParams()))
        client.flush()
        refused_count = len(many) - (MAX_FRONTENDS - 1)  # the legit frontend holds one socket
        stopped = _poll_until(client, refused_count + len(bad), 60)
        by_rid = {s.rid: s.finish for s in stopped}
        assert len(by_rid) == refused_count + len(bad)
        assert set(by_rid) == set(many[MAX_FRONTENDS - 1 :]) | set(bad)
        assert all(f.reason == "error" for f in by_rid.values())
        assert "MAX_FRONTENDS" in (by_rid[many[-1]].message or "")
        assert "neither ipc:// nor tcp://" in (by_rid[200_001].message or "")
        assert "longer than" in (by_rid[200_002].message or "") and "longer than" in (by_rid[200_004].message or "")
        assert "not tcp://HOST:PORT" in (by_rid[200_003].message or "")
        # the worker is the same process, and the legitimate requests stream as if nothing happened
        drive(client, legit, rx.endpoint, step_sleep=0.002, register=False)
        got.wait_finished()
        assert all(got.text[r.rid] == reference(tok, r)[0] for r in legit)
        assert pool.pids()[0] == pid and pool.restarts == 0
        # their frontends' requests end: sockets of idle frontends are reused for new ones
        for rid in many[: MAX_FRONTENDS - 1]:
            client.end(rid, "abort")
        client.flush()  # the worker takes its messages in order: the ends before the new requests
        fresh = list(range(300_000, 300_000 + MAX_FRONTENDS - 1))
        for rid in fresh:
            client.add_request(Registration(rid, pool.receiver_endpoint(f"fe2-{rid}"), [], DecodeParams()))
        # a marker refused at once (a bad endpoint): any refusal of the fresh ones would come before it
        client.add_request(Registration(300_999, "udp://10.0.0.1:5", [], DecodeParams()))
        client.flush()
        assert [s.rid for s in _poll_until(client, 1, 60)] == [300_999]  # none of the fresh ones refused
        assert pool.pids()[0] == pid
    finally:
        client.close()
        rx.close()


def test_nan_and_infinite_sent_at_do_not_poison_the_queue_lag(tok, pool) -> None:
    assert _clamped_lag(math.nan) == 0.0 and _clamped_lag(-math.inf) == 0.0
    assert _clamped_lag(math.inf) == MAX_QUEUE_LAG_S and _clamped_lag(0.5) == 0.5
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(pool.endpoints[0])
    encoder = new_encoder()
    try:
        rid = np.array([900_001], "<u8").tobytes()
        token = np.array([tok.encode("hi")[0]], "<u4").tobytes()
        zero = np.zeros(1, "<u4").tobytes()
        pattern = re.compile(rb'detok_worker_queue_lag_seconds_count\{worker="0"\} (\S+)')

        def observed(text: bytes) -> float:
            found = pattern.search(text)
            return float(found.group(1)) if found else 0.0

        before = observed(render_metrics(pool.metrics_dir))
        for sent_at in (math.nan, math.inf, -math.inf, time.time()):
            push.send(encoder.encode(DetokBatch(1, sent_at, [], rid, zero, b"", token, [])))
        deadline = time.monotonic() + 60
        while True:
            text = render_metrics(pool.metrics_dir)
            if observed(text) >= before + 4:
                break
            assert time.monotonic() < deadline, "the batches were not observed"
            time.sleep(0.1)
        total = float(re.search(rb'detok_worker_queue_lag_seconds_sum\{worker="0"\} (\S+)', text).group(1))  # type: ignore[union-attr]
        assert math.isfinite(total) and total <= MAX_QUEUE_LAG_S + 60
    finally:
        push.close(0)
        ctx.term()


def test_a_tool_schema_nested_past_the_decoder_depth_is_malformed_not_fatal(tok, pool) -> None:
    """A registration whose tool schema (free JSON) nests 100,000 levels: msgspec's decoder raises
    RecursionError; the worker drops the message as malformed and serves on."""
    from detok.parsing.types import OutputParsing, ToolSpec

    pid = pool.pids()[0]
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(pool.endpoints[0])
    try:
        reg = Registration(900_100, "ipc:///nonexistent/x", [], DecodeParams(),
                           parsing=OutputParsing(None, "hermes", (ToolSpec("f", {"x": "PLACEHOLDER"}),)))
        raw = new_encoder().encode(DetokBatch(1, time.time(), [reg], b"", b"", b"", b"", []))
        nested = b"\x81\xa1x" * 100_000 + b"\xc0"  # {"x": {"x": ... null}}
        hostile = raw.replace(b"\xabPLACEHOLDER", nested)
        assert len(hostile) > 300_000
        pattern = re.compile(rb'detok_worker_malformed_messages_total\{worker="0"\} (\S+)')
        before = pattern.search(render_metrics(pool.metrics_dir))
        start = float(before.group(1)) if before else 0.0
        push.send(hostile)
        deadline = time.monotonic() + 10
        while True:
            found = pattern.search(render_metrics(pool.metrics_dir))
            if found and float(found.group(1)) >= start + 1:
                break
            assert time.monotonic() < deadline, "the message was not counted as malformed"
            time.sleep(0.1)
    finally:
        push.close(0)
        ctx.term()
    assert pool.pids()[0] == pid and pool.restarts == 0
    client = pool.client()
    rx = DeltaReceiver()
    try:
        requests = workload(tok, 2, 10, seed=5, first_rid=900_200)
        got = Collected(rx, [r.rid for r in requests])
        drive(client, requests, rx.endpoint)
        got.wait_finished(timeout=20)
        assert all(got.text[r.rid] == reference(tok, r)[0] for r in requests)
    finally:
        client.close()
        rx.close()
