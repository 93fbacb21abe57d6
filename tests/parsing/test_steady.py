"""`steady()` agrees with `feed` (the worker decodes a steady request's plain ids on its compiled path
without calling the parser, detok.stream.typed_fast): whenever a parser says it is steady, a plain
piece without its trigger characters comes back whole as text of that kind and leaves it steady in
the same way. Checked on random texts of every family's markers, JSON and XML bits, in random
groupings, markers as tokens or as text; a stated share of the pieces must have been steady."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.output import OutputParser
from detok.parsing.reasoning import FAMILIES as REASONING_FAMILIES
from detok.parsing.tools import FAMILIES as TOOL_FAMILIES
from detok.parsing.types import (
    JSON_STRING_TEXT,
    KIND_ARGUMENTS,
    KIND_CONTENT,
    KIND_REASONING,
    OutputParsing,
    Piece,
    Steady,
    ToolCallDelta,
    VALUE_NEWLINE,
)
from detok.parsing.tools.schema_values import json_string_body
from tests.helpers.tool_pieces import text_pieces
from tests.parsing.test_tools_properties import (
    JSON_BITS,
    SNIPPETS,
    TOOLS,
    XML_BITS,
    grouped,
)

WORDS = ["plain words ", "北京 ", "🫨", "x", "\n", "\t", "</", "<", "[", "{", "\\", '"', " and", "\u200b", "e\u0301"]


def _qualifies(piece: Piece, steady: Steady) -> bool:
    text = piece.text
    if steady.value:  # a family's string value: any text but held whitespace at its end
        held = "\n" if steady.value == VALUE_NEWLINE else ""  # VALUE_VERBATIM holds nothing
        return (piece.marker is None and bool(text) and not any(c in text for c in steady.triggers)
                and text[-1] not in held)
    return (piece.marker is None and bool(text) and not any(c in text for c in steady.triggers)
            and (not steady.json_string or (text.isprintable() and JSON_STRING_TEXT.fullmatch(text) is not None)))


def _passed_on(piece: Piece, steady: Steady) -> str:
    """What a steady parser gives for a qualifying piece: the text, or a value's JSON string body."""
    return json_string_body(piece.text) if steady.value else piece.text


def _fragments(markers: tuple[str, ...], extra: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(list(markers) + JSON_BITS + XML_BITS + WORDS * 3 + extra * 3)


@st.composite
def tool_case(draw: st.DrawFn) -> tuple[type, list[Piece], bool]:
    family = draw(st.sampled_from(TOOL_FAMILIES))
    text = "".join(draw(st.lists(_fragments(family.markers, SNIPPETS[family.names[0]]), max_size=40)))
    as_tokens = draw(st.booleans())
    pieces = text_pieces(text, list(family.markers) if as_tokens else [])
    return family, grouped(pieces, draw(st.lists(st.integers(1, 4), max_size=60))), as_tokens


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_case())
def test_a_steady_tool_parser_passes_plain_pieces_on_unchanged(case: tuple[type, list[Piece], bool]) -> None:
    _check_tool_parser(*case)


def _check_tool_parser(family: type, pieces: list[Piece], as_tokens: bool) -> int:
    """Feeds the pieces, checking every steady one; how many were."""
    markers = frozenset(family.markers) if as_tokens else frozenset()
    parser = family(tools=TOOLS, token_markers=markers, call_id=lambda i: f"call_{i}")
    seen = 0
    for piece in pieces:
        steady = parser.steady()
        if steady is not None and _qualifies(piece, steady):
            seen += 1
            content, calls = parser.feed(piece)
            if steady.held:  # held for the call's end (tests/parsing/test_steady_held.py: joined or not)
                assert (content, calls) == ("", []), (family, steady, piece)
            elif steady.kind == KIND_CONTENT:
                assert (content, calls) == (piece.text, []), (family, steady, piece)
            else:
                assert steady.kind == KIND_ARGUMENTS
                index = parser.calls_emitted - 1
                want = [ToolCallDelta(index, None, None, _passed_on(piece, steady))]
                assert (content, calls) == ("", want), (family, steady, piece)
            assert parser.steady() == steady
        else:
            parser.feed(piece)
    parser.finish()
    return seen


