"""Pool start and shutdown: nothing left behind after close, after the parent is SIGKILLed, or
after a failed start; tcp endpoints for workers on other hosts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import detok
from detok.pool import pool as pool_module
from detok.wire.endpoints import IpcDir
from detok.pool.pool import DetokPool, PoolStartError
from detok.receiver.receiver import DeltaReceiver
from detok.wire.security import CurveKeys, InsecureTransportError
from tests.helpers.pool_helpers import Collected, drive, reference, workload
from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by whoever adopted it) is dead
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) or path.exists():
        if time.monotonic() > deadline:
            alive = [p for p in pids if _alive(p)]
            raise AssertionError(f"left behind: processes {alive}, dir exists: {path.exists()}")
        time.sleep(0.05)


def test_close_leaves_no_process_and_no_ipc_file() -> None:
    pool = DetokPool(hf_qwen2_dir(), workers=1, spare=True)
    pids, ipc_dir = pool.all_pids(), pool.ipc_dir
    assert len(pids) == 2 and all(_alive(p) for p in pids)  # the worker and the loaded spare
    assert [f.name for f in ipc_dir.iterdir() if f.name.startswith("worker")] == ["worker-0"]
    pool.close()  # returns (a hang fails at the test's timeout)
    _wait_gone(pids, ipc_dir, 60)
    assert pool.closed
    pool.close()  # idempotent


def test_children_die_with_a_killed_parent_and_clean_up_the_ipc_dir(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from detok.pool.pool import DetokPool
        if __name__ == "__main__":
            pool = DetokPool({str(hf_qwen2_dir())!r}, workers=1, spare=True)
            print(json.dumps({{"pids": pool.all_pids(), "dir": str(pool.ipc_dir)}}), flush=True)
            time.sleep(600)
        """
    )
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, cwd=REPO, text=True)
    try:
        line = parent.stdout.readline()  # type: ignore[union-attr]
        info = json.loads(line)
        assert all(_alive(p) for p in info["pids"])
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        _wait_gone(info["pids"], Path(info["dir"]), 60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)


def test_a_tokenizer_that_does_not_load_fails_the_start_cleanly(tmp_path: Path, monkeypatch) -> None:
    made: list[IpcDir] = []

    class RecordedIpcDir(IpcDir):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pool_module, "IpcDir", RecordedIpcDir)
    # the worker's own error, not the start timeout's (which is long enough never to come first)
    with pytest.raises(PoolStartError, match="TokenizerLoadError"):
        DetokPool(tmp_path / "missing.json", workers=1, start_timeout_s=240)
    assert len(made) == 1 and not made[0].path.exists()


def test_tcp_endpoints() -> None:
    """tcp takes the deployment's CURVE keys (or an explicit insecure=True)."""
    tok = detok.load_tokenizer(hf_qwen2_dir())
    with pytest.raises(InsecureTransportError):
        DetokPool(hf_qwen2_dir(), workers=1, transport="tcp", spare=False)
    keys = CurveKeys.generate()
    with DetokPool(hf_qwen2_dir(), workers=1, transport="tcp", spare=False, keys=keys) as pool:
        assert pool.endpoints[0].startswith("tcp://127.0.0.1:") and not pool.endpoints[0].endswith("*")
        assert pool.notify_endpoint.startswith("tcp://127.0.0.1:")
        with pytest.raises(InsecureTransportError):
            DeltaReceiver("tcp://127.0.0.1:*")
        rx = DeltaReceiver("tcp://127.0.0.1:*", keys=keys)
        client = pool.client()
        try:
            assert rx.endpoint.startswith("tcp://127.0.0.1:")
            requests = workload(tok, 20, 12, seed=21, first_rid=20_000)
            got = Collected(rx, [r.rid for r in requests])
            drive(client, requests, rx.endpoint)
            got.wait_finished()
            assert all(got.text[r.rid] == reference(tok, r)[0] for r in requests)
        finally:
            client.close()
            rx.close()
