"""The OpenAI-compatible HTTP frontend (FastAPI): completions, chat completions, models, health,
metrics. It tokenizes prompts (chat template included), sends them to the scheduler, and streams
the detok workers' text back; a client that goes away aborts its request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable

import msgspec
import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from detok.frontend import sse
from detok.frontend.errors import RequestError, error_response, from_validation_error
from detok.frontend.latency import LatencyRecorder
from detok.frontend.openai_types import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from detok.frontend.responses import ResponseContext, collect_body, stream_events
from detok.frontend.scheduler_link import SchedulerLink
from detok.frontend.validation import GenerationJob, ServingLimits, chat_job, completion_job
from detok.metrics import CONTENT_TYPE, render_metrics
from detok.receiver import RequestStream
from detok.tokenizer.base import Tokenizer

log = logging.getLogger("detok.frontend")

# Bodies above this size are tokenized (and chat-templated) off the event loop: a long prompt
# must not stall every other stream for milliseconds.
_OFFLOAD_BODY_BYTES = 16_384
_HEALTH_POLL_S = 0.25


@dataclasses.dataclass
class FrontendState:
    tokenizer: Tokenizer
    limits: ServingLimits
    link: SchedulerLink
    health: Callable[[], dict[str, bool]]  # component name -> up
    api_key: str | None = None
    latency: LatencyRecorder | None = None
    metrics_dir: str | None = None
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    down: str = ""  # what is down, as the health watchdog last saw it ("" when all is up)


def create_app(state: FrontendState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.link.receiver.start()  # receive on uvicorn's loop
        watchdog = asyncio.ensure_future(_watch_health(state))
        try:
            yield
        finally:
            watchdog.cancel()
            if state.latency is not None:
                state.latency.flush()

    app = FastAPI(title="detok", summary="OpenAI-compatible API over the detok worker pool", lifespan=lifespan)
    app.state.detok = state
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        components = state.health()
        up = all(components.values())
        return JSONResponse({"status": "ok" if up else "unavailable", **components}, status_code=200 if up else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        if state.latency is not None:
            state.latency.flush()  # a scrape sees every observation so far
        return Response(render_metrics(state.metrics_dir), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        _authorize(state, request)
        card = ModelCard(state.limits.model_name, state.created, max_model_len=state.limits.max_model_len)
        return Response(msgspec.json.encode(ModelList([card])), media_type="application/json")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(state, request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate(state, request, "chat")

    return app


async def _watch_health(state: FrontendState) -> None:
    """Poll the stack's health; when a part goes down, refuse new requests (503) and end the
    requests in flight with an error, since no delta will come for them. Also flushes the
    batched latency histograms to prometheus."""
    while True:
        if state.latency is not None:
            state.latency.flush()
        components = state.health()
        down = ", ".join(f"{name} down" for name, up in components.items() if not up)
        if down and not state.down:
            failed = state.link.receiver.fail_all(f"the request was lost: {down}")
            log.error("%s: refusing requests (503) until it is back; %d requests in flight failed", down, failed)
        elif state.down and not down:
            log.warning("all parts of the stack are up again")
        state.down = down
        await asyncio.sleep(_HEALTH_POLL_S)


def _authorize(state: FrontendState, request: Request) -> None:
    if state.api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), state.api_key.encode()):
        raise RequestError("Incorrect API key provided.", status=401, code="invalid_api_key")


def _build_job(state: FrontendState, body: bytes, kind: str) -> GenerationJob:
    try:
        if kind == "chat":
            return chat_job(ChatCompletionRequest.model_validate_json(body), state.tokenizer, state.limits)
        return completion_job(CompletionRequest.model_validate_json(body), state.tokenizer, state.limits)
    except pydantic.ValidationError as e:
        raise from_validation_error(e) from None
    except ValueError as e:  # a DecodeParams invariant the checks above did not name
        raise RequestError(str(e)) from None


async def _generate(state: FrontendState, request: Request, kind: str) -> Response:
    arrival = time.perf_counter()
    _authorize(state, request)
    body = await request.body()
    if len(body) > _OFFLOAD_BODY_BYTES:
        job = await asyncio.to_thread(_build_job, state, body, kind)
    else:
        job = _build_job(state, body, kind)
    if state.down:
        raise RequestError(f"the server cannot serve: {state.down}", status=503, type="service_unavailable")
    stream = state.link.submit(job, time.time())
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    ctx = ResponseContext(
        kind,  # type: ignore[arg-type]
        f"{prefix}-{stream.rid:016x}",
        state.limits.model_name,
        len(job.prompt_ids),
        job.include_usage,
        arrival,
    )
    if job.stream:
        return StreamingResponse(
            _abort_on_exit(state, stream, stream_events(ctx, stream, state.latency)),
            media_type=sse.MEDIA_TYPE,
            headers=sse.HEADERS,
        )
    return await _respond_unless_disconnected(state, request, stream, ctx)


async def _abort_on_exit(
    state: FrontendState, stream: RequestStream, body: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """Pass the SSE body through; if the client disconnects first (Starlette cancels this
    generator), abort the request in the scheduler and the worker."""
    try:
        async for chunk in body:
            yield chunk
    finally:
        if not stream.done:
            state.link.abort(stream.rid)


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _respond_unless_disconnected(
    state: FrontendState, request: Request, stream: RequestStream, ctx: ResponseContext
) -> Response:
    collect = asyncio.ensure_future(collect_body(ctx, stream, state.latency))
    disconnect = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait((collect, disconnect), return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect.cancel()
        if not collect.done():  # the client went away (or this handler was cancelled)
            collect.cancel()
            state.link.abort(stream.rid)
    if not collect.done() or collect.cancelled():
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    return Response(collect.result(), media_type="application/json")


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def on_request_error(_request: Request, exc: RequestError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request"}
        return error_response(RequestError(str(first.get("msg"))))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(RequestError(str(exc.detail), status=exc.status_code, type=kind))

    @app.exception_handler(Exception)
    async def on_unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unhandled error in a request")
        return error_response(RequestError(f"internal error: {type(exc).__name__}", status=500, type="server_error"))
