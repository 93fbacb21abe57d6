"""Waiting on a condition instead of sleeping: the one place tests poll with a deadline.

A fixed sleep either wastes time on a quiet machine or is too short on a loaded one; these poll the
condition and give up only after a generous deadline (the test then fails with what it waited for).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0  # generous: a loaded 2-core box is slow, but a hang still fails the test


def wait_until(condition: Callable[[], T], timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.02,
               what: str | Callable[[], str] = "") -> T:
    """Polls `condition` until it returns something truthy (returned) or `timeout` s pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            message = what() if callable(what) else what
            raise AssertionError(f"not reached in {timeout} s: {message or getattr(condition, '__name__', condition)}")
        time.sleep(interval)


def holds_for(condition: Callable[[], object], duration: float, interval: float = 0.02) -> bool:
    """True if `condition` stays truthy for `duration` s (for "nothing changes" checks that have no
    event to wait for; prefer an event)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        if not condition():
            return False
        time.sleep(interval)
    return bool(condition())


def collect_until(poll: Callable[[], list[T]], done: Callable[[list[T]], bool], timeout: float = DEFAULT_TIMEOUT_S,
                  interval: float = 0.01) -> list[T]:
    """Accumulates what `poll()` returns until `done(items)` (returned) or the deadline (AssertionError)."""
    items: list[T] = []
    deadline = time.monotonic() + timeout
    while not done(items):
        if time.monotonic() > deadline:
            raise AssertionError(f"not complete in {timeout} s: {len(items)} items collected")
        items.extend(poll())
        time.sleep(interval)
    return items


def output_matches(read: Callable[[], str], predicate: Callable[[str], bool], timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Waits until the text `read()` returns satisfies `predicate` (e.g. a log line appeared); returns it."""
    return wait_until(lambda: (lambda text: text if predicate(text) else "")(read()), timeout,
                      what=lambda: f"output so far:\n{read()[-3000:]}")


async def async_wait_until(condition: Callable[[], T], timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.01,
                           what: str = "") -> T:
    """`wait_until` inside an event loop: polls without blocking the loop."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout} s: {what or getattr(condition, '__name__', condition)}")
        await asyncio.sleep(interval)
