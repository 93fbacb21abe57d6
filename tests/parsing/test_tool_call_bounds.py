"""The bounds on what a model writes in its tool calls (`detok.parsing.limits`): nesting past
MAX_ARGUMENT_DEPTH, text held for a nameless call or a typed XML value past MAX_HELD_CALL_CHARS, calls
past MAX_TOOL_CALLS.
Each ends the call as the family's rule says (content while the name is unknown, else arguments
closed to valid JSON), logs one clear line, and never raises; on Qwen3.6's vocabulary (hermes,
`<tool_call>` one token) and in text pieces (llama3_json)."""

from __future__ import annotations

import json
import logging

import pytest

from detok.parsing import malformed
from detok.parsing.limits import MAX_ARGUMENT_DEPTH, MAX_HELD_CALL_CHARS, MAX_TOOL_CALLS
from detok.parsing.tools import HermesToolParser
from detok.parsing.tools import Llama3JsonToolParser
from detok.parsing.types import Piece
from tests.helpers.tool_parsing import run_all_groupings, run_parser, tools_of
from tests.helpers.tool_pieces import marker_ids, token_pieces

TOOLS = tools_of("f")


@pytest.fixture(autouse=True)
def fresh_log_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malformed, "_RATE", malformed._RateBound())


def _hermes(qwen3_tok, text: str):  # type: ignore[no-untyped-def]
    return token_pieces(qwen3_tok, text, marker_ids(HermesToolParser, qwen3_tok))


MARKERS = frozenset(("<tool_call>", "</tool_call>"))  # one token each in Qwen3.6's vocabulary


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH - 1, MAX_ARGUMENT_DEPTH])
def test_arguments_at_the_depth_bound_stream_whole(qwen3_tok, depth: int, caplog) -> None:  # type: ignore[no-untyped-def]
    args = '{"a": ' + _nested(depth - 1) + "}"  # the object is the first level
    text = '<tool_call>\n{"name": "f", "arguments": ' + args + "}\n</tool_call>"
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        result = run_all_groupings(HermesToolParser, _hermes(qwen3_tok, text), tools=TOOLS, token_markers=MARKERS)
    assert [(c.name, c.arguments) for c in result.calls] == [("f", args)]
    assert not caplog.records


def test_arguments_past_the_depth_bound_end_there_closed(qwen3_tok, caplog) -> None:  # type: ignore[no-untyped-def]
    text = '<tool_call>\n{"name": "f", "arguments": {"a": ' + _nested(MAX_ARGUMENT_DEPTH + 50) + "}}\n</tool_call>ok"
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        result = run_all_groupings(HermesToolParser, _hermes(qwen3_tok, text), tools=TOOLS, token_markers=MARKERS)
    (call,) = result.calls
    json.loads(call.arguments)
    assert call.name == "f" and 1 + call.arguments.count("[") == MAX_ARGUMENT_DEPTH  # the object and its arrays
    assert result.content == "ok"
    assert any(f"nested deeper than {MAX_ARGUMENT_DEPTH} levels" in r.getMessage() for r in caplog.records)


def test_past_the_depth_bound_before_the_name_is_content(caplog) -> None:  # type: ignore[no-untyped-def]
    text = '{"arguments": ' + _nested(MAX_ARGUMENT_DEPTH + 5) + ', "name": "f"}'
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        result = run_parser(Llama3JsonToolParser, [Piece(text)], tools=TOOLS)
    assert result.calls == [] and result.content == text
    assert any("nested deeper" in r.getMessage() for r in caplog.records)


