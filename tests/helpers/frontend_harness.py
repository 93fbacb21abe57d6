"""The frontend app in this process, with a fake scheduler + worker behind its real sockets.

The app, its `SchedulerLink` and its `DeltaReceiver` are the real ones; the fake scheduler binds
the PULL socket the link pushes `GenerateRequest`s to, records them, and answers each one on its
`reply_to` with `DeltaBatch`es, as the workers would. Clients reach the app through httpx's ASGI
transport (the `openai` SDK takes such an httpx client), so a test sees exactly the prompt ids,
seeds and rids the scheduler receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any
from pathlib import Path

import httpx
import openai
import zmq
import zmq.asyncio

from detok import wire
from detok.api.app import FrontendState, create_app
from detok.api.scheduler_link import SchedulerLink
from detok.api.validation import ServingLimits
from detok.wire.to_frontends import DeltaBatch, RequestFinished
from detok.wire.to_scheduler import Abort, GenerateRequest
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import Finish
from detok.tokenizer.base import Tokenizer

MODEL = "test-model"

# (request) -> (text pieces, finish, output tokens); None: never answer (a request left open)
Reply = Callable[[GenerateRequest], "tuple[list[str], Finish, int] | None"]


def seed_reply(request: GenerateRequest) -> tuple[list[str], Finish, int]:
    """Text that shows which seed a choice got, in three deltas, ended by max_tokens."""
    return [f"seed {request.seed} ", "says ", "hello"], Finish("length"), 3


@dataclasses.dataclass
class FakeScheduler:
    reply: Reply = seed_reply
    requests: list[GenerateRequest] = dataclasses.field(default_factory=list)
    aborts: list[int] = dataclasses.field(default_factory=list)

    async def serve(self, sock: zmq.asyncio.Socket, ctx: zmq.asyncio.Context) -> None:
        decoder = wire.scheduler_request_decoder()
        encoder = wire.new_encoder()
        pushes: dict[str, zmq.asyncio.Socket] = {}
        try:
            while True:
                message = decoder.decode(await sock.recv())
                if isinstance(message, Abort):
                    self.aborts.append(message.rid)
                    continue
                self.requests.append(message)
                answer = self.reply(message)
                if answer is None:
                    continue
                push = pushes.get(message.reply_to)
                if push is None:
                    push = pushes[message.reply_to] = ctx.socket(zmq.PUSH)
                    push.connect(message.reply_to)
                texts, finish, tokens = answer
                offset = 0
                for text in texts:
                    await push.send(encoder.encode(DeltaBatch.from_rows(0, 0.0, [message.rid], [text], [offset])))
                    offset += len(text)
                done = RequestFinished(message.rid, finish, tokens)
                await push.send(encoder.encode(DeltaBatch.from_rows(0, 0.0, [], [], [], [done])))
        finally:
            for push in pushes.values():
                push.close(linger=0)


@dataclasses.dataclass
class Running:
    state: FrontendState
    scheduler: FakeScheduler
    http: httpx.AsyncClient
    sdk: openai.AsyncOpenAI
    app: Any = None  # the FastAPI app the clients reach


@contextlib.asynccontextmanager
async def running_app(
    tmp_path: Path,
    tok: Tokenizer,
    reply: Reply = seed_reply,
    max_model_len: int = 4096,
    **state_options: object,
) -> AsyncIterator[Running]:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.PULL)
    endpoint = f"ipc://{tmp_path}/scheduler"
    sock.bind(endpoint)
    scheduler = FakeScheduler(reply)
    serving = asyncio.ensure_future(scheduler.serve(sock, ctx))
    receiver = DeltaReceiver()
    link = SchedulerLink(endpoint, receiver)
    state_options.setdefault("health", lambda: {"pool": True, "scheduler": True})
    state = FrontendState(tokenizer=tok, limits=ServingLimits(MODEL, max_model_len), link=link,
                          **state_options)  # type: ignore[arg-type]
    app = create_app(state)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                sdk = openai.AsyncOpenAI(base_url="http://app/v1", api_key="none", http_client=http, max_retries=0)
                yield Running(state, scheduler, http, sdk, app)
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        link.close()
        receiver.close()
        sock.close(linger=0)
        ctx.term()
