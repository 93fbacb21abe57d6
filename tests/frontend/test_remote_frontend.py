"""A frontend on another host than the pool and the scheduler: every socket between them is
CURVE tcp (the frontend's DeltaReceiver the workers deliver to, its SchedulerLink to the
scheduler's request inbox). Here "another host" is 127.0.0.1 over tcp, real worker processes, the
real HTTP app; without the deployment's keys the frontend's sockets refuse tcp."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import zmq

from detok.api.app import FrontendState, create_app
from detok.api.scheduler_link import SchedulerLink
from detok.api.validation import ServingLimits
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from detok.tokenizer.factory import load_tokenizer
from detok.wire.security import CurveKeys, InsecureTransportError, SocketSecurity, generate_keys
from scheduler_stub.stub import RequestInbox, SchedulerStub, StepPolicy, run_loop
from scheduler_stub.workload import CorpusWorkload, embedded_corpus_text
from tests.helpers.serve_helpers import LiveServer

pytestmark = pytest.mark.timeout(180)

GPT2 = str(Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gpt-2")


def test_http_frontend_over_curve_tcp_to_pool_and_scheduler():
    keys = CurveKeys.generate()
    tok = load_tokenizer(GPT2)
    with DetokPool(GPT2, workers=1, spare=False, transport="tcp", keys=keys) as pool:
        ctx = zmq.Context()
        client = pool.client(context=ctx)
        stub = SchedulerStub(client, CorpusWorkload(tok, embedded_corpus_text()), tok.eos_token_ids,
                             StepPolicy(step_interval_s=0.002, max_batch=8))
        inbox = RequestInbox(ctx, "tcp://127.0.0.1:*", security=SocketSecurity(keys))
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, args=(stub, inbox, stop.is_set), daemon=True)
        loop.start()
        try:
            assert inbox.endpoint.startswith("tcp://127.0.0.1:")
            with pytest.raises(InsecureTransportError):
                DeltaReceiver("tcp://127.0.0.1:*")
            receiver = DeltaReceiver("tcp://127.0.0.1:*", keys=keys)
            with pytest.raises(InsecureTransportError):
                SchedulerLink(inbox.endpoint, receiver)
            link = SchedulerLink(inbox.endpoint, receiver, keys=keys)
            try:
                assert receiver.endpoint.startswith("tcp://127.0.0.1:")
                state = FrontendState(tokenizer=tok, limits=ServingLimits("m", 4096), link=link,
                                      health=lambda: {"pool": True, "scheduler": True})
                streamed, whole = asyncio.run(_ask(state))
                assert whole["choices"][0]["finish_reason"] == "length"
                assert whole["usage"]["completion_tokens"] == 24
                assert streamed == whole["choices"][0]["text"] and streamed
            finally:
                link.close()
                receiver.close()
        finally:
            stop.set()
            loop.join(5)
            inbox.close()
            client.close()
            ctx.term()


async def _ask(state: FrontendState) -> tuple[str, dict]:
    app = create_app(state)
    body = {"model": "m", "prompt": "Hello", "max_tokens": 24, "seed": 5, "ignore_eos": True}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            whole = (await http.post("/v1/completions", json=body, timeout=60)).json()
            texts = []
            async with http.stream("POST", "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        texts += [c["text"] for c in chunk["choices"]]
    return "".join(texts), whole


def test_detok_frontend_command_serves_over_curve_tcp(tmp_path):
    """`detok frontend` as a process of its own (as on another host): its receiver and scheduler
    link over CURVE tcp with the deployment's keys from `detok keygen`; without keys it refuses."""
    generate_keys(tmp_path / "keys")
    keys = CurveKeys.load(tmp_path / "keys")
    tok = load_tokenizer(GPT2)
    with DetokPool(GPT2, workers=1, spare=False, transport="tcp", keys=keys) as pool:
        ctx = zmq.Context()
        client = pool.client(context=ctx)
        stub = SchedulerStub(client, CorpusWorkload(tok, embedded_corpus_text()), tok.eos_token_ids,
                             StepPolicy(step_interval_s=0.002, max_batch=8))
        inbox = RequestInbox(ctx, "tcp://127.0.0.1:*", security=SocketSecurity(keys))
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, args=(stub, inbox, stop.is_set), daemon=True)
        loop.start()
        args = ["frontend", "--scheduler", inbox.endpoint, "--receiver", "tcp://127.0.0.1:*", "--tokenizer", GPT2,
                "--port", "0"]
        try:
            refused = subprocess.run([sys.executable, "-m", "detok.cli", *args], capture_output=True, text=True,
                                     timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            assert refused.returncode == 2 and "need CURVE keys" in refused.stderr
            server = LiveServer.command([sys.executable, "-m", "detok.cli", *args, "--keys", str(tmp_path / "keys")])
            try:
                body = {"model": "detok-stub", "prompt": "Hello", "max_tokens": 16, "seed": 2, "ignore_eos": True}
                whole = httpx.post(server.base_url + "/v1/completions", json=body, timeout=60).json()
                assert whole["usage"]["completion_tokens"] == 16 and whole["choices"][0]["text"]
                assert server.stop(signal.SIGTERM) == 0, server.output
            finally:
                server.kill_group()
        finally:
            stop.set()
            loop.join(5)
            inbox.close()
            client.close()
            ctx.term()
