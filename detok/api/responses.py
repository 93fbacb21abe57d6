"""OpenAI responses from a request's delta streams (one per choice): SSE chunks when streaming,
one body otherwise.

Both are built from the same deltas by the same per-choice state (`ChoiceState`), so streamed text
always equals non-streamed text, choice by choice. Latency (time to first token, inter-token
latency, end-to-end) is timed here, where the frontend actually sees text arrive.

Logprobs, per choice: `ChoiceState.logprobs(delta)` formats the entries a delta carries (the
workers made the token strings; `detok.streaming.logprobs_format` only shapes them, chat's written
to JSON bytes by `chat_logprobs_json`) for a streamed chunk, and the non-streamed choice carries the
same objects joined (`body_logprobs()`), so a body equals its chunks concatenated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import msgspec

from detok.streaming import sse
from detok.streaming.chunk_push import plain_chunk, pusher_for, pushing
from detok.streaming.chunks import ChunkRenderer
from detok.streaming.merged_deltas import merged_deltas
from detok.api.errors import RequestError, error_json
from detok.streaming.latency import LatencyRecorder, RequestTimer
from detok.streaming.chat_logprobs_json import chat_logprobs_json, joined_chat_logprobs
from detok.streaming.logprobs_format import CompletionLogprobs, CompletionOffsets, completion_logprobs
from detok.streaming.stream_interval import ChunkInterval
from detok.api.openai_types import (
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
from detok.api.typed_responses import TypedChoice
from detok.parsing.types import OutputParsing
from detok.receiver.receiver import RequestDelta, RequestStream
from detok.wire.to_frontends import openai_finish_reason
from detok.wire.params import Finish

_ENCODER = msgspec.json.Encoder()


@dataclasses.dataclass
class ResponseContext:
    kind: Literal["completion", "chat"]
    id: str
    model: str
    prompt_tokens: int
    include_usage: bool
    arrival: float  # time.perf_counter() when the request arrived
    eos_id: int | None = None  # the primary end-of-sequence id: vLLM's `stop_reason: null`
    ignore_eos: bool = False
    echo: str = ""  # text each choice starts with
    role: str = "assistant"  # chat: the reply's role (GenerationJob.role)
    logprobs: int | None = None
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    stream_interval: int = 1  # output tokens per streamed chunk after the first (the server's or the request's)
    completed: bool = False  # the response was built to its end (not cut short by its client)
    continuous_usage: bool = False  # usage in every chunk (stream_options.continuous_usage_stats)
    # output parsing (detok.api.typed_responses): None for plain text
    parsing: OutputParsing | None = None
    reasoning_field: str = "reasoning"
    include_reasoning: bool = True
    parallel_tool_calls: bool = True
    prompt_text: str | None = None  # chat `return_prompt_text`: the rendered prompt, in the first chunk or the body
    # `return_token_ids`: the output ids of each chunk (or the body) and the prompt's (prompt_ids)
    return_token_ids: bool = False
    output_ids: bool = False  # the output's ids too (not with include_reasoning false and a parser)
    prompt_ids: list[int] | None = None
    tokens_as_ids: bool = False  # return_tokens_as_token_ids: logprob tokens written `token_id:{id}`
    # while a streamed body is written straight to its connection (SseResponse under uvicorn):
    # its writer, for the receiving loop's chunk pusher (detok.streaming.chunk_push)
    direct: Any = None

    @property
    def opens_at_once(self) -> bool:
        """A streamed body's first chunk is ready before any delta (chat's role chunks, echo):
        `stream_events` yields it, joined, without waiting."""
        return self.kind == "chat" or bool(self.echo)

    def typed_choice(self) -> TypedChoice | None:
        p = self.parsing
        if p is None or self.kind != "chat":
            return None
        return TypedChoice(self.reasoning_field, self.include_reasoning, self.parallel_tool_calls,
                           p.tool_parser is not None, p.reasoning_parser is not None)


class ChoiceState:
    """One choice's progress: its text (non-streamed), logprobs, finish, tokens and clock."""

    __slots__ = ("as_ids", "calls", "chat", "finish", "ids", "index", "k", "logprob_parts", "num_tokens", "offsets",
                 "parts", "prompt_ids", "timer", "typed")

    def __init__(self, index: int, ctx: ResponseContext, recorder: LatencyRecorder | None) -> None:
        self.index = index
        self.parts: list[str] = [ctx.echo] if ctx.echo else []
        self.chat = ctx.kind == "chat"
        self.k = ctx.logprobs  # None: no logprobs asked for
        self.as_ids = ctx.tokens_as_ids
        self.offsets = CompletionOffsets(len(ctx.echo))  # completions' text_offset, chunk to chunk
        self.logprob_parts: list[Any] = []  # non-streamed: each delta's logprobs, for body_logprobs()
        self.finish: Finish | None = None
        self.num_tokens = 0
        self.calls = 0  # tool calls the worker emitted (from the finish)
        self.timer = RequestTimer(recorder, ctx.arrival)
        self.typed = ctx.typed_choice()
        # return_token_ids: the output ids so far (None: not asked for); completions' prompt ids,
        # until the choice's first chunk carries them (vLLM puts them in the choice)
        self.ids: list[int] | None = [] if ctx.output_ids else None
        self.prompt_ids = ctx.prompt_ids if ctx.return_token_ids and not self.chat else None

    def running_usage(self, ctx: ResponseContext, delta: RequestDelta | None = None) -> Usage | None:
        """vLLM's usage of a chunk with `continuous_usage_stats`: the prompt and this choice's
        output tokens so far (None: not asked for)."""
        if not ctx.continuous_usage:
            return None
        if delta is not None and delta.num_tokens is not None:
            self.num_tokens = delta.num_tokens
        return Usage(ctx.prompt_tokens, self.num_tokens, ctx.prompt_tokens + self.num_tokens)

    def end(self, finish: Finish, num_tokens: int | None, calls: int = 0) -> None:
        self.timer.finish(finish.reason)
        self.finish, self.num_tokens = finish, num_tokens or 0
        self.calls = self.typed.num_calls(calls) if self.typed is not None else 0

    def finish_reason(self) -> str | None:
        return openai_finish_reason(self.finish, self.calls) if self.finish is not None else None

    def logprobs(self, delta: RequestDelta) -> msgspec.Raw | CompletionLogprobs | None:
        """The `logprobs` object of a streamed chunk carrying `delta` (None: none to carry). A
        delta may carry entries and no text (part of a character, a held stop-string prefix, the
        hidden end-of-sequence token): they are sent all the same."""
        entries = delta.logprobs
        if self.k is None or entries is None or not len(entries):
            return None
        if self.as_ids:
            entries = entries.named_by_id(self.chat)
        if self.chat:
            return chat_logprobs_json(entries, self.k)
        return completion_logprobs(entries, self.k, self.offsets)

    def token_ids(self, delta: RequestDelta) -> bytes:
        """A streamed chunk's `,"token_ids":[...]` for `delta` (b"": not asked for), the prompt's
        ids before it in a completion choice's first chunk; the ids are kept for the body too."""
        if self.ids is None:
            return b""
        ids = delta.logprobs.token_ids if delta.logprobs is not None else []
        self.ids.extend(ids)
        head = b""
        if self.prompt_ids is not None:
            head, self.prompt_ids = b',"prompt_token_ids":' + _ENCODER.encode(self.prompt_ids), None
        return head + b',"token_ids":' + _ENCODER.encode(ids) if ids or head else b""

    def body_logprobs(self) -> msgspec.Raw | CompletionLogprobs | None:
        """The `logprobs` object of the non-streamed choice: its chunks' objects joined."""
        if self.k is None:
            return None
        if self.chat:
            return joined_chat_logprobs(self.logprob_parts)
        body = CompletionLogprobs([], [], [], [])
        for part in self.logprob_parts:
            body.extend(part)
        return body


