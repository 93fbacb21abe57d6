"""HTTP load benchmark of an OpenAI-compatible server (a running `detok serve`, or one it starts).

For each concurrency level, `concurrency` simulated users each send streamed requests back to
back (one keep-alive connection each) for `--duration` seconds; requests in flight at the end are
waited for (up to `--grace`). Reported per level: request throughput, output tokens/s, time to
first token and inter-token latency (between text-bearing chunks: content, reasoning or tool-call
fragments) p50 / p99, end-to-end p50, and,
when the server exports detok's /metrics, its own TTFT and inter-token means over the level (the
difference to the client's figures is HTTP and the load generator). One JSON line per level with
--json; --plot writes a PNG of throughput and latency against concurrency.

    python bench/load.py --spawn --concurrency 1,4,16,64,256 --duration 10 --plot load.png
    python bench/load.py --url http://127.0.0.1:8000/v1 --concurrency 8 --duration 5 --json

--spawn starts `detok serve --port 0` (more of its options with --serve-arg=...) and stops it at
the end. The stub scheduler's step interval sets one request's token rate (20 ms: 50 tokens/s), so
the ideal output rate is concurrency x 50 tokens/s; what matters is how close the stack stays to
it and what latency it adds. Requests set `ignore_eos` so every output has --max-tokens tokens.
The client (bench/_sse_client.py, an asyncio Protocol on uvloop) costs CPU per chunk too; --procs
spreads the users over several processes on machines with cores to spare. --logprobs N asks
every request for logprobs with N alternatives (chat: `logprobs: true, top_logprobs: N`). --tools
offers every chat request a tool (TOOLS in bench/load_requests.py); with the stub's `--workload echo`, a
`--tool-call-parser` and a `--prompt` that is a call in the parser's format, every reply calls it:

    python bench/load.py --spawn --endpoint chat --tools --concurrency 256 --serve-arg=--workload \
        --serve-arg=echo --serve-arg=--tool-call-parser --serve-arg=hermes \
        --prompt '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'

A request's body and what the client reads of each chunk are in `bench/load_requests.py`, the
samples and their summary in `bench/load_summary.py`, the spawned server and the plot in
`bench/spawned_server.py`.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/load.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection

import httpx
import msgspec
import uvloop

from bench._common import progress
from bench._sse_client import HttpError, SseConnection
from bench.load_requests import ChunkClock, LoadConfig, request_body
from bench.load_summary import _SERVER_HISTOGRAMS, PointResult, _Sample, _server_means, summarize
from bench.spawned_server import SpawnedServer, plot

async def _one_request(conn: SseConnection, cfg: LoadConfig, index: int) -> _Sample:
    path = "/chat/completions" if cfg.endpoint == "chat" else "/completions"
    body = msgspec.json.encode(request_body(cfg, index))
    sample = _Sample(ok=False)
    resent_before = conn.resent
    start = time.perf_counter()
    try:
        status, content = await conn.request(path, body, ChunkClock(start, sample))
    except HttpError as e:
        conn.close()
        sample.error = str(e)
        return sample
    finally:
        sample.resent = conn.resent > resent_before
    if status != 200:
        sample.error = f"HTTP {status}: {content[:200].decode(errors='replace')}"
        return sample
    if sample.error:
        return sample
    sample.e2e = time.perf_counter() - start
    sample.ok = True
    return sample


async def _scrape(api_url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of the server's latency histograms, {} if it has no detok /metrics."""
    base = api_url.removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(base + "/metrics")
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    values: dict[str, float] = {}
    for line in response.text.splitlines():
        name, _, value = line.partition(" ")
        if name.endswith(("_sum", "_count")):
            values[name] = float(value)
    return {
        field: (values[f"{metric}_sum"], values[f"{metric}_count"])
        for field, metric in _SERVER_HISTOGRAMS.items()
        if f"{metric}_sum" in values and f"{metric}_count" in values
    }


async def _send_until(cfg: LoadConfig, concurrency: int, first_index: int, stop_at: float,
                      samples: list[_Sample]) -> None:
    """`concurrency` users, each on its own keep-alive connection, sending back to back until
    wall-clock `stop_at` (shared by the client processes)."""
    counter = iter(range(first_index, 1 << 62))

    async def user() -> None:
        conn = SseConnection(cfg.url, cfg.api_key, cfg.grace_s + cfg.duration_s)
        try:
            while time.time() < stop_at:
                samples.append(await _one_request(conn, cfg, next(counter)))
        finally:
            conn.close()

    await asyncio.wait_for(asyncio.gather(*(user() for _ in range(concurrency))), cfg.duration_s + cfg.grace_s)


