"""What a StreamTable step returns: per-row Python values (`StepResult`) or the frontend's packed
wire columns (`PackedStep`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from detok.stream.params import Finish
from detok.wire.packing import split_text, unpack_u32


class StepResult(NamedTuple):
    texts: list[str]
    offsets: list[int]  # char offset of each row's text in its request's output
    num_tokens: list[int]  # output tokens the row's request had consumed after the row
    finishes: list[Finish | None]


class PackedStep(NamedTuple):
    """A step's output as the frontend's wire columns: `text` is the rows' texts in UTF-8, back to
    back; `lengths` (chars of each row's text), `offsets` and `num_tokens` (as in StepResult),
    `byte_lengths` (UTF-8 bytes of each row's text) and `tags` (the tag each row's request was
    opened with, 0 for an unknown rid) are packed little-endian uint32, one per row. `finished`:
    (row, rid, finish) of rows that ended their request."""

    text: bytes
    lengths: bytes
    offsets: bytes
    num_tokens: bytes
    byte_lengths: bytes
    tags: bytes
    finished: list[tuple[int, Hashable, Finish]]

    def unpacked(self) -> StepResult:
        texts = split_text(self.text, self.lengths)
        finishes: list[Finish | None] = [None] * len(texts)
        for row, _, finish in self.finished:
            finishes[row] = finish
        return StepResult(texts, unpack_u32(self.offsets).tolist(), unpack_u32(self.num_tokens).tolist(), finishes)
