"""Soak: many requests through a real pool, a worker killed every other round, every request either
exact (against the oracle) or finished with an error naming the dead worker - none left hanging.
`make test` runs a small sample; the long run is marked slow (`DETOK_SLOW=1`)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import detok
from detok.pool import DetokPool
from detok.receiver import DeltaReceiver
from tests.pool_helpers import Collected, drive, reference, workload
from tests.tokenizers_available import hf_qwen2_dir



@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("rounds", "per_round"),
    [(2, 300), pytest.param(8, 1000, marks=pytest.mark.slow)],  # make test runs the small sample
)
def test_soak_requests_with_worker_kills(rounds: int, per_round: int) -> None:
    tok = detok.load_tokenizer(str(hf_qwen2_dir()))
    with DetokPool(str(hf_qwen2_dir()), workers=2) as pool:
        client = pool.client()
        rx = DeltaReceiver()
        try:
            for round_ in range(rounds):
                requests = workload(tok, per_round, 64, seed=round_, first_rid=100_000 * (round_ + 1))
                got = Collected(rx, [r.rid for r in requests])
                victim = round_ % 2

                def kill_once(step: int) -> None:
                    if round_ % 2 == 1 and step == 20:
                        os.kill(pool.pids()[victim], signal.SIGKILL)

                drive(client, requests, rx.endpoint, max_count=3, seed=round_, between_steps=kill_once)
                deadline = time.monotonic() + 120
                while len(got.finish) < len(requests) and time.monotonic() < deadline:
                    client.poll(0.02)  # a scheduler polls every step: worker deaths arrive here
                    got.pump(0.02)
                got.wait_finished(timeout=1)
                errors = sum(got.finish[r.rid].reason == "error" for r in requests)
                assert (errors > 0) == (round_ % 2 == 1)  # the kill cost its worker's requests only
                for r in requests:
                    finish = got.finish[r.rid]
                    if finish.reason == "error":  # the killed worker's requests, named as such
                        assert round_ % 2 == 1 and "detok worker" in (finish.message or "")
                        continue
                    assert got.text[r.rid] == reference(tok, r)[0]
                assert pool.wait_ready(30)
        finally:
            client.close()
            rx.close()
