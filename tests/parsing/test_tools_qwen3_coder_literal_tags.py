"""qwen3_coder: a `</parameter>` that the value itself holds (code or XML that mentions the tag) does
not end the value. vLLM's qwen3coder parser takes a `</parameter>` as the value's end only when the
next non-space text is a structural tag (`<parameter=`, `</function>`, `</tool_call>`) or the end of
the output (`_find_true_param_end`; streamed, it waits for that text), so the value keeps the tag
and what follows. Here the value was cut at the first `</parameter>` and the rest of it dropped
without a trace. On Qwen3.6's vocabulary (`<tool_call>` a token, the other tags text) and Qwen(1)'s,
every grouping."""

from __future__ import annotations

import pytest

from detok.parsing.tools import Qwen3CoderToolParser
from tests.helpers.tool_parsing import run_all_groupings, tools_of
from tests.helpers.tool_pieces import marker_ids, token_pieces

TOOLS = tools_of(("write", {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                                             "n": {"type": "integer"}, "o": {"type": "object"}}}))
XML = 'print("</parameter>")\nx = "<parameter=a>1</parameter>"'


def call(*params: tuple[str, str], end: str = "\n</function>\n</tool_call>") -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function=write>\n{body}" + end


CASES = [
    # the tag inside a line of code, then more of the value
    (call(("content", XML), ("path", "a.py")), [("write", {"content": XML, "path": "a.py"})]),
    # the tag followed by text on the next line
    (call(("content", "a</parameter>\nb"), ("n", "3")), [("write", {"content": "a</parameter>\nb", "n": 3})]),
    # twice, then the real one before </function>
    (call(("content", "</parameter></parameter> x")), [("write", {"content": "</parameter></parameter> x"})]),
    # a typed value: the object's text holds the tag
    (call(("o", '{"xml": "</parameter> ok"}')), [("write", {"o": {"xml": "</parameter> ok"}})]),
    # structural ones stay structural: before <parameter=, </function>, </tool_call>, the end of output
    (call(("content", "v"), ("path", "p")), [("write", {"content": "v", "path": "p"})]),
    ("<tool_call>\n<function=write>\n<parameter=content>\nv\n</parameter>  \n</tool_call>",
     [("write", {"content": "v"})]),
    ("<tool_call>\n<function=write>\n<parameter=content>\nv\n</parameter>\n", [("write", {"content": "v"})]),
]


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_literal_end_tag_stays_in_the_value(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    text, calls = CASES[case]
    markers = marker_ids(Qwen3CoderToolParser, tok)
    result = run_all_groupings(Qwen3CoderToolParser, token_pieces(tok, text, markers), tools=TOOLS,
                               token_markers=frozenset(markers.values()))
    assert result.content == ""
    assert [(c.name, c.args()) for c in result.calls] == calls
