"""A request's parsing: its reasoning parser, then its tool parser on the content, as one object."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from detok.parsing.base import ReasoningParser, ToolParser
from detok.parsing.registry import marker_token_ids, reasoning_parser_class, tool_parser_class
from detok.parsing.types import KIND_CONTENT, OutputParsing, Piece, Steady, ToolCallDelta, TypedDelta


def call_id_maker(seed: str) -> Callable[[int], str]:
    """Deterministic call ids ("call_" + 24 hex), equal on a replay of the same request."""

    def call_id(index: int) -> str:
        digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=12).hexdigest()
        return f"call_{digest}"

    return call_id


_ANY_CONTENT = Steady(KIND_CONTENT, "")


class OutputParser:
    """Feeds pieces through reasoning, then tools. `marker_ids` maps each marker token id the worker
    must cut steps at to its marker string."""

    def __init__(self, parsing: OutputParsing, token_id: Callable[[str], int | None]) -> None:
        self.marker_ids: dict[int, str] = {}
        self._combined: dict[tuple[int, int], Steady] = {}  # (reasoning's, tools') -> both
        self._reasoning: ReasoningParser | None = None
        self._tools: ToolParser | None = None
        if parsing.reasoning_parser:
            family = reasoning_parser_class(parsing.reasoning_parser)
            found = marker_token_ids(family, token_id)
            self.marker_ids.update({i: m for m, i in found.items()})
            self._reasoning = family(
                starts_in_reasoning=parsing.starts_in_reasoning, token_markers=frozenset(found)
            )
        if parsing.tool_parser:
            tfamily = tool_parser_class(parsing.tool_parser)
            tfound = marker_token_ids(tfamily, token_id)
            self.marker_ids.update({i: m for m, i in tfound.items()})
            self._tools = tfamily(
                tools=parsing.tools,
                token_markers=frozenset(tfound),
                call_id=call_id_maker(parsing.call_id_seed),
            )
            if self._reasoning is not None:
                self._reasoning.tools_follow = True
                self._reasoning.tool_names = frozenset(t.name for t in parsing.tools)
                self._reasoning.follow_tools(frozenset(tfamily.markers))
        self.marker_set = frozenset(self.marker_ids)

    @property
    def calls_emitted(self) -> int:
        return self._tools.calls_emitted if self._tools is not None else 0

    def steady(self) -> Steady | None:
        """The state in which plain text free of the triggers is one kind of output as it is (the
        reasoning parser's, or, in content, the tool parser's; both pass such pieces on unchanged)."""
        r = self._reasoning.steady() if self._reasoning is not None else _ANY_CONTENT
        if r is None or r.kind != KIND_CONTENT or self._tools is None:
            return r
        t = self._tools.steady()
        if t is None:
            return None
        both = self._combined.get((id(r), id(t)))  # (the parsers keep their Steady objects)
        if both is None:
            # each character once, sorted: the worker builds a decode mode per distinct trigger set
            triggers = "".join(sorted(set(r.triggers + t.triggers)))
            both = self._combined[(id(r), id(t))] = t._replace(triggers=triggers)
        return both

    def resume_held(self, text: str) -> None:
        """The worker's compiled path left this request in a mode of its steady state's chain
        (detok.stream.typed_fast) in which the parser holds `text`: in a JSON string argument, an
        escape's backslash, passed on; in a family's own string value, whitespace at its end,
        held back. The tool parser takes on that state."""
        if self._tools is None:
            raise ValueError("no tool parser holds text")
        self._tools.resume_held(text)

    def feed(self, piece: Piece) -> TypedDelta:
        if self._reasoning is None:
            return self._content([piece], "")
        reasoning, pieces = self._reasoning.feed(piece)
        return self._content(pieces, reasoning)

    def finish(self) -> TypedDelta:
        reasoning, pieces = self._reasoning.finish() if self._reasoning is not None else ("", [])
        out = self._content(pieces, reasoning)
        if self._tools is not None:
            content, calls = self._tools.finish()
            out.content += content
            out.tool_calls.extend(calls)
        return out

    def _content(self, pieces: list[Piece], reasoning: str) -> TypedDelta:
        if self._tools is None:
            # per token: one piece is the common case, and a generator join costs more than the piece
            if not pieces:
                return TypedDelta(reasoning=reasoning)
            if len(pieces) == 1:
                return TypedDelta(reasoning=reasoning, content=pieces[0].text)
            return TypedDelta(reasoning=reasoning, content="".join([p.text for p in pieces]))
        if len(pieces) == 1:  # per token: the common case, without the joins
            text, deltas = self._tools.feed(pieces[0])
            # a fresh list: finish() extends it, and a parser may return a shared empty one
            return TypedDelta(reasoning=reasoning, content=text, tool_calls=deltas if deltas else [])
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        for p in pieces:
            text, deltas = self._tools.feed(p)
            content.append(text)
            calls.extend(deltas)
        return TypedDelta(reasoning=reasoning, content="".join(content), tool_calls=calls)