@st.composite
def reasoning_case(draw: st.DrawFn) -> tuple[type, list[Piece], bool, bool | None]:
    family = draw(st.sampled_from(REASONING_FAMILIES))
    text = "".join(draw(st.lists(_fragments(family.markers, ["<tool_call>", "<function=f>"]), max_size=40)))
    as_tokens = draw(st.booleans())
    pieces = text_pieces(text, list(family.markers) if as_tokens else [])
    starts = draw(st.sampled_from([None, True, False]))
    return family, grouped(pieces, draw(st.lists(st.integers(1, 4), max_size=60))), as_tokens, starts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reasoning_case())
def test_a_steady_reasoning_parser_passes_plain_pieces_on_unchanged(case: tuple[type, list[Piece], bool, bool | None]) -> None:
    _check_reasoning_parser(*case)


def _check_reasoning_parser(family: type, pieces: list[Piece], as_tokens: bool, starts: bool | None) -> int:
    parser = family(starts_in_reasoning=starts, token_markers=frozenset(family.markers) if as_tokens else frozenset())
    seen = 0
    for piece in pieces:
        steady = parser.steady()
        if steady is not None and _qualifies(piece, steady):
            seen += 1
            want = (piece.text, []) if steady.kind == KIND_REASONING else ("", [piece])
            assert parser.feed(piece) == want, (family, steady, piece)
            assert parser.steady() == steady
        else:
            parser.feed(piece)
    parser.finish()
    return seen


def test_output_parser_combines_reasoning_then_tools() -> None:
    """qwen3 + hermes with every marker as text: reasoning is steady with the reasoning triggers,
    content with both parsers', a JSON string argument with the argument triggers; Harmony never."""
    parser = OutputParser(OutputParsing("qwen3", "hermes", TOOLS), lambda marker: None)
    states = []
    text = '<think>a b</think>c d <tool_call>{"name": "f", "arguments": {"a": "x y z"}}</tool_call> e'
    for ch in text:
        steady = parser.steady()
        states.append(None if steady is None else steady.kind)
        parser.feed(Piece(ch))
    assert KIND_REASONING in states and KIND_CONTENT in states and KIND_ARGUMENTS in states
    assert parser.steady() is not None  # content again after the call and its trailing text
    harmony = OutputParser(OutputParsing("openai_gptoss", "openai"), lambda marker: None)
    assert harmony.steady() is None


def test_the_checks_reach_steady_states() -> None:
    """The same checks on 200 seeded cases of each kind: a steady piece is common, not a corner
    (measured: 29% of the tool-parser pieces, 80% of the reasoning-parser pieces)."""
    rng = random.Random(0)
    tool_seen = tool_all = reasoning_seen = reasoning_all = 0
    for _ in range(200):
        family = rng.choice(TOOL_FAMILIES)
        bits = list(family.markers) + JSON_BITS + XML_BITS + WORDS * 3 + SNIPPETS[family.names[0]] * 3
        as_tokens = rng.random() < 0.5
        pieces = grouped(text_pieces("".join(rng.choices(bits, k=30)), list(family.markers) if as_tokens else []),
                         [rng.randint(1, 4) for _ in range(60)])
        tool_seen += _check_tool_parser(family, pieces, as_tokens)
        tool_all += len(pieces)
        rfamily = rng.choice(REASONING_FAMILIES)
        bits = list(rfamily.markers) + JSON_BITS + WORDS * 3
        pieces = grouped(text_pieces("".join(rng.choices(bits, k=30)), list(rfamily.markers) if as_tokens else []),
                         [rng.randint(1, 4) for _ in range(60)])
        reasoning_seen += _check_reasoning_parser(rfamily, pieces, as_tokens, rng.choice([None, True, False]))
        reasoning_all += len(pieces)
    assert tool_seen / tool_all >= 0.2 and reasoning_seen / reasoning_all >= 0.2, (
        tool_seen / tool_all, reasoning_seen / reasoning_all)


def test_pythonic_content_has_no_bracket_trigger() -> None:
    """Once the output did not start with a list, `[` opens nothing: in content the compiled path
    keeps it (the steady state's triggers are only the text tags' first characters)."""
    for family in (f for f in TOOL_FAMILIES if f.names[0] in ("pythonic", "llama4_pythonic")):
        parser = family(tools=TOOLS, token_markers=frozenset(), call_id=lambda i: f"call_{i}")
        assert parser.steady() is None  # at the output's start a `[` opens the list
        assert parser.feed(Piece("See ")) == ("See ", [])
        steady = parser.steady()
        assert steady is not None and steady.kind == KIND_CONTENT and "[" not in steady.triggers
        assert parser.feed(Piece("[1] and [f(x=1)]")) == ("[1] and [f(x=1)]", [])
        assert parser.steady() == steady
        assert parser.finish() == ("", [])
