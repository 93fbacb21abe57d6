"""hermes: vLLM's tests/tool_parsers/test_hermes_tool_parser.py cases and SGLang's Qwen25Detector
cases as data, on Qwen3.6's vocabulary (markers are tokens) and on Qwen(1)'s (markers are plain text
over several tokens), every case in every grouping of its tokens."""

from __future__ import annotations

import json

import pytest

from detok.parsing.tools import HermesToolParser
from tests.helpers.tool_pieces import marker_ids, token_pieces
from tests.helpers.tool_parsing import run_all_groupings

# (text, expected content, expected [(name, arguments as parsed JSON)])
CASES = [
    # vLLM: test_hermes_parser_streaming_just_forward_text
    ("This is some prior text that has nothing to do with tool calling.",
     "This is some prior text that has nothing to do with tool calling.", []),
    # vLLM: test_hermes_parser_streaming_failure_case_bug_19056 / non_streaming_tool_call_between_tags
    ('<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}}\n</tool_call>',
     "", [("final_answer", {"trigger": True})]),
    # vLLM: test_hermes_parser_streaming
    ('<tool_call>{"name": "get_current_temperature","arguments": {"location":'
     '"San Francisco, California, United States", "unit": "celsius"}}</tool_call>',
     "", [("get_current_temperature", {"location": "San Francisco, California, United States",
                                       "unit": "celsius"})]),
    # vLLM: test_hermes_streaming_content_then_tool_call_with_stream_interval
    ('Sure, let me check the weather.<tool_call>{"name": "get_weather", '
     '"arguments": {"city": "NYC"}}</tool_call>',
     "Sure, let me check the weather.", [("get_weather", {"city": "NYC"})]),
    # vLLM: test_hermes_streaming_multiple_tool_calls_with_stream_interval
    ('<tool_call>{"name": "search", "arguments": {"q": "cats"}}</tool_call>'
     '<tool_call>{"name": "search", "arguments": {"q": "dogs"}}</tool_call>',
     "", [("search", {"q": "cats"}), ("search", {"q": "dogs"})]),
    # vLLM: test_hermes_parser_non_streaming_tool_call_until_eos
    ('<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}}',
     "", [("final_answer", {"trigger": True})]),
    # vLLM: test_hermes_parser_non_streaming_tool_call_invalid_json (the object never closes): vLLM's
    # non-streamed path gives it all as content; its streamed path, and this one, emit the call
    ('<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}', "", [("final_answer", {"trigger": True})]),
    # vLLM: serialized arguments are decoded once; a string that is not an object stays a string
    ('<tool_call>\n{"name": "get_db_config", "arguments": "{\\"param\\": \\"max_connections\\"}"}\n</tool_call>',
     "", [("get_db_config", {"param": "max_connections"})]),
    ('<tool_call>\n{"name": "do_thing", "arguments": "hello"}\n</tool_call>', "", [("do_thing", "hello")]),
    *[("<tool_call>" + json.dumps({"name": "f", "arguments": v}) + "</tool_call>", "", [("f", v)])
      for v in ["{hello world}", "[oops", '{"a": 1} tail text']],
    # vLLM: test_hermes_streaming_content_and_tool_call_in_single_chunk
    ('Hi!<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', "Hi!", [("f", {"x": 1})]),
    # Qwen25Detector-style (SGLang's format): text, then two calls separated by a newline
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Tokyo"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>',
     "Let me check.\n", [("get_weather", {"location": "Tokyo"}), ("get_weather", {"location": "Paris"})]),
    # arguments before name; no arguments; nested and unicode values
    ('<tool_call>{"arguments": {"a": [1, {"b": null}]}, "name": "g"}</tool_call>', "", [("g", {"a": [1, {"b": None}]})]),
    ('<tool_call>{"name": "now"}</tool_call>', "", [("now", {})]),
    ('<tool_call>{"name": "say", "arguments": {"text": "北京 🫨 \\"q\\" \\u00e9"}}</tool_call> done',
     " done", [("say", {"text": '北京 🫨 "q" é'})]),
]


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    text, content, calls = CASES[case]
    markers = marker_ids(HermesToolParser, tok)
    assert bool(markers) == (tokenizer == "qwen3_tok")
    pieces = token_pieces(tok, text, markers)
    result = run_all_groupings(HermesToolParser, pieces, token_markers=frozenset(markers.values()))
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls
    assert len({c.id for c in result.calls}) == len(calls)


def test_arguments_are_the_models_text(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = '<tool_call>{"name": "f", "arguments": {"a" :  1,"b":[ 2 ]}}</tool_call>'
    markers = marker_ids(HermesToolParser, qwen3_tok)
    result = run_all_groupings(HermesToolParser, token_pieces(qwen3_tok, text, markers),
                               token_markers=frozenset(markers.values()))
    assert result.calls[0].arguments == '{"a" :  1,"b":[ 2 ]}'


def test_invalid_json_before_name_is_content(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = "ok <tool_call>{name: f}</tool_call> end"
    markers = marker_ids(HermesToolParser, qwen3_tok)
    result = run_all_groupings(HermesToolParser, token_pieces(qwen3_tok, text, markers),
                               token_markers=frozenset(markers.values()))
    assert result.calls == []
    assert result.content == text


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
def test_a_stray_end_marker_is_content(tokenizer: str, request: pytest.FixtureRequest) -> None:
    """`</tool_call>` with no call open is the model's text, where it stands (no peer case has one
    before a call; the parser keeps it rather than drop it)."""
    tok = request.getfixturevalue(tokenizer)
    text = 'So </tool_call> then <tool_call>{"name": "f", "arguments": {}}</tool_call></tool_call> end'
    markers = marker_ids(HermesToolParser, tok)
    result = run_all_groupings(HermesToolParser, token_pieces(tok, text, markers), token_markers=frozenset(markers.values()))
    assert result.content == "So </tool_call> then </tool_call> end"
    assert [(c.name, c.args()) for c in result.calls] == [("f", {})]
