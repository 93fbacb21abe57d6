"""hermes beyond the peers' cases (tests/parsing/cases/hermes.json): the arguments are the model's
text, JSON that breaks before the name is content, a stray end marker is content; on Qwen3.6's
vocabulary (markers are tokens) and on Qwen(1)'s (markers are plain text over several tokens), every
grouping of its tokens."""

from __future__ import annotations

import pytest

from detok.parsing.tools import HermesToolParser
from tests.helpers.tool_pieces import marker_ids, token_pieces
from tests.helpers.tool_parsing import run_all_groupings

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
