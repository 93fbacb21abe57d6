"""SchedulerClient against fake workers (plain zmq sockets in the test): sharding, one message per
worker per step, never blocking on a full queue, starts, and the failure paths."""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np
import pytest
import zmq

from detok import wire as p
from detok.scheduler.client import SchedulerClient, shard_array, shard_of
from detok.wire.endpoints import IpcDir
from detok.wire.params import DecodeParams, Finish
from tests.helpers.fake_workers import FakeWorkers
from tests.helpers.pool_helpers import poll_until
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ipc():
    d = IpcDir(prefix="detok-test-")
    yield d
    d.remove()


def test_shard_is_stable_and_vectorised() -> None:
    rids = [0, 1, 2, 12345, 2**40 + 7, 2**63 - 1]
    assert [shard_of(r, 8) for r in rids] == shard_array(np.array(rids, dtype=np.uint64), 8).tolist()
    assert [shard_of(r, 8) for r in rids] == [0, 4, 1, 5, 4, 7]  # fixed forever: rids must not move
    rng = random.Random(0)
    many = [rng.getrandbits(63) for _ in range(1000)]
    for n in (1, 2, 3, 7, 8):
        values = shard_array(np.array(many, dtype=np.uint64), n).tolist()
        assert values == [shard_of(r, n) for r in many]
        assert set(values) <= set(range(n))


@pytest.mark.parametrize("rid_kind", ["sequential", "per-frontend", "random"])
def test_load_balance_over_8_workers_for_10k_rids(rid_kind: str) -> None:
    rng = random.Random(1)
    if rid_kind == "sequential":
        rids = list(range(10_000))
    elif rid_kind == "per-frontend":  # 4 frontends, index in the high bits, counters below
        rids = [(f << 48) | c for f in range(4) for c in range(2_500)]
    else:
        rids = [rng.getrandbits(63) for _ in range(10_000)]
    load = Counter(shard_array(np.array(rids, dtype=np.uint64), 8).tolist())
    ratio = max(load.values()) / (10_000 / 8)
    limit = 1.05 if rid_kind != "random" else 1.10  # random rids: multinomial spread (~1.04 typical)
    assert ratio <= limit, (rid_kind, ratio, load)


def test_one_message_per_worker_per_step_with_starts_counted(ipc) -> None:
    fake = FakeWorkers(ipc, 3)
    client = SchedulerClient(fake.endpoints, fake.notify)
    try:
        rids = list(range(100, 130))
        for rid in rids:
            client.add_request(p.Registration(rid, "ipc:///fe", [1, 2], DecodeParams()))
        assert client.send_step(rids, [rid % 7 for rid in rids]) == []
        assert client.send_step(rids, [5] * 2 * len(rids), [2] * len(rids)) == []  # client counts starts
        seen: dict[int, list[int]] = {}
        for w in range(3):
            first, second = fake.recv(w), fake.recv(w)
            assert fake.pending(w) == 0  # exactly one message per step
            mine = [r for r in rids if client.worker_of(r) == w]
            assert sorted(reg.rid for reg in first.new) == mine and second.new == []
            assert p.unpack_rids(first.rids).tolist() == mine
            assert p.unpack_u32(first.tokens).tolist() == [r % 7 for r in mine]
            assert p.unpack_u32(first.starts).tolist() == [0] * len(mine)
            assert p.unpack_u32(second.starts).tolist() == [1] * len(mine)
            assert p.unpack_u32(second.counts).tolist() == [2] * len(mine)
            assert second.seq == first.seq + 1 and second.sent_at >= first.sent_at
            seen[w] = mine
        assert sum(len(v) for v in seen.values()) == 30
    finally:
        client.close()
        fake.close()


