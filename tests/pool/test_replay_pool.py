"""Exact replay with real processes and sockets: a worker SIGKILLed mid-stream (with a loaded spare,
without one, again while its replacement replays, repeatedly), several frontends, and a standalone
tcp worker that comes back on the same endpoint. Every request's text equals the oracle and no
request fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import detok
from detok.scheduler.client import SchedulerClient
from detok.wire.endpoints import tcp_endpoint
from detok.metrics import render_metrics
from detok.pool.pool import DetokPool, _free_port
from detok.receiver.receiver import DeltaReceiver
from detok.wire.security import generate_keys
from detok.wire.params import DecodeParams
from tests.helpers.pool_helpers import Collected, Request, drive, reference, workload
from tests.helpers.waiting import wait_until
from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer(hf_qwen2_dir())


def _wait(predicate, timeout: float, what: str) -> None:
    wait_until(predicate, max(timeout, 60.0), 0.01, what)  # generous: a loaded box is slow


def _with_stops(requests: list[Request]) -> list[Request]:
    """Every third request gets stop strings and min_tokens, so stop decisions are replayed too."""
    for i, r in enumerate(requests):
        if i % 3 == 0:
            r.params = DecodeParams(stop=("。", "\n\n", " the"), min_tokens=4, include_stop_str_in_output=i % 2 == 0)
    return requests


def _finish_all(client: SchedulerClient, got: Collected, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(got.finish) < len(got.streams) and time.monotonic() < deadline:
        client.poll(0.01)  # a scheduler polls every step: replay requests are answered here
        got.pump(0.01)
    got.wait_finished(timeout=1)


def _assert_exact(tok, requests: list[Request], got: Collected) -> None:
    wrong = []
    for r in requests:
        want_text, want_finish = reference(tok, r)
        finish = got.finish[r.rid]
        assert finish.reason != "error", (r.rid, finish)
        if got.text[r.rid] != want_text or (finish.reason, finish.matched) != (want_finish.reason, want_finish.matched):
            wrong.append(r.rid)
    assert not wrong, f"{len(wrong)} of {len(requests)} requests differ from the oracle, e.g. {wrong[:5]}"


@pytest.mark.parametrize("spare", [True, False], ids=["spare", "cold-start"])
def test_sigkill_mid_stream_loses_nothing(tok, spare: bool) -> None:
    with DetokPool(hf_qwen2_dir(), workers=2, spare=spare) as pool:
        client = pool.client()
        rx = DeltaReceiver()
        try:
            requests = _with_stops(workload(tok, 80, 60, seed=11, first_rid=10_000))
            on_victim = [r.rid for r in requests if client.worker_of(r.rid) == 0]
            assert 10 < len(on_victim) < 70
            victim = pool.pids()[0]
            got = Collected(rx, [r.rid for r in requests])

            def kill_at_step(step: int) -> None:
                if step == 20:
                    os.kill(victim, signal.SIGKILL)
                got.pump()

            stopped = drive(client, requests, rx.endpoint, max_count=3, seed=1, between_steps=kill_at_step, step_sleep=0.005)
            _finish_all(client, got)
            _assert_exact(tok, requests, got)
            assert all(s.finish.reason != "error" for s in stopped + client.poll())
            assert pool.wait_ready(30) and pool.restarts == 1
            assert client.replays_sent >= 1
            _wait(lambda: (client.poll(), client.worker_states()[0].synced)[1], 10, "the replacement's status")
            metrics = render_metrics(pool.metrics_dir).decode()
            assert 'detok_worker_replays_total{worker="0"}' in metrics
            assert 'detok_worker_recovery_seconds_count{worker="0"} 1.0' in metrics
        finally:
            client.close()
            rx.close()


def test_repeated_kills_and_kills_during_replay_with_two_frontends(tok) -> None:
    with DetokPool(hf_qwen2_dir(), workers=2, spare=True) as pool:
        client = pool.client()
        receivers = [DeltaReceiver(), DeltaReceiver()]
        try:
            requests = _with_stops(workload(tok, 120, 80, seed=12, first_rid=20_000))
            half = len(requests) // 2
            gots = [Collected(receivers[0], [r.rid for r in requests[:half]]),
                    Collected(receivers[1], [r.rid for r in requests[half:]])]
            # register each half with its own frontend, then drive them together
            from detok.wire.to_workers import Registration

            for i, r in enumerate(requests):
                client.add_request(Registration(r.rid, receivers[0 if i < half else 1].endpoint, r.context, r.params))
            kills: list[int] = []
            pos = {r.rid: 0 for r in requests}
            by_rid = {r.rid: r for r in requests}
            step = 0
            while pos:
                for s in client.poll():
                    pos.pop(s.rid, None)
                rids, starts, tokens, ends = [], [], [], []
                for rid, at in list(pos.items()):
                    rids.append(rid), starts.append(at), tokens.append(by_rid[rid].tokens[at])
                    pos[rid] = at + 1
                    if pos[rid] == len(by_rid[rid].tokens):
                        ends.append((rid, "length"))
                        del pos[rid]
                client.send_step(rids, tokens, starts=starts, ends=ends)
                step += 1
                if step in (15, 30, 45):
                    victim = step // 15 % 2
                    pid = pool.pids()[victim]
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                        kills.append(victim)
                        # and its replacement as soon as it serves: mid-replay or just after
                        _wait(lambda: pool.pids()[victim] not in (None, pid), 20, "replacement")
                        os.kill(pool.pids()[victim], signal.SIGKILL)
                        kills.append(victim)
                for got in gots:
                    got.pump()
                time.sleep(0.005)
            for got in gots:
                _finish_all(client, got)
            _assert_exact(tok, requests[:half], gots[0])
            _assert_exact(tok, requests[half:], gots[1])
            # (a process killed before it reported serving is not counted as a restart)
            # (the first kill is of a serving process; a later one may hit a cold replacement still loading)
            assert pool.wait_ready(60) and 1 <= pool.restarts <= len(kills)
        finally:
            client.close()
            for rx in receivers:
                rx.close()


def _standalone(port: int | str, notify: str, keys: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "detok.cli", "worker", "--tokenizer", str(hf_qwen2_dir()), "--keys", str(keys),
         "--bind", f"tcp://127.0.0.1:{port}", "--notify", notify, "--idle-timeout", "60"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )


def test_a_standalone_tcp_worker_that_comes_back_on_the_same_endpoint_is_replayed(tok, tmp_path: Path) -> None:
    """Over CURVE tcp, as on separate hosts: the worker process is killed and a new one started on
    the same endpoint; it asks for its shard and gets it."""
    keys = tmp_path / "keys"
    generate_keys(keys)
    # the first worker binds a port of its choosing (named in its banner; its successor takes the
    # same one back: the point of the test); the notify port, bound by the client after the worker
    # is told it, is picked free now (a narrow race)
    notify = tcp_endpoint("127.0.0.1", _free_port("127.0.0.1"))
    worker = _standalone("*", notify, keys)
    client = rx = None
    try:
        banner = worker.stdout.readline()  # type: ignore[union-attr]
        assert "listening on tcp://127.0.0.1:" in banner, banner
        port = int(banner.split("listening on tcp://127.0.0.1:")[1].split()[0])
        client = SchedulerClient([tcp_endpoint("127.0.0.1", port)], notify, keys=keys)
        rx = DeltaReceiver("tcp://127.0.0.1:*", keys=keys)
        requests = _with_stops(workload(tok, 30, 40, seed=13, first_rid=30_000))
        got = Collected(rx, [r.rid for r in requests])
        state = {"worker": worker}

        def restart_at(step: int) -> None:
            if step == 10:
                state["worker"].kill()
                state["worker"].wait(10)
                state["worker"] = _standalone(port, notify, keys)  # same endpoint, a new process
            got.pump()

        drive(client, requests, rx.endpoint, max_count=2, seed=2, between_steps=restart_at, step_sleep=0.01)
        _finish_all(client, got, timeout=90)
        _assert_exact(tok, requests, got)
        assert client.replays_sent >= 1
        worker = state["worker"]
    finally:
        if client is not None:
            client.close()
        if rx is not None:
            rx.close()
        worker.kill()
        worker.wait(10)
