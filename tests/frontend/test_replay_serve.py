"""Exact replay through `detok serve` with the openai SDK: while a worker is SIGKILLed every ~300 ms,
every request succeeds and its streamed text equals its non-streamed text (same prompt and seed:
the stub scheduler's tokens are a function of them)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import openai
import pytest

from tests.helpers.serve_helpers import LiveServer

pytestmark = pytest.mark.timeout(300)
MODEL = "detok-stub"


def _worker_pids(server: LiveServer) -> list[int]:
    detail = server.get("/health").json()["detail"]
    return [w["pid"] for w in detail["pool"]["workers"] if w.get("pid")]


def test_streamed_equals_non_streamed_while_workers_are_killed() -> None:
    server = LiveServer("--workers", "2", "--step-ms", "5", "--max-model-len", "4096")
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        # for the first 2 s: then the pool may recover (each cold start loads the tokenizer)
        until = time.monotonic() + 2.0
        while not stop.wait(0.3) and time.monotonic() < until:
            try:
                pids = _worker_pids(server)
                if pids:
                    os.kill(pids[len(kills) % len(pids)], signal.SIGKILL)
                    kills.append(pids[len(kills) % len(pids)])
            except (OSError, KeyError, ValueError):
                pass  # the slot was empty, or the process went already

    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120, max_retries=0)

    async def streamed(seed: int) -> tuple[str, str | None]:
        text, reason = [], None
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"tell me {seed}"}], seed=seed, max_tokens=150,
            stream=True, stop=["。"] if seed % 3 == 0 else None,
        )
        async for chunk in stream:
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        return "".join(text), reason

    async def whole(seed: int) -> tuple[str, str | None]:
        out = await client.chat.completions.create(
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
        t0 = time.monotonic()
        stream_results, whole_results = asyncio.run(run())
        stop.set()
        thread.join(5)
        assert len(kills) >= 2, f"only {len(kills)} workers killed while the requests ran"
        assert time.monotonic() - t0 > 0.6
        assert stream_results == whole_results  # text and finish reason, request by request
        assert all(text for text, _ in stream_results)
        assert server.get("/health").status_code == 200
    finally:
        stop.set()
        server.stop(signal.SIGTERM)
        server.kill_group()
