"""The `think` grammar with a `reasoning_prefix` (`detok.parsing.family_table`): text the model
writes at the start of its reasoning that names the block rather than being part of it (Gemma 4's
`<|channel>thought\n`), dropped as vLLM's gemma4 parser drops it.

The reasoning's first characters are held while they are a prefix of it: the whole prefix is
dropped, anything else is reasoning after all and goes out. Only the first reasoning block is looked
at. Text that is still a proper prefix at the end of the output (the model wrote only `thought`) is
dropped with it (vLLM's streamed result). The decision depends on the text alone, not on how it was
cut; while it is open the parser is not steady, so the worker feeds it every piece.
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser
from detok.parsing.types import Piece, Steady


class PrefixDroppingThinkParser(ThinkParser):
    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        super().__init__(starts_in_reasoning=starts_in_reasoning, token_markers=token_markers)
        self._prefix_open = True  # the reasoning's start not yet decided
        self._prefix_held = ""

    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        reasoning, content = super().feed(piece)
        return (self._drop_prefix(reasoning) if self._prefix_open else reasoning), content

    def finish(self) -> tuple[str, list[Piece]]:
        reasoning, content = super().finish()
        if self._prefix_open:
            reasoning = self._drop_prefix(reasoning)
            self._prefix_open, self._prefix_held = False, ""  # a proper prefix at the end: dropped
        return reasoning, content

    def steady(self) -> Steady | None:
        return None if self._prefix_open else super().steady()

    def _drop_prefix(self, reasoning: str) -> str:
        if not reasoning:
            return ""
        text = self._prefix_held + reasoning
        prefix = self.reasoning_prefix
        if prefix.startswith(text):
            self._prefix_held = text if len(text) < len(prefix) else ""
            self._prefix_open = len(text) < len(prefix)
            return ""
        self._prefix_open, self._prefix_held = False, ""
        return text[len(prefix) :] if text.startswith(prefix) else text
