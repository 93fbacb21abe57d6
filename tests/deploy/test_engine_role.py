"""`detok serve --inbox` (the engine pod's command) refuses what cannot work before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys

from detok.wire.security import generate_keys


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detok.cli", "serve", "--port", "0", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_tcp_inbox_without_keys_is_refused() -> None:
    done = _serve("--inbox", "tcp://127.0.0.1:7100")
    assert done.returncode != 0 and "tcp endpoints need CURVE keys" in done.stderr, done.stderr
    assert "starting" not in done.stderr  # nothing was started


def test_keys_others_can_read_are_refused(tmp_path) -> None:
    generate_keys(tmp_path)
    os.chmod(tmp_path / "detok.key_secret", 0o644)
    done = _serve("--inbox", "tcp://127.0.0.1:7100", "--keys", str(tmp_path))
    assert done.returncode != 0 and "accessible by other users" in done.stderr, done.stderr


def test_a_keys_folder_without_the_secret_is_refused(tmp_path) -> None:
    generate_keys(tmp_path)
    (tmp_path / "detok.key_secret").unlink()
    done = _serve("--inbox", "tcp://127.0.0.1:7100", "--keys", str(tmp_path))
    assert done.returncode != 0 and "detok keygen" in done.stderr, done.stderr