def test_a_full_queue_is_reported_not_waited_on_and_order_is_kept(ipc) -> None:
    endpoint = ipc.endpoint("absent")  # no worker yet: messages pile up in the client
    client = SchedulerClient([endpoint], None, hwm=4)
    try:
        client.add_request(p.Registration(1, "ipc:///fe", [], DecodeParams()))
        reports = []
        for step in range(200):  # never blocks (a blocked send would hang to the test's timeout)
            reports.append(client.send_step([1], [step], starts=[step]))
        assert reports[-1] == [0] and client.backlog(0) > 100
        ctx = zmq.Context()
        worker = ctx.socket(zmq.PULL)
        worker.bind(endpoint)
        decoder = p.worker_inbound_decoder()
        starts: list[int] = []

        def drained() -> bool:
            client.flush()
            while worker.poll(0):
                starts.extend(p.unpack_u32(decoder.decode(worker.recv()).starts).tolist())
            return not client.backlog(0) and len(starts) >= 200

        wait_until(drained, 60, 0.01, lambda: f"backlog {client.backlog(0)}, {len(starts)} steps received")
        assert client.flush() == []
        assert starts == list(range(200))  # nothing lost, nothing reordered
        worker.close(0)
        ctx.term()
    finally:
        client.close()


def _poll_until(client: SchedulerClient, predicate, timeout: float = 60.0) -> list:
    return poll_until(client, lambda _stopped: predicate(), timeout)


def test_a_new_client_resets_every_worker(ipc) -> None:
    fake = FakeWorkers(ipc, 2)
    client = SchedulerClient(fake.endpoints, fake.notify)
    try:
        for w in range(2):
            reset = fake.recv(w, resets=True)
            assert isinstance(reset, p.Replay) and reset.instance == 0
            assert reset.batch.new == [] and reset.batch.rids == b"" and reset.batch.ends == []
    finally:
        client.close()
        fake.close()


def test_a_dead_worker_is_not_failed_and_its_next_process_gets_the_whole_shard(ipc) -> None:
    fake = FakeWorkers(ipc, 2)
    client = SchedulerClient(fake.endpoints, fake.notify)
    try:
        rids = list(range(40))
        for rid in rids:
            client.add_request(p.Registration(rid, f"ipc:///fe{rid % 2}", [rid], DecodeParams()))
        # three steps, the second speculative, and an end for rid 1 and 3 (whichever worker)
        client.send_step(rids, [1000 + r for r in rids])
        client.send_step(rids, [r for r in rids for _ in range(2)], [2] * len(rids))
        client.send_step(rids, [2000 + r for r in rids], ends=[(1, "length"), (3, "stop", 7)])
        for w in range(2):
            for _ in range(3):
                fake.recv(w)
        fake.notice(p.WorkerEvent(1, "died", 4242, 1, "detok worker 1 (pid 4242) was killed by SIGKILL"))
        _poll_until(client, lambda: client.worker_states()[1].down)
        assert client.poll() == [] and set(client.live_rids()) == set(rids) - {1, 3}  # nothing failed
        # the slot's next process asks; the answer is everything that shard was sent
        fake.notice(p.WorkerStatus(1, 777, False, 0, 4243, 2))
        _poll_until(client, lambda: client.replays_sent == 1)
        replay = fake.recv(1)
        assert isinstance(replay, p.Replay) and replay.instance == 777
        on_1 = sorted(r for r in rids if client.worker_of(r) == 1)
        batch = replay.batch
        assert sorted(reg.rid for reg in batch.new) == on_1
        assert all(reg.reply_to == f"ipc:///fe{reg.rid % 2}" and reg.context == [reg.rid] for reg in batch.new)
        order = p.unpack_rids(batch.rids).tolist()
        assert sorted(order) == on_1 and p.unpack_u32(batch.starts).tolist() == [0] * len(on_1)
        counts, tokens = p.unpack_u32(batch.counts).tolist(), p.unpack_u32(batch.tokens).tolist()
        assert counts == [4] * len(on_1)
        for i, rid in enumerate(order):
            assert tokens[4 * i : 4 * i + 4] == [1000 + rid, rid, rid, 2000 + rid]
        assert sorted((e.rid, e.reason, e.matched) for e in batch.ends) == sorted(
            (r, reason, m) for r, reason, m in [(1, "length", None), (3, "stop", 7)] if client.worker_of(r) == 1
        )
        # the same process asking again right away gets nothing new; a newer process does at once
        fake.notice(p.WorkerStatus(1, 777, False, 0, 4243, 2))
        client.poll(0.2)
        assert client.replays_sent == 1 and fake.pending(1) == 0
        fake.notice(p.WorkerStatus(1, 888, False, 0, 4244, 3))
        _poll_until(client, lambda: client.replays_sent == 2)
        assert fake.recv(1).instance == 888
    finally:
        client.close()
        fake.close()


