"""Pool benchmark: scheduler -> detokenizer workers -> frontend receiver, end to end, with real
processes and sockets; the same workload through detok's pool and through the baseline pipelines.

    python bench/pool.py [--tokenizer SRC] [--workers 1] [--concurrency 1024] [--tokens 256]
                         [--rounds 10] [--step-interval-ms MS] [--pipelines detok,sglang,hf]
                         [--logprobs K] [--keys DIR] [--json]

Pipeline `detok-tcp` (not in the default set) is detok's over tcp on 127.0.0.1 with CURVE (the keys
in --keys DIR, else a fresh keypair): `--pipelines detok,detok-tcp` measures CURVE-on-tcp against
ipc in the same run.

Processes (the machine's cores are shared by all three, as in a real deployment):
  scheduler  (spawned) runs `rounds x concurrency` requests of `tokens` output ids, one token per
             request per step, about `concurrency` at once (continuous batching, see
             bench/pool_drivers.py): detok through SchedulerClient, baselines as pickled batches
  workers    detok: DetokPool(workers=N); baselines: one process from bench/baselines_pipeline.py
             (sglang: SGLang's DetokenizerManager batch decode; hf: tokenizers' DecodeStream per rid)
  receiver   this process: stores every delta message with its arrival time; the texts are
             checked against the oracle afterwards, off the clock (for every pipeline alike)

Figures per run (one JSON line each with --json):
  tokens_per_s      all tokens / (last delta received - scheduler start)
  latency_p50_ms, latency_p99_ms   scheduler send -> delta message received, over messages
  mismatches        requests whose concatenated text differs from the oracle (docs/tokenizers.md)
  *_cpu_ns_per_token   CPU time of each stage per token (workers summed), from /proc

Without --step-interval-ms, each pipeline runs twice: as fast as its queues take it (max
throughput), then paced at a quarter of that throughput (the latency figure). With --logprobs K,
detok runs a second time with every request asking for the sampled logprob and K alternatives
per token (pipeline `detok+logprobsK`: the workers make K+1 token strings per token), so worker
CPU per token with and without logprobs come from the same run; `logprob_entries_missing` counts
tokens whose entry did not arrive. A `shard_balance`
line gives max/mean requests per worker over 8 workers for 10K rids.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/pool.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import _common
import numpy as np
import zmq
from bench.pool_drivers import LogprobTable, Workload, run_baseline_scheduler, run_detok_scheduler

import detok
from detok.scheduler.client import shard_array
from detok.wire.endpoints import IpcDir

PIPELINES = ("detok", "sglang", "hf")
EXTRA_PIPELINES = ("detok-tcp",)  # detok over tcp with CURVE
_TICKS = os.sysconf("SC_CLK_TCK")
_RECEIVE_TIMEOUT_S = 600.0


def main() -> int:
    args = _parse()
    if args.profile:
        from detok.worker.serving_loop import PROFILE_ENV

        os.makedirs(args.profile, exist_ok=True)
        os.environ[PROFILE_ENV] = os.path.abspath(args.profile)  # inherited by the spawned workers
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    kinds = tuple(args.kinds.split(","))
    streams = _common.make_streams(tok, args.tokens, args.concurrency, args.seed, kinds)
    oracle = _common.Oracle(tok)
    expected = [oracle.text(s) for s in streams]
    outputs = np.ascontiguousarray(np.array([s.ids for s in streams], dtype=np.uint32).T)
    workload = Workload([list(s.context) for s in streams], outputs, args.rounds, args.arrival == "staggered")
    label = Path(source).parent.name if Path(source).name == "tokenizer.json" else Path(source).name
    base = {"bench": "pool", "tokenizer": label, "workers": args.workers, "concurrency": args.concurrency,
            "tokens": args.tokens, "rounds": args.rounds, "arrival": args.arrival}
    _common.report(args.json, {**base, "metric": "shard_balance", **_shard_balance()})
    variants = []
    for pipeline in args.pipelines.split(","):
        variants.append((pipeline, None))
        if pipeline == "detok" and args.logprobs is not None:
            variants.append((pipeline, LogprobTable.make(outputs, args.logprobs, tok.vocab_size, args.seed)))
    for pipeline, logprobs in variants:
        name = pipeline if logprobs is None else f"{pipeline}+logprobs{logprobs.k}"
        runs = [args.step_interval_ms] if args.step_interval_ms is not None else [0.0, None]
        max_tps = None
        for interval_ms in runs:
            if interval_ms is None:  # a quarter of the measured maximum
                interval_ms = args.concurrency / (max_tps / 4) * 1000
            result = _run(pipeline, source, workload, expected, interval_ms / 1000, args, logprobs)
            max_tps = max_tps or result["tokens_per_s"]
            mode = "max" if interval_ms == 0 else "paced"
            _common.report(args.json, {**base, "pipeline": name, "mode": mode, "step_interval_ms": round(interval_ms, 3), **result})
    return 0


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--workers", type=int, default=1, help="detok worker processes")
    p.add_argument("--concurrency", type=int, default=1024, help="requests generating at once")
    p.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    p.add_argument("--rounds", type=int, default=10, help="requests in all = rounds x concurrency")
    p.add_argument("--arrival", choices=["staggered", "waves"], default="staggered",
                   help="staggered: steady-state continuous batching (a few requests start and end every "
                        "step); waves: `concurrency` requests start together, wave after wave")
    p.add_argument("--step-interval-ms", type=float, default=None,
                   help="pace steps (default: max throughput, then a quarter of it)")
    p.add_argument("--pipelines", default=",".join(PIPELINES),
                   help=f"comma-separated subset of {PIPELINES + EXTRA_PIPELINES}")
    p.add_argument("--keys", metavar="DIR", default=None,
                   help="CURVE keys for detok-tcp (detok keygen DIR; default: a fresh keypair)")
    p.add_argument("--kinds", default="corpus,multilingual", help="token stream kinds (bench/_common.py)")
    p.add_argument("--hwm", type=int, default=64, help="scheduler-side queue bound, in messages")
    p.add_argument("--logprobs", type=int, default=None, metavar="K",
                   help="also run detok with every request asking for logprobs with K alternatives (0-20)")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="run detok's workers under cProfile, stats in DIR (slows them down)")
    return p.parse_args()




# ---- one run -----------------------------------------------------------------------------------------
def _run(pipeline: str, source: str, workload: Workload, expected: list[str], interval_s: float,
         args: argparse.Namespace, logprobs: LogprobTable | None = None) -> dict[str, Any]:
    if pipeline in ("detok", "detok-tcp"):
        return _run_detok(source, workload, expected, interval_s, args, logprobs, tcp=pipeline == "detok-tcp")
    if pipeline in ("sglang", "hf"):
        return _run_baseline(pipeline, source, workload, expected, interval_s, args)
    raise SystemExit(f"unknown pipeline {pipeline!r}; choose from {PIPELINES + EXTRA_PIPELINES}")


def _run_detok(source: str, workload: Workload, expected: list[str], interval_s: float, args: argparse.Namespace,
               logprobs: LogprobTable | None, tcp: bool = False) -> dict[str, Any]:
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver
    from detok.wire.security import CurveKeys

    keys = (CurveKeys.load(args.keys) if args.keys else CurveKeys.generate()) if tcp else None
    transport = {"transport": "tcp", "keys": keys} if tcp else {}

    received: list[tuple[float, Any]] = []
    finished = [0]

    def on_batch(batch: Any) -> None:
        received.append((time.time(), batch))
        finished[0] += len(batch.finished)

    mp = multiprocessing.get_context("spawn")
    with DetokPool(source, workers=args.workers, spare=False, idle_timeout_s=3600, **transport) as pool:  # type: ignore[arg-type]
        rx = DeltaReceiver("tcp://127.0.0.1:*" if tcp else None, on_batch=on_batch, keys=keys)
        parent, child = mp.Pipe()
        sched = mp.Process(target=run_detok_scheduler, args=(child, workload, pool.endpoints, pool.notify_endpoint,
                                                             rx.endpoint, interval_s, args.hwm, logprobs, keys))
        sched.start()
        _, sched_pid = parent.recv()
        workers = [p for p in pool.pids() if p]
        total = workload.requests
        stats = _measure(parent, workers, sched_pid, lambda: finished[0] >= total, lambda: rx.poll_blocking(0.2))
        parent.send("stop")
        sched.join(30)
        rx.close()
    texts: dict[int, list[str]] = {}
    lengths: dict[int, int] = {}
    gaps = 0
    for _, batch in received:
        for rid, text, offset in batch.rows():
            if text:  # empty rows carry nothing
                gaps += offset != lengths.get(rid, 0)
                lengths[rid] = offset + len(text)
                texts.setdefault(rid, []).append(text)
    n = workload.concurrency
    mismatches = sum("".join(texts.get(rid, ())) != expected[rid % n] for rid in range(total)) + gaps
    latencies = [t - b.sent_at for t, b in received if b.rids]
    figures = _figures(stats, latencies, received[-1][0], mismatches, workload, args)
    if logprobs is not None:
        entries = sum(int(np.frombuffer(b.logprobs.counts, "<u4").sum()) for _, b in received if b.logprobs is not None)
        figures["logprob_entries_missing"] = workload.requests * workload.tokens - entries
    return figures


def _run_baseline(pipeline: str, source: str, workload: Workload, expected: list[str], interval_s: float, args: argparse.Namespace) -> dict[str, Any]:
    from bench import baselines

    target = baselines.run_sglang_style_worker if pipeline == "sglang" else baselines.run_hf_decodestream_worker
    mp = multiprocessing.get_context("spawn")
    ipc = IpcDir(prefix="detok-bench-")
    in_ep, out_ep = ipc.endpoint("in"), ipc.endpoint("out")
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.bind(out_ep)
    worker = mp.Process(target=target, args=((in_ep, out_ep), source, True, False), daemon=True)
    worker.start()
    try:
        assert pull.poll(120_000), "baseline worker did not start"
        ready = pull.recv_pyobj()
        assert ready[0] == "ready", ready
        parent, child = mp.Pipe()
        sched = mp.Process(target=run_baseline_scheduler, args=(child, workload, in_ep, interval_s, args.hwm))
        sched.start()
        _, sched_pid = parent.recv()
        received: list[tuple[float, Any]] = []
        finished = [0]

        def pump() -> None:
            if pull.poll(200):
                while True:
                    try:
                        msg = pull.recv_pyobj(zmq.NOBLOCK)
                    except zmq.Again:
                        return
                    received.append((time.time(), msg))
                    finished[0] += sum(msg[3])

        stats = _measure(parent, [worker.pid], sched_pid, lambda: finished[0] >= workload.requests, pump)
        parent.send("stop")
        sched.join(30)
        worker.join(30)
    finally:
        if worker.is_alive():
            worker.kill()
        pull.close(0)
        ctx.term()
        ipc.remove()
    texts: dict[str, list[str]] = {}
    for _, (_, rids, out, _) in received:
        for rid, text in zip(rids, out):
            texts.setdefault(rid, []).append(text)
    n = workload.concurrency
    mismatches = sum("".join(texts.get(f"r{k}", ())) != expected[k % n] for k in range(workload.requests))
    latencies = [t - msg[0] for t, msg in received]
    return _figures(stats, latencies, received[-1][0], mismatches, workload, args)


def _measure(parent: Any, worker_pids: list[int], sched_pid: int, done: Any, pump: Any) -> dict[str, Any]:
    """Start the scheduler and receive until `done()`; CPU seconds of every stage."""
    workers0 = sum(_proc_cpu(p) for p in worker_pids)
    me0 = _self_cpu()
    # The receiver keeps every message for the check after the run (a frontend would not): without
    # this, collections walking that growing heap would pause it and show up as pipeline latency.
    gc.disable()
    t_go = time.time()
    parent.send("go")
    deadline = time.monotonic() + _RECEIVE_TIMEOUT_S
    try:
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("benchmark timed out waiting for the deltas")
            pump()
    finally:
        gc.enable()
    receiver_cpu = _self_cpu() - me0
    worker_cpu = sum(_proc_cpu(p) for p in worker_pids) - workers0
    _, sched_cpu, full_waits = parent.recv()
    return {"t_go": t_go, "receiver_cpu": receiver_cpu, "worker_cpu": worker_cpu, "scheduler_cpu": sched_cpu, "full_waits": full_waits}


def _figures(stats: dict[str, Any], latencies: list[float], t_last: float, mismatches: int, workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    tokens = workload.requests * workload.tokens
    ms = sorted(x * 1000 for x in latencies)
    return {
        "tokens_per_s": round(tokens / (t_last - stats["t_go"])),
        "latency_p50_ms": round(statistics.median(ms), 3),
        "latency_p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
        "mismatches": mismatches,
        "worker_cpu_ns_per_token": round(stats["worker_cpu"] / tokens * 1e9),
        "scheduler_cpu_ns_per_token": round(stats["scheduler_cpu"] / tokens * 1e9),
        "receiver_cpu_ns_per_token": round(stats["receiver_cpu"] / tokens * 1e9),
        "messages": len(latencies),
        "scheduler_full_waits": stats["full_waits"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _shard_balance(workers: int = 8, rids: int = 10_000) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    kinds = {
        "sequential": np.arange(rids, dtype=np.uint64),
        "per_frontend": np.array([(f << 48) | c for f in range(4) for c in range(rids // 4)], dtype=np.uint64),
        "random": rng.integers(0, 2**63, size=rids, dtype=np.uint64),
    }
    for name, values in kinds.items():
        load = Counter(shard_array(values, workers).tolist())
        out[f"max_over_mean_{name}"] = round(max(load.values()) / (rids / workers), 4)
    return out


if __name__ == "__main__":
    sys.exit(main())
