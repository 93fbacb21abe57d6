"""Test-only parser families, registered by the `toy_parsers` fixture (monkeypatching the registry's
FAMILIES): they exercise the worker/frontend plumbing without depending on the real families.

- `toy_think`: `<think>`...`</think>` reasoning, both markers required as single tokens; a
  `starts_in_reasoning` request starts inside it.
- `toy_tools`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (markers required as single
  tokens), each call emitted whole at its closing marker (name, then the arguments in two fragments),
  content outside calls passed through. Joined output does not depend on how text is cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import ClassVar

import pytest

from detok.parsing.base import ReasoningParser, ToolParser
from detok.parsing.types import Piece, ToolCallDelta, ToolSpec


class ToyThink(ReasoningParser):
    names = ("toy_think",)
    markers = ("<think>", "</think>")
    required_tokens = ("<think>", "</think>")

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        self._in = bool(starts_in_reasoning)

    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        if piece.marker == "<think>":
            self._in = True
            return "", []
        if piece.marker == "</think>":
            self._in = False
            return "", []
        if self._in:
            return piece.text, []
        return "", [piece]

    def finish(self) -> tuple[str, list[Piece]]:
        return "", []


class ToyTools(ToolParser):
    names = ("toy_tools",)
    markers = ("<tool_call>", "</tool_call>")
    required_tokens = ("<tool_call>", "</tool_call>")

    def __init__(self, *, tools: Sequence[ToolSpec], token_markers: frozenset[str],
                 call_id: Callable[[int], str]) -> None:
        self._call_id = call_id
        self._buf: list[str] | None = None
        self._n = 0

    def feed(self, piece: Piece) -> tuple[str, list[ToolCallDelta]]:
        if piece.marker == "<tool_call>":
            self._buf = []
            return "", []
        if piece.marker == "</tool_call>":
            return "", self._close()
        if self._buf is not None:
            self._buf.append(piece.text)
            return "", []
        return piece.text, []

    def _close(self) -> list[ToolCallDelta]:
        text = "".join(self._buf or [])
        self._buf = None
        try:
            call = json.loads(text)
            name, args = call["name"], json.dumps(call.get("arguments", {}))
        except (ValueError, KeyError, TypeError):
            return []
        i = self._n
        self._n += 1
        half = len(args) // 2
        return [ToolCallDelta(i, self._call_id(i), name, ""), ToolCallDelta(i, None, None, args[:half]),
                ToolCallDelta(i, None, None, args[half:])]

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        return ("<tool_call>" + "".join(self._buf), []) if self._buf is not None else ("", [])

    @property
    def calls_emitted(self) -> int:
        return self._n


class Boom(ToyThink):
    """Raises on its first text piece (a parser bug must be its request's error, not the worker's)."""

    names: ClassVar[tuple[str, ...]] = ("toy_boom",)

    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        if piece.marker is None and piece.text:
            raise RuntimeError("boom")
        return super().feed(piece)


@pytest.fixture
def toy_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    from detok.parsing import reasoning, tools

    monkeypatch.setattr(reasoning, "FAMILIES", [*reasoning.FAMILIES, ToyThink, Boom])
    monkeypatch.setattr(tools, "FAMILIES", [*tools.FAMILIES, ToyTools])
