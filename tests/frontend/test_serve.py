"""`detok serve` as a user runs it: Ctrl-C and SIGTERM leaving no process behind, a real tokenizer
given with --tokenizer, a taken port. (The demo, what `make run` shows, is run from the installed
wheel: tests/test_wheel.py.)"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.helpers.serve_helpers import LiveServer, openai_client, serve_command

pytestmark = pytest.mark.timeout(240)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("frontends", ["1", "2"])
def test_sigterm_to_the_whole_group_stops_everything_without_a_restart(frontends):
    # (systemd's default stop, `kill -TERM -PGID`: the stub and a spare worker get the SIGTERM as
    # `detok serve` does; its supervisors must not take their exits for failures to restart, and a
    # frontend still draining open streams must not report the stub's exit as a fault)
    server = LiveServer("--frontends", frontends, "--workers", "1")
    try:
        deadline = time.monotonic() + 30  # (the health board may not show every frontend at once)
        while server.get("/health").json()["status"] != "ok":
            assert time.monotonic() < deadline, server.output
            time.sleep(0.1)
        body = {"model": "detok-stub", "prompt": "Hi", "max_tokens": 20000, "ignore_eos": True, "stream": True}
        with contextlib.ExitStack() as streams:
            # (several connections: the kernel spreads them over the frontends' shared port)
            lines = [streams.enter_context(httpx.stream("POST", server.base_url + "/v1/completions", json=body,
                                                        timeout=60)).iter_lines() for _ in range(4)]
            for each in lines:
                assert next(line for line in each if line.startswith("data: ")).startswith("data: {")
            with concurrent.futures.ThreadPoolExecutor(4) as readers:
                ends = readers.map(lambda each: [line for line in each if line.startswith("data: ")][-2:], lines)
                assert server.stop(signal.SIGTERM, whole_group=True) == 0, server.output
                for end in ends:
                    assert end[-1] == "data: [DONE]"  # (the drain's words, whether it or the watchdog ended it)
                    assert json.loads(end[-2][6:])["error"]["message"] == "the server is shutting down"
        assert not server.leftovers(), server.output
        # (the streams it cut are reported, by whichever saw them end first: the drain or the watchdog)
        noise = [line for line in server.output.splitlines() if "restarting" in line or "Traceback" in line
                 or (" WARNING " in line and "shutting down: " not in line) or " ERROR " in line]
        assert not noise, server.output
    finally:
        server.kill_group()


def test_real_tokenizer_random_workload_and_sigint_to_main_process():
    server = LiveServer(
        "--tokenizer", str(FIXTURES / "hf" / "gpt-2"), "--workload", "random", "--tokens-per-step", "3",
        "--workers", "1", "--no-spare", "--step-ms", "2", "--served-model-name", "gpt2-stub",
    )
    try:
        client = openai_client(server.base_url + "/v1")
        whole = client.completions.create(model="gpt2-stub", prompt="Hello", max_tokens=31, seed=3)
        assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 31
        chunks = list(client.completions.create(model="gpt2-stub", prompt="Hello", max_tokens=31, seed=3, stream=True))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
        with pytest.raises(openai.BadRequestError, match="no chat template"):
            client.chat.completions.create(model="gpt2-stub", messages=[{"role": "user", "content": "x"}])
        assert server.stop(signal.SIGINT) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def test_scheduler_death_fails_requests_in_flight_and_the_stack_serves_again():
    """The stub SIGKILLed mid-stream: its request ends with an error event naming why (its state is
    gone), /health says so while the stub is down (503), the supervised stub comes back within
    seconds (a new scheduler generation) and serves new requests."""
    server = LiveServer("--tokenizer", str(FIXTURES / "hf" / "gpt-2"), "--workers", "1", "--no-spare",
                        "--step-ms", "2", "--log-level", "info")
    try:
        stub_pid = int(re.search(r"scheduler stub (\d+)", server.output).group(1))
        assert stub_pid in server.children()
        body = {"model": "detok-stub", "prompt": "Hi", "max_tokens": 20000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=30) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: ")).startswith("data: {")
            os.kill(stub_pid, signal.SIGKILL)
            events = [line[6:] for line in lines if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and "scheduler" in json.loads(events[-2])["error"]["message"]
        deadline = time.monotonic() + 60
        while True:
            health = server.get("/health")
            detail = health.json()["detail"]["scheduler"]
            if health.status_code == 503:  # while it is down (it may be back before the first look)
                assert health.json()["scheduler"] is False
            elif detail["generation"] == 2:
                break
            assert time.monotonic() < deadline, health.json()
            time.sleep(0.05)
        assert health.json()["scheduler"] is True and detail["restarts"] == 1 and detail["pid"] != stub_pid
        again = httpx.post(server.base_url + "/v1/completions", json={"model": "detok-stub", "prompt": "x", "max_tokens": 5},
                           timeout=30)
        assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 5
        # the new stub's scheduler client reset the worker: the dead stub's request is freed there
        # at once, not after the idle timeout
        deadline = time.monotonic() + 60
        while 'detok_worker_live_requests{worker="0"} 0.0' not in server.get("/metrics").text:
            assert time.monotonic() < deadline, "the dead scheduler's request is still held by the worker"
            time.sleep(0.1)
        assert server.stop(signal.SIGTERM) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()


def test_taken_port_fails_fast_with_a_clear_message():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(serve_command("--port", str(port)), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_taken_default_port_is_an_error_too(monkeypatch):
    """Without --port, DEFAULT_PORT is bound the same way (a taken one is an error with a hint).
    Hermetic: the default is pointed at a port this test holds, never the real 8000."""
    from detok.api import limits
    from detok.serve import serve
    from detok.cli import build_parser

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(limits, "DEFAULT_PORT", port)
        with pytest.raises(SystemExit) as refused:
            serve._bind("127.0.0.1", None)
    message = str(refused.value)
    assert f"cannot listen on 127.0.0.1:{port}" in message and "--port" in message, message
    assert build_parser().parse_args(["serve"]).port is None  # `detok serve` without --port: the default
