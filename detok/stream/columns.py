"""The batched table's per-slot columns (`StreamColumns`): the state of every live request that
the compiled step (`_plainstep.c`, through `packed_step`) and the numpy step (`numpy_step`) both
take. A slot is a request's row in every column; `StreamTable` gives slots out and grows the
columns, and each stepper reads and writes them in place."""

from __future__ import annotations

import numpy as np

UNKNOWN = 0  # slot 0 is never given out: unknown rids map to it, and it never matches a start
NOT_PLAIN = -2  # `expect` of a slot whose next step must go through its DecodeStream
PENDING_WIDTH = 4  # the held-bytes column's width: an incomplete UTF-8 character holds at most 3
FIRSTS_BYTES = 32  # a slot's stop strings' first characters, UTF-8 (the compiled step's column width)

# the columns a grown table doubles, zero-filled (`expect` is filled with NOT_PLAIN)
_ZEROED = ("pend", "pend_len", "tag", "eos_stops", "mode", "ntok", "choff", "stop_firsts", "stop_firsts_len")


class StreamColumns:
    """One row per slot: `expect` (the next token index of a plain slot, NOT_PLAIN otherwise),
    `pend`/`pend_len` (bytes of an incomplete character held), `tag` (the caller's tag, kind bits
    on top for typed output), `eos_stops` (the request stops on end-of-sequence ids), `mode` (its
    decode mode), `ntok`/`choff` (tokens and chars so far), `stop_firsts`/`stop_firsts_len` (its
    stop strings' first characters). The `v_*` memoryviews are the same buffers: a scalar store or
    load through one costs a few tens of ns, through numpy's indexing about a hundred (per request
    set-up and end)."""

    __slots__ = ("choff", "eos_stops", "expect", "mode", "ntok", "pend", "pend_len", "stop_firsts", "stop_firsts_len",
                 "tag", "v_choff", "v_eos_stops", "v_expect", "v_firsts", "v_firsts_len", "v_mode", "v_ntok",
                 "v_pend_len", "v_tag")

    def __init__(self, capacity: int) -> None:
        self.expect = np.full(capacity, NOT_PLAIN, dtype=np.int64)
        self.expect[UNKNOWN] = -3
        self.pend = np.zeros((capacity, PENDING_WIDTH), dtype=np.uint8)
        self.pend_len = np.zeros(capacity, dtype=np.uint8)
        self.tag = np.zeros(capacity, dtype=np.uint32)
        self.eos_stops = np.zeros(capacity, dtype=bool)
        self.mode = np.zeros(capacity, dtype=np.int64)
        self.ntok = np.zeros(capacity, dtype=np.int64)
        self.choff = np.zeros(capacity, dtype=np.int64)
        self.stop_firsts = np.zeros((capacity, FIRSTS_BYTES), dtype=np.uint8)
        self.stop_firsts_len = np.zeros(capacity, dtype=np.uint8)
        self._views()

    def __len__(self) -> int:
        return len(self.expect)

    def grow(self) -> None:
        """Twice the slots (the new ones empty); buffers taken before are stale after this."""
        old = len(self.expect)
        for name in _ZEROED:
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))
        self.expect = np.concatenate([self.expect, np.full(old, NOT_PLAIN, dtype=np.int64)])
        self._views()

    def step_buffers(self) -> tuple[memoryview, ...]:
        """The columns the compiled step and plain opener take, in their order (as memoryviews: the
        step takes a buffer of each per call, cheaper from a memoryview than from a numpy array)."""
        return tuple(map(memoryview, (self.pend, self.pend_len, self.choff, self.ntok, self.expect, self.eos_stops,
                                      self.mode, self.tag)))

    def _views(self) -> None:
        self.v_expect = memoryview(self.expect)
        self.v_ntok = memoryview(self.ntok)
        self.v_choff = memoryview(self.choff)
        self.v_pend_len = memoryview(self.pend_len)
        self.v_tag = memoryview(self.tag)
        self.v_mode = memoryview(self.mode)
        self.v_eos_stops = memoryview(self.eos_stops)
        self.v_firsts_len = memoryview(self.stop_firsts_len)
        self.v_firsts = memoryview(self.stop_firsts).cast("B")  # (flat: slot k's at FIRSTS_BYTES * k)
