"""A chat request's messages as a chat template receives them (what transformers'
`apply_chat_template` gets from vLLM for the same request):

- content: a template that loops over a message's `content` gets the list of text parts
  (`{"type": "text", "text": ...}`, a plain string becoming one part); any other template gets the
  text parts joined with "\\n" (`detok.tokenizer.chat.template_content_format`); tool messages get a
  string either way;
- an assistant's `tool_calls` as sent, with `function.arguments` parsed into a dict that prints as
  the JSON text the client sent (`ToolCallArguments`); a tool message's `tool_call_id`; `name`;
  an assistant's `reasoning` (also under its older name `reasoning_content`).

Only text content parts are accepted (this server serves a text model); anything else is a 400
naming the part.
"""

from __future__ import annotations

import json
from typing import Any

from detok.api.errors import RequestError
from detok.api.openai_requests import ChatMessage, ToolCall
from detok.tokenizer.chat import ContentFormat, ToolCallArguments

# part type -> the key holding its text (vLLM reads these as text)
_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
               "thinking": "thinking"}


def _texts(content: str | list[dict[str, Any]] | None, param: str) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type")
        key = _TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        if key is None:
            shown = repr(kind) if isinstance(kind, str) else "a part without a string type"
            raise RequestError(f"{param}.{j}.type: content parts of type {shown} are not supported (this "
                               f"server takes text only: {', '.join(_TEXT_PARTS)})", f"{param}.{j}.type")
        text = part.get(key)
        if text is None:  # vLLM skips a text part without text
            continue
        if not isinstance(text, str):
            raise RequestError(f"{param}.{j}.{key}: must be a string", f"{param}.{j}.{key}")
        texts.append(text)
    return texts


def message_text(message: ChatMessage) -> str:
    """A message's text as one string (text parts joined with newlines)."""
    return "\n".join(_texts(message.content, "content"))


def _arguments(value: str | dict[str, Any] | None, param: str) -> ToolCallArguments:
    if isinstance(value, dict):
        return ToolCallArguments(value, json.dumps(value, ensure_ascii=False))
    if not value:  # null or "": no arguments, as vLLM
        return ToolCallArguments({}, "{}")
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError) as e:
        raise RequestError(f"{param}: not valid JSON ({e})", param) from None
    if not isinstance(parsed, dict):
        raise RequestError(f"{param}: must be a JSON object, got {type(parsed).__name__}", param)
    return ToolCallArguments(parsed, value)


def _tool_call(call: ToolCall, param: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if call.id is not None:
        out["id"] = call.id
    if call.type is not None:
        out["type"] = call.type
    out["function"] = {"name": call.function.name,
                       "arguments": _arguments(call.function.arguments, f"{param}.function.arguments")}
    return out


def template_messages(messages: list[ChatMessage], content_format: ContentFormat) -> list[dict[str, Any]]:
    """The messages as template variables; RequestError (400) naming the first bad part."""
    out = []
    for i, m in enumerate(messages):
        texts = _texts(m.content, f"messages.{i}.content")
        content: str | list[dict[str, str]]
        if content_format == "openai" and m.role != "tool":
            content = [{"type": "text", "text": t} for t in texts]
        else:
            content = "\n".join(texts)
        message: dict[str, Any] = {"role": m.role, "content": content}
        if m.role == "assistant":
            if m.tool_calls:  # an empty list is dropped, keeping templates on the plain path
                message["tool_calls"] = [_tool_call(c, f"messages.{i}.tool_calls.{j}")
                                         for j, c in enumerate(m.tool_calls)]
            reasoning = m.reasoning if m.reasoning is not None else m.reasoning_content
            if reasoning is not None:
                message["reasoning"] = message["reasoning_content"] = reasoning
        if m.role == "tool" and m.tool_call_id is not None:
            message["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            message["name"] = m.name
        out.append(message)
    return out
