"""OpenAI fields of a parsed choice (reasoning, content, tool calls): the workers did the parsing;
this only shapes what they sent.

Streamed, one delta becomes up to three chunks, in this order: the reasoning (under the server's
reasoning field, `reasoning` as vLLM or `reasoning_content` as SGLang / DeepSeek), the content, the
tool calls (`delta.tool_calls[i]`: a call's first chunk carries `id`, `type` and `function.name`,
later ones only `function.arguments` fragments). Non-streamed, the same deltas joined: `content`
(null when empty), the reasoning field and `tool_calls`, whose `arguments` equal the streamed
fragments joined ("{}" when a call sent none).

`include_reasoning: false` drops the reasoning; `parallel_tool_calls: false` keeps only the first
call (index 0), as vLLM.
"""

from __future__ import annotations

from typing import Any

from detok.streaming.chunks import ChunkRenderer
from detok.api.openai_types import ChatMessageOut, ToolCallFunction, ToolCallOut
from detok.parsing.types import ToolCallDelta
from detok.receiver.receiver import RequestDelta

REASONING_FIELDS = ("reasoning", "reasoning_content")


class TypedChoice:
    """One parsed choice's reasoning and tool calls (the content is the choice's text)."""

    __slots__ = ("calls", "field", "include_reasoning", "parallel", "reasoning", "sent_args", "tools")

    def __init__(self, field: str, include_reasoning: bool, parallel: bool, tools: bool, reasoning: bool) -> None:
        self.field = field
        self.include_reasoning = include_reasoning and reasoning
        self.parallel = parallel
        self.tools = tools  # the request's tool calls are parsed (the body carries `tool_calls`)
        self.reasoning: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index -> [id, name, argument parts]
        self.sent_args: dict[int, int] = {}  # streamed: index -> argument chars sent

    def _calls_of(self, delta: RequestDelta) -> tuple[ToolCallDelta, ...]:
        if self.parallel:
            return delta.tool_calls
        return tuple(d for d in delta.tool_calls if d.index == 0)

    def num_calls(self, calls: int) -> int:
        return calls if self.parallel else min(calls, 1)

    # ---- streamed -------------------------------------------------------------------------------
    def chunks(self, render: ChunkRenderer, index: int, delta: RequestDelta, logprobs: Any,
               usage: Any = None, ids: bytes = b"") -> list[bytes]:
        """The delta's chunks; `usage` (continuous_usage_stats) goes in each; the logprobs and `ids`
        (the choice's token_ids field, ChoiceState.token_ids) in the first."""
        out: list[bytes] = []
        if delta.reasoning and self.include_reasoning:
            out.append(render.field(index, self.field, delta.reasoning, logprobs, usage, ids))
            logprobs, ids = None, b""
        if delta.text:
            out.append(render.text(index, delta.text, logprobs, usage=usage, choice_extra=ids))
            logprobs, ids = None, b""
        if delta.tool_calls or (delta.finish is not None and self.sent_args):
            fragments = self._fragments(delta)
            if fragments:
                out.append(render.field(index, "tool_calls", fragments, logprobs, usage, ids))
                logprobs, ids = None, b""
        if logprobs is not None or ids:  # entries with no text (a marker, a held prefix): sent all the same
            out.append(render.text(index, "", logprobs, usage=usage, choice_extra=ids))
        return out

    def _fragments(self, delta: RequestDelta) -> list[dict[str, Any]]:
        calls = self._calls_of(delta)
        sent = self.sent_args
        for d in calls:
            sent[d.index] = sent.get(d.index, 0) + len(d.arguments)
        fragments = [_call_json(d) for d in calls]
        if delta.finish is not None:  # a call that sent no arguments: "{}", as the body says
            for i in [i for i, n in sent.items() if n == 0]:
                fragments.append({"index": i, "function": {"arguments": "{}"}})
                sent[i] = 2
        return fragments

    # ---- non-streamed -----------------------------------------------------------------------------
    def add(self, delta: RequestDelta) -> None:
        if delta.reasoning and self.include_reasoning:
            self.reasoning.append(delta.reasoning)
        for d in self._calls_of(delta):
            call = self.calls.setdefault(d.index, [None, None, []])
            if d.id is not None:
                call[0], call[1] = d.id, d.name
            if d.arguments:
                call[2].append(d.arguments)

    def message(self, content: str, role: str = "assistant") -> ChatMessageOut:
        msg = ChatMessageOut(content or None, role)
        if self.include_reasoning:
            setattr(msg, self.field, "".join(self.reasoning) or None)
        if self.tools:
            msg.tool_calls = [ToolCallOut(str(c[0]), ToolCallFunction(str(c[1]), "".join(c[2]) or "{}"))
                              for _, c in sorted(self.calls.items()) if c[0] is not None]
        return msg


def _call_json(d: ToolCallDelta) -> dict[str, Any]:
    if d.id is not None:
        return {"index": d.index, "id": d.id, "type": "function",
                "function": {"name": d.name, "arguments": d.arguments}}
    return {"index": d.index, "function": {"arguments": d.arguments}}
