"""The `harmony` grammar's reasoning engine (gpt-oss: vLLM's `openai_gptoss`, SGLang's `gpt-oss`).

Harmony is a grammar kind, not a think table: a message's head (`<|start|>ROLE<|channel|>CHANNEL
to=RECIPIENT<|message|>`) says what its body is, so the state is the channel and recipient read by
`detok.parsing.harmony.HarmonyReader`, not a start and an end terminal. As vLLM's HarmonyParser: `analysis` messages are reasoning; `final` messages and `commentary`
without a recipient (preambles) are content; messages of one kind are joined with "\n". A message to a
function (`functions.NAME`, or a bare NAME of the request's tools: `harmony.called_function`) is a tool
call on any channel, `analysis` included (vLLM decides by the recipient before the channel): passed on
as its raw Harmony message to the tool parser (`openai`) when one follows (`tools_follow`), else left
out, neither reasoning nor content, as vLLM drops it without a tool parser. Messages on other channels (and built-in tool calls to `browser.*` /
`python`) are left out as in vLLM; text outside any message is content. `starts_in_reasoning` does not
apply: the channel says what a message is.
"""

from __future__ import annotations

from detok.parsing.base import ReasoningParser
from detok.parsing.harmony import CALL, CLOSE, HEAD, MARKERS, STRAY, TEXT, HarmonyReader, Head, called_function
from detok.parsing.types import KIND_CONTENT, KIND_REASONING, Piece, Steady

_REASONING, _CONTENT, _TOOL, _NONE = range(4)
# (kept objects: OutputParser caches combined states by the identity of its parsers' answers)
_STEADY_REASONING, _STEADY_CONTENT = Steady(KIND_REASONING, ""), Steady(KIND_CONTENT, "")


class HarmonyReasoningParser(ReasoningParser):
    markers = MARKERS
    required_tokens = ()

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        self._reader = HarmonyReader(token_markers)
        self._kind = _NONE  # the current message's kind
        self._seen = [False, False]  # a reasoning / content message has had text (for the "\n" join)
        self._started = False  # the current message has had text

    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        if piece.marker is None and self._reader.in_plain_body:  # the per-token fast path
            kind = self._kind
            if kind == _TOOL:
                return "", [piece]
            if self._started:
                if kind == _REASONING:
                    return piece.text, []
                if kind == _CONTENT:
                    return "", [piece]
        return self._route(self._reader.feed(piece))

    def steady(self) -> Steady | None:
        # `feed`'s fast path: a message body with no text marker possible (a tool call's body is
        # passed on to the tool parser as content pieces)
        if not self._reader.in_plain_body:
            return None
        if self._kind == _TOOL:
            return _STEADY_CONTENT
        if self._started and self._kind in (_REASONING, _CONTENT):
            return _STEADY_REASONING if self._kind == _REASONING else _STEADY_CONTENT
        return None

    def finish(self) -> tuple[str, list[Piece]]:
        return self._route(self._reader.finish())

    def _route(self, events: list[tuple[int, object]]) -> tuple[str, list[Piece]]:
        reasoning: list[str] = []
        content: list[Piece] = []
        for kind, value in events:
            if kind == TEXT:
                text = value  # type: ignore[assignment]
                if self._kind in (_REASONING, _CONTENT):
                    sink = reasoning if self._kind == _REASONING else None
                    if not self._started and self._seen[self._kind]:
                        text = "\n" + text  # vLLM joins messages of one kind with a newline
                    self._started = self._seen[self._kind] = True
                    if sink is not None:
                        sink.append(text)  # type: ignore[arg-type]
                    else:
                        content.append(Piece(text))  # type: ignore[arg-type]
                elif self._kind == _TOOL:
                    content.append(Piece(text))  # type: ignore[arg-type]
            elif kind == HEAD:
                head: Head = value  # type: ignore[assignment]
                self._kind = self._kind_of(head)
                self._started = False
                if self._kind == _TOOL:
                    content.extend(head.raw)
            elif kind == CLOSE:
                if self._kind == _TOOL:  # the tool parser needs the close, even an implicit one
                    content.append(self._reader.marker_piece(value or CALL))  # type: ignore[arg-type]
                self._kind = _NONE
            elif kind == STRAY:
                content.append(Piece(value))  # type: ignore[arg-type]
        return "".join(reasoning), content

    def _kind_of(self, head: Head) -> int:
        # A function recipient decides before the channel: gpt-oss also writes calls on the analysis
        # channel (`<|channel|>analysis to=functions.f`), and vLLM's `openai` tool parser and its
        # streamed Harmony deltas make those calls too, as the tool parser alone does here.
        # Without a tool parser such a message is left out, on any channel (vLLM's HarmonyParser: a
        # function recipient is a TOOL segment before the channel is looked at, dropped with no tool parser).
        if called_function(head.recipient, self.tool_names) is not None:
            return _TOOL if self.tools_follow else _NONE
        if head.channel == "analysis":
            return _REASONING
        if head.recipient is not None:
            return _NONE
        if head.channel in ("final", "commentary"):
            return _CONTENT
        return _NONE
