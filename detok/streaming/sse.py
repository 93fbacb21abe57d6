"""Server-sent events framing, as OpenAI streams it: `data: <json>\\n\\n` ... `data: [DONE]\\n\\n`."""

from __future__ import annotations

from collections.abc import Iterator

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"
# no-cache: proxies must not buffer or replay the stream; X-Accel-Buffering: nginx flushes per event
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(payload: bytes) -> bytes:
    """One SSE event carrying a JSON payload (JSON never holds a raw newline, so one `data:` line)."""
    return b"data: " + payload + b"\n\n"


def parse_events(lines: Iterator[str]) -> Iterator[str]:
    """The `data:` payloads of an SSE text stream, `[DONE]` included (for clients and tests)."""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)
