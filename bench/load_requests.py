"""What bench/load.py sends and reads: a simulated user's request (`LoadConfig`, `request_body`:
chat or completions, logprobs, a long system message, the tools of --tools) and what its client
takes of each streamed chunk (`ChunkClock`: TTFT and the gaps between output-bearing chunks, the
usage, an error event)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import msgspec

from bench.load_summary import _Sample


@dataclasses.dataclass(frozen=True)
class LoadConfig:
    url: str
    model: str = "detok-stub"
    api_key: str | None = None
    endpoint: str = "completions"  # or "chat"
    max_tokens: int = 128
    duration_s: float = 10.0
    grace_s: float = 60.0
    ignore_eos: bool = True  # fixed-length outputs, comparable across points
    logprobs: int | None = None  # top alternatives per token (chat: logprobs + top_logprobs)
    system_chars: int = 0  # chat: a system message of this many characters, the same in every request
    prompt: str | None = None  # the user message (None: "Request N: tell me a story."); with the stub's
    # `--workload echo` it is also the output, e.g. "<think>...</think>..." for a reasoning parser
    tools: bool = False  # chat: every request offers TOOLS (tool_choice "auto"): a tool-call parser's replies


# what --tools offers (a reply that calls it: `--prompt` in the parser's format with the stub's `--workload echo`)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, with notes.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "notes": {"type": "string"}},
                   "required": ["city"]}}}]


def _system_text(chars: int) -> str:
    words = "You are a careful assistant. Answer in plain words, cite what you use, and say when you are unsure. "
    return (words * (chars // len(words) + 1))[:chars]


def request_body(cfg: LoadConfig, index: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": index,
        "ignore_eos": cfg.ignore_eos,
    }
    prompt = cfg.prompt if cfg.prompt is not None else f"Request {index}: tell me a story."
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        if cfg.system_chars:  # (an agent's instructions and tool descriptions: the same long text each time)
            body["messages"].insert(0, {"role": "system", "content": _system_text(cfg.system_chars)})
        if cfg.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = cfg.logprobs
        if cfg.tools:
            body["tools"] = TOOLS
            body["tool_choice"] = "auto"
    else:
        body["prompt"] = prompt
        if cfg.logprobs is not None:
            body["logprobs"] = cfg.logprobs
    return body


class _Text(msgspec.Struct):
    content: str | None = None
    # a parsed reply's output: reasoning (vLLM's field or SGLang's) and tool-call fragments
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[Any] | None = None


class _Choice(msgspec.Struct):
    delta: _Text | None = None  # chat
    text: str | None = None  # completions


class _Usage(msgspec.Struct):
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    """What the client reads of a streamed chunk (the rest of it is skipped by the decoder)."""

    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class ChunkClock:
    """Called with each SSE payload as its bytes arrive: times the text-bearing chunks into a sample."""

    __slots__ = ("start", "last", "sample")

    def __init__(self, start: float, sample: _Sample) -> None:
        self.start = start
        self.last: float | None = None
        self.sample = sample

    def __call__(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            return
        chunk = _decode_chunk(payload)
        sample = self.sample
        if chunk.error is not None:
            error = chunk.error
            sample.error = str(error.get("message") if isinstance(error, dict) else error)
        if sample.error:
            return  # the response failed; read on to its end (the connection is reused)
        choices = chunk.choices
        if choices:
            choice = choices[0]
            delta = choice.delta
            text = choice.text if delta is None else (delta.content or delta.reasoning or delta.reasoning_content
                                                       or delta.tool_calls)
            if text:
                now = time.perf_counter()
                if self.last is None:
                    sample.ttft = now - self.start
                else:
                    sample.itls.append(now - self.last)
                self.last = now
        if chunk.usage is not None and chunk.usage.completion_tokens:
            sample.output_tokens = chunk.usage.completion_tokens
