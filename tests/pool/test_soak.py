"""Soak: hundreds of concurrent requests (stop strings, min_tokens, multi-byte text, speculative
multi-token steps) through a real pool while a worker is SIGKILLed every third step (~300 ms at the
pacing here) - kills landing on replacements mid-replay too. Every request's text must equal the
oracle: nothing lost, repeated or failed. The kills are counted in steps, not seconds, so a loaded
box gets as many. `make test` runs a bounded sample; the long run is marked slow (`DETOK_SLOW=1`)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import detok
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import DecodeParams
from tests.helpers.pool_helpers import Collected, drive, reference, workload
from tests.helpers.tokenizers_available import hf_qwen2_dir
from tests.helpers.waiting import wait_until

KILL_EVERY_STEPS = 3


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("requests_n", "tokens", "kill_seconds"),
    [(500, 48, 2.5), pytest.param(600, 160, 10.0, marks=pytest.mark.slow)],  # make test runs the sample
)
def test_soak_with_a_worker_killed_every_third_step(requests_n: int, tokens: int, kill_seconds: float) -> None:
    tok = detok.load_tokenizer(str(hf_qwen2_dir()))
    rng = random.Random(requests_n)
    requests = workload(tok, requests_n, tokens, seed=7, first_rid=500_000)
    for i, r in enumerate(requests):
        if i % 2:
            r.params = DecodeParams(stop=("。", "\n\n", " the ", "欢迎"), min_tokens=rng.choice([0, 5]),
                                    include_stop_str_in_output=i % 4 == 1)
    with DetokPool(str(hf_qwen2_dir()), workers=2, spare=True) as pool:
        client = pool.client()
        rx = DeltaReceiver()
        try:
            got = Collected(rx, [r.rid for r in requests])
            kills = 0
            started = time.monotonic()
            # ~tokens/2 steps (1-3 tokens each): the kills fall in the first 80% of them
            planned = len(range(1, int(tokens / 2 * 0.8), KILL_EVERY_STEPS))

            def kill_every_third_step(step: int) -> None:
                # SIGKILL whatever process serves a random slot that has one (a slot whose
                # replacement still loads its tokenizer has none: the step loop waits for one)
                nonlocal kills
                if step % KILL_EVERY_STEPS == 1 and kills < planned:
                    pid = wait_until(lambda: [p for p in pool.pids() if p], 120, 0.01, "no slot has a process")
                    try:
                        os.kill(rng.choice(pid), signal.SIGKILL)
                        kills += 1
                    except ProcessLookupError:
                        pass  # it died meanwhile: still a death mid-stream
                got.pump()

            # paced so the run outlasts the kills: each request sees several deaths
            step_sleep = kill_seconds / (tokens / 2) * 1.2
            stopped = drive(client, requests, rx.endpoint, max_count=3, seed=3,
                            between_steps=kill_every_third_step, step_sleep=step_sleep)
            deadline = time.monotonic() + 240
            while len(got.finish) < len(requests) and time.monotonic() < deadline:
                stopped += client.poll(0.01)
                got.pump(0.01)
            got.wait_finished(timeout=1)
            print(f"soak: {len(requests)} requests, {kills} kills of {planned} planned, "
                  f"{client.replays_sent} replays, {time.monotonic() - started:.1f} s")
            assert kills >= planned - 1 and kills >= 3, (kills, planned)
            errors = [r.rid for r in requests if got.finish[r.rid].reason == "error"]
            assert not errors, f"{len(errors)} requests failed, e.g. {got.finish[errors[0]]}"
            wrong = [r.rid for r in requests if got.text[r.rid] != reference(tok, r)[0]]
            assert not wrong, f"{len(wrong)} of {len(requests)} texts differ from the oracle"
            assert rx.gaps == 0
            assert all(s.finish.reason != "error" for s in stopped)
            assert pool.wait_ready(60)
        finally:
            client.close()
            rx.close()
