"""Exact replay through `detok serve` with the openai SDK: while workers are SIGKILLed (three kills,
paced by the streams' progress), every request succeeds and its streamed text equals its non-streamed text (same prompt and seed:
the stub scheduler's tokens are a function of them)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import httpx
import pytest

from tests.helpers.serve_helpers import LiveServer, openai_client

pytestmark = pytest.mark.timeout(300)
MODEL = "detok-stub"


def _worker_pids(server: LiveServer) -> list[int]:
    detail = server.get("/health").json()["detail"]
    return [w["pid"] for w in detail["pool"]["workers"] if w.get("pid")]


KILLS = 3
KILL_EVERY_CHUNKS = 100  # of 40 streams of up to 150 tokens: all kills land while they run


def test_streamed_equals_non_streamed_while_workers_are_killed() -> None:
    server = LiveServer("--workers", "2", "--step-ms", "5", "--max-model-len", "4096")
    stop = threading.Event()
    kills: list[int] = []
    chunks = [0]  # streamed chunks so far: the kills are paced by progress, not by the clock

    def killer() -> None:
        # KILLS kills while the streams run, one per KILL_EVERY chunks (then the pool may recover:
        # each cold start loads the tokenizer); a slot being refilled has no pid: wait for one
        for k in range(KILLS):
            while chunks[0] < (k + 1) * KILL_EVERY_CHUNKS:
                if stop.wait(0.01):
                    return
            while not stop.is_set():
                try:
                    pids = _worker_pids(server)
                    if pids:
                        victim = pids[k % len(pids)]
                        os.kill(victim, signal.SIGKILL)
                        kills.append(victim)
                        break
                except (OSError, KeyError, ValueError, httpx.HTTPError):
                    pass  # the process went already, or /health was busy: try again
                stop.wait(0.05)

    # one client (connection pool) per phase, whose idle connections expire before the server's
    # keep-alive timeout: a connection idle since its stream ended is never reused as the server
    # closes it (a client-side HTTP race, not the server's)
    stream_client, whole_client = (openai_client(server.base_url + "/v1", "unused", asynchronous=True)
                                   for _ in range(2))

    async def streamed(seed: int) -> tuple[str, str | None]:
        text, reason = [], None
        stream = await stream_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"tell me {seed}"}], seed=seed, max_tokens=150,
            stream=True, stop=["。"] if seed % 3 == 0 else None,
        )
        async for chunk in stream:
            chunks[0] += 1
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        return "".join(text), reason

    async def whole(seed: int) -> tuple[str, str | None]:
        out = await whole_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"tell me {seed}"}], seed=seed, max_tokens=150,
            stop=["。"] if seed % 3 == 0 else None,
        )
        return out.choices[0].message.content or "", out.choices[0].finish_reason

    async def run() -> tuple[list, list]:
        seeds = range(40)
        return await asyncio.gather(*(streamed(s) for s in seeds)), await asyncio.gather(*(whole(s) for s in seeds))

    thread = threading.Thread(target=killer, daemon=True)
    try:
        thread.start()
        stream_results, whole_results = asyncio.run(run())
        stop.set()
        thread.join(30)
        assert len(kills) == KILLS, f"only {len(kills)} workers killed while the requests ran"
        assert stream_results == whole_results  # text and finish reason, request by request
        assert all(text for text, _ in stream_results)
        assert server.get("/health").status_code == 200
    finally:
        stop.set()
        server.stop(signal.SIGTERM)
        server.kill_group()
