"""The fields of a received request that the frontend's compiled push reads and writes
(`push_rows`, detok/_native/_directrows.c), in the native side's own storage.

`StreamFields` is the base of `RequestStream` and `TypedFields` the base of `TypedState`: the
compiled types of `detok._native._chunkpush` where the extension is built (a struct whose fields
the Python class reads as it reads its own slots, and `push_rows` reads without looking anything
up by name), else the Python classes below with the same fields. `idle_for_push` is the one rule of
when a stream's row may be pushed at once; `push_rows` runs its compiled twin (`idle_for_push` of
the extension), which tests/native/test_twins_push.py holds equal to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from detok.receiver.token_logprobs import TokenLogprobs
    from detok.wire.params import Finish


class PythonStreamFields:
    """A RequestStream's push fields, without the extension (the compiled StreamFields' twin)."""

    __slots__ = ("_chunks", "_logprobs", "_next_token", "_push_error", "_push_queued", "_pusher", "_received",
                 "_tokens", "_typed", "_waiter", "finish")

    _chunks: list[str]
    _logprobs: list[TokenLogprobs]
    _received: int
    _next_token: int
    _tokens: int | None
    finish: Finish | None
    _waiter: asyncio.Future[None] | None
    _typed: Any
    _pusher: Any
    _push_error: BaseException | None
    _push_queued: bool


class PythonTypedFields:
    """A TypedState's push fields, without the extension (the compiled TypedFields' twin)."""

    __slots__ = ("args", "content", "last_call", "new_calls", "new_reasoning", "reasoning")

    new_reasoning: list[str]
    new_calls: list[Any]
    reasoning: int
    content: int
    args: dict[int, int]
    last_call: int


def idle_for_push(fields: Any, typed: bool) -> bool:
    """Nothing waits in the stream - no text, no logprob entries, no finish, and (unless `typed`: a
    parsed request's row, whose TypedState is checked by the caller) no typed output - and no push
    is queued: a new row of it may be written at once as the only thing its chunk holds."""
    return (not fields._push_queued and fields.finish is None and (typed or fields._typed is None)
            and type(fields._chunks) is list and not fields._chunks
            and type(fields._logprobs) is list and not fields._logprobs)


try:  # the compiled storage (optional: without it, the Python classes of the same fields)
    from detok._native._chunkpush import StreamFields, TypedFields
except ImportError:  # pragma: no cover - a build without its C extensions
    StreamFields = PythonStreamFields  # type: ignore[assignment,misc]
    TypedFields = PythonTypedFields  # type: ignore[assignment,misc]
