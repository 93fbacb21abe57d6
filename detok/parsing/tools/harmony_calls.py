"""The `harmony_calls` grammar's engine: gpt-oss tool calls (Harmony), vLLM's `openai` tool-call parser.
Harmony's own kind, as its reasoning (`detok.parsing.reasoning.harmony_channels`): a call is a message
whose head names a function recipient, not a region between two terminals.

A message with a recipient `functions.NAME`, or a bare NAME of the request's tools (gpt-oss drops the
prefix in long contexts; `harmony.called_function`), is a call of NAME on any channel; its body is the
arguments text, streamed as it comes (leading whitespace skipped; a call whose body is empty gets
`"{}"`). It reads the raw Harmony output (no reasoning parser: `analysis` messages are left out,
`final` and preamble messages are content joined with "\n", as vLLM's parse_chat_output) or what
`openai_gptoss` passes on (content text, and each tool-call message raw). Other recipients (built-in
tools, unknown bare names) are not calls of the request's tools and are left out, as in vLLM. A
`functions.` name is not checked against the request's tools (vLLM does not either), and the arguments
are passed on as the model wrote them, JSON or not (as vLLM; OpenAI's API documents that arguments may
be invalid JSON). Calls past MAX_TOOL_CALLS are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from detok.parsing.base import ToolParser
from detok.parsing.harmony import CLOSE, HEAD, MARKERS, STRAY, TEXT, HarmonyReader, Head, called_function
from detok.parsing.tools.core import MAX_TOOL_CALLS
from detok.parsing.types import KIND_ARGUMENTS, KIND_CONTENT, Piece, Steady, ToolCallDelta, ToolSpec

_CONTENT, _CALL, _NONE = range(3)


# (kept objects: OutputParser caches combined states by the identity of its parsers' answers)
_STEADY_CONTENT, _STEADY_ARGUMENTS = Steady(KIND_CONTENT, ""), Steady(KIND_ARGUMENTS, "")


class HarmonyCallsToolParser(ToolParser):
    markers = MARKERS

    def __init__(
        self,
        *,
        tools: Sequence[ToolSpec],
        token_markers: frozenset[str],
        call_id: Callable[[int], str],
    ) -> None:
        self._reader = HarmonyReader(token_markers)
        self._names = frozenset(t.name for t in tools)  # a call may name one without `functions.`
        self._call_id = call_id
        self._calls = 0
        self._kind = _NONE
        self._args_started = False
        self._content_seen = False
        self._started = False

    @property
    def calls_emitted(self) -> int:
        return self._calls

    def feed(self, piece: Piece) -> tuple[str, list[ToolCallDelta]]:
        if piece.marker is None and piece.text:  # the per-token fast paths
            reader = self._reader
            if reader.in_plain_body:
                if self._kind == _CONTENT and self._started:
                    return piece.text, []
                if self._kind == _CALL and self._args_started:
                    return "", [ToolCallDelta(self._calls - 1, arguments=piece.text)]
            elif reader.in_plain_idle:  # content text (what openai_gptoss passes on, or stray)
                return piece.text, []
        return self._route(self._reader.feed(piece))

    def steady(self) -> Steady | None:
        # exactly `feed`'s fast paths (text markers possible or held: not `in_plain_*`)
        reader = self._reader
        if reader.in_plain_body:
            if self._kind == _CONTENT and self._started:
                return _STEADY_CONTENT
            if self._kind == _CALL and self._args_started:
                return _STEADY_ARGUMENTS
            return None
        return _STEADY_CONTENT if reader.in_plain_idle else None

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        return self._route(self._reader.finish())

    def _route(self, events: list[tuple[int, object]]) -> tuple[str, list[ToolCallDelta]]:
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        for kind, value in events:
            if kind == TEXT:
                text: str = value  # type: ignore[assignment]
                if self._kind == _CONTENT:
                    if not self._started and self._content_seen:
                        text = "\n" + text
                    self._started = self._content_seen = True
                    content.append(text)
                elif self._kind == _CALL:
                    if not self._args_started:
                        text = text.lstrip()
                        self._args_started = bool(text)
                    if text:
                        calls.append(ToolCallDelta(self._calls - 1, arguments=text))
            elif kind == HEAD:
                self._open(value, calls)  # type: ignore[arg-type]
            elif kind == CLOSE:
                if self._kind == _CALL and not self._args_started:
                    calls.append(ToolCallDelta(self._calls - 1, arguments="{}"))
                self._kind = _NONE
            elif kind == STRAY:
                content.append(value)  # type: ignore[arg-type]
        return "".join(content), calls

    def _open(self, head: Head, calls: list[ToolCallDelta]) -> None:
        self._started = False
        if head.recipient is not None:
            # past MAX_TOOL_CALLS a call is left out, as every family does (a bound on one response)
            name = called_function(head.recipient, self._names)
            if name is not None and self._calls < MAX_TOOL_CALLS:
                index = self._calls
                self._calls += 1
                self._kind = _CALL
                self._args_started = False
                calls.append(ToolCallDelta(index, id=self._call_id(index), name=name))
            else:
                self._kind = _NONE
        elif head.channel in ("final", "commentary"):
            self._kind = _CONTENT
        else:  # analysis (the reasoning parser's, or left out without one) and unknown channels
            self._kind = _NONE
