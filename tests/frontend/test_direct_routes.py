"""The generation endpoints served past FastAPI's layers (`_DetokApp.direct_routes`) answer
exactly as through them: the same status, content type and body (ids and timestamps aside) for
good, streamed, malformed, refused and unauthorized requests; and the layers come back for these
paths as soon as the app has user middleware."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from detok.tokenizer.hf import HFTokenizer
from tests.helpers.frontend_harness import MODEL, running_app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
_MSG = [{"role": "user", "content": "hi there"}]

REQUESTS: list[tuple[str, Any, dict[str, str]]] = [
    (CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": 5}, {}),
    (CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}}, {}),
    (COMPLETIONS, {"model": MODEL, "prompt": "hello", "max_tokens": 4, "stream": True}, {}),
    (COMPLETIONS, {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 3, "logprobs": 2}, {}),
    (CHAT, b"{", {}),  # not JSON
    (CHAT, [], {}),  # not an object
    (CHAT, {"model": MODEL}, {}),  # no messages
    (CHAT, {"model": MODEL, "messages": "hi"}, {}),
    (CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": -1}, {}),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "n": 0}, {}),
    (COMPLETIONS, {"model": MODEL, "prompt": [10**12]}, {}),  # an id outside the vocabulary
    (CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": 5}, {"authorization": "Bearer wrong"}),
    (CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": 5}, {"authorization": ""}),  # no key
]


@pytest.fixture(scope="module")
def tok() -> HFTokenizer:
    return HFTokenizer.from_path(FIXTURES / "hf" / "qwen2")


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "created")}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def _normalized(content: bytes, content_type: str) -> Any:
    if content_type.startswith("text/event-stream"):
        # (how deltas group into chunks depends on timing: compared as what they add up to)
        events = [e[len("data: "):] for e in content.decode().split("\n\n") if e]
        texts: dict[int, str] = {}
        ends: dict[int, Any] = {}
        usage, shapes = None, set()
        for e in events[:-1]:
            chunk = json.loads(e)
            shapes.add(tuple(sorted(chunk)))
            usage = chunk.get("usage") or usage
            for c in chunk["choices"]:
                delta = c.get("delta") or {}
                texts[c["index"]] = texts.get(c["index"], "") + (delta.get("content") or c.get("text") or "")
                if c.get("finish_reason"):
                    ends[c["index"]] = (c["finish_reason"], c.get("stop_reason"))
        return {"texts": texts, "ends": ends, "usage": usage, "shapes": sorted(shapes), "last": events[-1:]}
    if content_type.startswith("application/json"):
        return _without_ids(json.loads(content))
    return content


async def _answers(tmp_path: Path, tok: HFTokenizer, direct: bool, api_key: str | None) -> list[tuple[Any, ...]]:
    out = []
    tmp_path.mkdir()
    async with running_app(tmp_path, tok, api_key=api_key) as app:
        if not direct:
            app.app.direct_routes = {}
        for path, body, headers in REQUESTS:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent = {"content-type": "application/json", **({"authorization": f"Bearer {api_key}"} if api_key else {}),
                    **headers}
            sent = {k: v for k, v in sent.items() if v}
            r = await app.http.post(path, content=content, headers=sent)
            kind = r.headers.get("content-type", "")
            out.append((path, r.status_code, kind, _normalized(r.content, kind)))
    return out


@pytest.mark.parametrize("api_key", [None, "k"])
def test_direct_routes_answer_as_fastapis(tmp_path: Path, tok: HFTokenizer, api_key: str | None) -> None:
    direct = asyncio.run(_answers(tmp_path / "d", tok, True, api_key))
    layered = asyncio.run(_answers(tmp_path / "l", tok, False, api_key))
    assert direct == layered
    statuses = [a[1] for a in direct]
    assert 200 in statuses and 400 in statuses and (api_key is None or 401 in statuses)


def test_user_middleware_sees_the_generation_requests(tmp_path: Path, tok: HFTokenizer) -> None:
    seen: list[str] = []

    async def main() -> int:
        async with running_app(tmp_path, tok) as app:
            @app.app.middleware("http")
            async def record(request: Any, call_next: Any) -> Any:
                seen.append(request.url.path)
                return await call_next(request)

            r = await app.http.post(CHAT, json={"model": MODEL, "messages": _MSG, "max_tokens": 3})
            return r.status_code

    assert asyncio.run(main()) == 200
    assert seen == [CHAT]


def test_configured_telemetry_takes_fastapis_path(tmp_path: Path, tok: HFTokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI's OpenTelemetry must see every request: once it is on (looked at again within
    `_TELEMETRY_RECHECK_S`), the generation requests go through FastAPI too."""
    import fastapi

    from detok.api import app as app_module

    layered: list[str] = []
    real_call = fastapi.FastAPI.__call__

    async def counting(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            layered.append(scope["path"])
        await real_call(self, scope, receive, send)

    monkeypatch.setattr(fastapi.FastAPI, "__call__", counting)
    monkeypatch.setattr(app_module, "_TELEMETRY_RECHECK_S", 0.0)

    async def main() -> None:
        async with running_app(tmp_path, tok) as app:
            body = {"model": MODEL, "messages": _MSG, "max_tokens": 3}
            assert (await app.http.post(CHAT, json=body)).status_code == 200
            assert layered == []  # (direct)
            monkeypatch.setattr(app.app._native_telemetry, "enabled", lambda: True)
            assert (await app.http.post(CHAT, json=body)).status_code == 200
            assert layered == [CHAT]

    asyncio.run(main())
