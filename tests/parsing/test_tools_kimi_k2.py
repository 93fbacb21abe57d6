"""kimi_k2: vLLM's tests/tool_parsers/test_kimi_k2_tool_parser.py cases as data. No Kimi vocabulary is
at hand (no registry package ships it), so Kimi's markers are added to Qwen3.6's real vocabulary as
marker pieces; the text between them is Qwen3.6's real tokens. Every case in every grouping."""

from __future__ import annotations

import json

import pytest

from detok.parsing.tools import KimiK2ToolParser
from tests.helpers.tool_pieces import added_marker_pieces, token_pieces
from tests.helpers.tool_parsing import run_all_groupings, tools_of

SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
TB, TE, AB = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"
MARKERS = list(KimiK2ToolParser.markers)


def tool(tool_id: str, args: str) -> str:
    return f"{TB}{tool_id} {AB}{args}{TE}"


def wrap(*calls: str) -> str:
    return SB + "".join(calls) + SE


WEATHER = ("get_weather", {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}})
READ_FILE = ("read_file", {"type": "object", "properties": {"path": {"type": "string"}}})
BOOK = ("book_flight", {"type": "object", "properties": {"city": {"type": "string"}}})
CASES = [
    ("This is a test", (), "This is a test", []),
    ("I'll check. " + wrap(tool("functions.get_weather:0", '{"city": "Beijing"}')), (), "I'll check. ",
     [("functions.get_weather:0", "get_weather", {"city": "Beijing"})]),
    ("Compare weather. " + wrap(tool("functions.get_weather:0", '{"city": "Beijing"}'),
                                tool("functions.get_weather:1", '{"city": "Shanghai"}')), (), "Compare weather. ",
     [("functions.get_weather:0", "get_weather", {"city": "Beijing"}),
      ("functions.get_weather:1", "get_weather", {"city": "Shanghai"})]),
    ("Multiple tasks. " + wrap(tool("functions.get_weather:0", '{"city": "New York"}'),
                               tool("functions.get_news:1", '{"topic": "technology"}'),
                               tool("functions.send_email:2", '{"to": "user@example.com", "subject": "Daily Update"}')),
     (), "Multiple tasks. ",
     [("functions.get_weather:0", "get_weather", {"city": "New York"}),
      ("functions.get_news:1", "get_news", {"topic": "technology"}),
      ("functions.send_email:2", "send_email", {"to": "user@example.com", "subject": "Daily Update"})]),
    ("Process HTML. " + wrap(tool("functions.process_html:0", '{"html": "<div>content</div>"}')), (), "Process HTML. ",
     [("functions.process_html:0", "process_html", {"html": "<div>content</div>"})]),
    ("Formatted. " + wrap(tool("functions.process_data:0", '{\n  "name": "test",\n  "value": 123\n}')), (),
     "Formatted. ", [("functions.process_data:0", "process_data", {"name": "test", "value": 123})]),
    ("No prefix. " + wrap(tool("get_weather:0", '{"city": "Tokyo"}')), (), "No prefix. ",
     [("get_weather:0", "get_weather", {"city": "Tokyo"})]),
    ("Empty args. " + wrap(tool("functions.test:0", "{}")), (), "Empty args. ", [("functions.test:0", "test", {})]),
    # invalid JSON still extracted (closed here to valid JSON); an id without ":IDX" is skipped
    ("Help. " + wrap(tool("functions.bad:0", '{"city": "Beijing"'), tool("functions.good:1", '{"city": "Shanghai"}')),
     (), "Help. ", [("functions.bad:0", "bad", {"city": "Beijing"}), ("functions.good:1", "good", {"city": "Shanghai"})]),
    ("Help. " + wrap(tool("functions.invalid.0", '{"city": "Beijing"}'), tool("functions.valid:1", '{"city": "Shanghai"}')),
     (), "Help. ", [("functions.valid:1", "valid", {"city": "Shanghai"})]),
    # bare counters: the only tool; inferred by the arguments; ambiguous or malformed: skipped
    ("Let me check. " + wrap(tool("0", '{"city": "Tokyo", "unit": "celsius"}')), (WEATHER,), "Let me check. ",
     [("0", "get_weather", {"city": "Tokyo", "unit": "celsius"})]),
    ("Let me check. " + wrap(tool("0", '{"city": "Tokyo", "unit": "celsius"}')), (READ_FILE, WEATHER), "Let me check. ",
     [("0", "get_weather", {"city": "Tokyo", "unit": "celsius"})]),
    ("Let me check. " + wrap(tool("0", '{"city": "Tokyo"}')), (WEATHER, BOOK), "Let me check. ", []),
    ("Let me check. " + wrap(tool("0", '{"city": "Tokyo"')), (WEATHER, BOOK), "Let me check. ", []),
    # the singular section markers; a cut call
    ("<|tool_call_section_begin|>" + tool("functions.f:0", '{"a": 1}') + "<|tool_call_section_end|>", (), "",
     [("functions.f:0", "f", {"a": 1})]),
    (SB + TB + "functions.f:0" + AB + '{"a": [1, 2', (), "", [("functions.f:0", "f", {"a": [1, 2]})]),
    # SGLang test/registered/.../test_kimik2_detector.py (KimiK2Detector): single, multiple, braces in strings
    ("Let me help. " + SB + TB + "functions.execute_command:0" + AB + '{"command": "ls"}' + TE + SE, (),
     "Let me help. ", [("functions.execute_command:0", "execute_command", {"command": "ls"})]),
    (SB + TB + "functions.write_to_file:0" + AB + '{"path": "a.txt", "content": "hi"}' + TE
     + TB + "functions.execute_command:1" + AB + '{"command": "ls"}' + TE + SE, (), "",
     [("functions.write_to_file:0", "write_to_file", {"path": "a.txt", "content": "hi"}),
      ("functions.execute_command:1", "execute_command", {"command": "ls"})]),
    (SB + TB + "functions.write_to_file:0" + AB
     + json.dumps({"path": "x.md", "content": "# T\n```py\nd={'k': 1}\n```\ndone } { more"}) + TE + SE, (), "",
     [("functions.write_to_file:0", "write_to_file", {"path": "x.md", "content": "# T\n```py\nd={'k': 1}\n```\ndone } { more"})]),
]


@pytest.mark.parametrize("as_text", [False, True], ids=["markers-as-tokens", "markers-as-text"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, as_text: bool, qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    """As text, the markers are split over several of Qwen3.6's tokens (SGLang's split-marker
    regressions, #25071, in every grouping)."""
    text, tools, content, calls = CASES[case]
    pieces = token_pieces(qwen3_tok, text, {}) if as_text else added_marker_pieces(qwen3_tok, text, MARKERS)
    markers = frozenset() if as_text else frozenset(MARKERS)
    result = run_all_groupings(KimiK2ToolParser, pieces, tools=tools_of(*tools), token_markers=markers)
    assert result.content == content
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.calls] == calls
