"""glm45: a string value's leading and trailing whitespace is the value's own. vLLM's glm4_moe
parser strips only non-string values (PR #42026, test_whitespace_preserved_in_arg_values:
`<arg_value>    indented code    </arg_value>` gives "    indented code    "); SGLang's Glm4MoeDetector
and Glm47MoeDetector no longer strip values either (PR #20543). GLM's template writes the value
inline between its tags, so that whitespace is the model's data (indentation, a trailing newline
of code for an exact-match edit tool). Values of other types are still stripped and read as JSON.
On Qwen3.6's vocabulary with GLM's tags added (as test_tools_glm45), every grouping."""

from __future__ import annotations

import pytest

from detok.parsing.tools import Glm45ToolParser
from tests.helpers.tool_parsing import run_all_groupings, tools_of
from tests.helpers.tool_pieces import added_marker_pieces, token_pieces

MARKERS = list(Glm45ToolParser.markers)
TOOLS = tools_of(("apply_diff", {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"},
                                                                  "o": {"type": "object"}}}))
CASES = [
    # vLLM test_whitespace_preserved_in_arg_values
    ("    indented code    ", {"s": "    indented code    "}),
    ("\n    if x:\n        return 1\n", {"s": "\n    if x:\n        return 1\n"}),
    ("  São Paulo \n  line2  ", {"s": "  São Paulo \n  line2  "}),
    ("   ", {"s": "   "}),
    ('\t"quoted"\\ \r\n', {"s": '\t"quoted"\\ \r\n'}),
    ("", {"s": ""}),
]


def _call(value: str) -> str:
    return f"<tool_call>apply_diff\n<arg_key>s</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>"


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_string_value_whitespace_is_kept(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    value, args = CASES[case]
    text = _call(value)
    if tokenizer == "qwen3_tok":
        pieces, markers = added_marker_pieces(tok, text, MARKERS), frozenset(MARKERS)
    else:
        pieces, markers = token_pieces(tok, text, {}), frozenset()
    result = run_all_groupings(Glm45ToolParser, pieces, tools=TOOLS, token_markers=markers)
    assert [(c.name, c.args()) for c in result.calls] == [("apply_diff", args)]


def test_cut_inside_a_string_value_keeps_its_whitespace(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = "<tool_call>apply_diff\n<arg_key>s</arg_key><arg_value>  def f():\n    "
    result = run_all_groupings(Glm45ToolParser, added_marker_pieces(qwen3_tok, text, MARKERS), tools=TOOLS,
                               token_markers=frozenset(MARKERS))
    assert [c.args() for c in result.calls] == [{"s": "  def f():\n    "}]


def test_other_values_are_still_stripped(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = ("<tool_call>apply_diff\n<arg_key> n </arg_key><arg_value> 42\n</arg_value>"
            '<arg_key>o</arg_key><arg_value>\n {"k": 1} </arg_value><arg_key>x</arg_key><arg_value>  words  '
            "</arg_value></tool_call>")
    result = run_all_groupings(Glm45ToolParser, added_marker_pieces(qwen3_tok, text, MARKERS), tools=TOOLS,
                               token_markers=frozenset(MARKERS))
    assert [c.args() for c in result.calls] == [{"n": 42, "o": {"k": 1}, "x": "words"}]
