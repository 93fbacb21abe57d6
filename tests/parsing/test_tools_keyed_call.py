"""The `keyed_call` grammar (gemma4) on hostile input: nesting past `MAX_ARGUMENT_DEPTH`, arguments
held past `MAX_HELD_CALL_CHARS`, names that are not names, and random text of its terminals - each
ends as a call with valid JSON arguments or as content, with a log line, never an error."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.parsing import malformed
from detok.parsing.limits import MAX_ARGUMENT_DEPTH, MAX_FUNCTION_NAME_CHARS, MAX_HELD_CALL_CHARS
from detok.parsing.registry import tool_parser_class
from detok.parsing.tools.keyed_values import decode, scalar
from detok.parsing.types import Piece
from tests.helpers.tool_parsing import run_parser

GEMMA4 = tool_parser_class("gemma4")
MARKERS = frozenset(GEMMA4.markers)
Q = '<|"|>'


@pytest.fixture(autouse=True)
def fresh_log_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malformed, "_RATE", malformed._RateBound())


def _pieces(text: str) -> list[Piece]:
    """Text with the family's markers as marker pieces (as the worker feeds one-token markers)."""
    out: list[Piece] = []
    i = 0
    while i < len(text):
        m = next((m for m in MARKERS if text.startswith(m, i)), None)
        if m is not None:
            out.append(Piece(m, m))
            i += len(m)
        else:
            j = min((k for k in (text.find(m, i) for m in MARKERS) if k >= 0), default=len(text))
            out.append(Piece(text[i:j]))
            i = j
    return out


def test_nesting_at_the_bound_decodes_and_past_it_ends_the_call(caplog: pytest.LogCaptureFixture) -> None:
    deep = "a:" + "[" * (MAX_ARGUMENT_DEPTH - 1) + "]" * (MAX_ARGUMENT_DEPTH - 1)
    assert decode(deep, Q)["a"] is not None
    with pytest.raises(ValueError, match=str(MAX_ARGUMENT_DEPTH)):
        decode("a:" + "[" * MAX_ARGUMENT_DEPTH, Q)
    with caplog.at_level(logging.WARNING, logger="detok.parsing"):
        got = run_parser(GEMMA4, _pieces("<|tool_call>call:f{a:" + "{b:" * 10_000 + "<tool_call|>"), token_markers=MARKERS)
    assert got.content == "" and [(c.name, c.args()) for c in got.calls] == [("f", {})]
    assert "nested deeper" in caplog.text


def test_arguments_past_the_held_bound_end_the_call(caplog: pytest.LogCaptureFixture) -> None:
    big = "x" * (MAX_HELD_CALL_CHARS + 10)
    with caplog.at_level(logging.WARNING, logger="detok.parsing"):
        got = run_parser(GEMMA4, _pieces(f"<|tool_call>call:f{{a:{Q}{big}{Q}}}<tool_call|>after"), token_markers=MARKERS)
    assert got.content == "after" and [(c.name, c.args()) for c in got.calls] == [("f", {})]
    assert str(MAX_HELD_CALL_CHARS) in caplog.text


@pytest.mark.parametrize("head", ["call:" + "n" * (MAX_FUNCTION_NAME_CHARS + 1), "call:a b", "call:", "f", "call:<x>",
                                  "call:" + "n" * 10_000])
def test_a_name_that_is_not_one_is_content(head: str) -> None:
    text = f"<|tool_call>{head}{{a:1}}<tool_call|>"
    got = run_parser(GEMMA4, _pieces(text), token_markers=MARKERS)
    assert got.calls == [] and got.content == text


@pytest.mark.parametrize(("text", "value"), [("1e400", "1e400"), ("nan", "nan"), ("-0", 0), ("9" * 5000, "9" * 5000),
                                             ("1.5e3", 1500.0), ("True", "True"), ("", "")])
def test_scalars_are_json_or_their_text(text: str, value: object) -> None:
    assert scalar(text) == value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<|tool_call>", "<tool_call|>", Q, "call:", "f", "{", "}", "[", "]", ",", ":", " ",
                                 "true", "1.", "-", "é", "\n", "(", "x:"]), max_size=60))
def test_any_text_gives_valid_json_arguments(bits: list[str]) -> None:
    got = run_parser(GEMMA4, _pieces("".join(bits)), token_markers=MARKERS)
    for call in got.calls:
        assert isinstance(json.loads(call.arguments), dict)
