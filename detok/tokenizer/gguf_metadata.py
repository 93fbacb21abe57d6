"""Read the key/value metadata of a GGUF file, and where its tensors lie: the header only, tensor
data is never touched.

`gguf.GGUFReader` builds two numpy views per string of every array, which takes 15 s for the
280k merges of a Llama-3 vocabulary; this reader walks the same layout (constants from the `gguf`
package) in well under a second and maps only the header of multi-GB model files.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from typing import Any

import numpy as np
from gguf import GGUF_MAGIC, READER_SUPPORTED_VERSIONS, GGUFValueType

GGUF_MAGIC_BYTES = struct.pack("<I", GGUF_MAGIC)  # b"GGUF"

_SCALAR_FORMAT = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


class GGUFFormatError(ValueError):
    """The bytes are not a well-formed GGUF header."""


class _Cursor:
    def __init__(self, buf: mmap.mmap, byte_order: str) -> None:
        self.buf = buf
        self.pos = 0
        self.order = byte_order

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFFormatError(f"file is truncated: {what} at byte {self.pos} needs {n} bytes")

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self._need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        n = self.scalar("Q", what)
        self._need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFFormatError(f"{what} is not valid UTF-8: {raw[:40]!r}") from None

    def _strings(self, count: int, key: str) -> list[str]:
        """The hot loop of a vocabulary (hundreds of thousands of tokens and merges), kept lean."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = struct.Struct(self.order + "Q").unpack_from
        out: list[str] = []
        append = out.append
        try:
            for _ in range(count):
                (n,) = length(buf, pos)
                pos += 8
                if pos + n > end:
                    raise struct.error
                append(str(buf[pos : pos + n], "utf-8"))
                pos += n
        except struct.error:
            raise GGUFFormatError(f"file is truncated: {key}[{len(out)}] at byte {pos}") from None
        except UnicodeDecodeError:
            raise GGUFFormatError(f"{key}[{len(out)}] is not valid UTF-8") from None
        self.pos = pos
        return out

    def value(self, vtype: int, key: str) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(key)
        if vtype == GGUFValueType.ARRAY:
            return self.array(key)
        fmt = _SCALAR_FORMAT.get(vtype)  # type: ignore[call-overload]
        if fmt is None:
            raise GGUFFormatError(f"{key}: unknown value type {vtype}")
        return self.scalar(fmt, key)

    def array(self, key: str) -> Any:
        itype = self.scalar("I", key)
        count = self.scalar("Q", key)
        if itype == GGUFValueType.STRING:
            return self._strings(count, key)
        if itype == GGUFValueType.ARRAY:
            return [self.array(f"{key}[{i}]") for i in range(count)]
        fmt = _SCALAR_FORMAT.get(itype)
        if fmt is None:
            raise GGUFFormatError(f"{key}: unknown array item type {itype}")
        dtype = np.dtype(fmt).newbyteorder(self.order)
        self._need(count * dtype.itemsize, key)
        values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
        self.pos += count * dtype.itemsize
        return values


def is_gguf(head: bytes) -> bool:
    """True if `head` (the first bytes of a file) starts with the GGUF magic."""
    return head[:4] == GGUF_MAGIC_BYTES


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    """Where one tensor's data lies in the file (its bytes are not read here)."""

    name: str
    dims: tuple[int, ...]  # as stored: the fastest-varying dimension first
    ggml_type: int  # a gguf.GGMLQuantizationType value
    offset: int  # of its first byte, from the start of the file


_DEFAULT_ALIGNMENT = 32  # GGUF's, when general.alignment is absent


def _parse(buf: mmap.mmap, tensors: list[GGUFTensorInfo] | None = None) -> dict[str, Any]:
    """The metadata; the tensor infos too, appended to `tensors` if given."""
    if not is_gguf(buf[:4]):
        raise GGUFFormatError("not a GGUF file (no 'GGUF' magic)")
    cur = _Cursor(buf, "<")
    cur.pos = 4
    version = cur.scalar("I", "version")
    if version & 0xFFFF == 0:  # written on a big-endian host
        cur.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in READER_SUPPORTED_VERSIONS:
        raise GGUFFormatError(f"unsupported GGUF version {version}")
    tensor_count = cur.scalar("Q", "tensor count")
    kv_count = cur.scalar("Q", "metadata count")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cur.string("metadata key")
        metadata[key] = cur.value(cur.scalar("I", key), key)
    if tensors is not None:
        infos = []
        for _ in range(tensor_count):
            name = cur.string("tensor name")
            dims = tuple(cur.scalar("Q", name) for _ in range(cur.scalar("I", name)))
            infos.append((name, dims, cur.scalar("I", name), cur.scalar("Q", name)))
        alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
        start = -(-cur.pos // alignment) * alignment  # the data section starts aligned
        tensors += [GGUFTensorInfo(name, dims, kind, start + offset) for name, dims, kind, offset in infos]
    return metadata


def _read(path: str | os.PathLike[str], tensors: list[GGUFTensorInfo] | None) -> dict[str, Any]:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise GGUFFormatError("file is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            try:
                return _parse(mapped, tensors)
            except GGUFFormatError as e:
                problem = str(e)  # raised below, once the traceback no longer pins the mapping
    raise GGUFFormatError(problem)


def read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """All metadata key/values; numeric arrays as numpy arrays, string arrays as lists.

    Raises GGUFFormatError for anything that is not a complete GGUF header, OSError if unreadable.
    """
    return _read(path, None)


def read_gguf_layout(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[GGUFTensorInfo]]:
    """The metadata (as `read_gguf_metadata`) and each tensor's name, dimensions, type and offset."""
    tensors: list[GGUFTensorInfo] = []
    return _read(path, tensors), tensors
