"""The peers' approach to streamed tool calls, for a side-by-side figure: on every delta the whole
text so far is parsed again (vLLM's hermes parser: find every `<tool_call>` region of
`current_text`, read the name with a regex, cut the arguments out by brace matching, send what is
longer than what was sent). Written here from that description (no peer code); same results as
detok's hermes on well-formed calls, and its cost per token grows with the output."""

from __future__ import annotations

import re

from detok.parsing.types import Piece, ToolCallDelta

START, END = "<tool_call>", "</tool_call>"
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ARGS = re.compile(r'"arguments"\s*:\s*')


def _balanced(raw: str) -> str:
    """The JSON value at the start of `raw`, cut at its closing bracket (or all of it)."""
    if not raw or raw[0] not in "{[":
        return raw
    depth, in_str, esc = 0, False, False
    for i, c in enumerate(raw):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return raw[: i + 1]
    return raw


class ReparseHermes:
    """Feed pieces like a detok parser; every feed re-reads the whole text so far."""

    def __init__(self) -> None:
        self.text = ""
        self.sent_content = 0
        self.names: list[str] = []
        self.sent_args: list[str] = []

    def feed(self, piece: Piece) -> tuple[str, list[ToolCallDelta]]:
        self.text += piece.text
        text = self.text
        first = text.find(START)
        if first < 0:  # hold a suffix that may start the tag
            keep = next((k for k in range(min(len(START) - 1, len(text)), 0, -1) if START.startswith(text[-k:])), 0)
            first = len(text) - keep
        content = text[self.sent_content : first] if first > self.sent_content else ""
        self.sent_content = max(self.sent_content, first)
        deltas: list[ToolCallDelta] = []
        pos, index = 0, 0
        while (start := text.find(START, pos)) >= 0:
            body_start = start + len(START)
            end = text.find(END, body_start)
            body = text[body_start : end if end >= 0 else len(text)]
            if index == len(self.names):
                m = _NAME.search(body)
                if m is None:
                    break
                self.names.append(m.group(1))
                self.sent_args.append("")
                deltas.append(ToolCallDelta(index, f"call_{index}", m.group(1)))
            a = _ARGS.search(body)
            if a is not None:
                args = _balanced(body[a.end() :].rstrip())
                if len(args) > len(self.sent_args[index]):
                    deltas.append(ToolCallDelta(index, None, None, args[len(self.sent_args[index]) :]))
                    self.sent_args[index] = args
            if end < 0:
                break
            pos, index = end + len(END), index + 1
        return content, deltas

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        return "", []
