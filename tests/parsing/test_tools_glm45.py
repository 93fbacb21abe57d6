"""glm45: vLLM's tests/tool_parsers/test_glm4_moe_tool_parser.py cases as data. No GLM vocabulary is at
hand, so GLM's tags are added to Qwen3.6's real vocabulary as marker pieces (as GLM-4.5 has them all
as tokens); also on Qwen(1)'s vocabulary where every tag is plain text. Every grouping."""

from __future__ import annotations

import pytest

from detok.parsing.tools import Glm45ToolParser
from tests.helpers.tool_pieces import added_marker_pieces, token_pieces
from tests.helpers.tool_parsing import run_all_groupings, tools_of

MARKERS = list(Glm45ToolParser.markers)
TOOLS = tools_of(("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),
                 ("typed", {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}}))


def call(name: str, indent: str = "", **args: str) -> str:
    body = "".join(f"{indent}<arg_key>{k}</arg_key>\n{indent}<arg_value>{v}</arg_value>\n" for k, v in args.items())
    return f"<tool_call>{name}\n{body}{indent}</tool_call>"


DALLAS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
CASES = [
    ("This is a test", "This is a test", []),
    (call("get_current_weather", "    ", **DALLAS), "", [("get_current_weather", DALLAS)]),
    (call("get_current_weather", "    ", **DALLAS) + "\n    "
     + call("get_current_weather", "    ", city="Orlando", state="FL", unit="fahrenheit"), "",
     [("get_current_weather", DALLAS), ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "fahrenheit"})]),
    ("I'll help you check the weather. " + call("get_current_weather", "    ", city="Seattle", state="WA", unit="celsius"),
     "I'll help you check the weather. ", [("get_current_weather", {"city": "Seattle", "state": "WA", "unit": "celsius"})]),
    ("I will help you get the weather." + call("get_weather", "    ", city="Beijing", date="2025-08-01"),
     "I will help you get the weather.", [("get_weather", {"city": "Beijing", "date": "2025-08-01"})]),
    # test_extract_tool_calls_with_thinking_tags (no reasoning parser here: the think text is content)
    ("<think>I want to get the weather.</think>\n\nI will help you get the weather.\n"
     + call("get_weather", city="Beijing", date="2025-08-01"),
     "<think>I want to get the weather.</think>\n\nI will help you get the weather.\n",
     [("get_weather", {"city": "Beijing", "date": "2025-08-01"})]),
    # malformed: what can be read is read
    ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Seattle</arg_value>\n<arg_key>incomplete_arg\n"
     "<arg_value>value</arg_value>\n</tool_call>", "", [("get_weather", {"city": "Seattle"})]),
    ("<tool_call>get_current_time\n</tool_call>", "", [("get_current_time", {})]),
    ("<tool_call>get_current_time</tool_call>", "", [("get_current_time", {})]),
    # test_extract_tool_calls_mixed_content: vLLM keeps only the text before the first call
    ("I will help you get the weather info.\n\n" + call("get_weather", city="Beijing", date="2025-08-01")
     + "\n\nmeaningwhile, I will also check the weather in Shanghai.\n\n"
     + call("get_weather", city="Shanghai", date="2025-08-01"),
     "I will help you get the weather info.\n\n\n\nmeaningwhile, I will also check the weather in Shanghai.\n\n",
     [("get_weather", {"city": "Beijing", "date": "2025-08-01"}),
      ("get_weather", {"city": "Shanghai", "date": "2025-08-01"})]),
    (call("send_message", recipient="Amy", message="It is a nice day", priority="high"), "",
     [("send_message", {"recipient": "Amy", "message": "It is a nice day", "priority": "high"})]),
    # incomplete (no </tool_call>): vLLM's non-streamed path gives it as content; its streamed path and
    # this one emit the call read so far
    ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n"
     "<arg_value>2025-08-01</arg_value>", "", [("get_weather", {"city": "Beijing", "date": "2025-08-01"})]),
    # typing: schema strings stay strings (even "42"), others are JSON / Python literals
    (call("typed", s="42", n="7", x="[1, 'a']", y="{\"k\": null}", z="plain words", t="True"), "",
     [("typed", {"s": "42", "n": 7, "x": [1, "a"], "y": {"k": None}, "z": "plain words", "t": True})]),
    # a string value keeps its whitespace (vLLM #42026 test_whitespace_preserved_in_arg_values, SGLang #20543)
    (call("get_weather", city="  São Paulo \n  line2  "), "", [("get_weather", {"city": "  São Paulo \n  line2  "})]),
]


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    text, content, calls = CASES[case]
    if tokenizer == "qwen3_tok":
        pieces, markers = added_marker_pieces(tok, text, MARKERS), frozenset(MARKERS)
    else:
        pieces, markers = token_pieces(tok, text, {}), frozenset()
    result = run_all_groupings(Glm45ToolParser, pieces, tools=TOOLS, token_markers=markers)
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls
