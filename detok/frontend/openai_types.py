"""OpenAI request bodies (pydantic, so FastAPI parses and documents them) and response bodies
(msgspec Structs: a streamed response encodes one per step, and msgspec is several times faster).

Requests are strict (a string where a number belongs is a 400, as with OpenAI), unknown fields
are ignored (as vLLM does), and sampling knobs the stub has no use for are accepted and ignored.
Features this server cannot honour are rejected in `detok.frontend.validation`, not silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field

NonNegativeInt = Annotated[int, Field(ge=0)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False


class _SamplingRequest(_Request):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: NonNegativeInt = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[NonNegativeInt] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    ignore_eos: bool = False
    seed: int | None = None
    n: int = 1
    # accepted for compatibility; the stub scheduler does not sample
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class CompletionRequest(_SamplingRequest):
    # one prompt: text, or token ids; a list of one of either is accepted too (n=1, no batching)
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None


class TextContentPart(_Request):
    type: Literal["text"]
    text: str


class ChatMessage(_Request):
    # other content part types (images, audio) fail validation: a text-only server says so
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None


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
    logprobs: None = None


# `object` is a msgspec tag so it is always written first, while `omit_defaults` drops `usage`
# from the stream chunks that carry none.
class Completion(msgspec.Struct, omit_defaults=True, tag_field="object", tag="text_completion"):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatMessageOut(msgspec.Struct, gc=False):
    content: str
    role: str = "assistant"


class ChatChoice(msgspec.Struct, gc=False):
    index: int
    message: ChatMessageOut
    finish_reason: str | None
    stop_reason: str | int | None = None
    logprobs: None = None


class ChatCompletion(msgspec.Struct, omit_defaults=True, tag_field="object", tag="chat.completion"):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class ChatDelta(msgspec.Struct, gc=False, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, gc=False):
    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    logprobs: None = None


class ChatCompletionChunk(msgspec.Struct, omit_defaults=True, tag_field="object", tag="chat.completion.chunk"):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


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
