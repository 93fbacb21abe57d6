"""What a StreamTable step returns: per-row Python values (`StepResult`) or the frontend's packed
wire columns (`PackedStep`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

import numpy as np

from detok.wire.params import Finish
from detok.wire.packing import split_text, unpack_u32


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_RIDS = np.zeros(0, dtype=np.uint64)


def unknown_finish(rid: Hashable) -> Finish:
    return Finish("error", None, f"unknown request id {rid!r} (not registered, or already finished)")


class StepResult(NamedTuple):
    texts: list[str]
    offsets: list[int]  # char offset of each row's text in its request's output
    num_tokens: list[int]  # output tokens the row's request had consumed after the row
    finishes: list[Finish | None]


class PackedStep(NamedTuple):
    """A step's output as the frontend's wire columns: `text` is the rows' texts in UTF-8, back to
    back; `lengths` (chars of each row's text), `offsets` and `num_tokens` (as in StepResult),
    `byte_lengths` (UTF-8 bytes of each row's text) and `tags` (the tag each row's request was
    opened with, 0 for an unknown rid) are packed little-endian uint32, one per row (`text` is
    empty when the step gave each row's str alone: `step_packed(packed_text=False)`). `finished`:
    (row, rid, finish) of rows that ended their request. `unknown_rows` / `unknown_rids`: the rows
    whose rid is not open (never registered, or finished by an earlier row), kept as arrays, not
    as a Finish per row: a flood of a million unknown rids builds no per-row objects (the compiled
    step; the numpy step lists them in `finished`)."""

    text: bytes
    lengths: bytes
    offsets: bytes
    num_tokens: bytes
    byte_lengths: bytes
    tags: bytes
    finished: list[tuple[int, Hashable, Finish]]
    unknown_rows: np.ndarray = _NO_ROWS
    unknown_rids: np.ndarray = _NO_RIDS
    # uint8 per row when typed requests' rows came off the compiled path (1 reasoning, 2 content,
    # 3 arguments of the request's last call; 0 plain text), else empty (detok.stream.typed_fast)
    kinds: bytes = b""
    # each row's text as a str, when the step was asked for them (`step_packed(row_texts=True)`)
    texts: list[str] | None = None

    def unpacked(self) -> StepResult:
        texts = self.texts if self.texts is not None else split_text(self.text, self.lengths)
        finishes: list[Finish | None] = [None] * len(texts)
        for row, _, finish in self.finished:
            finishes[row] = finish
        for row, rid in zip(self.unknown_rows.tolist(), self.unknown_rids.tolist()):
            finishes[row] = unknown_finish(rid)
        return StepResult(texts, unpack_u32(self.offsets).tolist(), unpack_u32(self.num_tokens).tolist(), finishes)
