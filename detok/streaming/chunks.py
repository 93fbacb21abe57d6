"""Streamed text chunks rendered from byte templates: per chunk, only the text (and the logprobs
object, when asked for) is JSON-encoded and spliced between a fixed head and tail.

A text chunk of one response differs from the next only in the choice index, the delta's fields
and the logprobs; the id, created, model and the keys are the same bytes every time. Building the
OpenAI Structs and encoding them whole costs an object per field a chunk; the template costs one
`msgspec.json.encode(text)` and a join. The bytes are exactly what the Structs of
`detok.api.openai_types` encode to (key order included; `tests/frontend/test_chunks.py`
checks it), so a client cannot tell the two apart.

Extra delta fields (reasoning content, tool calls, ...): pass them as `extra`, an ordered mapping of
key -> JSON-able value, written after `content` in the chat delta (`ChunkRenderer.text`). Extra
choice fields (vLLM's `token_ids`, `prompt_token_ids`): `choice_extra`, encoded `,"key":value`
bytes written after the choice's `logprobs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

_encode = msgspec.json.encode

# the per-choice tail after the delta (chat) or the text (completions): not finished yet
_OPEN_TAIL = b',"finish_reason":null,"stop_reason":null,"logprobs":'
_NULL = b"null"
_END = b"}]}\n\n"


class ChunkRenderer:
    """Renders one streamed response's text chunks as complete SSE events (`data: ...\\n\\n`)."""

    __slots__ = ("_chat", "_delta_heads", "_heads", "_keys")

    def __init__(self, kind: Literal["completion", "chat"], response_id: str, created: int, model: str,
                 choices: int = 1) -> None:
        self._chat = kind == "chat"
        obj = "chat.completion.chunk" if self._chat else "text_completion"
        head = (b'data: {"object":' + _encode(obj) + b',"id":' + _encode(response_id) + b',"created":'
                + _encode(created) + b',"model":' + _encode(model) + b',"choices":[{"index":')
        # per choice index: everything up to the first byte of the text's JSON string
        field = b',"delta":{"content":' if self._chat else b',"text":'
        self._heads = [head + str(i).encode() + field for i in range(choices)]
        self._delta_heads = [head + str(i).encode() + b',"delta":{' for i in range(choices)]
        self._keys: dict[str, bytes] = {}  # delta key -> its encoded `"key":`

    def text_frame(self, index: int) -> tuple[bytes, bytes]:
        """(before, after) the text's JSON string in `text(index, text)` without logprobs, extra
        fields or usage: that chunk is before + msgspec.json.encode(text) + after."""
        return self._heads[index], (b"}" if self._chat else b"") + _OPEN_TAIL + _NULL + _END

    def items_frame(self) -> tuple[bytes, bytes]:
        """(between the text's JSON string and the first item, after the last item) of a chat
        chunk whose logprobs are the workers' rendered items (detok.worker.chat_entries) and
        nothing else: that chunk is text_frame's before + JSON(text) + mid + the items joined with
        commas + end, what `text(index, text, logprobs)` writes for them."""
        if not self._chat:
            raise ValueError("rendered logprobs items are chat's")
        return b"}" + _OPEN_TAIL + b'{"content":[', b"]}" + _END

    def field_prefix(self, index: int, key: str) -> bytes:
        """What comes before the string value's JSON in `field(index, key, value)` without
        logprobs, usage or extra choice fields; text_frame's `after` follows it (chat)."""
        if not self._chat:
            raise ValueError("delta fields are for chat chunks only")
        return self._delta_heads[index] + _encode(key) + b":"

    def field(self, index: int, key: str, value: Any, logprobs: Any = None, usage: Any = None,
              choice_extra: bytes = b"") -> bytes:
        """A chat chunk whose delta is the one field `key` (the reasoning, or `tool_calls`)."""
        prefix = self._keys.get(key)
        if prefix is None:
            if not self._chat:
                raise ValueError("delta fields are for chat chunks only")
            prefix = self._keys[key] = _encode(key) + b":"
        return b"".join((self._delta_heads[index], prefix, _encode(value), b"}", _OPEN_TAIL,
                         _NULL if logprobs is None else _encode(logprobs), choice_extra,
                         _END if usage is None else b'}],"usage":' + _encode(usage) + b"}\n\n"))

    def fields(self, index: int, fields: Mapping[str, Any], logprobs: Any = None, choice_extra: bytes = b"") -> bytes:
        """A chat chunk whose delta holds only `fields` (in order): a reasoning chunk
        (`{"reasoning": ...}`) or a tool-call chunk (`{"tool_calls": [...]}`)."""
        if not self._chat:
            raise ValueError("delta fields are for chat chunks only")
        parts = [self._delta_heads[index]]
        first = True
        for key, value in fields.items():
            parts.append((b"" if first else b",") + _encode(key) + b":" + _encode(value))
            first = False
        parts.append(b"}")
        parts.append(_OPEN_TAIL)
        parts.append(_NULL if logprobs is None else _encode(logprobs))
        parts.append(choice_extra)
        parts.append(_END)
        return b"".join(parts)

    def text(self, index: int, text: str, logprobs: Any = None,
             extra: Mapping[str, Any] | None = None, usage: Any = None, choice_extra: bytes = b"") -> bytes:
        """The chunk carrying `text` (and `logprobs`, a Struct or None; `extra` delta fields, chat
        only; `usage`, a Usage Struct, for `continuous_usage_stats`) for choice `index`."""
        parts = [self._heads[index], _encode(text)]
        if self._chat:
            if extra:
                for key, value in extra.items():
                    parts.append(b"," + _encode(key) + b":" + _encode(value))
            parts.append(b"}")
        elif extra:
            raise ValueError("extra delta fields are for chat chunks only")
        parts.append(_OPEN_TAIL)
        parts.append(_NULL if logprobs is None else _encode(logprobs))
        parts.append(choice_extra)
        parts.append(_END if usage is None else b'}],"usage":' + _encode(usage) + b"}\n\n")
        return b"".join(parts)
