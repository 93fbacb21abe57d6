"""A chat request's output parsing (`OutputParsing`): which parsers, its tools, where the output starts.

Reasoning parsing applies to every chat request of a server started with `--reasoning-parser`;
tool-call parsing to requests with `tools` and `tool_choice` "auto" (the default) on a server started
with `--tool-call-parser` ("none" renders the tools and parses nothing, as vLLM). The tools travel
to the worker with their names and parameter schemas (formats such as qwen3_coder type values by
them), bounded by `detok.parsing.limits` (a 400 naming `tools`), and slimmed to what a family reads
(`slim_parameters`: each top-level property's `type` / `anyOf` types), so a registration the
scheduler client keeps for replay, and the worker's copy, hold no descriptions or nested schemas.

Whether the output starts inside reasoning: the rendered prompt decides first (a template that
opens the family's start marker, e.g. `<think>\\n`, at the end of the prompt: inside; one that
closes it, `</think>`, as Qwen3's does for enable_thinking=false: outside), then
`chat_template_kwargs` `enable_thinking` / `thinking` (or the one `reasoning_effort` sets); else the
family's default.
"""

from __future__ import annotations

from typing import Any

import msgspec

from detok.api.errors import RequestError
from detok.api.openai_requests import ChatCompletionRequest
from detok.parsing.limits import ParsingLimitError, check_parsing
from detok.parsing.registry import reasoning_parser_class
from detok.parsing.types import OutputParsing, ToolSpec

THINKING_KWARGS = ("enable_thinking", "thinking")


def starts_in_reasoning(reasoning_parser: str, prompt_text: str, template_kwargs: dict[str, object]) -> bool | None:
    family = reasoning_parser_class(reasoning_parser)
    markers = family.markers
    tail = prompt_text.rstrip()
    if markers and (tail.endswith(markers[0]) or (family.reasoning_prefix
                                                   and tail.endswith(markers[0] + family.reasoning_prefix.rstrip()))):
        return True
    if len(markers) > 1 and tail.endswith(markers[1]):
        return False
    if not family.thinking_switch:
        return None
    for key in THINKING_KWARGS:
        value = template_kwargs.get(key)
        if isinstance(value, bool):
            return value
    return None


def slim_parameters(parameters: Any) -> dict[str, Any] | None:
    """The part of a tool's JSON schema the families read (`detok.parsing.tools.schema_values`:
    `properties`, and per property its `type`, or the `type`s of its `anyOf` options); parsing
    with it gives the same result as with the whole schema (tested)."""
    if not isinstance(parameters, dict):
        return None
    props = parameters.get("properties")
    if not isinstance(props, dict):
        return {}
    out: dict[str, Any] = {}
    for key, spec in props.items():
        if spec is None:
            out[key] = None
        elif not isinstance(spec, dict):
            out[key] = {}
        elif "type" in spec:
            out[key] = {"type": spec["type"]}
        elif "anyOf" in spec:
            options = spec["anyOf"] if isinstance(spec["anyOf"], list) else []
            out[key] = {"anyOf": [{"type": o["type"]} for o in options if isinstance(o, dict) and "type" in o]}
        else:
            out[key] = {}
    return {"type": "object", "properties": out}


def output_parsing(
    req: ChatCompletionRequest, prompt_text: str, reasoning_parser: str | None, tool_parser: str | None,
    template_kwargs: dict[str, object] | None = None,
) -> OutputParsing | None:
    """The request's parsing (None: plain text); RequestError (400) for tools past the limits.
    `template_kwargs`: the variables the template got (reasoning_effort's enable_thinking included);
    the request's chat_template_kwargs if not given."""
    tools: tuple[ToolSpec, ...] = ()
    parse_tools = tool_parser is not None and req.tools is not None and req.tool_choice in (None, "auto")
    if parse_tools:
        tools = tuple(ToolSpec(t.function.name, t.function.parameters) for t in req.tools or ())
    if reasoning_parser is None and not parse_tools:
        return None
    start = None
    if reasoning_parser is not None:
        kwargs = template_kwargs if template_kwargs is not None else req.chat_template_kwargs or {}
        start = starts_in_reasoning(reasoning_parser, prompt_text, kwargs)
    parsing = OutputParsing(reasoning_parser, tool_parser if parse_tools else None, tools, start)
    try:
        check_parsing(parsing)  # the whole schemas: what the client sent is what is bounded
    except ParsingLimitError as e:
        raise RequestError(f"tools: {e}", "tools") from None
    if tools:
        parsing = msgspec.structs.replace(parsing, tools=tuple(ToolSpec(t.name, slim_parameters(t.parameters))
                                                               for t in tools))
    return parsing
