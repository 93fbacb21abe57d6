"""From a parsed OpenAI request to a `GenerationJob`: prompt ids, limits and decode parameters.

Everything a request can get wrong is caught here and becomes a 400 naming the parameter, so
nothing invalid ever reaches the scheduler or a worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from detok.frontend.errors import RequestError
from detok.frontend.openai_types import ChatCompletionRequest, CompletionRequest, _SamplingRequest
from detok.stream.params import DecodeParams
from detok.tokenizer.base import Tokenizer
from detok.tokenizer.chat import ChatTemplateError

MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024
_COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    model_name: str
    max_model_len: int


@dataclasses.dataclass(frozen=True)
class GenerationJob:
    prompt_ids: list[int]
    max_tokens: int
    params: DecodeParams
    seed: int
    ignore_eos: bool
    stream: bool
    include_usage: bool


def _unsupported(param: str, what: str) -> RequestError:
    return RequestError(f"{param}: {what} is not supported by this server", param)


def _check_common(req: _SamplingRequest, limits: ServingLimits) -> None:
    if req.model != limits.model_name:
        raise RequestError(
            f"The model `{req.model}` does not exist. This server serves `{limits.model_name}`.",
            "model",
            status=404,
            code="model_not_found",
        )
    if req.n != 1:
        raise RequestError("n: only n=1 is supported (one choice per request)", "n")
    if req.stream_options is not None and not req.stream:
        raise RequestError("stream_options: only allowed when stream is true", "stream_options")


def _stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    strings = [stop] if isinstance(stop, str) else list(stop or [])
    if len(strings) > MAX_STOP_STRINGS:
        raise RequestError(f"stop: at most {MAX_STOP_STRINGS} stop strings are allowed", "stop")
    for s in strings:
        if not s:
            raise RequestError("stop: stop strings must not be empty", "stop")
        if len(s) > MAX_STOP_STRING_CHARS:
            raise RequestError(f"stop: a stop string may hold at most {MAX_STOP_STRING_CHARS} characters", "stop")
    return tuple(strings)


def _check_ids(ids: list[int], tok: Tokenizer, param: str) -> None:
    bad = next((i for i in ids if not 0 <= i < tok.vocab_size), None)
    if bad is not None:
        raise RequestError(f"{param}: token id {bad} is outside the vocabulary (size {tok.vocab_size})", param)


def _job(
    req: _SamplingRequest,
    prompt_ids: list[int],
    max_tokens: int | None,
    default_max_tokens: int | None,
    prompt_param: str,
    tok: Tokenizer,
    limits: ServingLimits,
) -> GenerationJob:
    if not prompt_ids:
        raise RequestError(f"{prompt_param}: the prompt is empty", prompt_param)
    room = limits.max_model_len - len(prompt_ids)
    if room < 1:
        raise RequestError(
            f"This model's maximum context length is {limits.max_model_len} tokens. However, your "
            f"request has {len(prompt_ids)} input tokens. Please reduce the length of the input.",
            prompt_param,
            code="context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = room if default_max_tokens is None else min(default_max_tokens, room)
    elif max_tokens > room:
        raise RequestError(
            f"This model's maximum context length is {limits.max_model_len} tokens. However, you "
            f"requested {len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the input, "
            f"{max_tokens} for the completion). Please reduce the length of the input or the completion.",
            "max_tokens",
            code="context_length_exceeded",
        )
    if req.min_tokens > max_tokens:
        raise RequestError(f"min_tokens ({req.min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens")
    stop_token_ids = list(req.stop_token_ids or [])
    _check_ids(stop_token_ids, tok, "stop_token_ids")
    params = DecodeParams(
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        stop=_stop_strings(req.stop),
        stop_token_ids=tuple(stop_token_ids),
        include_stop_str_in_output=req.include_stop_str_in_output,
        min_tokens=req.min_tokens,
    )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    seed = 0 if req.seed is None else req.seed  # the stub is deterministic: no seed means seed 0
    return GenerationJob(prompt_ids, max_tokens, params, seed, req.ignore_eos, req.stream, include_usage)


def completion_job(req: CompletionRequest, tok: Tokenizer, limits: ServingLimits) -> GenerationJob:
    _check_common(req, limits)
    if req.echo:
        raise _unsupported("echo", "echo")
    if req.suffix is not None:
        raise _unsupported("suffix", "suffix")
    if req.best_of not in (None, 1):
        raise _unsupported("best_of", "best_of > 1")
    if req.logprobs is not None:
        raise _unsupported("logprobs", "logprobs")
    return _job(req, _completion_prompt_ids(req.prompt, tok), req.max_tokens, _COMPLETIONS_DEFAULT_MAX_TOKENS,
                "prompt", tok, limits)


def _completion_prompt_ids(prompt: str | list[str] | list[int] | list[list[int]], tok: Tokenizer) -> list[int]:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise RequestError("prompt: send one prompt per request (batched prompts are not supported)", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tok.encode(prompt, add_special_tokens=True)
    _check_ids(prompt, tok, "prompt")
    return list(prompt)


def chat_job(req: ChatCompletionRequest, tok: Tokenizer, limits: ServingLimits) -> GenerationJob:
    _check_common(req, limits)
    if req.logprobs or req.top_logprobs is not None:
        raise _unsupported("logprobs", "logprobs")
    messages: list[dict[str, Any]] = []
    for m in req.messages:
        content = m.content if not isinstance(m.content, list) else "".join(part.text for part in m.content)
        message: dict[str, Any] = {"role": m.role, "content": content if content is not None else ""}
        if m.name is not None:
            message["name"] = m.name
        messages.append(message)
    try:
        text = tok.apply_chat_template(messages, add_generation_prompt=req.add_generation_prompt, tools=req.tools)
    except ChatTemplateError as e:
        raise RequestError(f"messages: {e}", "messages") from None
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return _job(req, tok.encode(text, add_special_tokens=False), max_tokens, None, "messages", tok, limits)
