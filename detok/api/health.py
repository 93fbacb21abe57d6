"""`/health` and the health watchdog (the contract: docs/http-api.md and docs/reliability.md).

Only the scheduler's state decides what the frontend does: while it is down, `/health` is 503 and
new requests are refused (503); when it goes down, or comes back as a new process
(`scheduler_generation` changed), the requests it held are lost and end with an error. A dead or
stalled worker never makes the frontend fail anything (the scheduler client handles its shard);
it only makes `/health` say "degraded".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from detok.wire.to_frontends import DeltaBatch, RequestFinished
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import Finish

log = logging.getLogger("detok.frontend")

HEALTH_POLL_S = 0.25


class SchedulerWatch:
    """Tracks the scheduler's state and which generation of it each request in flight went to."""

    def __init__(
        self,
        receiver: DeltaReceiver,
        health: Callable[[], dict[str, bool]],
        health_detail: Callable[[], dict[str, Any]],
        generation: Callable[[], int],
        scheduler_serving: Callable[[], bool] | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.receiver = receiver
        self.health = health
        # admission asks per request: the scheduler's state alone, where the stack can tell it
        # without every component's (the pool's part copies its slots under a lock)
        self._scheduler_serving = scheduler_serving or self._scheduler_from_health
        self.health_detail = health_detail
        self.generation = generation
        self.scheduler_down = False
        # the frontend is stopping: the scheduler going down then is the stack stopping (a SIGTERM
        # to the whole process group reaches the stub too), not a fault to report
        self.stopping = stopping
        self._seen_generation = generation()
        self._inflight: dict[int, int] = {}  # rid -> scheduler generation it was sent to

    # ---- requests -------------------------------------------------------------------------------
    def sent(self, rids: list[int]) -> None:
        generation = self.generation()
        for rid in rids:
            self._inflight[rid] = generation

    def ended(self, rids: list[int]) -> None:
        for rid in rids:
            self._inflight.pop(rid, None)

    def scheduler_up(self) -> bool:
        """The scheduler's state now (admission: not the last poll's, which may be 0.25 s old)."""
        return self._scheduler_serving()

    def _scheduler_from_health(self) -> bool:
        return bool(self.health().get("scheduler", False))

    # ---- /health --------------------------------------------------------------------------------
    def report(self) -> tuple[int, dict[str, Any]]:
        """(status code, body) of `/health`."""
        components = self.health()
        if not components.get("scheduler", False):
            status, code = "unavailable", 503
        else:
            status, code = ("ok" if all(components.values()) else "degraded"), 200
        return code, {"status": status, **components, "detail": self.health_detail()}

    # ---- watchdog -------------------------------------------------------------------------------
    def poll(self) -> None:
        """Compare with the last poll; fail the requests whose scheduler state is gone."""
        up = self.health().get("scheduler", False)
        generation = self.generation()
        if not up and not self.scheduler_down:
            # (stopping: the drain's own words, whichever of the two ends a stream first)
            stopping = self.stopping()
            failed = self.receiver.fail_all("the server is shutting down" if stopping
                                            else "the request was lost: the scheduler is down")
            self._inflight.clear()
            if stopping:  # (as the drain reports the requests it ends: a warning only if there were any)
                log.log(logging.WARNING if failed else logging.INFO,
                        "shutting down: the scheduler stopped with the stack; %d requests in flight ended with an "
                        "error", failed)
            else:
                log.error("the scheduler is down: refusing requests (503) until it is back; %d requests in "
                          "flight failed", failed)
        elif up and generation != self._seen_generation:
            failed = self._fail_older_than(generation, "the request was lost: the scheduler restarted")
            log.warning("the scheduler restarted (generation %d); %d requests it held failed", generation, failed)
        elif up and self.scheduler_down:
            log.warning("the scheduler is up again")
        self.scheduler_down = not up
        self._seen_generation = generation

    def _fail_older_than(self, generation: int, message: str) -> int:
        lost = [rid for rid, g in self._inflight.items() if g != generation]
        if lost:  # finished through the receiver's own path, as a worker's error finish would be
            finish = Finish("error", None, message)
            self.receiver.dispatch(DeltaBatch.from_rows(-1, 0.0, [], [], [], [RequestFinished(r, finish, 0) for r in lost]))
        self.ended(lost)
        return len(lost)

    async def run(self, every: Callable[[], None] | None = None) -> None:
        """Poll forever (`every` also runs at each poll, e.g. a metrics flush)."""
        while True:
            if every is not None:
                every()
            try:
                self.poll()
            except Exception:  # a failing health probe must not end the watchdog
                log.exception("health check failed")
            await asyncio.sleep(HEALTH_POLL_S)
