"""Faults stay local, with real worker processes and no spare: every request on the healthy worker
streams to its exact end while the other is SIGKILLed (its requests are replayed to the cold-started
replacement and end exactly too); a SIGSTOPped worker is detected by its missing heartbeats within
the bound, reported, killed and replaced, and the other worker keeps streaming meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import detok
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from tests.helpers.pool_helpers import Collected, drive, reference, workload

pytestmark = pytest.mark.timeout(180)
STALL_S = 1.5
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer("mock")


@pytest.fixture(scope="module")
def pool():
    with DetokPool("mock", workers=2, spare=False, stall_timeout_s=STALL_S) as pool:
        yield pool


def _fault_run(tok, pool: DetokPool, sig: signal.Signals, first_rid: int):
    """80 requests over both workers, `sig` sent to worker 0's process at step 15; returns
    (requests, which were on worker 0, what arrived, the victim's pid, worker 1's chars at the
    fault and once the stall was seen)."""
    client = pool.client()
    rx = DeltaReceiver()
    try:
        requests = workload(tok, 80, 60, seed=first_rid, first_rid=first_rid)
        on_victim = {r.rid for r in requests if client.worker_of(r.rid) == 0}
        assert 10 < len(on_victim) < 70
        victim, stalls_before = pool.pids()[0], pool.stall_replacements
        got = Collected(rx, [r.rid for r in requests])
        healthy_chars: list[int] = []

        def between(step: int) -> None:
            got.pump()
            if step == 15:
                os.kill(victim, sig)
                healthy_chars.append(sum(len(got.text[r.rid]) for r in requests if r.rid not in on_victim))
            if sig == signal.SIGSTOP and step == 16:
                def healthy() -> int:
                    return sum(len(got.text[r.rid]) for r in requests if r.rid not in on_victim)

                # until the stall is replaced and the other worker's step-16 text came meanwhile
                # (a generous deadline: a loaded box is slow, a stall never replaced fails)
                deadline = time.monotonic() + 90
                while pool.stall_replacements == stalls_before or healthy() <= healthy_chars[0]:
                    assert time.monotonic() < deadline, ("no replacement or no healthy stream",
                                                         pool.stall_replacements, healthy(), healthy_chars)
                    got.pump(0.05)
                healthy_chars.append(healthy())

        drive(client, requests, rx.endpoint, between_steps=between, step_sleep=0.01)
        # without a spare the replacement loads the tokenizer first; polling answers its replay
        deadline = time.monotonic() + 60
        while len(got.finish) < len(requests) and time.monotonic() < deadline:
            client.poll(0.01)
            got.pump(0.01)
        got.wait_finished(timeout=1)
        assert pool.wait_ready(120)
        return requests, on_victim, got, victim, healthy_chars, client
    finally:
        client.close()
        rx.close()


def _check_local(tok, requests, on_victim, got) -> None:
    wrong = [r.rid for r in requests if got.finish[r.rid].reason != "length" or got.text[r.rid] != reference(tok, r)[0]]
    assert [r for r in wrong if r not in on_victim] == []  # the healthy worker's: untouched
    assert wrong == []  # and the victim's, replayed to its replacement


def test_sigkill_without_a_spare_loses_nothing_on_the_healthy_worker(tok, pool) -> None:
    restarts = pool.restarts
    requests, on_victim, got, victim, _, _ = _fault_run(tok, pool, signal.SIGKILL, 40_000)
    _check_local(tok, requests, on_victim, got)
    assert pool.restarts == restarts + 1 and pool.pids()[0] not in (None, victim)


def test_a_stopped_worker_is_detected_replaced_and_the_others_keep_streaming(tok, pool) -> None:
    stall_replacements = pool.stall_replacements
    requests, on_victim, got, victim, chars, client = _fault_run(tok, pool, signal.SIGSTOP, 50_000)
    _check_local(tok, requests, on_victim, got)
    assert pool.stall_replacements == stall_replacements + 1 and pool.pids()[0] not in (None, victim)
    assert chars[1] > chars[0]  # worker 1 streamed while worker 0 was stopped
    assert any(e.kind == "died" and "stalled" in e.message for e in client.events if e.worker == 0)
    slot = pool.slots()[0]
    assert slot.serving and slot.state == "serving" and not slot.stalled


def test_stall_reported_without_replacement_and_in_metrics(tmp_path: Path) -> None:
    """replace_stalled=False: the stall is reported (slots, the detok_worker_stalled gauge) and
    clears when the process runs again (SIGCONT). In a process that writes multiprocess metrics."""
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from detok.metrics import use_metrics_dir
        use_metrics_dir({str(tmp_path / "metrics")!r})
        from detok.metrics import render_metrics
        from detok.pool.pool import DetokPool

        def wait(pred):
            deadline = time.monotonic() + 120
            while not pred():
                assert time.monotonic() < deadline
                time.sleep(0.05)

        def gauge():
            text = render_metrics({str(tmp_path / "metrics")!r}).decode()
            return [l for l in text.splitlines() if l.startswith(("detok_worker_stalled{{", "detok_worker_stall_repl"))]

        if __name__ == "__main__":
            with DetokPool("mock", workers=1, spare=False, stall_timeout_s=1.0,
                           replace_stalled=False, metrics_dir={str(tmp_path / "metrics")!r}) as pool:
                pid = pool.pids()[0]
                os.kill(pid, signal.SIGSTOP)
                wait(lambda: pool.slots()[0].stalled)
                slot = pool.slots()[0]
                print("STALLED", slot.state, slot.serving, gauge(), flush=True)
                time.sleep(0.5)  # two supervisor turns (stall_timeout_s / 4 each): a replacement would show
                assert pool.pids()[0] == pid and pool.stall_replacements == 0  # reported only
                os.kill(pid, signal.SIGCONT)
                wait(lambda: not pool.slots()[0].stalled)
                print("RESUMED", pool.slots()[0].state, gauge(), flush=True)
        """)
    (tmp_path / "stall.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "stall.py")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    stalled, resumed = done.stdout.splitlines()
    assert stalled.startswith("STALLED stalled False") and 'detok_worker_stalled{worker="0"} 1.0' in stalled
    assert 'detok_worker_stall_replacements_total{worker="0"} 0.0' in stalled
    assert resumed.startswith("RESUMED serving") and 'detok_worker_stalled{worker="0"} 0.0' in resumed
