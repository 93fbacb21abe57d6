"""`detok serve --frontends 2`: real processes and one shared port. Requests spread over the
frontends stream correctly and at once; a SIGKILLed frontend is restarted and only its streams
fail; one /metrics scrape counts every frontend's requests; Ctrl-C with streams open on every
frontend ends each with `[DONE]` and leaves no process."""

from __future__ import annotations

import contextlib
import os
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.serve_helpers import LiveServer, group_pids
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_DEADLINE_S = 120.0
_MORE_EVENTS = 30  # read from a surviving stream after the other frontend's restart
_SERVE = ("--frontends", "2", "--tokenizer", str(FIXTURES / "hf" / "gpt-2"), "--workload", "random",
          "--workers", "1", "--no-spare")


class _Stream:
    """One streamed completion, opened now and read event by event."""

    def __init__(self, base_url: str, seed: int, max_tokens: int) -> None:
        self._stack = contextlib.ExitStack()
        client = self._stack.enter_context(httpx.Client(timeout=60))
        body = {"model": "detok-stub", "prompt": f"Hi {seed}", "max_tokens": max_tokens, "seed": seed,
                "ignore_eos": True, "stream": True}
        self.response = self._stack.enter_context(client.stream("POST", base_url + "/v1/completions", json=body))
        assert self.response.status_code == 200
        self.frontend = int(self.response.headers["x-detok-frontend"])
        self.seed = seed
        self._lines: Iterator[str] = self.response.iter_lines()
        self.events: list[str] = []

    def next_event(self) -> str:
        for line in self._lines:
            if line.startswith("data: "):
                self.events.append(line[6:])
                return line[6:]
        raise EOFError("the stream ended")

    def close(self) -> None:
        self._stack.close()

    def read_all(self) -> list[str]:
        try:
            while self.next_event() != "[DONE]":
                pass
        except (httpx.HTTPError, EOFError):
            pass
        finally:
            self._stack.close()
        return self.events

    def text(self) -> str:
        return "".join(json.loads(e)["choices"][0]["text"] for e in self.events
                       if e.startswith("{") and json.loads(e).get("choices"))


def _open_on_every_frontend(server: LiveServer, max_tokens: int, per_frontend: int = 2) -> list[_Stream]:
    """Open streams (all at once: each has its first event before the next opens) until every
    frontend holds `per_frontend` of them."""
    streams: list[_Stream] = []
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline and len(streams) < 80:
        stream = _Stream(server.base_url, len(streams), max_tokens)
        stream.next_event()
        streams.append(stream)
        counts = [sum(s.frontend == i for s in streams) for i in (0, 1)]
        if min(counts) >= per_frontend:
            return streams
    for s in streams:
        s.read_all()
    raise AssertionError(f"connections did not reach both frontends: {[s.frontend for s in streams]}")


def _frontends(server: LiveServer) -> list[dict]:
    return server.get("/health").json()["detail"]["frontends"]


def _wait(condition, what: str) -> None:
    wait_until(condition, _DEADLINE_S, 0.05, what)


def test_requests_spread_over_frontends_stream_concurrently_and_equal_non_streamed():
    server = LiveServer(*_SERVE, "--step-ms", "5")
    try:
        streams = _open_on_every_frontend(server, max_tokens=60)  # every one open before any is read on
        for s in streams:
            events = s.read_all()
            assert events[-1] == "[DONE]"
            whole = httpx.post(server.base_url + "/v1/completions", timeout=60, json={
                "model": "detok-stub", "prompt": f"Hi {s.seed}", "max_tokens": 60, "seed": s.seed, "ignore_eos": True})
            assert whole.status_code == 200
            assert s.text() == whole.json()["choices"][0]["text"]  # whichever frontend served either
        health = server.get("/health").json()
        assert health["status"] == "ok" and health["frontends"] is True
        assert server.stop(signal.SIGINT, whole_group=True) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def test_a_killed_frontend_is_restarted_and_only_its_streams_fail():
    server = LiveServer(*_SERVE, "--step-ms", "10", "--log-level", "info", "--max-model-len", "131072")
    try:
        # streams that cannot finish on their own before the kill however slow the box (100,000
        # tokens at 10 ms steps): frontend 0's must end without [DONE], frontend 1's go on
        streams = _open_on_every_frontend(server, max_tokens=100_000)
        victim = next(f for f in _frontends(server) if f["index"] == 0)
        os.kill(victim["pid"], signal.SIGKILL)
        ends = {id(s): s.read_all() for s in streams if s.frontend == 0}
        assert all(events[-1] != "[DONE]" for events in ends.values()), list(ends.values())
        _wait(lambda: [(f["state"], f["generation"]) for f in _frontends(server) if f["index"] == 0] == [("up", 1)],
              "frontend 0 back")
        for s in streams:  # frontend 1's streams were never failed: they still stream, no error event
            if s.frontend == 1:
                more = [s.next_event() for _ in range(_MORE_EVENTS)]
                assert all(e.startswith("{") and "error" not in json.loads(e) for e in more), more[-2:]
                s.close()
        assert re.search(r"frontend 0 \(pid \d+\) exited with code -9; restarting it", server.output)
        served_by = set()
        deadline = time.monotonic() + _DEADLINE_S
        while served_by != {0, 1} and time.monotonic() < deadline:  # the new frontend 0 serves too
            s = _Stream(server.base_url, 1000 + len(served_by), 3)
            assert s.read_all()[-1] == "[DONE]"
            served_by.add(s.frontend)
        assert served_by == {0, 1}
        assert server.stop(signal.SIGTERM) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def test_one_metrics_scrape_counts_every_frontends_requests():
    server = LiveServer(*_SERVE, "--step-ms", "2")
    try:
        streams = _open_on_every_frontend(server, max_tokens=5, per_frontend=3)
        for s in streams:
            assert s.read_all()[-1] == "[DONE]"
        text = server.get("/metrics").text
        finished = re.search(r'^detok_frontend_requests_finished_total\{reason="length"\} (\S+)$', text, re.M)
        assert finished is not None and float(finished.group(1)) == len(streams), text[-2000:]
    finally:
        server.kill_group()


def test_ctrl_c_with_streams_open_on_every_frontend_ends_each_with_done_and_leaves_nothing():
    server = LiveServer(*_SERVE, "--step-ms", "20", "--shutdown-drain", "0.5")
    try:
        streams = _open_on_every_frontend(server, max_tokens=5000)
        pids = [f["pid"] for f in _frontends(server)]
        assert set(pids) <= set(group_pids(server.proc.pid))
        os.killpg(server.proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
        for s in streams:
            events = s.read_all()
            assert events[-1] == "[DONE]" and "shutting down" in json.loads(events[-2])["error"]["message"]
        assert server.proc.wait(60) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()
