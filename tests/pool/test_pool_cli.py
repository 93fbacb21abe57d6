"""`detok pool` and `detok worker` as real commands: endpoints printed, requests served over
them from this process (as an external scheduler and frontend would), clean exit on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import detok
from detok.cli import build_parser
from detok.scheduler.client import SchedulerClient
from detok.wire.endpoints import tcp_endpoint
from detok.pool.pool import _free_port
from detok.receiver.receiver import DeltaReceiver
from tests.helpers.pool_helpers import Collected, drive, reference, workload
from tests.helpers.tokenizers_available import hf_qwen2_dir
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


def _detok(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "detok.cli", *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _serve_some(tok, workers: list[str], notify: str | None, first_rid: int, keys: Path) -> None:
    rx = DeltaReceiver("tcp://127.0.0.1:*", keys=keys)
    client = SchedulerClient(workers, notify, keys=keys)
    try:
        requests = workload(tok, 30, 10, seed=first_rid, first_rid=first_rid)
        got = Collected(rx, [r.rid for r in requests])
        drive(client, requests, rx.endpoint)
        got.wait_finished()
        assert all(got.text[r.rid] == reference(tok, r)[0] for r in requests)
    finally:
        client.close()
        rx.close()


def test_parser_has_the_subcommands() -> None:
    parser = build_parser()
    assert parser.parse_args(["pool", "--tokenizer", "x"]).workers == 2
    assert parser.parse_args(["worker", "--tokenizer", "x", "--bind", "tcp://*:1"]).index == 0
    assert parser.parse_args(["keygen", "d"]).dir == "d"


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    """`detok keygen DIR`: the public key and the secret key (0600)."""
    path = tmp_path_factory.mktemp("keys") / "deploy"
    done = subprocess.run([sys.executable, "-m", "detok.cli", "keygen", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (path / "detok.key_secret").stat().st_mode & 0o777 == 0o600
    assert path.stat().st_mode & 0o777 == 0o700
    again = subprocess.run([sys.executable, "-m", "detok.cli", "keygen", str(path)], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 1 and "already exist" in again.stderr  # never overwritten silently
    return path


def test_tcp_without_keys_is_refused(keys: Path) -> None:
    for args in (("pool", "--transport", "tcp"), ("worker", "--bind", "tcp://127.0.0.1:1")):
        done = subprocess.run([sys.executable, "-m", "detok.cli", *args, "--tokenizer", str(hf_qwen2_dir())],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "need CURVE keys" in done.stderr, done.stderr
    leaked = keys.parent / "leaky"
    leaked.mkdir()
    (leaked / "detok.key_secret").write_bytes((keys / "detok.key_secret").read_bytes())
    (leaked / "detok.key_secret").chmod(0o644)
    done = subprocess.run([sys.executable, "-m", "detok.cli", "worker", "--bind", "tcp://127.0.0.1:1", "--keys",
                           str(leaked), "--tokenizer", str(hf_qwen2_dir())], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "accessible by other users" in done.stderr


def test_detok_pool_prints_endpoints_and_serves_an_external_scheduler(keys: Path) -> None:
    tok = detok.load_tokenizer(hf_qwen2_dir())
    proc = _detok("pool", "--tokenizer", str(hf_qwen2_dir()), "--workers", "2", "--transport", "tcp", "--no-spare",
                  "--keys", str(keys), "--host", "0.0.0.0")
    try:
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert len(info["workers"]) == 2 and all(e.startswith("tcp://127.0.0.1:") for e in info["workers"])
        assert [e.replace("0.0.0.0", "127.0.0.1") for e in info["listening"]] == info["workers"]
        _serve_some(tok, info["workers"], info["notify"], 30_000, keys)
        pids = info["pids"]
    finally:
        code, err = _stop(proc)
    assert code == 0, err

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(lambda: all(gone(p) for p in pids), 60, 0.05, lambda: f"workers left: {[p for p in pids if not gone(p)]}")


def test_detok_worker_standalone_over_tcp(keys: Path) -> None:
    """The banner names the address the socket listens on (0.0.0.0 here, not 127.0.0.1)."""
    tok = detok.load_tokenizer(hf_qwen2_dir())
    # the worker binds a port of its choosing and names it; the notify port is bound later by the
    # scheduler client (the worker must be told it first): picked free now, a narrow race left
    notify = tcp_endpoint("127.0.0.1", _free_port("127.0.0.1"))
    proc = _detok("worker", "--tokenizer", str(hf_qwen2_dir()), "--bind", "tcp://0.0.0.0:*", "--notify", notify,
                  "--keys", str(keys))
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        found = re.search(r"listening on tcp://0\.0\.0\.0:(\d+) \(CURVE\)", line)
        assert found, line
        port = int(found.group(1))
        _serve_some(tok, [tcp_endpoint("127.0.0.1", port)], notify, 31_000, keys)
    finally:
        code, err = _stop(proc)
    assert code == 0, err
