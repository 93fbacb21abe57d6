"""Every bound the HTTP frontend puts on what a client sends, in one place (docs/http-api.md and
docs/reliability.md, "Every named limit", list them). A value past one of these is a 4xx naming the
parameter, before anything reaches the scheduler or a worker; the HTTP limits are enforced by
`detok.api.http_limits`.
"""

from __future__ import annotations

import dataclasses

# ---- request values -----------------------------------------------------------------------------
INT64_MIN = -(2**63)  # seed range, as vLLM's (the scheduler hashes it as a signed 64-bit integer)
INT64_MAX = 2**63 - 1
MAX_N = 16  # choices per request (n); each is a separate GenerateRequest
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024  # the longest stop string
MAX_STOP_TOTAL_BYTES = 16 * 1024  # all stop strings of a request together, UTF-8
MAX_STOP_TOKEN_IDS = 256
MAX_LOGIT_BIAS = 1024  # entries
MAX_ALLOWED_TOKEN_IDS = 65536  # allowed_token_ids
MAX_BAD_WORDS = 128  # bad_words, each at most MAX_BAD_WORD_CHARS
MAX_BAD_WORD_CHARS = 256
LOGIT_BIAS_RANGE = 100.0  # OpenAI's range: a value past it is clamped to it (as vLLM), not refused
MAX_MESSAGES = 2048
MAX_TOOLS = 256
MAX_TOOL_CALLS = 256  # per assistant message
MAX_DOCUMENTS = 256
MAX_CHAT_LOGPROBS = 20  # top_logprobs (OpenAI's bound, vLLM's default max_logprobs)
# completions' logprobs: vLLM's max_logprobs (20) for both APIs, not OpenAI's 5 for this one
# (vLLM's tests/entrypoints/openai/test_completion.py accepts up to 20 and refuses 21)
MAX_COMPLETION_LOGPROBS = 20
MAX_REQUEST_ID_CHARS = 256  # a request's own id (request_id, X-Request-Id): it is in every chunk it gets
MAX_CACHE_SALT_CHARS = 1024  # cache_salt (vLLM's bound)

# ---- HTTP ----------------------------------------------------------------------------------------
DEFAULT_PORT = 8000  # `detok serve --port`; taken is an error, 0 picks a free port
MAX_BODY_BYTES = 8 * 1024 * 1024  # larger bodies are a 413, by Content-Length or while streaming
HEADER_TIMEOUT_S = 10.0  # from connection (or request start) to the end of the headers, else 408
BODY_TIMEOUT_S = 30.0  # from the end of the headers to the end of the body, else 408
MAX_CONNECTIONS = 2048  # open connections; one more is answered 503 and closed
# Idle seconds a kept-alive connection stays open between requests (`--timeout-keep-alive`, vLLM's
# option, whose default is uvicorn's 5 s). Longer than the idle timeout of the usual clients'
# connection pools (httpx 5 s, aiohttp 15 s), so the client closes an idle connection first: a
# server closing it at the moment the client reuses it for a new request loses that request (a load
# tool saw 40 of 3,486 requests fail that way at 5 s). Idle connections count against
# --max-connections.
KEEP_ALIVE_S = 60.0
SHUTDOWN_DRAIN_S = 1.0  # on SIGINT/SIGTERM, streams that end within this finish normally
MAX_HEADER_BYTES = 64 * 1024  # request line and headers together, else 431
LINGER_S = 2.0  # a refused connection reads and drops what its client still sends, this long at most


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    keep_alive_s: float = KEEP_ALIVE_S
    max_header_bytes: int = MAX_HEADER_BYTES
