"""The stack's health, shared with frontend processes (`detok serve --frontends N`).

The pool and the scheduler stub are supervised by the `detok serve` process; a frontend process
answers `/health` and decides admission from what that process last published: a JSON snapshot
(components, per-part detail, scheduler generation) the supervisor writes every
`PUBLISH_EVERY_S` to a file (written aside and renamed, so a reader never sees half of one). A
snapshot older than `STALE_AFTER_S` means the supervisor is gone or hung: the scheduler counts as
down (503), which is what a client should see then.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

PUBLISH_EVERY_S: Final = 0.1
STALE_AFTER_S: Final = 5.0
_READ_EVERY_S: Final = 0.05  # a frontend re-reads the file at most this often (admission reads it per request)


class HealthBoard:
    """Supervisor side: publishes `snapshot()` until closed."""

    def __init__(self, path: str, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._stop = threading.Event()
        self.publish()
        self._thread = threading.Thread(target=self._run, name="detok-health-board", daemon=True)
        self._thread.start()

    def publish(self) -> None:
        body = dict(self._snapshot(), published=time.time())
        aside = f"{self.path}.{os.getpid()}.tmp"
        with open(aside, "w") as f:
            json.dump(body, f)
        os.replace(aside, self.path)

    def _run(self) -> None:
        while not self._stop.wait(PUBLISH_EVERY_S):
            try:
                self.publish()
            except Exception:  # a failed write leaves the last snapshot, which goes stale: 503
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def _fresh(body: dict[str, Any]) -> bool:
    """The snapshot was published recently: its supervisor is alive."""
    return time.time() - float(body.get("published", 0.0)) <= STALE_AFTER_S


class HealthView:
    """Frontend side: the last snapshot, as FrontendState's health callables."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._read_at = 0.0
        self._body: dict[str, Any] = {}

    def _current(self) -> dict[str, Any]:
        now = time.monotonic()
        if now - self._read_at >= _READ_EVERY_S:
            self._read_at = now
            try:
                with open(self.path) as f:
                    self._body = json.load(f)
            except (OSError, ValueError):
                self._body = {}
        return self._body

    def health(self) -> dict[str, bool]:
        body = self._current()
        components = dict(body.get("components") or {"pool": False, "scheduler": False})
        if not _fresh(body):
            components["scheduler"] = False  # nobody supervises the stack any more
        return components

    def scheduler_serving(self) -> bool:
        """health()["scheduler"] alone (no copy of the components)."""
        body = self._current()
        return bool((body.get("components") or {}).get("scheduler", False)) and _fresh(body)

    def detail(self) -> dict[str, object]:
        return dict(self._current().get("detail") or {})

    def generation(self) -> int:
        return int(self._current().get("generation", 0))
