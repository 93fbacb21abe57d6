"""Give freed heap memory back to the OS after a burst (glibc's `malloc_trim`).

A heavy request (a 4 MB prompt, a flood of unknown rids) allocates hundreds of MB of short-lived
objects; once they are freed, glibc keeps most of those pages in its arenas (the RSS stays at the
peak for minutes). `malloc_trim(0)` returns every free page at the top of each arena and, since
glibc 2.8, the free pages inside it. It is a no-op where glibc is not the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable

# At most one trim per this many seconds (a trim walks every arena: its cost grows with the heap).
TRIM_MIN_INTERVAL_S = 1.0


def _load_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # ctypes releases the GIL during the call


_TRIM = _load_trim()
_lock = threading.Lock()
_last = 0.0


def trim_heap(force: bool = False) -> bool:
    """Return free heap pages to the OS (rate-limited unless `force`); True if a trim ran."""
    global _last
    if _TRIM is None:
        return False
    now = time.monotonic()
    with _lock:
        if not force and now - _last < TRIM_MIN_INTERVAL_S:
            return False
        _last = now
    _TRIM(0)
    return True
