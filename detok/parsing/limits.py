"""Bounds on what a request's output parsing may carry (its tools), checked by the frontend (a 400
naming the parameter) and again by the worker on the registration (that request's error, never the
worker's). docs/reliability.md's limits tables list them."""

from __future__ import annotations

import json
from typing import Any, Final

from detok.parsing.types import OutputParsing

MAX_TOOLS: Final = 256  # tools per request (as the frontend's `tools` bound)
MAX_TOOL_NAME_CHARS: Final = 256  # a function name
MAX_TOOL_SCHEMA_BYTES: Final = 64 * 1024  # one tool's `parameters` as JSON
MAX_TOOLS_BYTES: Final = 1024 * 1024  # every tool's name and parameters together, as JSON
MAX_SCHEMA_DEPTH: Final = 32  # nesting of objects and arrays in one tool's `parameters`
# nesting of a value the model wrote that a tool parser decodes (JSON arguments, a typed XML value, a
# Python literal): deeper stays the model's text. Below every supported interpreter's own decoder
# limits (the 3.11 JSON decoder's recursion limit, the parser's 200 nested brackets), so the same
# text decodes the same way on each.
MAX_ARGUMENT_DEPTH: Final = 128
MAX_PARSER_NAME_CHARS: Final = 64
MAX_CALL_ID_SEED_CHARS: Final = 256

# What the model writes in its tool calls, bounded while the families read it (docs/reliability.md's
# limits tables). Past a bound a call is malformed: while its name is unknown it ends as the model's text
# (content), once its name went out its arguments are closed to valid JSON where the bound was met;
# a log line says which (`detok.parsing.malformed`), never an error of the request or the worker.
MAX_TOOL_CALLS: Final = 128  # calls emitted per response; later ones are parsed and dropped
MAX_FUNCTION_NAME_CHARS: Final = 256  # a longer "name" is not one: the model's text
# text a family holds for one call before it can pass it on (arguments written before the name, a
# string-valued arguments awaiting its close, a call's region while no name is known, an XML value held
# for typing); the text it streams on is the request's output, bounded by its max_tokens. Also the
# bytes the worker's compiled path keeps for a slot in a held steady state before its stream takes them
MAX_HELD_CALL_CHARS: Final = 1024 * 1024


class ParsingLimitError(ValueError):
    """A request's parsing past one of the bounds; the message names the bound and the tool."""


def schema_depth(value: Any, limit: int = MAX_SCHEMA_DEPTH) -> int:
    """Nesting depth of a JSON value (iterative: a hostile schema cannot exhaust the stack);
    stops counting past `limit` + 1."""
    depth = 0
    level = [value]
    while level and depth <= limit:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, (list, tuple)):
                nxt.extend(v)
        if not nxt:
            break
        depth += 1
        level = nxt
    return depth


def check_parsing(parsing: OutputParsing) -> None:
    """ParsingLimitError unless `parsing` is within every bound."""
    for name in (parsing.reasoning_parser, parsing.tool_parser):
        if name is not None and len(name) > MAX_PARSER_NAME_CHARS:
            raise ParsingLimitError(f"a parser name may hold at most {MAX_PARSER_NAME_CHARS} characters")
    if len(parsing.call_id_seed) > MAX_CALL_ID_SEED_CHARS:
        raise ParsingLimitError(f"call_id_seed may hold at most {MAX_CALL_ID_SEED_CHARS} characters")
    if len(parsing.tools) > MAX_TOOLS:
        raise ParsingLimitError(f"at most {MAX_TOOLS} tools are allowed, got {len(parsing.tools)}")
    total = 0
    for i, tool in enumerate(parsing.tools):
        if not tool.name or len(tool.name) > MAX_TOOL_NAME_CHARS:
            raise ParsingLimitError(f"tools.{i}: a function name must hold 1 to {MAX_TOOL_NAME_CHARS} characters")
        size = len(tool.name)
        if tool.parameters is not None:
            depth = schema_depth(tool.parameters)
            if depth > MAX_SCHEMA_DEPTH:
                raise ParsingLimitError(f"tools.{i}: parameters nest deeper than {MAX_SCHEMA_DEPTH} levels")
            try:
                size += len(json.dumps(tool.parameters, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            except (TypeError, ValueError) as e:
                raise ParsingLimitError(f"tools.{i}: parameters are not JSON ({e})") from None
            if size > MAX_TOOL_SCHEMA_BYTES:
                raise ParsingLimitError(f"tools.{i}: parameters may hold at most {MAX_TOOL_SCHEMA_BYTES} bytes "
                                        f"as JSON, got {size}")
        total += size
        if total > MAX_TOOLS_BYTES:
            raise ParsingLimitError(f"the tools may hold at most {MAX_TOOLS_BYTES} bytes as JSON together")
