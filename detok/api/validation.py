"""From a parsed OpenAI request to a `GenerationJob`: prompt ids, limits and decode parameters.

Everything a request can get wrong is caught here (or by the request models' own bounds, or in
`detok.api.refusals`) and becomes a 4xx naming the parameter, so nothing invalid ever reaches
the scheduler or a worker. Every bound is a named constant of `detok.api.limits`.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from detok.api import limits
from detok.api.chat_messages import message_text, template_messages
from detok.api.errors import RequestError
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest, _SamplingRequest
from detok.api.prompt_truncation import Side, cut_ids, encode_truncated, truncation_size
from detok.api.refusals import refuse_unsupported
from detok.api.sampling_extras import check_ids, sampling_extras
from detok.api.typed_requests import THINKING_KWARGS, output_parsing
from detok.parsing.registry import reasoning_parser_class, tool_parser_class
from detok.parsing.types import OutputParsing
from detok.wire.params import DecodeParams
from detok.tokenizer.base import Tokenizer
from detok.tokenizer.bounded import TooLong, encode_within
from detok.tokenizer.chat import ChatTemplateError, template_content_format, template_variables
from detok.wire.to_scheduler import LogprobsForm, SamplingExtras

_COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# keys a client may not pass through chat_template_kwargs (vLLM refuses the same two)
_RESERVED_TEMPLATE_KWARGS = frozenset({"chat_template", "tokenize"})


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    model_name: str
    max_model_len: int
    random_seed: bool = False  # a request without a seed samples at random (a real engine); else seed 0
    reasoning_parser: str | None = None  # `--reasoning-parser`: chat output parsed by the workers
    tool_parser: str | None = None  # `--tool-call-parser`: tool calls of tool_choice "auto" parsed


@dataclasses.dataclass(frozen=True)
class GenerationJob:
    prompt_ids: list[int]
    max_tokens: int
    params: DecodeParams
    seed: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool = False  # usage in every chunk: stream_options.continuous_usage_stats
    n: int = 1
    logprobs: int | None = None  # None: none; k: the sampled token's logprob and k alternatives
    echo: str = ""  # text every choice starts with (`echo`)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    parsing: OutputParsing | None = None  # reasoning / tool-call parsing by the workers (chat)
    include_reasoning: bool = True  # false: parsed reasoning is dropped
    parallel_tool_calls: bool = True  # false: only the first tool call is returned
    role: str = "assistant"  # chat: the reply's role (the last message's without a generation prompt)
    stream_interval: int = 1  # the request's own stream_interval (the server's applies if larger)
    request_id: str | None = None  # the response id's tail the client chose (request_id)
    prompt_text: str | None = None  # chat `return_prompt_text`: the rendered prompt
    return_token_ids: bool = False  # the output and prompt ids in the response (they ride the logprob entries)
    hide_output_ids: bool = False  # (include_reasoning false with a parser: the prompt's ids only, as vLLM)
    tokens_as_ids: bool = False  # return_tokens_as_token_ids
    extras: SamplingExtras | None = None  # min_p, penalties, logit_bias, allowed ids, bad words (None: defaults)
    chat: bool = False  # a chat completion (its logprobs rendered by the workers: logprobs_form)

    @property
    def scheduler_logprobs(self) -> int | None:
        """The logprobs the scheduler is asked for: the output ids come with the sampled token's
        entry, so `return_token_ids` alone asks for 0 alternatives (none are shown)."""
        wants_ids = self.return_token_ids and not self.hide_output_ids
        return self.logprobs if self.logprobs is not None or not wants_ids else 0

    @property
    def logprobs_form(self) -> LogprobsForm:
        """How the workers send the logprob entries: a chat response's items rendered where the
        token strings are made (detok.worker.chat_entries), except with tokens named by id."""
        return "chat" if self.chat and self.logprobs is not None and not self.tokens_as_ids else "entries"

    def choice_seeds(self) -> list[int]:
        """One seed per choice, distinct, within the int64 range (wrapping around)."""
        span = 1 << 64
        return [(self.seed + i - limits.INT64_MIN) % span + limits.INT64_MIN for i in range(self.n)]


def _check_common(req: _SamplingRequest, lim: ServingLimits) -> None:
    if req.model is not None and req.model != lim.model_name:
        raise RequestError(
            f"The model `{req.model}` does not exist. This server serves `{lim.model_name}`.",
            "model",
            status=404,
            code="model_not_found",
        )
    if req.stream_options is not None and not req.stream:
        raise RequestError("stream_options: only allowed when stream is true", "stream_options")
    refuse_unsupported(req, lim.tool_parser)


def _stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    strings = [stop] if isinstance(stop, str) else list(stop or [])
    if len(strings) > limits.MAX_STOP_STRINGS:
        raise RequestError(f"stop: at most {limits.MAX_STOP_STRINGS} stop strings are allowed", "stop")
    total = 0
    for s in strings:
        if not s:
            raise RequestError("stop: stop strings must not be empty", "stop")
        if len(s) > limits.MAX_STOP_STRING_CHARS:
            raise RequestError(f"stop: a stop string may hold at most {limits.MAX_STOP_STRING_CHARS} characters",
                               "stop")
        total += len(s.encode("utf-8", "surrogatepass"))
    if total > limits.MAX_STOP_TOTAL_BYTES:
        raise RequestError(f"stop: the stop strings may hold at most {limits.MAX_STOP_TOTAL_BYTES} bytes (UTF-8) "
                           f"together, got {total}", "stop")
    return tuple(strings)


def _stop_token_ids(ids: list[int] | None, tok: Tokenizer) -> tuple[int, ...]:
    ids = ids or []
    if len(ids) > limits.MAX_STOP_TOKEN_IDS:
        raise RequestError(f"stop_token_ids: at most {limits.MAX_STOP_TOKEN_IDS} ids are allowed", "stop_token_ids")
    check_ids(ids, tok, "stop_token_ids")
    return tuple(ids)


def _context_error(lim: ServingLimits, count: str, param: str) -> RequestError:
    return RequestError(
        f"This model's maximum context length is {lim.max_model_len} tokens. However, your "
        f"request has {count} input tokens. Please reduce the length of the input.",
        param,
        code="context_length_exceeded",
    )


def encode_prompt(tok: Tokenizer, text: str, add_special_tokens: bool, lim: ServingLimits, param: str,
                  keep: int | None = None, side: Side | None = None) -> list[int]:
    """The prompt's ids (exactly `tok.encode`'s), or the context-length 400 as soon as counting
    shows the text cannot fit: a prompt of a million tokens is not tokenized whole to refuse it.
    With `keep` (truncate_prompt_tokens), the ids cut to it instead (prompt_truncation)."""
    if keep is not None:
        return encode_truncated(tok, text, add_special_tokens, keep, side or "left")
    ids = encode_within(tok, text, lim.max_model_len - 1, add_special_tokens)
    if isinstance(ids, TooLong):
        raise _context_error(lim, f"at least {ids.at_least}", param)
    return ids


def _job(
    req: _SamplingRequest,
    prompt_ids: list[int],
    max_tokens: int | None,
    default_max_tokens: int | None,
    prompt_param: str,
    tok: Tokenizer,
    lim: ServingLimits,
    logprobs: int | None,
    echo: str,
    parsing: OutputParsing | None = None,
    max_tokens_param: str = "max_tokens",
    role: str = "assistant",
    keep_special_tokens: bool = False,
    chat: dict[str, Any] | None = None,  # a chat job's own fields (prompt_text, hide_output_ids, chat)
) -> GenerationJob:
    if not prompt_ids:
        raise RequestError(f"{prompt_param}: the prompt is empty", prompt_param)
    room = lim.max_model_len - len(prompt_ids)
    if room < 1:
        raise _context_error(lim, str(len(prompt_ids)), prompt_param)
    if max_tokens is None:
        # chat: the rest of the context. Completions: OpenAI's 16, which must fit as an explicit
        # max_tokens must (vLLM and OpenAI refuse the request rather than shorten the completion)
        max_tokens = room if default_max_tokens is None else default_max_tokens
    if max_tokens > room:
        raise RequestError(
            f"This model's maximum context length is {lim.max_model_len} tokens. However, you "
            f"requested {len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the input, "
            f"{max_tokens} for the completion). Please reduce the length of the input or the completion.",
            max_tokens_param,
            code="context_length_exceeded",
        )
    min_tokens = req.min_tokens or 0
    if min_tokens > max_tokens:
        raise RequestError(f"min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens")
    extras = sampling_extras(req, tok)
    params = DecodeParams(
        skip_special_tokens=req.skip_special_tokens is not False and not keep_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens is not False,
        stop=_stop_strings(req.stop),
        stop_token_ids=_stop_token_ids(req.stop_token_ids, tok),
        include_stop_str_in_output=bool(req.include_stop_str_in_output),
        min_tokens=min_tokens,
    )
    if logprobs is not None and echo:
        raise RequestError("echo: with logprobs, echo needs prompt logprobs, which this server does not implement",
                           "echo")
    n = req.n or 1
    if n > 1 and req.temperature == 0:
        # vLLM's SamplingParams._verify_greedy_sampling (a positive temperature is at least 0.01
        # there, so only 0 is greedy): greedy choices would all be the same
        raise RequestError(f"n: must be 1 when using greedy sampling (temperature 0), got {n}", "n")
    stream = bool(req.stream)
    return GenerationJob(
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        params=params,
        # no seed (or -1, a random seed for vLLM #4531, OpenAI and llama.cpp): seed 0 for the stub
        # (deterministic), a random one for a real model (as vLLM)
        seed=req.seed if req.seed not in (None, -1) else secrets.randbits(63) if lim.random_seed else 0,
        ignore_eos=bool(req.ignore_eos),
        stream=stream,
        include_usage=bool(stream and req.stream_options and req.stream_options.include_usage),
        # as vLLM: running usage in every chunk only together with include_usage
        continuous_usage=bool(stream and req.stream_options and req.stream_options.include_usage
                              and req.stream_options.continuous_usage_stats),
        n=n,
        logprobs=logprobs,
        echo=echo,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if req.top_k is None else req.top_k,
        parsing=parsing,
        include_reasoning=getattr(req, "include_reasoning", None) is not False,
        parallel_tool_calls=getattr(req, "parallel_tool_calls", None) is not False,
        role=role,
        stream_interval=req.stream_interval or 1,
        request_id=req.request_id,
        return_token_ids=bool(req.return_token_ids),
        tokens_as_ids=bool(req.return_tokens_as_token_ids),
        extras=extras,
        **(chat or {}),
    )


def completion_job(req: CompletionRequest, tok: Tokenizer, lim: ServingLimits) -> GenerationJob:
    _check_common(req, lim)
    max_output = req.max_tokens if req.max_tokens is not None else _COMPLETIONS_DEFAULT_MAX_TOKENS
    keep = truncation_size(req.truncate_prompt_tokens, lim.max_model_len, max_output, "max_tokens")
    prompt_ids, prompt_text = _completion_prompt(req.prompt, tok, req.add_special_tokens is not False, lim, keep,
                                                 req.truncation_side or "left")
    echo = ""
    if req.echo:  # the prompt as given, or decoded from its ids as vLLM does
        echo = prompt_text if prompt_text is not None else tok.decode(prompt_ids, skip_special_tokens=False)
    return _job(req, prompt_ids, req.max_tokens, _COMPLETIONS_DEFAULT_MAX_TOKENS, "prompt", tok, lim,
                req.logprobs, echo)


def _completion_prompt(
    prompt: str | list[str] | list[int] | list[list[int]], tok: Tokenizer, add_special_tokens: bool,
    lim: ServingLimits, keep: int | None, side: Side,
) -> tuple[list[int], str | None]:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise RequestError("prompt: send one prompt per request (batched prompts are not supported)", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        return encode_prompt(tok, prompt, add_special_tokens, lim, "prompt", keep, side), prompt
    check_ids(prompt, tok, "prompt")  # type: ignore[arg-type]
    ids = list(prompt)  # type: ignore[arg-type]
    return (ids if keep is None else cut_ids(ids, keep, side)), None


def chat_job(req: ChatCompletionRequest, tok: Tokenizer, lim: ServingLimits) -> GenerationJob:
    _check_common(req, lim)
    if req.top_logprobs and not req.logprobs:
        raise RequestError("top_logprobs: needs logprobs set to true", "top_logprobs")
    template = tok.chat_template
    messages = template_messages(req.messages, template_content_format(template) if template else "string")
    kwargs = dict(req.chat_template_kwargs or {})
    reserved = sorted(_RESERVED_TEMPLATE_KWARGS & kwargs.keys())
    if reserved:
        raise RequestError(f"chat_template_kwargs: {', '.join(reserved)} may not be set here", "chat_template_kwargs")
    if req.reasoning_effort is not None:
        # as vLLM's build_chat_params: the effort is a template variable (over the kwargs' own) and
        # turns thinking on, "none" off, unless the client set enable_thinking itself
        kwargs["reasoning_effort"] = req.reasoning_effort
        kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    thinking = {k: kwargs[k] for k in THINKING_KWARGS if k in kwargs}  # (read by the output parsing)
    if template is not None:  # as vLLM: only variables the template reads
        wanted = template_variables(template)
        kwargs = {k: v for k, v in kwargs.items() if k in wanted}
    kwargs.pop("messages", None)
    kwargs.pop("tools", None)
    kwargs.update(
        add_generation_prompt=req.add_generation_prompt is not False,  # the request's (default) value wins
        continue_final_message=bool(req.continue_final_message),
        documents=req.documents,
    )
    tools = [t.model_dump() for t in req.tools] if req.tools else None  # tool_choice "none" here
    try:
        text = tok.apply_chat_template(messages, tools=tools, **kwargs)
    except ChatTemplateError as e:
        raise RequestError(f"messages: {e}", "messages") from None
    # The reply's role, as vLLM's get_chat_request_role: without a generation prompt the output
    # continues the last message, in that message's role. Echo: the last message, if it has the reply's role.
    last = req.messages[-1]
    role = "assistant" if req.add_generation_prompt is not False else last.role
    echo = message_text(last) if req.echo and last.role == role else ""
    max_tokens, max_tokens_param = ((req.max_completion_tokens, "max_completion_tokens")
                                    if req.max_completion_tokens is not None else (req.max_tokens, "max_tokens"))
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    hidden = req.include_reasoning is False and bool(lim.reasoning_parser or lim.tool_parser)
    if hidden:
        # as vLLM with a parser: no logprobs at all (null), streamed or not, and no output token ids
        # (its hide_stream_metadata / suppress_metadata); they would show the reasoning left out
        logprobs = None
    keep = truncation_size(req.truncate_prompt_tokens, lim.max_model_len, max_tokens or 0, max_tokens_param)
    ids = encode_prompt(tok, text, bool(req.add_special_tokens), lim, "messages", keep, req.truncation_side)
    parsing = output_parsing(req, text, lim.reasoning_parser, lim.tool_parser, thinking)
    # Tool calls parsed: special tokens are not skipped, whatever the request says (vLLM's tool
    # parsers' adjust_request and SGLang's chat serving do the same, since tool markers are special
    # tokens in many vocabularies); the text around them (a marker mentioned in reasoning) keeps them.
    # Not for a family whose vLLM parser leaves the request's value (llama3_json); a reasoning family
    # whose terminals are text of special tokens (Kimi K3) keeps them too
    keep_special = parsing is not None and (
        (parsing.tool_parser is not None and tool_parser_class(parsing.tool_parser).keeps_special_tokens)
        or (parsing.reasoning_parser is not None and reasoning_parser_class(parsing.reasoning_parser).keeps_special_tokens))
    return _job(req, ids, max_tokens, None, "messages", tok, lim, logprobs, echo, parsing, max_tokens_param, role,
                keep_special, {"prompt_text": text if req.return_prompt_text else None, "hide_output_ids": hidden,
                               "chat": True})