def _or_unset(ids: list[int] | None) -> list[int] | msgspec.UnsetType:
    return msgspec.UNSET if ids is None else ids


def _error(finish: Finish) -> RequestError:
    default = "the request was aborted" if finish.reason == "abort" else "the request failed"
    return RequestError(finish.message or default, status=500, type="server_error")


def stop_reason(ctx: ResponseContext, finish: Finish) -> str | int | None:
    """vLLM v1's: null for the primary EOS (checked first unless ignore_eos), else the stop token
    id or stop string that matched (extra EOS ids count as stop token ids there)."""
    if finish.reason != "stop":
        return None
    if finish.matched == ctx.eos_id and isinstance(finish.matched, int) and not ctx.ignore_eos:
        return None
    return finish.matched


def _usage(ctx: ResponseContext, choices: Sequence[ChoiceState]) -> Usage:
    # as vLLM: the prompt counted once, the completion tokens of every choice summed
    completion = sum(c.num_tokens for c in choices)
    return Usage(ctx.prompt_tokens, completion, ctx.prompt_tokens + completion)


def _text_chunk(ctx: ResponseContext, index: int, text: str, logprobs: Any = None, role: bool = False,
                usage: Usage | None = None) -> bytes:
    if ctx.kind == "chat":
        delta = ChatDelta(role=ctx.role, content=text) if role else ChatDelta(content=text)
        first = role  # (vLLM: the prompt's text and ids in each choice's role chunk, the stream's first)
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(
            ctx.id, ctx.created, ctx.model, [ChatChunkChoice(index, delta, logprobs=logprobs)], usage,
            prompt_token_ids=ctx.prompt_ids if first and ctx.return_token_ids else None,
            prompt_text=ctx.prompt_text if first else None,
        )
    else:
        chunk = Completion(ctx.id, ctx.created, ctx.model, [CompletionChoice(index, text, None, logprobs=logprobs)], usage)
    return sse.event(_ENCODER.encode(chunk))


