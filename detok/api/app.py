"""The OpenAI-compatible HTTP frontend (FastAPI): completions, chat completions, models, health,
metrics. It tokenizes prompts (chat template included), sends each choice to the scheduler, and
streams the detok workers' text back.

Everything a request holds (its streams in the receiver, its requests in the scheduler) is
released on every way out: finished, refused after acceptance, failed, or its client gone (then
aborted, counted as `reason="abort"`, and logged as one INFO line).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import msgspec
import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from detok.api.body_precheck import precheck
from detok.streaming.chunk_push import direct_rows
from detok.api.errors import RequestError, error_response, from_validation_error
from detok.api.health import SchedulerWatch
from detok.api.http_limits import read_body
from detok.api.intake import Intake
from detok.streaming.latency import LatencyRecorder
from detok.api.limits import MAX_REQUEST_ID_CHARS, HttpLimits
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest
from detok.api.openai_types import ModelCard, ModelList
from detok.api.responses import ResponseContext, collect_body, stream_events
from detok.api.scheduler_link import SchedulerLink
from detok.streaming.stream_interval import effective_interval
from detok.streaming.sse_response import RAW_SEND, SseResponse
from detok.api.validation import GenerationJob, ServingLimits, chat_job, completion_job
from detok.metrics import CONTENT_TYPE, render_metrics
from detok.receiver.receiver import RequestStream
from detok.tokenizer.base import Tokenizer

log = logging.getLogger("detok.frontend")

# Bodies above this size are parsed, chat-templated and tokenized in the intake pool
# (detok.api.intake), off the event loop: a long prompt must not stall every other stream.
_OFFLOAD_BODY_BYTES = 16_384
_CLIENT_CLOSED_REQUEST = 499  # nginx's status for a response nobody is listening to
# How often the direct routes look again whether FastAPI's OpenTelemetry got configured (then every
# request goes through FastAPI, which traces it): at most this long after it is, a request is not traced.
_TELEMETRY_RECHECK_S = 1.0


@dataclasses.dataclass
class FrontendState:
    tokenizer: Tokenizer
    limits: ServingLimits
    link: SchedulerLink
    health: Callable[[], dict[str, bool]]  # component name -> up (docs/reliability.md)
    health_detail: Callable[[], dict[str, object]] = dict
    scheduler_generation: Callable[[], int] = lambda: 1
    scheduler_serving: Callable[[], bool] | None = None  # health()["scheduler"] alone (admission, per request)
    api_key: str | None = None
    latency: LatencyRecorder | None = None
    metrics_dir: str | None = None
    http: HttpLimits = HttpLimits()
    stream_interval: int = 1  # deltas per streamed chunk after the first (vLLM's --stream-interval)
    frontend_index: int | None = None  # `detok serve --frontends N`: this process's index (a response header)
    reasoning_field: str = "reasoning"  # `--reasoning-field`: vLLM's name, or reasoning_content (SGLang)
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    draining: bool = False  # shutting down (set in the stop signal's handler): new requests are refused
    intake: Intake = dataclasses.field(default_factory=Intake)  # where large bodies become jobs
    watch: SchedulerWatch = dataclasses.field(init=False)
    eos_id: int | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.watch = SchedulerWatch(self.link.receiver, self.health, self.health_detail, self.scheduler_generation,
                                    self.scheduler_serving, stopping=lambda: self.draining)
        self.tokenizer.encode_prompt("")  # (a backend's prompt tables built now, not at the first request)
        # a streamed response's rows written as the receiver dispatches them where its compiled
        # pusher can (one C pass over a batch: detok/_native/_directrows.c)
        self.link.receiver.direct_rows = direct_rows
        eos = self.tokenizer.special_tokens.eos
        self.eos_id = self.tokenizer.token_to_id(eos) if eos is not None else None


def create_app(state: FrontendState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.link.receiver.start()  # receive on uvicorn's loop
        flush = state.latency.flush if state.latency is not None else None
        watchdog = asyncio.ensure_future(state.watch.run(flush))
        try:
            yield
        finally:
            watchdog.cancel()
            state.intake.close()
            if state.latency is not None:
                state.latency.flush()

    app = _DetokApp(title="detok", summary="OpenAI-compatible API over the detok worker pool", lifespan=lifespan)
    app.state.detok = state
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        status, body = state.watch.report()
        return JSONResponse(body, status_code=status)

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
        return await _generate_or_500(state, request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate_or_500(state, request, "chat")

    app.direct_routes = {"/v1/completions": completions, "/v1/chat/completions": chat_completions}
    return app


class _DetokApp(FastAPI):
    """FastAPI, with the generation endpoints' POSTs served directly (`direct_routes`).

    Everything a generation request passed through before its handler (FastAPI's and Starlette's
    layers: error middleware, routing, dependency solving, a query-string parse; ≈7% of the
    frontend's CPU at 512 streaming users, py-spy) does nothing for it: its handler takes the raw
    request, answers its own errors, and streams to the server's `send`. The layers stay for
    everything else, and for these paths too once the app has user middleware, a root path or
    FastAPI's OpenTelemetry configured (which must see every request)."""

    direct_routes: dict[str, Callable[[Request], Awaitable[Response]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # the server's own `send`: streamed chunks go straight to it, past the per-message wrappers
        # of the middleware (which only need to see the response start)
        scope[RAW_SEND] = send
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.direct_routes.get(scope["path"])
            if handler is not None and self._direct_allowed(scope):
                scope["app"] = self
                request = Request(scope, receive)
                try:
                    response = await handler(request)
                except RequestError as e:  # (what the app's exception handler answers)
                    response = error_response(e)
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    _telemetry_checked = -1.0  # (monotonic time of the last check)
    _telemetry_on = False

    def _direct_allowed(self, scope: Scope) -> bool:
        if self.user_middleware or self.root_path or scope.get("root_path"):
            return False
        now = time.monotonic()
        if now - self._telemetry_checked >= _TELEMETRY_RECHECK_S:  # (the check reads the providers)
            telemetry = getattr(self, "_native_telemetry", None)  # (FastAPI >= 0.165's own OpenTelemetry)
            self._telemetry_on = telemetry is not None and bool(telemetry.enabled())
            self._telemetry_checked = now
        return not self._telemetry_on


def _authorize(state: FrontendState, request: Request) -> None:
    if state.api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), state.api_key.encode()):
        raise RequestError("Incorrect API key provided.", status=401, code="invalid_api_key")


def _build_job(state: FrontendState, body: bytes, kind: str) -> GenerationJob:
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    body = precheck(body, kind, state.limits.max_model_len)
    try:
        req = model.model_validate_json(body)
    except pydantic.ValidationError as e:
        raise from_validation_error(e, model) from None
    try:
        if isinstance(req, ChatCompletionRequest):
            return chat_job(req, state.tokenizer, state.limits)
        return completion_job(req, state.tokenizer, state.limits)
    except ValueError as e:  # a DecodeParams invariant the checks above did not name
        raise RequestError(str(e)) from None


def _request_id(request: Request, job: GenerationJob) -> str:
    """The response id's tail, as vLLM's `_base_request_id`: an X-Request-Id header, else the body's
    `request_id`, else 128 random bits as 32 hex digits (vLLM's uuid4 hex, without building a
    UUID object).
    Rids stay inside the stack."""
    header = request.headers.get("x-request-id")
    if header is not None:
        if len(header) > MAX_REQUEST_ID_CHARS:
            raise RequestError(f"X-Request-Id: at most {MAX_REQUEST_ID_CHARS} characters", "X-Request-Id")
        return header
    return job.request_id if job.request_id is not None else os.urandom(16).hex()


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "a client"


async def _generate_or_500(state: FrontendState, request: Request, kind: str) -> Response:
    """`_generate`, with an unexpected error logged once and answered as OpenAI's 500 JSON."""
    try:
        return await _generate(state, request, kind)
    except RequestError:
        raise
    except Exception as e:
        log.exception("unhandled error in a request")
        return error_response(RequestError(f"internal error: {type(e).__name__}", status=500, type="server_error"))


async def _generate(state: FrontendState, request: Request, kind: str) -> Response:
    arrival = time.perf_counter()
    _authorize(state, request)
    try:
        body = await read_body(request, state.http)
    except ClientDisconnect:
        log.info("%s disconnected while sending its request", _client(request))
        return Response(status_code=_CLIENT_CLOSED_REQUEST)
    if len(body) > _OFFLOAD_BODY_BYTES:
        job = await state.intake.run(len(body), _build_job, state, body, kind)
    else:
        job = _build_job(state, body, kind)
    if state.draining:
        raise RequestError("the server is shutting down", status=503, type="service_unavailable")
    if not state.watch.scheduler_up():
        raise RequestError("the server cannot serve: the scheduler is down", status=503, type="service_unavailable")
    response_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{_request_id(request, job)}"
    streams = state.link.submit(job, time.time())
    release = _Release(state, streams, request)
    try:
        state.watch.sent([s.rid for s in streams])
        ctx = ResponseContext(
            kind,  # type: ignore[arg-type]
            response_id,
            state.limits.model_name,
            len(job.prompt_ids),
            job.include_usage,
            arrival,
            eos_id=state.eos_id,
            ignore_eos=job.ignore_eos,
            echo=job.echo,
            role=job.role,
            logprobs=job.logprobs,
            stream_interval=effective_interval(state.stream_interval, job.stream_interval),
            continuous_usage=job.continuous_usage,
            parsing=job.parsing,
            reasoning_field=state.reasoning_field,
            include_reasoning=job.include_reasoning,
            parallel_tool_calls=job.parallel_tool_calls,
            prompt_text=job.prompt_text,
            return_token_ids=job.return_token_ids,
            output_ids=job.return_token_ids and not job.hide_output_ids,
            tokens_as_ids=job.tokens_as_ids,
            prompt_ids=job.prompt_ids,
        )
        if job.stream:
            return SseResponse(stream_events(ctx, streams, state.latency), release, ctx, state.frontend_index)
        return await _respond_unless_disconnected(request, streams, ctx, state, release)
    except BaseException:
        release()
        raise


class _Release:
    """Frees a request's choices once: aborts (and counts) those not finished."""

    def __init__(self, state: FrontendState, streams: Sequence[RequestStream], request: Request) -> None:
        self._state, self._streams, self._request = state, streams, request
        self._done = False

    def __call__(self, client_gone: bool = False) -> int:
        if self._done:
            return 0
        self._done = True
        state = self._state
        rids = [s.rid for s in self._streams]
        state.watch.ended(rids)
        aborted = 0
        for stream in self._streams:
            if not stream.done:
                state.link.abort(stream.rid)
                aborted += 1
                if state.latency is not None:
                    state.latency.finished("abort")
        if aborted and client_gone:
            log.info("%s went away: aborted %d unfinished choice(s)", _client(self._request), aborted)
        return aborted


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _respond_unless_disconnected(
    request: Request, streams: list[RequestStream], ctx: ResponseContext, state: FrontendState, release: _Release
) -> Response:
    collect = asyncio.ensure_future(collect_body(ctx, streams, state.latency))
    disconnect = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait((collect, disconnect), return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect.cancel()
        gone = not collect.done()  # the client went away (or this handler was cancelled)
        if gone:
            collect.cancel()
        release(client_gone=gone)
    if not collect.done() or collect.cancelled():
        return Response(status_code=_CLIENT_CLOSED_REQUEST)
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
