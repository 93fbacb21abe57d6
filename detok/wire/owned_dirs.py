"""detok's temporary directories (ipc sockets, metrics), each locked by its owner while it lives,
and the removal of those a killed stack left behind.

A stack removes its directories when it stops; a SIGKILLed one cannot. Each directory therefore
holds an owner file on which the creating process keeps an exclusive `flock` for as long as it
runs (the kernel drops the lock when the process dies, however it dies; the descriptor is
close-on-exec, so no spawned child keeps it). `remove_orphans`, run when `detok serve` or `detok
pool` starts, removes every `detok-*` directory of this user whose owner file it can lock: its
owner is gone. A directory whose lock is held belongs to a running stack and is never touched, nor
is any directory without an owner file (another program's, or a detok older than this).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

log = logging.getLogger("detok.wire")

OWNER_FILE: Final = ".detok-owner"
PREFIX: Final = "detok-"
HEALTH_SUFFIX: Final = ".health.json"


class OwnedDir:
    """A new private directory (mode 0700) under `parent`, locked by this process until `remove()`."""

    def __init__(self, prefix: str = PREFIX, parent: str | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        # locked before it is named OWNER_FILE: a cleaner never sees this directory unlocked
        fd, staged = tempfile.mkstemp(dir=self.path, prefix=".owner-")
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(staged, self.path / OWNER_FILE)
        self._fd: int | None = fd

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)  # after the removal: the directory is never unlocked while it exists
            self._fd = None

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # type: ignore[arg-type]


def temp_roots() -> list[Path]:
    """Where detok creates its directories: the temp dir, and /tmp (ipc paths must be short)."""
    roots = [Path(tempfile.gettempdir())]
    if Path("/tmp").is_dir() and Path("/tmp").resolve() != roots[0].resolve():
        roots.append(Path("/tmp"))
    return roots


def remove_orphans(roots: list[Path] | None = None) -> list[Path]:
    """Remove the detok directories whose owner process is gone; returns them."""
    removed = []
    uid = os.getuid()
    for root in roots if roots is not None else temp_roots():
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                if not (entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_uid == uid):
                    continue
            except OSError:
                continue
            if _remove_if_orphaned(Path(entry.path)):
                removed.append(Path(entry.path))
        removed += _remove_stray_files(root)
    if removed:
        log.info("removed %d directories left by stopped detok stacks: %s", len(removed),
                 ", ".join(p.name for p in removed))
    return removed


def _remove_stray_files(root: Path) -> list[Path]:
    """`detok-*.health.json` files beside a directory that is gone (`detok serve --frontends N`
    keeps its health board next to its metrics directory)."""
    removed = []
    for path in root.glob(f"{PREFIX}*{HEALTH_SUFFIX}"):
        owner = path.with_name(path.name[: -len(HEALTH_SUFFIX)])
        if path.is_file() and not path.is_symlink() and not owner.exists() and path.stat().st_uid == os.getuid():
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def _remove_if_orphaned(path: Path) -> bool:
    try:
        fd = os.open(path / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no owner file: not ours to judge
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its owner is alive
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)