def test_a_nameless_call_past_the_held_bound_is_content_at_once(caplog) -> None:  # type: ignore[no-untyped-def]
    """Arguments written before the name are held; past the bound the region is given back as the
    model's text (not held to its end), and what follows the region is parsed as usual."""
    big = "a" * 4096
    head = '<tool_call>{"arguments": {"x": "'
    pieces = [Piece(head)] + [Piece(big)] * (MAX_HELD_CALL_CHARS // len(big) + 2)
    tail = '"}, "name": "f"}</tool_call> then <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    parser = HermesToolParser(tools=TOOLS, token_markers=frozenset(), call_id=lambda i: f"c{i}")
    content: list[str] = []
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        for p in pieces:
            content.append(parser.feed(p)[0])
        assert sum(map(len, content)) > MAX_HELD_CALL_CHARS  # given back before the region's end
        got = parser.feed(Piece(tail))
        end = parser.finish()
    content += [got[0], end[0]]
    assert "".join(content) == "".join(p.text for p in pieces) + '"}, "name": "f"}</tool_call> then '
    assert [(d.name, d.arguments) for d in got[1] + end[1]] == [("f", ""), (None, "{}")]
    assert [r.getMessage() for r in caplog.records if "characters" in r.getMessage()]


def test_calls_past_the_count_bound_are_dropped_with_one_line(caplog) -> None:  # type: ignore[no-untyped-def]
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>' * (MAX_TOOL_CALLS + 20)
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        result = run_parser(HermesToolParser, [Piece(text)], tools=TOOLS)
    assert len(result.calls) == MAX_TOOL_CALLS
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"more than {MAX_TOOL_CALLS} calls" in lines[0]


def test_log_lines_are_rate_bounded(caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        for _ in range(1000):
            malformed.log_malformed("x", "y")
    assert len(caplog.records) == 1 and "malformed tool call: x; y" in caplog.records[0].getMessage()


def test_a_pythonic_list_past_the_held_bound_is_content_at_once(caplog) -> None:  # type: ignore[no-untyped-def]
    from detok.parsing.registry import tool_parser_class

    parser = tool_parser_class("pythonic")(tools=TOOLS, token_markers=frozenset(), call_id=lambda i: f"c{i}")
    big = "x" * 4096
    pieces = [Piece("[f(a='")] + [Piece(big)] * (MAX_HELD_CALL_CHARS // len(big) + 2)
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        content = [parser.feed(p)[0] for p in pieces]
        assert sum(map(len, content)) > MAX_HELD_CALL_CHARS  # given back before the end
        content.append(parser.finish()[0])
    assert "".join(content) == "".join(p.text for p in pieces) and parser.calls_emitted == 0
    assert any("held past" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("family", "head", "tail"), [
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=n>\n", "\n</parameter>\n</function>\n</tool_call>ok"),
    ("minimax_m2", '<minimax:tool_call><invoke name="f"><parameter name="n">', "</parameter></invoke></minimax:tool_call>ok"),
    ("deepseek_v32", '<｜DSML｜function_calls><｜DSML｜invoke name="f"><｜DSML｜parameter name="n" string="false">',
     "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>ok"),
])
def test_a_typed_value_past_the_held_bound_goes_on_as_its_text(family: str, head: str, tail: str, caplog) -> None:  # type: ignore[no-untyped-def]
    """An integer parameter (a value held whole for typing) longer than MAX_HELD_CALL_CHARS: it is
    passed on as a string while it arrives, the arguments stay valid JSON, the content after is kept."""
    from detok.parsing.registry import tool_parser_class
    from detok.parsing.types import ToolSpec

    tools = (ToolSpec("f", {"type": "object", "properties": {"n": {"type": "integer"}}}),)
    parser = tool_parser_class(family)(tools=tools, token_markers=frozenset(), call_id=lambda i: f"c{i}")
    big = "9" * 4096
    count = MAX_HELD_CALL_CHARS // len(big) + 2
    args, content = [], []
    with caplog.at_level(logging.WARNING, "detok.parsing"):
        for piece in [Piece(head)] + [Piece(big)] * count:
            text, deltas = parser.feed(piece)
            content.append(text)
            args += [d.arguments for d in deltas if d.arguments]
        assert sum(map(len, args)) > MAX_HELD_CALL_CHARS  # passed on before the value's end
        for text, deltas in (parser.feed(Piece(tail)), parser.finish()):
            content.append(text)
            args += [d.arguments for d in deltas if d.arguments]
    assert json.loads("".join(args)) == {"n": big * count}
    assert "".join(content) == "ok"
    assert any(f"a typed value past {MAX_HELD_CALL_CHARS} characters" in r.getMessage() for r in caplog.records)
