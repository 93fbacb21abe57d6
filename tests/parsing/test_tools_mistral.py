"""mistral: vLLM's tests/tool_parsers/test_mistral_tool_parser.py cases as data, on mistral-common's
Tekken vocabulary (240911: `[TOOL_CALLS]` is a control token; its `[ARGS]`/`[CALL_ID]` came with v11
and are added as marker pieces) and on its v3 SentencePiece vocabulary (pre-v11 array form), every
case in every grouping of its tokens."""

from __future__ import annotations

import pytest

from detok.parsing.tools import MistralToolParser
from tests.helpers.tool_pieces import added_marker_pieces
from tests.helpers.tokenizers_available import mistral_spm, mistral_tekken
from tests.helpers.tool_parsing import run_all_groupings

MARKERS = ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]
WEATHER = {"city": "San Francisco", "state": "CA", "unit": "celsius"}
BASH = {"command": "print(\"hello world!\")\nre.compile(r'{}')"}
CASES = [
    ("This is a test", "This is a test", []),
    # pre-v11 array form (test_extract_tool_calls_pre_v11_tokenizer, ..._streaming_pre_v11_tokenizer)
    ('[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]', "", [("add", {"a": 3.5, "b": 4})]),
    ('[TOOL_CALLS] [{"name": "get_current_weather", "arguments":{"city": "San Francisco", "state": "CA", '
     '"unit": "celsius"}}]', "", [("get_current_weather", WEATHER)]),
    ('[TOOL_CALLS] [{"arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}, '
     '"name": "get_current_weather"}]', "", [("get_current_weather", WEATHER)]),
    ('[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]', "", [("get_age", {"name": "John Doe"})]),
    ('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"name": "get_current_weather", '
     '"arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}}]', "",
     [("add", {"a": 3.5, "b": 4}), ("get_current_weather", WEATHER)]),
    ('Hello[TOOL_CALLS] [{"name": "add", "arguments":{"a": 1, "b": 2}}]', "Hello", [("add", {"a": 1, "b": 2})]),
    ('[TOOL_CALLS] [{"name": "get_current_weather", "arguments":{"city": "Dallas", "state": "TX", '
     '"unit": "fahrenheit"}}]\nextra trailing data', "\nextra trailing data",
     [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})]),
    ('[TOOL_CALLS]  [ {"name":"add" , "arguments" : {"a": 3, "b": 4} } ]', "", [("add", {"a": 3, "b": 4})]),
    ('[TOOL_CALLS]  junk [{"name": "add", "arguments":{"a": 1, "b": 2}}] trail', " trail", [("add", {"a": 1, "b": 2})]),
    ("[TOOL_CALLS] not json at all", "not json at all", []),
    # v11+ name form (test_extract_tool_calls, ..._streaming)
    ('[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}', "", [("add_this_and_that", {"a": 3.5, "b": 4})]),
    ('[TOOL_CALLS]add{"a": 3.5, "b": 4}[TOOL_CALLS]multiply{"a": 3, "b": 6}', "",
     [("add", {"a": 3.5, "b": 4}), ("multiply", {"a": 3, "b": 6})]),
    ('bla[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}', "bla", [("add_this_and_that", {"a": 3.5, "b": 4})]),
    # "complex": arguments cut off; vLLM returns the unterminated text, here closed to valid JSON
    ('hi{hi[TOOL_CALLS]bash{"command": "print(\\"hello world!\\")\\nre.compile(r\'{}\')', "hi{hi", [("bash", BASH)]),
    ('hi{hi[TOOL_CALLS]bash{"command": "print(\\"hello world!\\")\\nre.compile(r\'{}\')"}', "hi{hi", [("bash", BASH)]),
    ("[TOOL_CALLS]toolname_no_args", "", []),
    # SGLang test_function_call_parser.py TestMistralDetector (its normal text is stripped; vLLM's and
    # ours keep the space before the marker)
    ('[TOOL_CALLS] [{"name":"make_next_step_decision", "arguments":{"decision":"", "content":"```\\nTOOL: Access a '
     'weather API\\nANSWER: as follows: [City Name] - [Weather Conditions] - [Temperature]\\n```"}}]', "",
     [("make_next_step_decision", {"decision": "", "content": "```\nTOOL: Access a weather API\nANSWER: as follows: "
                                   "[City Name] - [Weather Conditions] - [Temperature]\n```"})]),
    ('[TOOL_CALLS] [{"name":"make_next_step_decision", "arguments":{"decision":"TOOL", "content":"Use weather API"}}]',
     "", [("make_next_step_decision", {"decision": "TOOL", "content": "Use weather API"})]),
    ('Here is some text before the tool call: [TOOL_CALLS] [{"name":"make_next_step_decision", '
     '"arguments":{"decision":"ANSWER", "content":"The answer is 42"}}]', "Here is some text before the tool call: ",
     [("make_next_step_decision", {"decision": "ANSWER", "content": "The answer is 42"})]),
    # with [ARGS] (mistral-common v11+ tokens) and [CALL_ID]
    ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}', "",
     [("get_weather", {"city": "Paris"}), ("get_time", {})]),
]


@pytest.fixture(scope="module", params=["tekken", "spm_v3"])
def mistral_tok(request):  # type: ignore[no-untyped-def]
    from detok.tokenizer.factory import load_tokenizer

    path = mistral_tekken("240911") if request.param == "tekken" else mistral_spm(3)
    return load_tokenizer(str(path))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, mistral_tok) -> None:  # type: ignore[no-untyped-def]
    text, content, calls = CASES[case]
    pieces = added_marker_pieces(mistral_tok, text, MARKERS)
    result = run_all_groupings(MistralToolParser, pieces, token_markers=frozenset(MARKERS))
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls
    assert all(len(c.id) == 9 and c.id.isalnum() for c in result.calls)


def test_tool_calls_is_a_control_token_of_tekken() -> None:
    from detok.tokenizer.factory import load_tokenizer
    from tests.helpers.tool_pieces import marker_ids

    assert "[TOOL_CALLS]" in marker_ids(MistralToolParser, load_tokenizer(str(mistral_tekken("240911")))).values()
