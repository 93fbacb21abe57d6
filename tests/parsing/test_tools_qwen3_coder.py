"""qwen3_coder: vLLM's tests/tool_parsers/test_qwen3coder_tool_parser.py cases as data, on Qwen3.6's
vocabulary (`<tool_call>` a token, the XML tags text) and on Qwen(1)'s (every tag text), every case in
every grouping of its tokens; arguments typed by the request's schema."""

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


DALLAS = call("get_current_weather", city="Dallas", state="TX", unit="fahrenheit")
DALLAS_ARGS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
CASES = [
    ("This is a test response without any tool calls", "This is a test response without any tool calls", []),
    (DALLAS, "", [("get_current_weather", DALLAS_ARGS)]),
    ("Sure! Let me check the weather for you." + DALLAS, "Sure! Let me check the weather for you.",
     [("get_current_weather", DALLAS_ARGS)]),
    (call("calculate_area", shape="rectangle", dimensions='{"width": 10, \n "height": 20}', precision="2"), "",
     [("calculate_area", {"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})]),
    (DALLAS + "\n" + call("get_current_weather", city="Orlando", state="FL", unit="fahrenheit"), "",
     [("get_current_weather", DALLAS_ARGS),
      ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "fahrenheit"})]),
    ("Let me calculate that area for you." + call("calculate_area", shape="circle", dimensions='{"radius": 15.5}',
                                                  precision="3"),
     "Let me calculate that area for you.",
     [("calculate_area", {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3})]),
    # test_extract_tool_calls_fallback_no_tags
    ("<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n"
     "</parameter>\n</function>", "", [("get_current_weather", {"city": "Dallas", "state": "TX"})]),
    # test_extract_tool_calls_type_conversion
    (call("test_types", int_param="42", float_param="3.14", bool_param="true", str_param="hello world",
          obj_param='{"key": "value"}'), "",
     [("test_types", {"int_param": 42, "float_param": 3.14, "bool_param": True, "str_param": "hello world",
                      "obj_param": {"key": "value"}})]),
    # test_extract_tool_calls_anyof_type_conversion
    (call("test_anyof", anyof_int="5", anyof_str="hello", anyof_array='["a", "b", "c"]',
          anyof_obj='{"key": "value"}', type_as_array="42", multi_non_null="some text"), "",
     [("test_anyof", {"anyof_int": 5, "anyof_str": "hello", "anyof_array": ["a", "b", "c"],
                      "anyof_obj": {"key": "value"}, "type_as_array": 42, "multi_non_null": "some text"})]),
    # test_extract_tool_calls_missing_closing_parameter_tag
    ("Let me check the weather for you:\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n"
     "<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
     "Let me check the weather for you:\n", [("get_current_weather", DALLAS_ARGS)]),
    # nullable string "null" is null; a multi-line code value keeps its inner newlines; no parameters
    (call("test_anyof", anyof_str="null"), "", [("test_anyof", {"anyof_str": None})]),
    (call("write", code='def f():\n    return "<x>"\n\n'), "", [("write", {"code": 'def f():\n    return "<x>"\n\n'})]),
    ("<tool_call>\n<function=now>\n</function>\n</tool_call> after", " after", [("now", {})]),
    # unterminated: the call is closed with what was parsed
    ("<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal", "",
     [("get_current_weather", {"city": "Dal"})]),
]


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    text, content, calls = CASES[case]
    markers = marker_ids(Qwen3CoderToolParser, tok)
    pieces = token_pieces(tok, text, markers)
    result = run_all_groupings(Qwen3CoderToolParser, pieces, tools=TOOLS,
                               token_markers=frozenset(markers.values()))
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls


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