def _finish_chunk(ctx: ResponseContext, index: int, finish: Finish, usage: Usage | None = None, calls: int = 0) -> bytes:
    reason = stop_reason(ctx, finish)
    if ctx.kind == "chat":
        choice = ChatChunkChoice(index, ChatDelta(), openai_finish_reason(finish, calls), reason)
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(ctx.id, ctx.created, ctx.model, [choice], usage)
    else:
        chunk = Completion(ctx.id, ctx.created, ctx.model, [CompletionChoice(index, "", finish.reason, reason)], usage)
    return sse.event(_ENCODER.encode(chunk))


def _usage_chunk(ctx: ResponseContext, choices: Sequence[ChoiceState]) -> bytes:
    usage = _usage(ctx, choices)
    if ctx.kind == "chat":
        chunk: Completion | ChatCompletionChunk = ChatCompletionChunk(ctx.id, ctx.created, ctx.model, [], usage)
    else:
        chunk = Completion(ctx.id, ctx.created, ctx.model, [], usage)
    return sse.event(_ENCODER.encode(chunk))


async def stream_events(
    ctx: ResponseContext, streams: Sequence[RequestStream], recorder: LatencyRecorder | None
) -> AsyncIterator[bytes]:
    """The SSE body of a streamed response, choices interleaved as their text arrives (the
    caller aborts the requests not yet finished if this is closed early).

    Per chunk the hot path is: take what the choice's stream has (the receiver already joins the
    deltas of several batches a slow consumer did not take yet), format its logprobs if asked, and
    splice the text into the response's byte template (`ChunkRenderer`). With `stream_interval`
    N > 1, a choice's deltas after its first wait until N more output tokens arrived (or its finish)
    and go out as one chunk, as vLLM's (`stream_interval.ChunkInterval`)."""
    render = ChunkRenderer(ctx.kind, ctx.id, ctx.created, ctx.model, len(streams))
    choices = [ChoiceState(i, ctx, recorder) for i in range(len(streams))]
    opening: list[bytes] = []  # (one chunk: the response's head goes out with it, see SseResponse)
    for c in choices:
        if ctx.kind == "chat":  # OpenAI's first chunk of a choice announces the role
            opening.append(_text_chunk(ctx, c.index, "", role=True, usage=c.running_usage(ctx)))
        if ctx.echo:
            opening.append(render.text(c.index, ctx.echo, usage=c.running_usage(ctx),
                                       choice_extra=c.token_ids(RequestDelta(""))))
    if opening:  # (ctx.opens_at_once)
        yield b"".join(opening)
    interval = ChunkInterval(ctx.stream_interval, len(choices))
    finished = 0
    # one choice written straight to its connection: plain deltas go out from the receiving loop
    pusher = pusher_for(ctx, render, choices, streams)
    tail: list[bytes] = []  # the response's last events: written with [DONE] and the body's end, one write
    async with contextlib.aclosing(merged_deltas(streams)) as deltas, pushing(streams, pusher):
        async for index, delta in deltas:
            if (delta := interval.take(index, delta)) is None:  # (stream_interval: it waits)
                continue
            choice = choices[index]
            finish = delta.finish
            # the response's last delta: its chunks go out with the tail, in the one write
            out = tail if finish is not None and finished + 1 == len(choices) else None
            if choice.typed is not None:
                logprobs = choice.logprobs(delta)
                chunks = choice.typed.chunks(render, index, delta, logprobs, choice.running_usage(ctx, delta),
                                             choice.token_ids(delta))
                if chunks:
                    choice.timer.text()
                    if out is not None:
                        out.extend(chunks)
                    else:
                        for chunk in chunks:
                            yield chunk
            else:
                chunk = plain_chunk(ctx, render, choice, index, delta)
                if chunk is not None:
                    if out is not None:
                        out.append(chunk)
                    else:
                        yield chunk
            if finish is None:
                continue
            choice.end(finish, delta.num_tokens, delta.calls)
            if finish.reason in ("error", "abort"):
                tail.append(sse.event(error_json(_error(finish))))
                break
            chunk = _finish_chunk(ctx, index, finish, choice.running_usage(ctx), choice.calls)
            finished += 1
            if finished < len(choices):
                yield chunk
                continue
            tail.append(chunk)
            if ctx.include_usage:
                tail.append(_usage_chunk(ctx, choices))
            break
    ctx.completed = True  # (before the last chunk: once it is written the client may go, and that is no cut)
    tail.append(sse.DONE)
    yield b"".join(tail)



