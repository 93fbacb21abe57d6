"""Encoders: one per socket owner, reused (msgspec reuses its buffer)."""

from __future__ import annotations

import msgspec


def new_encoder() -> msgspec.msgpack.Encoder:
    """An encoder for one socket owner; keep it and reuse it (it reuses its buffer)."""
    return msgspec.msgpack.Encoder()
