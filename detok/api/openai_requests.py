"""OpenAI request bodies, parsed by pydantic (so FastAPI documents them).

Strict types (a string where a number belongs is a 400, as with OpenAI); JSON `null` means "not
given" for every optional field (OpenAI marks them nullable, vLLM accepts null), so every optional
field is `X | None = None` and its default is applied in `detok.api.validation`. Unknown
fields are ignored, as vLLM ignores them. Options this server cannot honour are declared (type
`Any`) only so that `detok.api.refusals` can answer them with a 400 naming them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from detok.api.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_ALLOWED_TOKEN_IDS,
    MAX_BAD_WORD_CHARS,
    MAX_BAD_WORDS,
    MAX_CACHE_SALT_CHARS,
    MAX_CHAT_LOGPROBS,
    MAX_COMPLETION_LOGPROBS,
    MAX_DOCUMENTS,
    MAX_MESSAGES,
    MAX_N,
    MAX_REQUEST_ID_CHARS,
    MAX_TOOL_CALLS,
    MAX_TOOLS,
)

TokenId = Annotated[int, Field(ge=0)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _OpenObject(BaseModel):
    """An object whose unknown keys are kept (templates may read them)."""

    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Request):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # usage in every chunk (vLLM's; with include_usage)


class _SamplingRequest(_Request):
    model: str | None = None  # None: the served model
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    ignore_eos: bool | None = None
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    n: int | None = Field(default=None, ge=1, le=MAX_N)
    echo: bool | None = None
    add_special_tokens: bool | None = None
    # sampling knobs: validated, carried to the scheduler where the wire has a field for them
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[TokenId] | None = Field(default=None, min_length=1, max_length=MAX_ALLOWED_TOKEN_IDS)
    bad_words: list[Annotated[str, Field(max_length=MAX_BAD_WORD_CHARS)]] | None = Field(default=None,
                                                                                         max_length=MAX_BAD_WORDS)
    user: str | None = None
    # refused (detok.api.refusals): structured output, beam search, constrained sampling, ...
    response_format: Any = None
    structured_outputs: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structural_tag: Any = None
    prompt_logprobs: Any = None
    use_beam_search: Any = None
    logits_processors: Any = None
    # the prompt cut to its last (or first) k ids (detok.api.prompt_truncation); -1: all the room
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1)
    truncation_side: Literal["left", "right"] | None = None
    # output tokens per streamed chunk after the first: raises the server's --stream-interval
    stream_interval: int | None = Field(default=None, ge=1)
    # the response's id after "chatcmpl-" / "cmpl-" (an X-Request-Id header wins), as vLLM's
    request_id: str | None = Field(default=None, max_length=MAX_REQUEST_ID_CHARS)
    # the output ids in each chunk (or the body) and the prompt's (vLLM's, for RL and tracing)
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None  # logprob tokens written `token_id:{id}` (vLLM's)
    # accepted without effect (docs/http-api.md): the stack's scheduler keeps no prefix cache to salt
    cache_salt: str | None = Field(default=None, min_length=1, max_length=MAX_CACHE_SALT_CHARS)
    # refused (detok.api.refusals): vLLM options that need its engine
    thinking_token_budget: Any = None
    logprob_token_ids: Any = None
    repetition_detection: Any = None
    priority: Any = None
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None
    vllm_xargs: Any = None
    watermarking: Any = None


class CompletionRequest(_SamplingRequest):
    # one prompt: text, or token ids; a list of one of either is accepted too (no batching)
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    suffix: Any = None  # refused
    best_of: Any = None  # refused above 1


class FunctionCall(_Request):
    name: str
    arguments: str | dict[str, Any] | None = None


class ToolCall(_Request):
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCall


class ChatMessage(_Request):
    # any role, as vLLM's custom roles (`ipython`, `observation`, ...): the template decides; an
    # assistant's tool calls and reasoning and a tool message's tool_call_id are read for those roles only
    role: str
    # a string, or content parts (text only: see detok.api.chat_messages)
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=MAX_TOOL_CALLS)
    tool_call_id: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None  # older name of `reasoning`


class FunctionDefinition(_OpenObject):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolParam(_Request):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    type: Literal["function"] = "function"
    function: NamedFunction


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_CHAT_LOGPROBS)
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    tools: list[ToolParam] | None = Field(default=None, min_length=1, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    documents: list[dict[str, str]] | None = Field(default=None, max_length=MAX_DOCUMENTS)
    chat_template_kwargs: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # false: only the first tool call is returned (as vLLM)
    include_reasoning: bool | None = None  # false: the reasoning is parsed out and dropped (vLLM)
    # a template variable, and enable_thinking unless chat_template_kwargs sets it (vLLM's values)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    return_prompt_text: bool | None = None  # the rendered prompt in the response (vLLM's)
    # refused (detok.api.refusals)
    functions: Any = None
    function_call: Any = None
    chat_template: Any = None


REQUEST_MODELS: dict[str, type[BaseModel]] = {m.__name__: m for m in (CompletionRequest, ChatCompletionRequest)}
