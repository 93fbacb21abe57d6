"""A live `detok serve` in a subprocess for tests: started in its own process group (so Ctrl-C to
the group can be simulated and leftovers found), its output collected, its URL read from the banner."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

_API_LINE = re.compile(r"OpenAI API : (http://\S+)/v1")
START_TIMEOUT_S = 180.0


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "detok.cli", "serve", *args]


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (zombies excluded), read from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


class LiveServer:
    def __init__(self, *args: str, env: dict[str, str] | None = None, command: list[str] | None = None,
                 cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            command or serve_command("--port", "0", *args),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            start_new_session=True,  # own process group: pgid == pid
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base_url = self._wait_for_banner()

    @classmethod
    def command(cls, command: list[str]) -> LiveServer:
        """Another command that prints the same `OpenAI API : URL/v1` line (e.g. `detok frontend`)."""
        return cls(command=command)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def _wait_for_banner(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = _API_LINE.search(self.output)
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise RuntimeError(f"detok serve exited with {self.proc.returncode}:\n{self.output}")
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"detok serve did not start in {START_TIMEOUT_S} s:\n{self.output}")

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return httpx.get(self.base_url + path, timeout=30, **kwargs)  # type: ignore[arg-type]

    def children(self) -> list[int]:
        return [p for p in group_pids(self.proc.pid) if p != self.proc.pid]

    def stop(self, sig: int = signal.SIGTERM, whole_group: bool = False, timeout: float = 90.0) -> int:
        """Signal the server (or its whole group, as Ctrl-C in a terminal does) and wait for it.
        (The stack's own stop bounds add up to about 40 s on a box too loaded to meet any of them.)"""
        if self.proc.poll() is None:
            if whole_group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self._reader.join(5)
            raise AssertionError(f"detok serve did not stop within {timeout:g} s of {signal.Signals(sig).name}:\n"
                                 f"{self.output[-4000:]}") from None
        self._reader.join(5)
        return code

    def leftovers(self, wait_s: float = 10.0) -> list[int]:
        """Processes of the server's group still alive after it exited (waits for them to go)."""
        deadline = time.monotonic() + wait_s
        while True:
            left = group_pids(self.proc.pid)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def openai_client(base_url: str, api_key: str = "none", *, asynchronous: bool = False, timeout: float = 120.0,
                  **kwargs: object):  # type: ignore[no-untyped-def]
    """An openai SDK client for a live server that never reuses a connection the server may be
    closing: its idle connections expire well before the server's keep-alive timeout (else a
    request can go out on a connection just as the server closes it: a client-side HTTP race)."""
    import httpx2
    import openai

    from detok.api.limits import KEEP_ALIVE_S

    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=KEEP_ALIVE_S / 3)
    if asynchronous:
        return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0,
                                  http_client=openai.DefaultAsyncHttpxClient(limits=limits), **kwargs)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0,
                         http_client=openai.DefaultHttpxClient(limits=limits), **kwargs)
