"""Options this server cannot honour: each is a 400 naming the parameter and saying why, never
silently ignored. Where vLLM refuses the same option without a server flag, the reason says so.

Tool calls are parsed (by the workers) only when the server runs a tool-call parser
(`--tool-call-parser`) and the request's `tool_choice` is "auto" (the default with tools) or "none"
(tools rendered, nothing parsed); "required" and a named tool need constrained sampling in the
engine and stay refused. Not implemented here: structured output (no grammar-constrained sampling), beam search and constrained sampling, prompt
logprobs, suffix insertion, and a chat template sent with the request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from detok.api.errors import RequestError
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest, _SamplingRequest

_TOOL_PARSING = (
    "needs tool-call parsing, which this server runs only when started with --tool-call-parser (vLLM needs "
    "--enable-auto-tool-choice and a --tool-call-parser for it); send tool_choice \"none\" to have the tools "
    "rendered into the prompt only"
)
_CONSTRAINED = (
    "needs constrained sampling in the engine (the model must be made to call a tool), which this server does "
    "not implement; send tool_choice \"auto\" (with --tool-call-parser) or \"none\""
)
_STRUCTURED = "structured output (constrained decoding) is not implemented by this server"
_SAMPLING = "is not implemented by this server (the scheduler samples without it)"
_ENGINE = "is not implemented by this server (its scheduler protocol does not carry it)"

Rule = tuple[Callable[[Any], bool], str]  # (is the value harmless?, why it is refused)

_GIVEN: Callable[[Any], bool] = lambda v: v is None  # noqa: E731 - any non-null value is refused

_COMMON: dict[str, Rule] = {
    "response_format": (lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
                        f"only {{\"type\": \"text\"}} is accepted: {_STRUCTURED}"),
    "structured_outputs": (_GIVEN, _STRUCTURED),
    "guided_json": (_GIVEN, _STRUCTURED),
    "guided_regex": (_GIVEN, _STRUCTURED),
    "guided_choice": (_GIVEN, _STRUCTURED),
    "guided_grammar": (_GIVEN, _STRUCTURED),
    "structural_tag": (_GIVEN, _STRUCTURED),
    "prompt_logprobs": (_GIVEN, "prompt logprobs are not implemented by this server"),
    "use_beam_search": (lambda v: v in (None, False), f"beam search {_SAMPLING}"),
    "logits_processors": (_GIVEN, f"logits processors {_SAMPLING}"),
    # vLLM options its engine honours, which the scheduler protocol does not carry
    "thinking_token_budget": (lambda v: v in (None, -1), f"a thinking token budget {_ENGINE}"),
    "logprob_token_ids": (_GIVEN, f"logprobs of chosen token ids {_ENGINE}"),
    "repetition_detection": (_GIVEN, f"repetition detection {_ENGINE}"),
    "priority": (lambda v: v in (None, 0), f"priority scheduling {_ENGINE}"),
    "kv_transfer_params": (_GIVEN, f"KV transfer (disaggregated serving) {_ENGINE}"),
    "ec_transfer_params": (_GIVEN, f"encoder-cache transfer {_ENGINE}"),
    "vllm_xargs": (_GIVEN, "vLLM's extension arguments have no extension to reach here"),
    "watermarking": (lambda v: v in (None, False), f"watermarking {_ENGINE}"),
}
_COMPLETION: dict[str, Rule] = {
    "suffix": (_GIVEN, "suffix (text insertion) is not implemented by this server"),
    "best_of": (lambda v: v is None or (type(v) is int and v == 1), f"best_of above 1 {_SAMPLING}"),
}
_CHAT: dict[str, Rule] = {
    "functions": (_GIVEN, f"legacy function calling {_TOOL_PARSING}"),
    "function_call": (_GIVEN, f"legacy function calling {_TOOL_PARSING}"),
    "chat_template": (_GIVEN, "a chat template sent with the request is not accepted (as vLLM without "
                              "--trust-request-chat-template); the server's template is used"),
}


def _apply(req: _SamplingRequest, rules: dict[str, Rule]) -> None:
    # a field the request did not give has its default, which every rule accepts
    # (tests/frontend/test_api_parity.py): only the given ones are read (most requests give few)
    given = req.model_fields_set
    if given.isdisjoint(rules):
        return
    for name, (harmless, why) in rules.items():
        if name in given and not harmless(getattr(req, name)):
            raise RequestError(f"{name}: {why}", name)


def refuse_unsupported(req: _SamplingRequest, tool_parser: str | None = None) -> None:
    """Raise RequestError (400) for the first option given that this server cannot honour
    (`tool_parser`: the server's tool-call parser, if it runs one)."""
    _apply(req, _COMMON)
    if isinstance(req, CompletionRequest):
        _apply(req, _COMPLETION)
    if isinstance(req, ChatCompletionRequest):
        _apply(req, _CHAT)
        _refuse_tool_choice(req, tool_parser)


def _refuse_tool_choice(req: ChatCompletionRequest, tool_parser: str | None) -> None:
    """As vLLM: tools without tool_choice mean "auto"; "none" renders the tools into the prompt and
    parses nothing (accepted); "auto" needs the server's tool-call parser; "required" and a named
    tool need constrained sampling (refused)."""
    if req.tools is None:
        if req.tool_choice not in (None, "none"):
            raise RequestError("tool_choice: needs tools (when using tool_choice, tools must be set)", "tool_choice")
        return
    if req.tool_choice is None or req.tool_choice == "auto":
        if tool_parser is None:
            if req.tool_choice is None:
                raise RequestError(f"tools: tool_choice \"auto\" (the default when tools are given) {_TOOL_PARSING}",
                                   "tools")
            raise RequestError(f"tool_choice: \"auto\" {_TOOL_PARSING}", "tool_choice")
        return
    if req.tool_choice != "none":
        shown = f'"{req.tool_choice}"' if isinstance(req.tool_choice, str) else "a named tool"
        raise RequestError(f"tool_choice: {shown} {_CONSTRAINED}", "tool_choice")
