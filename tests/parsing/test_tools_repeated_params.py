"""qwen3_coder and glm45: a parameter written twice in one call is written twice in the arguments, in
the order written (`{"a": 1, "a": 2}`), so `json.loads` gives the last value. That is vLLM's streamed
text (qwen3coder `extract_tool_calls_streaming` appends a `"name": value` fragment per parameter;
glm4_moe `_build_args_json_so_far` joins every `<arg_key>`/`<arg_value>` pair it finds) and SGLang's
(Qwen3CoderDetector and Glm4MoeDetector `parse_streaming_increment` the same), while their non-streamed
paths build a dict, keeping only the last (`{"a": 2}`). detok streams the arguments as they arrive and
cannot take back a key already sent; its one text is the peers' streamed one, which a client reads as
their non-streamed one. Pinned here (docs/reasoning-and-tools.md, stated behaviours)."""

from __future__ import annotations

import json

import pytest

from detok.parsing.tools import Glm45ToolParser
from detok.parsing.tools import Qwen3CoderToolParser
from tests.helpers.tool_parsing import run_all_groupings, tools_of
from tests.helpers.tool_pieces import added_marker_pieces, marker_ids, token_pieces

GLM_TAGS = list(Glm45ToolParser.markers)
TOOLS = tools_of(("f", {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}))
# (values written, the arguments text, what json.loads gives)
CASES = [
    ([("n", "1"), ("n", "2")], '{"n": 1, "n": 2}', {"n": 2}),
    ([("s", "x"), ("n", "1"), ("s", "y")], '{"s": "x", "n": 1, "s": "y"}', {"s": "y", "n": 1}),
]


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_qwen3_coder_repeated_parameter(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    params, arguments, loaded = CASES[case]
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    text = f"<tool_call>\n<function=f>\n{body}</function>\n</tool_call>"
    markers = marker_ids(Qwen3CoderToolParser, tok)
    result = run_all_groupings(Qwen3CoderToolParser, token_pieces(tok, text, markers), tools=TOOLS,
                               token_markers=frozenset(markers.values()))
    assert [(c.name, c.arguments) for c in result.calls] == [("f", arguments)]
    assert json.loads(result.calls[0].arguments) == loaded


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_glm45_repeated_parameter(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    params, arguments, loaded = CASES[case]
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in params)
    text = f"<tool_call>f\n{body}</tool_call>"
    if tokenizer == "qwen3_tok":  # GLM's tags added to Qwen3.6's vocabulary (as vocabularies.qwen_glm)
        pieces, tags = added_marker_pieces(tok, text, GLM_TAGS), frozenset(GLM_TAGS)
    else:
        pieces, tags = token_pieces(tok, text, {}), frozenset()
    result = run_all_groupings(Glm45ToolParser, pieces, tools=TOOLS, token_markers=tags)
    assert [(c.name, c.arguments) for c in result.calls] == [("f", arguments)]
    assert json.loads(result.calls[0].arguments) == loaded
