"""Replay benchmark: what a worker's death costs when the pool replays its shard.

    python bench/replay.py [--tokenizer SRC] [--workers 2] [--concurrency 512] [--tokens 256]
                           [--step-ms 5] [--kills 10] [--kill-every-s 0.5] [--no-spare] [--json]

A paced scheduler (this process, through SchedulerClient) steps `concurrency` requests of `tokens`
ids each, one id per request per step, while a worker (alternating) is SIGKILLed every
`kill-every-s` seconds. A DeltaReceiver (this process) records every delta message. Figures:
  recovery_ms p50/p99     kill -> the first replayed delta of that shard received (frontend view)
  worker_recovery_ms      the workers' own figure (death seen -> replayed deltas sent), /metrics
  stall_extra_ms p50/p99  for each request of the killed shard: the gap in its text around the
                          kill, minus the median gap between deltas of requests no kill touched
  mismatches, errors      requests whose text differs from the oracle / that failed (both must be 0)
and, measured apart with tracemalloc on a SchedulerClient alone, the scheduler-side memory kept for
replay per live request and per token id.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/replay.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import os
import signal
import statistics
import sys
import time
import tracemalloc
from typing import Any

from bench import _common
import numpy as np

import detok
from detok.scheduler.client import SchedulerClient
from detok.wire.endpoints import IpcDir
from detok.metrics import render_metrics
from detok.pool.pool import DetokPool
from detok.wire.to_workers import Registration
from detok.receiver.receiver import DeltaReceiver


def main() -> int:
    args = _parse()
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    streams = _common.make_streams(tok, args.tokens, args.concurrency, args.seed, ("corpus", "multilingual"))
    oracle = _common.Oracle(tok)
    expected = [oracle.text(s) for s in streams]
    base = {"bench": "replay", "tokenizer": os.path.basename(os.path.dirname(source)) or source,
            "workers": args.workers, "concurrency": args.concurrency, "tokens": args.tokens,
            "spare": not args.no_spare, "step_ms": args.step_ms}
    _common.report(args.json, {**base, "metric": "recovery", **_run(source, streams, expected, args)})
    _common.report(args.json, {**base, "metric": "scheduler_memory", **_memory(streams)})
    return 0


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=512)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--step-ms", type=float, default=5.0, help="scheduler step interval")
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--kill-every-s", type=float, default=0.5)
    p.add_argument("--no-spare", action="store_true", help="replacements start cold (load the tokenizer)")
    return p.parse_args()




def _run(source: str, streams: list[Any], expected: list[str], args: argparse.Namespace) -> dict[str, Any]:
    received: list[tuple[float, Any]] = []
    n = len(streams)
    with DetokPool(source, workers=args.workers, spare=not args.no_spare) as pool:
        client = pool.client()
        rx = DeltaReceiver(on_batch=lambda b: received.append((time.time(), b)))
        for k, s in enumerate(streams):
            client.add_request(Registration(k, rx.endpoint, list(s.context), detok.DecodeParams()))
        kills: list[tuple[float, int]] = []
        bar = _common.progress(args.tokens, "steps", args.no_progress)
        ids = np.array([s.ids for s in streams], dtype=np.uint32)
        rids = np.arange(n, dtype=np.uint64)
        first_kill = 0.5
        t0 = time.monotonic()
        for step in range(args.tokens):
            ends = [(k, "length") for k in range(n)] if step == args.tokens - 1 else ()
            client.send_step(rids, ids[:, step], starts=np.full(n, step, dtype=np.uint32), ends=ends)
            client.poll()
            due = first_kill + len(kills) * args.kill_every_s
            if len(kills) < args.kills and time.monotonic() - t0 >= due:
                w = len(kills) % args.workers
                pid = pool.pids()[w]
                if pid:
                    kills.append((time.time(), w))
                    os.kill(pid, signal.SIGKILL)
            rx.poll_blocking(0)
            deadline = time.monotonic() + args.step_ms / 1000
            while time.monotonic() < deadline:
                rx.poll_blocking(max(0.0, deadline - time.monotonic()))
            bar.update()
        bar.close()
        finished = lambda: sum(len(b.finished) for _, b in received) >= n  # noqa: E731
        deadline = time.monotonic() + 120
        while not finished() and time.monotonic() < deadline:
            client.poll(0.01)
            rx.poll_blocking(0.01)
        pool.wait_ready(60)
        worker_recovery = _histogram_quantiles(render_metrics(pool.metrics_dir).decode(), "detok_worker_recovery_seconds")
        client.close()
        rx.close()
    return _figures(received, kills, expected, args.workers, worker_recovery)


def _figures(received: list[tuple[float, Any]], kills: list[tuple[float, int]], expected: list[str], workers: int,
             worker_recovery: dict[str, float]) -> dict[str, Any]:
    from detok.scheduler.client import shard_of

    text: dict[int, str] = {}
    finish: dict[int, Any] = {}
    arrivals: dict[int, list[float]] = {}
    replay_seen: dict[int, float] = {}  # kill index -> first replayed delta of that shard
    for t, batch in received:
        for rid, piece, offset in batch.rows():
            if not piece:
                continue
            have = text.get(rid, "")
            if offset < len(have) and offset == 0:  # a replayed row: the whole text again
                for i, (tk, w) in enumerate(kills):
                    if w == batch.worker and tk < t and i not in replay_seen:
                        replay_seen[i] = t
            if offset + len(piece) > len(have):
                text[rid] = have + piece[len(have) - offset :]
                arrivals.setdefault(rid, []).append(t)
        for done in batch.finished:
            finish.setdefault(done.rid, done.finish)
    mismatches = sum(text.get(k, "") != e for k, e in enumerate(expected))
    errors = sum(f.reason == "error" for f in finish.values())
    recovery = sorted((replay_seen[i] - kills[i][0]) * 1000 for i in replay_seen)
    # a request's stall: the gap in its text around a kill of its shard
    killed_gaps, normal_gaps = [], []
    for rid, times in arrivals.items():
        w = shard_of(rid, workers)
        gaps = np.diff(times)
        for a, b, g in zip(times, times[1:], gaps):
            if any(w == kw and a <= tk < b for tk, kw in kills):
                killed_gaps.append(g)
            else:
                normal_gaps.append(g)
    base_gap = statistics.median(normal_gaps) if normal_gaps else 0.0
    extra = sorted((g - base_gap) * 1000 for g in killed_gaps)
    return {
        "kills": len(kills),
        "replays_seen": len(replay_seen),
        "recovery_ms_p50": _q(recovery, 0.5),
        "recovery_ms_p99": _q(recovery, 0.99),
        "worker_recovery_ms_p50": worker_recovery.get("p50"),
        "worker_recovery_ms_p99": worker_recovery.get("p99"),
        "stall_extra_ms_p50": _q(extra, 0.5),
        "stall_extra_ms_p99": _q(extra, 0.99),
        "stalled_requests": len(extra),
        "normal_gap_ms": round(base_gap * 1000, 3),
        "mismatches": mismatches,
        "errors": errors,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _q(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of sorted values."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, int(np.ceil(q * len(values))) - 1))], 2)


def _histogram_quantiles(metrics: str, name: str) -> dict[str, float]:
    """p50/p99 (ms, bucket upper bounds) of a histogram summed over its label sets."""
    buckets: dict[float, float] = {}
    for line in metrics.splitlines():
        if line.startswith(name + "_bucket{"):
            le = float(line.split('le="')[1].split('"')[0])
            buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    if not buckets or not buckets[max(buckets)]:
        return {}
    total = buckets[max(buckets)]
    out = {}
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        out[label] = next(le for le in sorted(buckets) if buckets[le] >= q * total) * 1000
    return out


def _memory(streams: list[Any]) -> dict[str, Any]:
    """Bytes the scheduler client keeps per live request and per token id sent (tracemalloc; the
    zmq queues of the unconnected sockets live outside Python's heap and are not counted)."""
    ipc = IpcDir(prefix="detok-bench-mem-")
    try:
        n, steps = len(streams), 128
        rids = np.arange(n, dtype=np.uint64)
        ids = np.array([s.ids[:steps] for s in streams], dtype=np.uint32)
        regs = [Registration(k, "ipc:///tmp/frontend", list(s.context), detok.DecodeParams()) for k, s in enumerate(streams)]
        client = SchedulerClient([ipc.endpoint("w0"), ipc.endpoint("w1")], ipc.endpoint("notify"), hwm=1_000_000)
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for reg in regs:
            client.add_request(reg)
        client.flush()
        after_registration = tracemalloc.take_snapshot()
        for step in range(steps):
            client.send_step(rids, ids[:, step], starts=np.full(n, step, dtype=np.uint32))
        after_steps = tracemalloc.take_snapshot()
        tracemalloc.stop()
        per_request = sum(s.size_diff for s in after_registration.compare_to(before, "filename")) / n
        per_token = sum(s.size_diff for s in after_steps.compare_to(after_registration, "filename")) / (n * steps)
        journal = client.journal_bytes() / (n * steps)
        client.close()
    finally:
        ipc.remove()
    return {"bytes_per_live_request": round(per_request), "bytes_per_token": round(per_token, 1),
            "journal_bytes_per_token": round(journal, 1), "requests": n, "tokens_each": steps}


if __name__ == "__main__":
    sys.exit(main())
