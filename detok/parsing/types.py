"""The values the parsers exchange with the worker and the frontend.

`ToolSpec` and `OutputParsing` travel in a request's registration (msgspec Structs, no pickle);
`ToolCallDelta` and `TypedDelta` are what a parser returns for each piece of text it is fed.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec


class ToolSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One tool of a request: its function name and JSON-schema parameters (None: untyped)."""

    name: str
    parameters: dict[str, Any] | None = None


class OutputParsing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a request's output is parsed; in its registration. All None/empty: plain text (no parser)."""

    reasoning_parser: str | None = None
    tool_parser: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    # None: the family's default (deepseek_r1, qwen3, glm45, kimi_k2 start inside reasoning, as vLLM's
    # current parsers with thinking on; mistral does not; openai_gptoss reads Harmony's channels);
    # True when the prompt already opened `<think>` (templates, enable_thinking / thinking kwargs).
    starts_in_reasoning: bool | None = None
    # Tool-call ids are derived from this and the call's index, so a replay after a worker's death
    # produces the same ids (never random).
    call_id_seed: str = ""


class ToolCallDelta(msgspec.Struct, frozen=True, array_like=True):
    """A fragment of one tool call. The first delta of a call carries `id` and `name`;
    the `arguments` fragments of one index, joined, are the call's JSON arguments text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class TypedDelta(msgspec.Struct):
    """What one piece (or the end) of a request's text became."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCallDelta] = msgspec.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


# What a steady parser turns plain text into (`Steady.kind`; also the wire's per-row kinds)
KIND_REASONING, KIND_CONTENT, KIND_ARGUMENTS = 1, 2, 3


class Steady(NamedTuple):
    """A parser state in which a plain piece whose text has none of `triggers` comes back whole as
    text of one `kind` (arguments: of the last call opened) and leaves the state as it was. The
    worker then decodes such text on its compiled path, without calling the parser (see
    `detok.stream.typed_fast`). `json_string`: inside a JSON string, the text must also be whole
    printable characters whose quotes and backslashes are complete escapes (`JSON_STRING_TEXT`: the
    string passes those on unchanged; a control character would be escaped), or end in an escape's
    backslash (passed on; the next text completes the escape). `value`: the text comes back as its
    JSON string body instead, less the whitespace the family holds at its end."""

    kind: int
    triggers: str
    json_string: bool = False
    # a family's own string value (XML formats), streamed as the JSON string body of the raw text
    # (quotes, backslashes, control characters escaped); its trailing whitespace is held until more
    # text shows it is inside the value: VALUE_NEWLINE one newline (qwen3_coder); VALUE_VERBATIM
    # nothing (glm45: the value is all the text between its tags). The text of an id then need not
    # pass unchanged (see detok.stream.typed_fast)
    value: str = ""
    held: bool = False


VALUE_NEWLINE, VALUE_VERBATIM = "newline", "verbatim"


# text a JSON string takes as it is and stays open with nothing held (with `str.isprintable`)
JSON_STRING_TEXT = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')


class Piece(NamedTuple):
    """Raw text fed to a parser: plain text (`marker` None), or one marker token detected by id by the
    worker (`marker` is that marker's string, e.g. "<think>"; `text` the text the decoder gave for it:
    the marker itself, or "" where `skip_special_tokens` skipped it). Parsers tell markers apart by
    `marker`; a reasoning family that passes a marker on as text passes on `text`."""

    text: str
    marker: str | None = None
