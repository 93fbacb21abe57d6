"""Hostile outputs for every reasoning family: huge reasoning, unclosed markers, markers inside
markers, garbage after the end; with markers as tokens and as plain text."""

from __future__ import annotations

import random

import pytest

from detok.parsing.reasoning import FAMILIES
from detok.parsing.reasoning.think import IMPLICIT_END_LOOKAHEAD, ThinkParser
from detok.parsing.types import Piece
from tests.helpers.parsing_pieces import feed_all

THINK_FAMILIES = [f for f in FAMILIES if issubclass(f, ThinkParser)]


def pieces_of(cls: type[ThinkParser], parts: list[str], as_tokens: bool) -> list[Piece]:
    """Parts that are markers become marker pieces when `as_tokens`, else plain text."""
    return [Piece(p, p) if as_tokens and p in cls.markers else Piece(p) for p in parts]


def parse(cls: type[ThinkParser], parts: list[str], as_tokens: bool, starts: bool | None = True) -> tuple[str, str]:
    tm = frozenset(cls.markers) if as_tokens else frozenset()
    r, c = feed_all(cls(starts_in_reasoning=starts, token_markers=tm), pieces_of(cls, parts, as_tokens))
    return r, "".join(p.text for p in c)


params = pytest.mark.parametrize(
    "cls,as_tokens",
    [pytest.param(f, t, id=f"{f.names[0]}-{'tokens' if t else 'text'}") for f in THINK_FAMILIES for t in (True, False)],
)


@params
def test_huge_reasoning_streams_out_holding_nothing_back(cls: type[ThinkParser], as_tokens: bool) -> None:
    """4 MB of reasoning in 4 KB pieces: each feed returns its text at once (at most a marker's
    length held), and the end marker after it still splits."""
    tm = frozenset(cls.markers) if as_tokens else frozenset()
    parser = cls(starts_in_reasoning=True, token_markers=tm)
    chunk = ("reasoning < [ / " * 256)[:4096]
    longest = max(len(m) for m in cls.markers)
    total = 0
    for _ in range(1024):
        r, c = parser.feed(Piece(chunk))
        assert not c and len(chunk) - longest <= len(r) <= len(chunk) + longest
        total += len(r)
    r, c = parser.feed(Piece(cls.end, cls.end if as_tokens else None))
    total += len(r)
    r2, c2 = parser.feed(Piece("answer"))
    rf, cf = parser.finish()
    assert total + len(r2) + len(rf) == 1024 * len(chunk)
    assert "".join(p.text for p in c + c2 + cf) == "answer"


@params
def test_unclosed_markers_flush_at_finish(cls: type[ThinkParser], as_tokens: bool) -> None:
    assert parse(cls, [cls.start, "never closed"], as_tokens, starts=False) == ("never closed", "")
    assert parse(cls, ["thinking", cls.end[:-1]], as_tokens) == ("thinking" + cls.end[:-1], "")
    assert parse(cls, ["content", cls.start[:-1]], as_tokens, starts=False)[1] == "content" + cls.start[:-1]


@params
def test_markers_inside_markers(cls: type[ThinkParser], as_tokens: bool) -> None:
    parts = [cls.start, "a", cls.start, "b", cls.start, cls.end, "c", cls.start, "d", cls.end, "e", cls.end, "f"]
    # a start inside reasoning is dropped; in the answer it opens reasoning again (reopen families) or
    # is dropped (the peers pass it on as text); a stray end is absorbed (vLLM's engine)
    want = ("abd", "cef") if cls.reopen else ("ab", "cdef")
    assert parse(cls, parts, as_tokens) == want
    # a stray end before any reasoning is dropped, and does not open or close anything
    assert parse(cls, [cls.end, "x", cls.end, "y"], as_tokens, starts=False) == ("", "xy")


@params
def test_garbage_after_end_is_content_verbatim(cls: type[ThinkParser], as_tokens: bool) -> None:
    rng = random.Random(7)
    garbage = "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x2FFF)])) for _ in range(5000))
    garbage += "\ufffd\x00" + (cls.implicit_end or "")  # a tool marker after the end is content too
    r, c = parse(cls, ["r", cls.end, garbage], as_tokens)
    assert (r, c) == ("r", garbage)


def test_implicit_end_waits_a_bounded_window() -> None:
    from detok.parsing.reasoning import Qwen3Parser

    tm = frozenset(Qwen3Parser.markers)
    spaces = " " * (IMPLICIT_END_LOOKAHEAD + 10)
    # whitespace past the window: the <tool_call> was reasoning, and so is what follows
    r, c = feed_all(Qwen3Parser(starts_in_reasoning=True, token_markers=tm), [Piece("<tool_call>", "<tool_call>"), Piece(spaces + "<function=f>")])
    assert (r, c) == ("<tool_call>" + spaces + "<function=f>", [])
    # within the window it ends reasoning, the marker piece kept for the tool parser
    r, c = feed_all(Qwen3Parser(starts_in_reasoning=True, token_markers=tm), [Piece("<tool_call>", "<tool_call>"), Piece("\n<function=f>")])
    assert r == "" and c[0] == Piece("<tool_call>", "<tool_call>") and "".join(p.text for p in c) == "<tool_call>\n<function=f>"


def test_text_after_a_confirmed_implicit_end_is_scanned_as_answer() -> None:
    """Markers as text: the confirming text and what follows it in the same piece go through the
    answer's scanner, the same result whether `</think>` arrives with it or after it."""
    from detok.parsing.reasoning import Qwen3Parser

    whole = parse(Qwen3Parser, ["r", "<tool_call>", "\n<function=x></think>tail"], False)
    split = parse(Qwen3Parser, ["r", "<tool_call>", "\n<function=x>", "</think>", "tail"], False)
    assert whole == split == ("r", "<tool_call>\n<function=x>tail")


def test_one_piece_with_a_hundred_thousand_text_markers() -> None:
    """A replay sends a request's whole output at once: with markers as text, one piece may hold
    very many of them (and many unconfirmed `<tool_call>` mentions). Each is handled once (no rescan
    of the rest per marker, no recursion per mention)."""
    from detok.parsing.reasoning import Qwen3Parser

    n = 100_000
    text = "<think>" + "a<tool_call> b" * n + "</think>" + "c</think><think>" * n
    r, c = feed_all(Qwen3Parser(starts_in_reasoning=False, token_markers=frozenset()), [Piece(text)])
    assert r == "a<tool_call> b" * n and "".join(p.text for p in c) == "c" * n
