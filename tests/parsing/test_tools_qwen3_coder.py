"""qwen3_coder beyond the peers' cases (tests/parsing/cases/qwen3_coder.json): the arguments text is
`json.dumps`'s, and a string value streams before it ends; on Qwen3.6's vocabulary (`<tool_call>` a
token, the XML tags text), every grouping of its tokens."""

from __future__ import annotations

import json

import pytest

from detok.parsing.tools import Qwen3CoderToolParser
from tests.helpers.tool_pieces import marker_ids, token_pieces
from tests.helpers.tool_parsing import run_all_groupings, tools_of

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "state": {"type": "string"},
    "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}}}
AREA = {"type": "object", "properties": {
    "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}
TYPES = {"type": "object", "properties": {
    "int_param": {"type": "integer"}, "float_param": {"type": "float"}, "bool_param": {"type": "boolean"},
    "str_param": {"type": "string"}, "obj_param": {"type": "object"}}}
ANYOF = {"type": "object", "properties": {
    "anyof_int": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 5},
    "anyof_str": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "anyof_array": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "anyof_obj": {"anyOf": [{"type": "object"}, {"type": "null"}]},
    "type_as_array": {"type": ["integer", "null"]},
    "multi_non_null": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}}}
TOOLS = tools_of(("get_current_weather", WEATHER), ("calculate_area", AREA), ("test_types", TYPES),
                 ("test_anyof", ANYOF))


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_arguments_text_is_json_dumps_format(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    markers = marker_ids(Qwen3CoderToolParser, qwen3_tok)
    text = call("calculate_area", shape="circle", dimensions='{"radius": 15.5}', precision="3")
    result = run_all_groupings(Qwen3CoderToolParser, token_pieces(qwen3_tok, text, markers), tools=TOOLS,
                               token_markers=frozenset(markers.values()))
    want = {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3}
    assert result.calls[0].arguments == json.dumps(want, ensure_ascii=False)


def test_string_values_stream_before_the_value_ends(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    markers = marker_ids(Qwen3CoderToolParser, qwen3_tok)
    text = call("get_current_weather", city="San Francisco is a long city name")
    pieces = token_pieces(qwen3_tok, text, markers)
    from tests.helpers.tool_parsing import run_parser

    result = run_parser(Qwen3CoderToolParser, pieces, tools=TOOLS, token_markers=frozenset(markers.values()))
    fragments = [d.arguments for ds in result.deltas for d in ds if d.arguments]
    assert any("San" in f and "name" not in f for f in fragments)