def test_ended_requests_are_kept_until_their_worker_acknowledges_the_end(ipc, monkeypatch) -> None:
    import detok.scheduler.replay_book as replay_book

    monkeypatch.setattr(replay_book, "ACKED_KEEP_S", 0.0)
    fake = FakeWorkers(ipc, 1)
    client = SchedulerClient(fake.endpoints, fake.notify)
    try:
        for rid in (1, 2):
            client.add_request(p.Registration(rid, "ipc:///fe", [], DecodeParams()))
        client.send_step([1, 2], [5, 6], ends=[(1, "length")])
        assert fake.recv(0).seq == 2  # seq 1 was the reset
        assert client.kept_requests == 2
        fake.notice(p.WorkerStatus(0, 5, True, 1, 1))  # acknowledges the reset only
        _poll_until(client, lambda: client.worker_states()[0].acked_seq == 1)
        assert client.kept_requests == 2
        fake.notice(p.WorkerStatus(0, 5, True, 2, 1))
        _poll_until(client, lambda: client.kept_requests == 1)
        assert client.journal_bytes() > 0
    finally:
        client.close()
        fake.close()


def test_stop_notices_and_unknown_rids(ipc) -> None:
    fake = FakeWorkers(ipc, 1)
    client = SchedulerClient(fake.endpoints, fake.notify)
    try:
        for rid in (1, 2, 3):
            client.add_request(p.Registration(rid, "ipc:///fe", [], DecodeParams()))
        fake.notice(p.StopNotice(0, [1, 99], [Finish("stop", "END"), Finish("stop", "x")], unknown_rids=[2, 98]))
        stopped: list = []
        deadline = time.monotonic() + 60
        while not stopped and time.monotonic() < deadline:
            stopped = client.poll(timeout=0.1)
        # 99 and 98 are not live here: ignored; 2 lost its registration (never after a replay):
        # failed at its frontend
        assert sorted((s.rid, s.finish.reason) for s in stopped) == [(1, "stop"), (2, "error")]
        fail = fake.recv(0)
        assert isinstance(fail, p.FailRequests) and fail.rids == [2] and fail.reply_to == ["ipc:///fe"]
        assert client.live_rids() == [3]
        t0 = time.monotonic()
        assert client.poll(timeout=0.2) == []
        assert time.monotonic() - t0 >= 0.15  # it waited for its timeout (a slow box only adds to it)
    finally:
        client.close()
        fake.close()


def test_bad_step_arguments_are_rejected(ipc) -> None:
    fake = FakeWorkers(ipc, 1)
    client = SchedulerClient(fake.endpoints, None)
    try:
        with pytest.raises(ValueError, match="tokens"):
            client.send_step([1, 2], [5])
        with pytest.raises(ValueError, match="one entry per rid"):
            client.send_step([1, 2], [5, 6], starts=[0])
        with pytest.raises(KeyError):
            client.fail(12345, "no such request")
    finally:
        client.close()
        fake.close()


def test_an_end_in_the_same_step_as_the_last_token_keeps_its_start(ipc) -> None:
    """An end is staged after the step's starts are counted: staged first, it would lose the
    request's count and send its last token with start 0 (dropped by the worker as a replay)."""
    workers = FakeWorkers(ipc, 1)
    client = SchedulerClient(workers.endpoints, workers.notify)
    try:
        client.add_request(p.Registration(5, "ipc:///fe", [1, 2], DecodeParams()))
        client.send_step([5], [40])
        client.send_step([5], [41], ends=[(5, "length")])
        first, second = workers.recv(0), workers.recv(0)
        assert p.unpack_u32(first.starts).tolist() == [0]
        assert p.unpack_u32(second.starts).tolist() == [1]
        assert [e.rid for e in second.ends] == [5]
    finally:
        client.close()
        workers.close()
