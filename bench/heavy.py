"""Streaming users while another client sends the heaviest legal bodies back to back
(docs/reliability.md, "Heavy requests").

    python -m bench.heavy [--users 8] [--duration-s 20] [--step-ms 20] [--max-tokens 100]
                          [--after-s 30] [--warmup-s 2] [--workers 1] [--json]

Starts `detok serve --workers W --no-spare --step-ms S` (the default tokenizer, --max-model-len
32768), lets the users stream for `warmup-s` seconds unmeasured, then runs, side by side in one run:
  quiet  N users stream chat completions back to back for `duration-s` seconds;
  heavy  the same, while a second client (its own process) sends the heavy bodies back to back:
         a 3.8 MB text prompt (~1M tokens), a chat with one 3.8 MB message, a 2 MB CJK prompt,
         800K token ids, and two 3.8 MB prompts at once;
  after  nobody sends for `after-s` seconds.
Reported per phase: the users' TTFT and ITL (gap between a stream's chunks) p50 / p99 / max,
/health answer times p50 / p99 / max (polled every 100 ms by a third process), the frontend's RSS
at the start, peak and end; for the heavy client, its answers (status counts, seconds p50 / max);
for `after`, the frontend's RSS 5 s and `after-s` s after the burst, and the RSS over time (1 s
samples). The goal: heavy ITL p99 within 10% of quiet, every gap and /health answer
under 100 ms, the RSS back within 50 MB of its steady value.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

import msgspec
import numpy as np

from bench import _common
from bench._sse_client import HttpError, SseConnection
from bench.spawned_server import SpawnedServer

MODEL = "detok-stub"
_MB = 1_000_000


# ---- the heavy bodies (tests/helpers/heavy_bodies.py holds the same) ---------------------------------
def _english(size: int) -> str:
    base = "The quick brown fox jumps over the lazy dog, and then it naps in the sun. "
    return (base * (size // len(base) + 1))[:size]


def _cjk(size_bytes: int) -> str:
    base = "北京欢迎你東京桜の花が咲いています今日は良い天気ですね中文测试文本"
    chars = size_bytes // 3
    return (base * (chars // len(base) + 1))[:chars]


def heavy_bodies() -> list[tuple[str, str, bytes]]:
    """(name, path, body) of each heavy request, in the order the heavy client sends them."""
    big = _english(int(3.8 * _MB))
    text = json.dumps({"model": MODEL, "prompt": big, "max_tokens": 8}).encode()
    return [
        ("text_3.8MB", "/v1/completions", text),
        ("chat_3.8MB", "/v1/chat/completions",
         json.dumps({"model": MODEL, "messages": [{"role": "user", "content": big}], "max_tokens": 8}).encode()),
        ("cjk_2MB", "/v1/completions",
         json.dumps({"model": MODEL, "prompt": _cjk(2 * _MB), "max_tokens": 8}, ensure_ascii=False).encode()),
        ("ids_800K", "/v1/completions",
         json.dumps({"model": MODEL, "prompt": [i % 50_000 for i in range(800_000)], "max_tokens": 8}).encode()),
        ("two_text_3.8MB", "/v1/completions", text),  # sent twice at once
    ]


def _post(url: str, path: str, body: bytes) -> tuple[int, float, str]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    t0 = time.perf_counter()
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
        seconds = time.perf_counter() - t0
        code = ""
        if resp.status != 200:
            try:
                code = json.loads(payload)["error"].get("code") or json.loads(payload)["error"]["type"]
            except (ValueError, KeyError, TypeError):
                code = "not OpenAI error JSON"
        return resp.status, seconds, code
    finally:
        conn.close()


def _heavy_client(url: str, stop: Any, out: Connection) -> None:
    """Sends the heavy bodies back to back until told to stop; sends back (name, status, s, code)."""
    bodies = heavy_bodies()
    answers: list[tuple[str, int, float, str]] = []
    out.send("ready")
    while not stop.is_set():
        for name, path, body in bodies:
            if stop.is_set():
                break
            if name.startswith("two_"):
                pair: list[tuple[int, float, str]] = []
                threads = [threading.Thread(target=lambda: pair.append(_post(url, path, body))) for _ in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                answers += [(name, *a) for a in pair]
            else:
                answers.append((name, *_post(url, path, body)))
    out.send(answers)


# ---- /health and RSS, from a process of their own ---------------------------------------------------
def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _probe(url: str, pid: int, stop: Any, out: Connection) -> None:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    health: list[float] = []
    rss: list[tuple[float, float]] = []
    start = time.monotonic()
    out.send("ready")
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/health")
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            continue
        health.append(time.perf_counter() - t0)
        rss.append((time.monotonic() - start, _rss_mb(pid)))
        time.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))
    conn.close()
    out.send((health, rss))


class _Helper:
    """A function in a spawned process of its own, started and waited for its 'ready'."""

    def __init__(self, target: Any, *args: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=target, args=(*args, self.stop, send), daemon=True)
        self.proc.start()
        if self._recv.recv() != "ready":
            raise RuntimeError("helper process did not start")

    def result(self) -> Any:
        self.stop.set()
        value = self._recv.recv()
        self.proc.join(30)
        return value


# ---- the users -----------------------------------------------------------------------------------------
async def _user(url: str, body: bytes, stop_at: float, ttfts: list[float], itls: list[float], errors: list[str]) -> None:
    conn = SseConnection(url)
    try:
        while time.monotonic() < stop_at:
            last = [time.perf_counter(), 0.0]  # the request's start, then its last chunk's time

            def on_event(payload: bytes, last: list[float] = last) -> None:
                if payload == b"[DONE]":
                    return
                now = time.perf_counter()
                if last[1]:
                    itls.append(now - last[1])
                else:
                    ttfts.append(now - last[0])
                last[1] = now

            try:
                status, _ = await conn.request("/chat/completions", body, on_event)
                if status != 200:
                    errors.append(f"HTTP {status}")
            except HttpError as e:
                errors.append(str(e))
                conn.close()
    finally:
        conn.close()


async def _users(url: str, users: int, seconds: float, max_tokens: int) -> tuple[list[float], list[float], list[str]]:
    body = msgspec.json.encode({"model": MODEL, "messages": [{"role": "user", "content": "tell me a story"}],
                                "max_tokens": max_tokens, "ignore_eos": True, "stream": True})
    ttfts: list[float] = []
    itls: list[float] = []
    errors: list[str] = []
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_user(url, body, stop_at, ttfts, itls, errors) for _ in range(users)))
    return ttfts, itls, errors


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1000, q)), 1) if values else float("nan")


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    return {f"{prefix}_p50_ms": _ms(values, 50), f"{prefix}_p99_ms": _ms(values, 99), f"{prefix}_max_ms": _ms(values, 100)}


def _timeline(rss: list[tuple[float, float]]) -> list[float]:
    """The RSS samples one per second (the first sample of each second)."""
    out: dict[int, float] = {}
    for t, r in rss:
        out.setdefault(int(t), round(r, 1))
    return list(out.values())


def _phase(args: argparse.Namespace, server: SpawnedServer, name: str, heavy: bool) -> dict[str, Any]:
    _common.log(f"phase {name}: {args.users} users for {args.duration_s:g} s{' + the heavy client' if heavy else ''}")
    probe = _Helper(_probe, server.url.removesuffix("/v1"), server.proc.pid)
    client = _Helper(_heavy_client, server.url.removesuffix("/v1")) if heavy else None
    ttfts, itls, errors = asyncio.run(_users(server.url, args.users, args.duration_s, args.max_tokens))
    answers = client.result() if client is not None else []
    health, rss = probe.result()
    record: dict[str, Any] = {"bench": "heavy", "phase": name, "users": args.users, "requests": len(ttfts),
                              **_stats("ttft", ttfts), **_stats("itl", itls), **_stats("health", health),
                              "rss_start_mb": round(rss[0][1], 1), "rss_peak_mb": round(max(r for _, r in rss), 1),
                              "rss_end_mb": round(rss[-1][1], 1), "rss_timeline_1s_mb": _timeline(rss),
                              "user_errors": len(errors)}
    if errors:
        record["first_user_error"] = errors[0]
    if heavy:
        statuses: dict[str, int] = {}
        for _, status, _, code in answers:
            key = f"{status} {code}".strip()
            statuses[key] = statuses.get(key, 0) + 1
        record.update(heavy_requests=len(answers), heavy_answers=statuses,
                      **_stats("heavy_answer", [a[2] for a in answers]))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--after-s", type=float, default=30.0)
    p.add_argument("--warmup-s", type=float, default=2.0, help="users stream this long, unmeasured, first")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON line per phase on stdout")
    args = p.parse_args(argv)
    server = SpawnedServer(["--workers", str(args.workers), "--no-spare", "--step-ms", f"{args.step_ms:g}"])
    try:
        asyncio.run(_users(server.url, args.users, args.warmup_s, args.max_tokens))  # warm up
        quiet = _phase(args, server, "quiet", heavy=False)
        _common.report(args.json, quiet)
        heavy = _phase(args, server, "heavy", heavy=True)
        heavy["itl_p99_vs_quiet"] = round(heavy["itl_p99_ms"] / quiet["itl_p99_ms"], 3)
        _common.report(args.json, heavy)
        _common.log(f"phase after: nobody sends for {args.after_s:g} s")
        probe = _Helper(_probe, server.url.removesuffix("/v1"), server.proc.pid)
        time.sleep(args.after_s)
        _, rss = probe.result()
        at5 = next((r for t, r in rss if t >= 5.0), rss[-1][1])
        _common.report(args.json, {"bench": "heavy", "phase": "after", "rss_steady_mb": quiet["rss_start_mb"],
                                   "rss_peak_mb": heavy["rss_peak_mb"], "rss_after_5s_mb": round(at5, 1),
                                   f"rss_after_{args.after_s:g}s_mb": round(rss[-1][1], 1),
                                   "rss_timeline_1s_mb": _timeline(rss)})
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
