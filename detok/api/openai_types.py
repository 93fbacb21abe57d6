"""OpenAI response bodies as msgspec Structs: a streamed response encodes one per step, and
msgspec is several times faster than pydantic at it. (Request bodies: `openai_requests`.)

Each choice has a `logprobs` slot, None unless the request asked for logprobs; it holds whatever
Struct `detok.streaming.logprobs_format` builds (OpenAI's shapes), hence `Any`.
"""

from __future__ import annotations

from typing import Any

import msgspec


# ---- responses ------------------------------------------------------------------------------


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(msgspec.Struct, gc=False):
    index: int
    text: str
    finish_reason: str | None
    stop_reason: str | int | None = None  # vLLM's extension: the stop string or id that matched
    logprobs: Any = None
    # vLLM's `return_token_ids` (UNSET: not written)
    token_ids: list[int] | msgspec.UnsetType = msgspec.UNSET
    prompt_token_ids: list[int] | msgspec.UnsetType = msgspec.UNSET


# `object` is a msgspec tag so it is always written first, while `omit_defaults` drops `usage`
# from the stream chunks that carry none.
class Completion(msgspec.Struct, omit_defaults=True, tag_field="object", tag="text_completion"):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ToolCallFunction(msgspec.Struct, gc=False):
    name: str
    arguments: str


class ToolCallOut(msgspec.Struct, gc=False):
    id: str
    function: ToolCallFunction
    type: str = "function"


class ChatMessageOut(msgspec.Struct, gc=False):
    """`content` is None (null) only for a parsed reply with no content; the reasoning field (vLLM's
    `reasoning` or SGLang's / DeepSeek's `reasoning_content`) and `tool_calls` are present only
    when the server parses them (UNSET fields are not written)."""

    content: str | None
    role: str = "assistant"
    reasoning: str | None | msgspec.UnsetType = msgspec.UNSET
    reasoning_content: str | None | msgspec.UnsetType = msgspec.UNSET
    tool_calls: list[ToolCallOut] | msgspec.UnsetType = msgspec.UNSET


class ChatChoice(msgspec.Struct, gc=False):
    index: int
    message: ChatMessageOut
    finish_reason: str | None
    stop_reason: str | int | None = None
    logprobs: Any = None
    token_ids: list[int] | msgspec.UnsetType = msgspec.UNSET  # vLLM's `return_token_ids`


class ChatCompletion(msgspec.Struct, omit_defaults=True, tag_field="object", tag="chat.completion"):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None  # vLLM's `return_token_ids`
    prompt_text: str | None = None  # vLLM's `return_prompt_text`


class ChatDelta(msgspec.Struct, gc=False, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, gc=False):
    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    logprobs: Any = None


class ChatCompletionChunk(msgspec.Struct, omit_defaults=True, tag_field="object", tag="chat.completion.chunk"):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None  # vLLM's `return_token_ids` (the first chunk)
    prompt_text: str | None = None  # vLLM's `return_prompt_text` (the first chunk)


class ModelCard(msgspec.Struct, tag_field="object", tag="model"):
    id: str
    created: int
    owned_by: str = "detok"
    max_model_len: int | None = None


class ModelList(msgspec.Struct, tag_field="object", tag="list"):
    data: list[ModelCard]


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody
