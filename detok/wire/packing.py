"""Packed little-endian columns of the wire messages, and the packed text of a step.

A step's texts travel as one UTF-8 blob plus each row's length in chars (uint32): the worker
writes the blob straight from its per-token tables without a Python object per row, and a
frontend that wants per-row strings decodes the blob once and slices it (`split_text`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Final

import numpy as np

try:  # the compiled helpers (optional extension); the Python ones below give the same results
    from detok._native._plainstep import group_rows as _compiled_group_rows
    from detok._native._plainstep import split_text as _compiled_split_text
except ImportError:  # pragma: no cover - depends on the build
    _compiled_split_text = _compiled_group_rows = None

_LITTLE_ENDIAN: Final = sys.byteorder == "little"

# array's "I" and "Q" are 4 and 8 bytes on every platform CPython supports with 64-bit ints.
assert array("I").itemsize == 4 and array("Q").itemsize == 8


def pack_u32(values: Iterable[int]) -> bytes:
    """Pack non-negative ints < 2**32 (token ids, starts, counts) as little-endian uint32.
    From numpy: `values.astype("<u4").tobytes()`."""
    return _pack("I", values)


def pack_rids(rids: Iterable[int]) -> bytes:
    """Pack rids as little-endian uint64. From numpy: `rids.astype("<u8").tobytes()`."""
    return _pack("Q", rids)


def unpack_u32(data: bytes) -> array[int]:
    """The ints of `pack_u32` bytes; ValueError if the length is not a multiple of 4."""
    return _unpack("I", data)


def unpack_rids(data: bytes) -> array[int]:
    """The rids of `pack_rids` bytes; ValueError if the length is not a multiple of 8."""
    return _unpack("Q", data)


def join_texts(texts: Sequence[str]) -> tuple[bytes, bytes]:
    """(UTF-8 blob, packed char lengths) of per-row texts; `split_text` is the inverse."""
    return "".join(texts).encode(), pack_u32(map(len, texts))


def split_text(text: bytes, lengths: bytes) -> list[str]:
    """Per-row texts of a packed text. ValueError if the blob is not UTF-8 or the lengths do not
    add up to its length in chars."""
    if _compiled_split_text is not None:
        return _compiled_split_text(text, lengths)
    whole = text.decode()
    ends = list(accumulate(unpack_u32(lengths)))
    if (ends[-1] if ends else 0) != len(whole):
        raise ValueError("lengths do not add up to the text")
    return [whole[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def group_rows(
    tags: bytes, byte_lengths: bytes, text: bytes, rids: bytes, lengths: bytes, offsets: bytes
) -> list[tuple[int, bytes, bytes, bytes, bytes]]:
    """Packed rows split by tag (uint32 per row): (tag, rids, text, lengths, offsets) per distinct
    tag, in the order of each tag's first row; `byte_lengths` (uint32) cut `text` into rows."""
    if _compiled_group_rows is not None:
        return _compiled_group_rows(tags, byte_lengths, text, rids, lengths, offsets)
    tag_a = np.frombuffer(tags, dtype="<u4")
    nbytes = np.frombuffer(byte_lengths, dtype="<u4")
    if len(nbytes) != len(tag_a) or int(nbytes.sum()) != len(text):
        raise ValueError("byte lengths do not fit the rows and the text")
    rid_a = np.frombuffer(rids, dtype="<u8")
    len_a, off_a = np.frombuffer(lengths, dtype="<u4"), np.frombuffer(offsets, dtype="<u4")
    text_a = np.frombuffer(text, dtype=np.uint8)
    _, first = np.unique(tag_a, return_index=True)
    groups = []
    for tag in tag_a[np.sort(first)].tolist():
        rows = tag_a == tag
        own = text_a[np.repeat(rows, nbytes)].tobytes()
        groups.append((tag, rid_a[rows].tobytes(), own, len_a[rows].tobytes(), off_a[rows].tobytes()))
    return groups


def _pack(code: str, values: Iterable[int]) -> bytes:
    packed = values if isinstance(values, array) and values.typecode == code else array(code, values)
    if not _LITTLE_ENDIAN:
        packed = array(code, packed)
        packed.byteswap()
    return packed.tobytes()


def _unpack(code: str, data: bytes) -> array[int]:
    out = array(code)
    if len(data) % out.itemsize:
        raise ValueError(f"packed {code} column must be a multiple of {out.itemsize} bytes, got {len(data)}")
    out.frombytes(data)
    if not _LITTLE_ENDIAN:
        out.byteswap()
    return out