def _client_process(cfg: LoadConfig, concurrency: int, first_index: int, stop_at: float, conn: Connection) -> None:
    samples: list[_Sample] = []
    uvloop.run(_send_until(cfg, concurrency, first_index, stop_at, samples))
    conn.send_bytes(msgspec.json.encode(samples))  # JSON, not pickle, between processes too
    conn.close()


async def run_point(cfg: LoadConfig, concurrency: int, show_progress: bool = True, procs: int = 1) -> PointResult:
    """`concurrency` clients (spread over `procs` processes) sending back to back for `duration_s`;
    requests in flight at the end are finished and counted."""
    warm = SseConnection(cfg.url, cfg.api_key)
    await _one_request(warm, cfg, -1)  # warm-up (the server's first-request paths): not counted
    warm.close()
    before = await _scrape(cfg.url)
    start = time.time()
    stop_at = start + cfg.duration_s
    shares = [concurrency // procs + (i < concurrency % procs) for i in range(procs)]
    children = []
    mp = multiprocessing.get_context("spawn")
    for i, share in enumerate(shares[1:], 1):
        receive, send = mp.Pipe(duplex=False)
        proc = mp.Process(target=_client_process, args=(cfg, share, i << 40, stop_at, send), daemon=True)
        proc.start()
        send.close()
        children.append((proc, receive))
    samples: list[_Sample] = []
    bar = progress(int(cfg.duration_s), f"concurrency {concurrency}", disable=not show_progress)

    async def tick() -> None:
        for shown in range(1, int(cfg.duration_s) + 1):
            await asyncio.sleep(max(0.0, start + shown - time.time()))
            bar.update(1)
            bar.set_postfix_str(f"{len(samples)} done here")

    ticker = asyncio.ensure_future(tick())
    try:
        await _send_until(cfg, shares[0], 0, stop_at, samples)
    finally:
        ticker.cancel()
        bar.close()
    for proc, receive in children:
        if receive.poll(cfg.grace_s):
            samples += msgspec.json.decode(receive.recv_bytes(), type=list[_Sample])
        proc.join(5)
    elapsed = time.time() - start
    server = _server_means(before, await _scrape(cfg.url))
    return dataclasses.replace(summarize(concurrency, elapsed, samples), **server)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of the API, e.g. http://127.0.0.1:8000/v1")
    where.add_argument("--spawn", action="store_true", help="start `detok serve` for the run")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="an argument for the spawned `detok serve` (repeat: --serve-arg=--workers --serve-arg=2)")
    p.add_argument("--model", default="detok-stub")
    p.add_argument("--api-key", default=None)
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="comma-separated levels")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    p.add_argument("--grace", type=float, default=60.0, help="most seconds to wait for in-flight requests")
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request (EOS ignored)")
    p.add_argument("--procs", type=int, default=1,
                   help="client processes sharing the concurrency (one Python client saturates a core near "
                        "10k chunks/s; use more on a machine with cores to spare)")
    p.add_argument("--system-chars", type=int, default=0, metavar="N",
                   help="chat: a system message of N characters (the same in every request)")
    p.add_argument("--prompt", default=None, metavar="TEXT",
                   help="the user message of every request (with the stub's --workload echo, also its output)")
    p.add_argument("--tools", action="store_true",
                   help="chat: every request offers a get_weather tool (tool_choice auto): with the stub's --workload echo, "
                        "a --tool-call-parser and a --prompt in its format, replies that call it")
    p.add_argument("--logprobs", type=int, default=None, metavar="N",
                   help="every request asks for logprobs with N alternatives (chat: top_logprobs=N; completions 0-5)")
    p.add_argument("--json", action="store_true", help="one JSON line per level on stdout")
    p.add_argument("--plot", default=None, metavar="PNG", help="write a plot of the sweep")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    server = SpawnedServer(args.serve_arg) if args.spawn else None
    url = server.url if server is not None else args.url.rstrip("/")
    cfg = LoadConfig(url, args.model, args.api_key, args.endpoint, args.max_tokens, args.duration, args.grace,
                     logprobs=args.logprobs, system_chars=args.system_chars, prompt=args.prompt,
                     tools=args.tools)
    results: list[PointResult] = []
    try:
        for level in levels:
            result = uvloop.run(run_point(cfg, level, not args.no_progress, min(args.procs, level)))
            results.append(result)
            if args.json:
                print(json.dumps(dataclasses.asdict(result)), flush=True)
            else:
                print(result.line(), flush=True)
    finally:
        if server is not None:
            server.close()
    if args.plot and results:
        plot(results, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0 if all(r.errors == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
