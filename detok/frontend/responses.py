"""OpenAI responses from a request's delta stream: SSE chunks when streaming, one body otherwise.

Both are built from the same deltas, so streamed text always equals non-streamed text. Latency
(time to first token, inter-token latency, end-to-end) is timed here, where the frontend actually
sees text arrive.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Literal

import msgspec

from detok.frontend import sse
from detok.frontend.errors import RequestError, error_json
from detok.frontend.openai_types import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    Usage,
)
from detok.frontend.latency import LatencyRecorder, RequestTimer
from detok.receiver import RequestStream
from detok.stream.params import Finish

_ENCODER = msgspec.json.Encoder()


@dataclasses.dataclass
class ResponseContext:
    kind: Literal["completion", "chat"]
    id: str
    model: str
    prompt_tokens: int
    include_usage: bool
    arrival: float  # time.perf_counter() when the request arrived
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))


def _error(finish: Finish) -> RequestError:
    return RequestError(finish.message or "the request failed", status=500, type="server_error")


def _usage(ctx: ResponseContext, completion_tokens: int) -> Usage:
    return Usage(ctx.prompt_tokens, completion_tokens, ctx.prompt_tokens + completion_tokens)


def _stop_reason(finish: Finish) -> str | int | None:
    return finish.matched if finish.reason == "stop" else None


def _text_chunk(ctx: ResponseContext, text: str, first: bool) -> bytes:
    if ctx.kind == "chat":
        delta = ChatDelta(role="assistant", content=text) if first else ChatDelta(content=text)
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(
            ctx.id, ctx.created, ctx.model, [ChatChunkChoice(0, delta)]
        )
    else:
        chunk = Completion(ctx.id, ctx.created, ctx.model, [CompletionChoice(0, text, None)])
    return sse.event(_ENCODER.encode(chunk))


def _finish_chunk(ctx: ResponseContext, finish: Finish) -> bytes:
    if ctx.kind == "chat":
        choice = ChatChunkChoice(0, ChatDelta(), finish.reason, _stop_reason(finish))
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(ctx.id, ctx.created, ctx.model, [choice])
    else:
        chunk = Completion(
            ctx.id, ctx.created, ctx.model, [CompletionChoice(0, "", finish.reason, _stop_reason(finish))]
        )
    return sse.event(_ENCODER.encode(chunk))


def _usage_chunk(ctx: ResponseContext, completion_tokens: int) -> bytes:
    usage = _usage(ctx, completion_tokens)
    if ctx.kind == "chat":
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(ctx.id, ctx.created, ctx.model, [], usage)
    else:
        chunk = Completion(ctx.id, ctx.created, ctx.model, [], usage)
    return sse.event(_ENCODER.encode(chunk))


async def stream_events(
    ctx: ResponseContext, stream: RequestStream, recorder: LatencyRecorder | None
) -> AsyncIterator[bytes]:
    """The SSE body of a streamed response (the caller aborts the request if this is cancelled)."""
    latency = RequestTimer(recorder, ctx.arrival)
    first = True
    if ctx.kind == "chat":  # OpenAI's first chunk announces the role before any text
        yield _text_chunk(ctx, "", first=True)
        first = False
    async for delta in stream:
        if delta.text:
            latency.text()
            yield _text_chunk(ctx, delta.text, first)
            first = False
        finish = delta.finish
        if finish is None:
            continue
        latency.finish(finish.reason)
        if finish.reason == "error":
            yield sse.event(error_json(_error(finish)))
        else:
            yield _finish_chunk(ctx, finish)
            if ctx.include_usage:
                yield _usage_chunk(ctx, delta.num_tokens or 0)
        break
    yield sse.DONE


async def collect_body(ctx: ResponseContext, stream: RequestStream, recorder: LatencyRecorder | None) -> bytes:
    """The JSON body of a non-streamed response; raises RequestError if the request failed."""
    latency = RequestTimer(recorder, ctx.arrival)
    parts: list[str] = []
    finish: Finish | None = None
    num_tokens = 0
    async for delta in stream:
        if delta.text:
            latency.text()
            parts.append(delta.text)
        if delta.finish is not None:
            finish, num_tokens = delta.finish, delta.num_tokens or 0
            break
    if finish is None:  # the stream ended without a finish: only if the receiver dropped it
        raise RequestError("the request ended without a result", status=500, type="server_error")
    latency.finish(finish.reason)
    if finish.reason == "error":
        raise _error(finish)
    text = "".join(parts)
    usage = _usage(ctx, num_tokens)
    if ctx.kind == "chat":
        choice = ChatChoice(0, ChatMessageOut(text), finish.reason, _stop_reason(finish))
        return _ENCODER.encode(ChatCompletion(ctx.id, ctx.created, ctx.model, [choice], usage))
    choice_c = CompletionChoice(0, text, finish.reason, _stop_reason(finish))
    return _ENCODER.encode(Completion(ctx.id, ctx.created, ctx.model, [choice_c], usage))
