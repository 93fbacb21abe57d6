"""bench/load.py against a scripted SSE server with known timing: the figures it reports are the
ones the server produced (TTFT, inter-token latency, tokens/s), errors are counted, and the CLI
writes JSON lines and a PNG plot. Only bounds a slow box cannot break are asserted: the server's
pauses are lower bounds of what the client measures, its pacing an upper bound of the requests."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

REPO = Path(__file__).resolve().parents[2]

from bench import load  # noqa: E402

pytestmark = pytest.mark.timeout(120)

FIRST_S = 0.040  # the scripted server's time to first token
GAP_S = 0.015  # and between tokens
TOKENS = 6
RUN_S = 0.5  # a point's duration: a few requests per client at the pacing above


_served = [0]


async def _metrics(_request: Request):
    # histograms as a detok frontend exports them: each request "took" FIRST_S to its first token
    n = _served[0]
    text = (
        f"detok_time_to_first_token_seconds_sum {n * FIRST_S}\ndetok_time_to_first_token_seconds_count {n}\n"
        f"detok_inter_token_latency_seconds_sum {n * GAP_S}\ndetok_inter_token_latency_seconds_count {n}\n"
    )
    return PlainTextResponse(text)


async def _completions(request: Request):
    _served[0] += 1
    body = await request.json()
    if body.get("max_tokens") == 13:
        return JSONResponse({"error": {"message": "unlucky", "type": "invalid_request_error"}}, status_code=400)

    async def events():
        await asyncio.sleep(FIRST_S)
        for i in range(TOKENS):
            if i:
                await asyncio.sleep(GAP_S)
            yield f'data: {{"choices": [{{"index": 0, "text": "t{i}", "finish_reason": null}}]}}\n\n'
        yield f'data: {{"choices": [], "usage": {{"completion_tokens": {TOKENS}}}}}\n\n'
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def scripted_server():
    app = Starlette(routes=[Route("/v1/completions", _completions, methods=["POST"]), Route("/metrics", _metrics)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, loop="asyncio", log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_point_reports_the_servers_timing(scripted_server):
    cfg = load.LoadConfig(scripted_server, max_tokens=64, duration_s=RUN_S, grace_s=10)
    result = asyncio.run(load.run_point(cfg, 4, show_progress=False))
    per_request = FIRST_S + (TOKENS - 1) * GAP_S
    assert result.errors == 0 and result.first_error == ""
    assert 1 <= result.requests <= 4 * (RUN_S / per_request + 1)  # the server's pacing bounds it
    assert result.ttft_p50_ms >= FIRST_S * 1000  # the server's pauses: lower bounds, never upper
    assert result.itl_p50_ms >= GAP_S * 1000 * 0.8
    assert result.output_tokens_per_s == pytest.approx(result.requests * TOKENS / result.duration_s, rel=1e-3)
    assert result.e2e_p50_ms >= per_request * 1000
    assert result.server_ttft_mean_ms == pytest.approx(FIRST_S * 1000)  # scraped from /metrics
    assert result.server_itl_mean_ms == pytest.approx(GAP_S * 1000)


def test_errors_are_counted(scripted_server):
    cfg = load.LoadConfig(scripted_server, max_tokens=13, duration_s=0.3, grace_s=5)
    result = asyncio.run(load.run_point(cfg, 2, show_progress=False))
    assert result.requests == 0 and result.errors > 0 and "HTTP 400" in result.first_error


def test_cli_json_lines_and_plot(scripted_server, tmp_path, capsys):
    png = tmp_path / "load.png"
    code = load.main(["--url", scripted_server, "--concurrency", "1,2", "--duration", "0.5", "--json",
                      "--no-progress", "--plot", str(png)])
    assert code == 0
    points = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["concurrency"] for p in points] == [1, 2]
    assert all(p["errors"] == 0 and p["requests"] > 0 and p["output_tokens_per_s"] > 0 for p in points)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_client_processes_share_the_load(scripted_server):
    cfg = load.LoadConfig(scripted_server, max_tokens=64, duration_s=1.0, grace_s=10)
    result = asyncio.run(load.run_point(cfg, 4, show_progress=False, procs=2))
    per_request = FIRST_S + (TOKENS - 1) * GAP_S
    assert result.errors == 0 and result.concurrency == 4
    assert 1 <= result.requests <= 4 * (1.0 / per_request + 1)
    assert result.ttft_p50_ms >= FIRST_S * 1000
