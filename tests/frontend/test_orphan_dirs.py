"""A SIGKILLed `detok serve` leaves its temp directories (metrics, ipc sockets) behind; the next
start removes them, never those of a stack that is still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from detok.wire.owned_dirs import OWNER_FILE, OwnedDir, remove_orphans, temp_roots
from tests.helpers.serve_helpers import LiveServer
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(300)


def _dirs_of(pid: int) -> set[Path]:
    """detok directories whose owner file names `pid`."""
    found = set()
    for root in temp_roots():
        for path in root.glob(f"detok-*/{OWNER_FILE}"):
            try:
                if path.read_text().strip() == str(pid):
                    found.add(path.parent)
            except OSError:
                pass
    return found


def _wait_gone(pids: list[int], timeout: float = 60.0) -> None:
    wait_until(lambda: not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids), timeout,
               what=f"the killed stack's children {pids} exiting")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_sigkilled_stacks_dirs_are_removed_by_the_next_start_and_a_live_ones_kept() -> None:
    first = LiveServer("--workers", "1", "--no-spare")
    try:
        children = first.children()
        left = _dirs_of(first.proc.pid)
        assert any(p.name.startswith("detok-metrics-") for p in left), left
        first.proc.kill()  # SIGKILL to the main process only: its clean-up never runs
        first.proc.wait(30)
        _wait_gone(children)  # its children notice the parent is gone and exit
        # (a child may remove its own: the pool's socket directory goes with its workers)
        assert any(p.name.startswith("detok-metrics-") and p.exists() for p in left), "only the next start removes it"
    finally:
        first.kill_group()
    live = LiveServer("--workers", "1", "--no-spare")
    second = None
    try:
        live_dirs = _dirs_of(live.proc.pid)
        assert live_dirs
        second = LiveServer("--workers", "1", "--no-spare")
        assert not any(p.exists() for p in left), [p for p in left if p.exists()]
        assert all(p.exists() for p in live_dirs), "a running stack's directories are never removed"
        assert live.get("/health").status_code == 200
        second_dirs = _dirs_of(second.proc.pid)
        assert second.stop(signal.SIGTERM) == 0
        assert live.stop(signal.SIGTERM) == 0
        assert not any(p.exists() for p in second_dirs | live_dirs), "a stopped stack leaves nothing"
    finally:
        live.kill_group()
        if second is not None:
            second.kill_group()


def test_remove_orphans_judges_by_the_owner_lock(tmp_path: Path) -> None:
    mine = OwnedDir("detok-test-", str(tmp_path))
    plain = tmp_path / "detok-not-ours"
    plain.mkdir()
    script = ("import sys, time; from detok.wire.owned_dirs import OwnedDir; d = OwnedDir('detok-child-', sys.argv[1]);"
              " print(d.path, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        child_dir = Path(child.stdout.readline().strip())  # type: ignore[union-attr]
        (tmp_path / f"{child_dir.name}.health.json").write_text("{}")
        (tmp_path / "detok-gone.health.json").write_text("{}")
        assert remove_orphans([tmp_path]) == [tmp_path / "detok-gone.health.json"]
        assert mine.path.exists() and child_dir.exists() and plain.exists()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        removed = set(remove_orphans([tmp_path]))
        assert removed == {child_dir, tmp_path / f"{child_dir.name}.health.json"}
        assert mine.path.exists() and plain.exists()
    finally:
        child.kill()
        mine.remove()
    assert not mine.path.exists()


def test_detok_pool_start_removes_an_orphan() -> None:
    script = ("import time; from detok.wire.owned_dirs import OwnedDir; d = OwnedDir('detok-orphan-');"
              " print(d.path, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    orphan = Path(child.stdout.readline().strip())  # type: ignore[union-attr]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert orphan.exists()
    pool = subprocess.Popen([sys.executable, "-m", "detok.cli", "pool", "--tokenizer", "mock", "--workers", "1",
                             "--no-spare"], stdout=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        assert pool.stdout is not None and pool.stdout.readline().startswith("{")  # started: its info line
        assert not orphan.exists()
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0