async def collect_body(
    ctx: ResponseContext, streams: Sequence[RequestStream], recorder: LatencyRecorder | None
) -> bytes:
    """The JSON body of a non-streamed response; raises RequestError if a choice failed."""
    choices = [ChoiceState(i, ctx, recorder) for i in range(len(streams))]
    async with contextlib.aclosing(merged_deltas(streams)) as deltas:
        async for index, delta in deltas:
            choice = choices[index]
            logprobs = choice.logprobs(delta)
            if logprobs is not None:
                choice.logprob_parts.append(logprobs)
            if choice.ids is not None and delta.logprobs is not None:
                choice.ids.extend(delta.logprobs.token_ids)
            if delta.text:
                choice.timer.text()
                choice.parts.append(delta.text)
            if choice.typed is not None:
                choice.typed.add(delta)
            if delta.finish is not None:
                choice.end(delta.finish, delta.num_tokens, delta.calls)
                if delta.finish.reason in ("error", "abort"):
                    raise _error(delta.finish)
    finishes = [c.finish for c in choices]
    if any(f is None for f in finishes):  # a stream ended without a finish: the receiver dropped it
        raise RequestError("the request ended without a result", status=500, type="server_error")
    usage = _usage(ctx, choices)
    if ctx.kind == "chat":
        chat = [ChatChoice(c.index, (c.typed.message if c.typed is not None else ChatMessageOut)("".join(c.parts), ctx.role),
                           c.finish_reason(), stop_reason(ctx, f), c.body_logprobs(), _or_unset(c.ids))
                for c, f in zip(choices, finishes) if f is not None]
        return _ENCODER.encode(ChatCompletion(ctx.id, ctx.created, ctx.model, chat, usage, prompt_text=ctx.prompt_text,
                                              prompt_token_ids=ctx.prompt_ids if ctx.return_token_ids else None))
    text = [CompletionChoice(c.index, "".join(c.parts), f.reason, stop_reason(ctx, f), c.body_logprobs(),
                             _or_unset(c.ids), _or_unset(ctx.prompt_ids if ctx.return_token_ids else None))
            for c, f in zip(choices, finishes) if f is not None]
    return _ENCODER.encode(Completion(ctx.id, ctx.created, ctx.model, text, usage))
