"""`detok serve --frontends 2`: real processes and one shared port. Requests spread over the
frontends stream correctly and at once; a SIGKILLed frontend is restarted and only its streams
fail, and its requests are aborted in the scheduler (the workers free them); one /metrics scrape counts every frontend's requests; Ctrl-C with streams open on every
frontend ends each with `[DONE]` and leaves no process."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import json
import re
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
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


def test_requests_spread_over_frontends_stream_concurrently_equal_non_streamed_and_are_counted():
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
        # one scrape counts every frontend's requests: the streams (on both) and the non-streamed ones
        text = server.get("/metrics").text
        finished = re.search(r'^detok_frontend_requests_finished_total\{reason="length"\} (\S+)$', text, re.M)
        assert finished is not None and float(finished.group(1)) == 2 * len(streams), text[-2000:]
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


def _worker_finished(server: LiveServer, reason: str) -> float:
    """Requests the detok workers finished with `reason`, from one /metrics scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(server.get("/metrics").text)
               if family.name == "detok_worker_requests_finished" for sample in family.samples
               if sample.name.endswith("_total") and sample.labels.get("reason") == reason)


def _open_on(server: LiveServer, frontend: int, count: int, max_tokens: int, seed: int,
             other: Callable[[_Stream], object]) -> list[_Stream]:
    """`count` streams open on `frontend` (each has its first event); a stream the kernel gives
    another frontend goes to `other` first."""
    mine: list[_Stream] = []
    deadline = time.monotonic() + _DEADLINE_S
    while len(mine) < count and time.monotonic() < deadline:
        stream = _Stream(server.base_url, seed, max_tokens)
        seed += 1
        stream.next_event()
        if stream.frontend == frontend:
            mine.append(stream)
        else:
            other(stream)
    assert len(mine) == count, "connections did not reach the frontend"
    return mine


def _owned_dirs(pid: int) -> list[Path]:
    """The detok temp directories process `pid` holds (its owner file names it)."""
    from detok.wire.owned_dirs import OWNER_FILE, temp_roots

    return [owner.parent for root in temp_roots() for owner in root.glob(f"detok-*/{OWNER_FILE}")
            if owner.read_text().strip() == str(pid)]


def test_a_killed_frontends_requests_are_aborted_and_the_others_finish_exactly():
    """Frontend 0's streams cannot end on their own in this test (100,000 tokens at 5 ms a step),
    so the workers' abort count reaching them is the scheduler stopping them. Frontend 1's streams
    finish at their own length, their text equal to the non-streamed one."""
    server = LiveServer(*_SERVE, "--step-ms", "5", "--log-level", "info", "--max-model-len", "200000")
    try:
        # streams that reached the other frontend are closed at once (that frontend aborts them):
        # reading them to the end would spend seconds per miss while the kernel keeps choosing one
        # frontend on a loaded box
        closed: list[_Stream] = []
        doomed = _open_on(server, 0, 2, 100_000, 0, lambda s: (closed.append(s), s.close()))
        survivors = _open_on(server, 1, 2, 1000, 100, lambda s: (closed.append(s), s.close()))
        _wait(lambda: _worker_finished(server, "abort") == len(closed), "the closed streams aborted")
        victim = next(f["pid"] for f in _frontends(server) if f["index"] == 0)
        victim_dirs = _owned_dirs(victim)
        assert victim_dirs  # its receiver's ipc directory
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: _worker_finished(server, "abort") == len(closed) + len(doomed), _DEADLINE_S, 0.05,
                   lambda: f"aborts: {_worker_finished(server, 'abort')}: {server.output[-3000:]}")
        assert re.search(r"aborted 2 requests of rids \[0x0, 0x1000000000000\)", server.output)
        for s in doomed:
            assert s.read_all()[-1] != "[DONE]"
        with concurrent.futures.ThreadPoolExecutor(len(survivors)) as threads:
            wholes = list(threads.map(lambda s: httpx.post(server.base_url + "/v1/completions", timeout=120, json={
                "model": "detok-stub", "prompt": f"Hi {s.seed}", "max_tokens": 1000, "seed": s.seed,
                "ignore_eos": True}).json(), survivors))
        for s, whole in zip(survivors, wholes):
            assert s.read_all()[-1] == "[DONE]"
            assert s.text() == whole["choices"][0]["text"] and whole["usage"]["completion_tokens"] == 1000
        assert _worker_finished(server, "abort") == len(closed) + len(doomed)
        _wait(lambda: not any(d.exists() for d in victim_dirs), "the dead frontend's ipc directory removed")
        assert server.stop(signal.SIGTERM) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def test_a_frontend_killed_again_and_again_leaves_nothing_behind():
    """Each death: the stream it held is aborted in the scheduler, its ipc directory removed; the
    supervisor's open descriptors and detok's temp directories stay as they were."""
    server = LiveServer(*_SERVE, "--step-ms", "5", "--max-model-len", "200000")
    try:
        closed: list[_Stream] = []
        supervisor = server.proc.pid
        fds = dirs = None
        for death in range(1, 4):
            doomed = _open_on(server, 0, 1, 100_000, 10 * death, lambda s: (closed.append(s), s.close()))
            _wait(lambda: _worker_finished(server, "abort") == len(closed) + death - 1, "earlier aborts counted")
            if dirs is None:
                dirs = _temp_dirs()
            os.kill(next(f["pid"] for f in _frontends(server) if f["index"] == 0), signal.SIGKILL)
            _wait(lambda: _worker_finished(server, "abort") == len(closed) + death, "the dead frontend's stream aborted")
            doomed[0].read_all()
            _wait(lambda: [(f["state"], f["generation"]) for f in _frontends(server) if f["index"] == 0]
                  == [("up", death)], "frontend 0 back")
            _wait(lambda: _temp_dirs() == dirs, lambda: f"detok temp directories: {dirs} -> {_temp_dirs()}")
            if fds is None:  # after the first death: the abort's socket is made then, once
                fds = _fds(supervisor)
            _wait(lambda: len(_fds(supervisor)) == len(fds),  # (pipes to the new process: other inodes)
                  lambda: f"the supervisor's descriptors: {fds} -> {_fds(supervisor)}")
        assert server.stop(signal.SIGTERM) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def _fds(pid: int) -> list[str]:
    """What process `pid` holds open (descriptor -> target)."""
    fd_dir = f"/proc/{pid}/fd"
    names = []
    for fd in sorted(os.listdir(fd_dir), key=int):
        with contextlib.suppress(OSError):
            names.append(f"{fd}:{os.readlink(f'{fd_dir}/{fd}')}")
    return names


def _temp_dirs() -> int:
    """detok's directories in this test run's temp dir (the stack's ipc, metrics, pool)."""
    return sum(1 for _ in Path(tempfile.gettempdir()).glob("detok-*"))


def test_ctrl_c_with_streams_open_on_every_frontend_ends_each_with_done_and_leaves_nothing():
    server = LiveServer(*_SERVE, "--step-ms", "20", "--shutdown-drain", "0.5")
    try:
        # 10 minutes of tokens: opening them on both frontends may take long on a loaded box
        streams = _open_on_every_frontend(server, max_tokens=30_000)
        pids = [f["pid"] for f in _frontends(server)]
        assert set(pids) <= set(group_pids(server.proc.pid))
        os.killpg(server.proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
        for s in streams:
            events = s.read_all()
            assert events[-1] == "[DONE]" and "shutting down" in json.loads(events[-2])["error"]["message"], events[-3:]
        assert server.proc.wait(60) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()
