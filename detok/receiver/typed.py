"""Typed rows (requests with output parsing) on the receiving side: replay de-duplication by offset.

Each of a request's streams - reasoning, content, and each tool call's arguments - has its own char
offset in the worker's rows, so a replay (the whole request decoded and parsed again by a fresh
worker, with the same result) is cut exactly as text rows are: what starts before what was already
received is trimmed, a gap is kept and counted. A call's header (id and name) is delivered once.
"""

from __future__ import annotations

import logging

from detok.parsing.types import KIND_CONTENT, KIND_REASONING, ToolCallDelta
from detok.receiver.stream_fields import TypedFields
from detok.wire.to_frontends import TypedRow

log = logging.getLogger("detok.receiver")


class TypedState(TypedFields):  # type: ignore[misc,valid-type]
    """What one request has received of its typed streams (the fields a compiled push reads and
    writes are its base's, `stream_fields.TypedFields`)."""

    __slots__ = ("gaps", "named")

    def __init__(self) -> None:
        self.new_reasoning: list[str] = []  # received, not taken yet
        self.new_calls: list[ToolCallDelta] = []
        self.reasoning = 0  # chars received
        self.content = 0
        self.args: dict[int, int] = {}  # call index -> argument chars received
        self.named: set[int] = set()  # call indices whose id and name were delivered
        self.gaps = 0
        self.last_call = -1  # the highest call index seen (the call a kind-3 row's arguments are of)

    def _cut(self, text: str, offset: int, have: int, what: str) -> str:
        if offset == have or not text:
            return text
        if offset < have:
            return text[have - offset :]
        self.gaps += 1
        log.warning("%s gap (have %d chars, delta starts at %d)", what, have, offset)
        return text

    @property
    def pending(self) -> bool:
        return bool(self.new_reasoning or self.new_calls)

    def feed(self, row: TypedRow, content_chunks: list[str]) -> bool:
        """Keep a row's new reasoning and calls, append its new content to `content_chunks` (the
        stream's text); whether anything was new."""
        reasoning, content, calls = self.accept(row)
        if reasoning:
            self.new_reasoning.append(reasoning)
        if content:
            content_chunks.append(content)
        if calls:
            self.new_calls.extend(calls)
        return bool(reasoning or content or calls)

    def feed_kind(self, kind: int, text: str, offset: int, content_chunks: list[str]) -> bool:
        """A text row of one kind (`DeltaBatch.kinds`): as a typed row with only that stream. An
        empty row says nothing (its offset is not meaningful)."""
        if not text:
            return False
        if kind == KIND_REASONING:
            new = self._cut(text, offset, self.reasoning, "reasoning")
            self.reasoning = max(self.reasoning, offset + len(text))
            if new:
                self.new_reasoning.append(new)
        elif kind == KIND_CONTENT:
            new = self._cut(text, offset, self.content, "content")
            self.content = max(self.content, offset + len(text))
            if new:
                content_chunks.append(new)
        else:
            index = self.last_call
            if index < 0:  # arguments before any call header: nothing to add them to
                self.gaps += 1
                log.warning("tool call arguments before any call (%d chars dropped)", len(text))
                return False
            have = self.args.get(index, 0)
            new = self._cut(text, offset, have, f"tool call {index} arguments")
            self.args[index] = max(have, offset + len(text))
            if new:
                self.new_calls.append(ToolCallDelta(index, None, None, new))
        return bool(new)

    def take(self) -> tuple[str, tuple[ToolCallDelta, ...]]:
        """(reasoning, tool-call deltas) received since the last take, argument fragments joined."""
        reasoning, calls = "", ()
        if self.new_reasoning:
            reasoning = "".join(self.new_reasoning)
            self.new_reasoning.clear()
        if self.new_calls:
            calls = tuple(join_calls(self.new_calls))
            self.new_calls.clear()
        return reasoning, calls

    def accept(self, row: TypedRow) -> tuple[str, str, list[ToolCallDelta]]:
        """(new reasoning, new content, new tool-call deltas) of a row, without what a replay repeats."""
        reasoning = self._cut(row.reasoning, row.reasoning_offset, self.reasoning, "reasoning")
        if row.reasoning:
            self.reasoning = max(self.reasoning, row.reasoning_offset + len(row.reasoning))
        content = self._cut(row.content, row.content_offset, self.content, "content")
        if row.content:
            self.content = max(self.content, row.content_offset + len(row.content))
        calls: list[ToolCallDelta] = []
        for f in row.calls:
            if f.index > self.last_call:
                self.last_call = f.index
            header = f.id is not None or f.name is not None
            if header and f.index in self.named:
                header = False  # delivered already (a replay)
            have = self.args.get(f.index, 0)
            args = self._cut(f.arguments, f.offset, have, f"tool call {f.index} arguments")
            if f.arguments:
                self.args[f.index] = max(have, f.offset + len(f.arguments))
            if header:
                self.named.add(f.index)
                calls.append(ToolCallDelta(f.index, f.id, f.name, args))
            elif args:
                calls.append(ToolCallDelta(f.index, None, None, args))
        return reasoning, content, calls


def join_calls(deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
    """Adjacent argument fragments of one call joined (a slow consumer's several rows as one)."""
    out: list[ToolCallDelta] = []
    for d in deltas:
        last = out[-1] if out else None
        if last is not None and last.index == d.index and d.id is None and d.name is None:
            out[-1] = ToolCallDelta(last.index, last.id, last.name, last.arguments + d.arguments)
        else:
            out.append(d)
    return out
