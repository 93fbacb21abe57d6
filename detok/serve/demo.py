"""`detok serve --demo`: one streamed chat completion through the real HTTP API, printed as it
arrives. Standard library only (urllib), since `make run` installs no client packages."""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import TextIO

from detok.streaming.sse import parse_events

DEMO_PROMPT = "Tell me about a morning somewhere in the world, in any language."


def stream_demo_chat(base_url: str, model: str, api_key: str | None = None, out: TextIO = sys.stdout,
                     timeout: float = 60.0) -> str:
    """Send one streamed chat completion and echo its text to `out` as it streams; return the text."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": DEMO_PROMPT}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 400,
    }
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{base_url}/chat/completions", json.dumps(body).encode(), headers)
    text: list[str] = []
    usage = None
    finish = None
    out.write(f"\n>>> user: {DEMO_PROMPT}\n>>> assistant (streamed):\n")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        lines = (raw.decode("utf-8") for raw in response)
        for payload in parse_events(lines):
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                piece = choice["delta"].get("content") or ""
                finish = choice.get("finish_reason") or finish
                if piece:
                    text.append(piece)
                    out.write(piece)
                    out.flush()
    out.write("\n")
    if usage:
        out.write(
            f"<<< finish_reason={finish}, {usage['prompt_tokens']} prompt tokens, "
            f"{usage['completion_tokens']} completion tokens\n"
        )
    out.flush()
    return "".join(text)
