"""What hostile-but-valid input costs a worker: stop-string memory and a batch of unknown rids.

    python bench/limits.py [--tokenizer SRC] [--only stop-memory,unknown-rids] [--json]
                           [--requests 40] [--stops 64] [--stop-chars 1024] [--rids 400000]

stop-memory   a real worker process (DetokPool, one worker, no spare); `requests` requests, each
              with `stops` stop strings of `stop-chars` random CJK chars (the API's limits), get 32
              CJK tokens each. Reported: the worker's RSS before, once every request has its first
              text (`rss_live_mb`), its peak (VmHWM), and after every request finished; the time
              from the registrations' send to every request's first text. Twice: each request with
              its own stop list (`distinct`), and all with the same list (`shared`).
unknown-rids  one `DetokBatch` of `rids` rids no worker ever registered (one token each), twice
              (a second batch of other rids, once the finished-rid memory is full): seconds for
              `WorkerCore.handle_batch` in this process, and, through a real worker process, from
              the send of the batch to the first delta of a small request sent right after it.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/limits.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import os
import random
import sys
import time
from typing import Any

from bench import _common
import numpy as np

import detok
from detok.wire.to_workers import DetokBatch, Registration

_CJK = (0x4E00, 0x9FFF)
_TIMEOUT_S = 600.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--only", default="stop-memory,unknown-rids", help="comma-separated measurements")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--stops", type=int, default=64)
    p.add_argument("--stop-chars", type=int, default=1024)
    p.add_argument("--rids", type=int, default=400_000)
    args = p.parse_args()
    source = args.tokenizer[0] if args.tokenizer else str(_common.FIXTURES / "hf" / "qwen2")
    tok = detok.load_tokenizer(source)
    only = set(args.only.split(","))
    if "stop-memory" in only:
        for shared in (False, True):
            _common.report(args.json, _stop_memory(tok, source, args, shared))
    if "unknown-rids" in only:
        _common.report(args.json, _unknown_rids_in_process(tok, args))
        _common.report(args.json, _unknown_rids_worker(tok, source, args))
    return 0




def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


# ---- stop strings ----------------------------------------------------------------------------------
def _stop_lists(args: argparse.Namespace, shared: bool) -> list[list[str]]:
    rng = random.Random(args.seed)

    def one() -> list[str]:
        return ["".join(chr(rng.randint(*_CJK)) for _ in range(args.stop_chars)) for _ in range(args.stops)]

    if shared:
        stops = one()
        return [stops] * args.requests
    return [one() for _ in range(args.requests)]


def _stop_memory(tok: Any, source: str, args: argparse.Namespace, shared: bool) -> dict[str, Any]:
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver

    text_ids = tok.encode(_common.MULTILINGUAL[:60] * 4)[:32]
    stop_lists = _stop_lists(args, shared)
    with DetokPool(source, workers=1, spare=False, idle_timeout_s=3600) as pool:
        rx = DeltaReceiver()
        client = pool.client()
        try:
            pid = pool.pids()[0]
            assert pid
            rss0 = _rss_mb(pid)
            rids = list(range(1, args.requests + 1))
            streams = {r: rx.open(r) for r in rids}
            t0 = time.monotonic()
            for rid, stops in zip(rids, stop_lists):
                client.add_request(Registration(rid, rx.endpoint, text_ids[:5], detok.DecodeParams(stop=stops)))
            for k, token in enumerate(text_ids):
                client.send_step(rids, [token] * len(rids), starts=[k] * len(rids))
            first: dict[int, float] = {}
            text: dict[int, str] = {r: "" for r in rids}
            bar = _common.progress(len(rids), "first text", args.no_progress)
            while len(first) < len(rids):
                if time.monotonic() - t0 > _TIMEOUT_S:
                    raise RuntimeError("requests got no text in time")
                client.flush()
                rx.poll_blocking(0.2)
                for rid, stream in streams.items():
                    delta = stream.take()
                    if delta is not None:
                        text[rid] += delta.text
                        if rid not in first and text[rid]:
                            first[rid] = time.monotonic() - t0
                            bar.update()
            bar.close()
            # every step in: wait until the worker has consumed all (its RSS then holds every request)
            time.sleep(0.5)
            rss_live, hwm = _rss_mb(pid), _rss_mb(pid, "VmHWM")
            for rid in rids:
                client.end(rid, "length")
            client.flush()
            done = 0
            deadline = time.monotonic() + _TIMEOUT_S
            while done < len(rids) and time.monotonic() < deadline:
                rx.poll_blocking(0.2)
                for rid, stream in streams.items():
                    delta = stream.take()
                    if delta is not None and delta.finish is not None:
                        done += 1
            time.sleep(1.5)  # the worker's idle sweep runs and its allocator settles
            rss_after = _rss_mb(pid)
        finally:
            client.close()
            rx.close()
    return {
        "bench": "limits", "metric": "stop_memory", "stop_lists": "shared" if shared else "distinct",
        "requests": args.requests, "stops": args.stops, "stop_chars": args.stop_chars,
        "rss_before_mb": round(rss0, 1), "rss_live_mb": round(rss_live, 1), "rss_peak_mb": round(hwm, 1),
        "rss_after_finish_mb": round(rss_after, 1),
        "mb_per_request": round((rss_live - rss0) / args.requests, 2),
        "first_text_all_s": round(max(first.values()), 3),
    }


# ---- unknown rids ----------------------------------------------------------------------------------
def _unknown_batch(tok: Any, n: int, first_rid: int, seq: int) -> DetokBatch:
    rids = np.arange(first_rid, first_rid + n, dtype="<u8")
    token = tok.encode("hello")[0]
    tokens = np.full(n, token, dtype="<u4")
    return DetokBatch(seq, time.time(), [], rids.tobytes(), np.zeros(n, "<u4").tobytes(), b"", tokens.tobytes(), [])


def _unknown_rids_in_process(tok: Any, args: argparse.Namespace) -> dict[str, Any]:
    from detok.worker.core import WorkerCore

    core = WorkerCore(tok, 0, idle_timeout_s=3600)
    seconds = []
    for i in range(2):
        batch = _unknown_batch(tok, args.rids, 10**9 + i * args.rids, i + 1)
        t0 = time.perf_counter()
        out = core.handle_batch(batch)
        seconds.append(time.perf_counter() - t0)
        assert out.notice is not None and len(out.notice.unknown_rids) == args.rids
        _common.log(f"in-process batch {i + 1}: {seconds[-1]:.3f} s")
    return {"bench": "limits", "metric": "unknown_rids_in_process", "rids": args.rids,
            "first_batch_s": round(seconds[0], 3), "second_batch_s": round(seconds[1], 3)}


def _unknown_rids_worker(tok: Any, source: str, args: argparse.Namespace) -> dict[str, Any]:
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver

    probe_ids = tok.encode(" probe text")
    seconds = []
    with DetokPool(source, workers=1, spare=False, idle_timeout_s=3600, hwm=100) as pool:
        rx = DeltaReceiver()
        client = pool.client()
        try:
            for i in range(2):
                first = 10**9 + i * args.rids
                t0 = time.monotonic()
                client.send_step(np.arange(first, first + args.rids, dtype=np.uint64),
                                 np.full(args.rids, probe_ids[0], dtype=np.uint32),
                                 starts=np.zeros(args.rids, dtype=np.uint32))
                probe = 1 + i
                stream = rx.open(probe)
                client.add_request(Registration(probe, rx.endpoint, [], detok.DecodeParams()))
                client.send_step([probe], [probe_ids[0]])
                while True:
                    if time.monotonic() - t0 > _TIMEOUT_S:
                        raise RuntimeError("the worker did not answer the probe in time")
                    client.flush()
                    client.poll()
                    rx.poll_blocking(0.1)
                    delta = stream.take()
                    if delta is not None and delta.text:
                        break
                seconds.append(time.monotonic() - t0)
                _common.log(f"worker process batch {i + 1}: probe answered after {seconds[-1]:.3f} s")
                client.end(probe)
                client.flush()
        finally:
            client.close()
            rx.close()
    return {"bench": "limits", "metric": "unknown_rids_worker_process", "rids": args.rids,
            "first_batch_s": round(seconds[0], 3), "second_batch_s": round(seconds[1], 3)}


if __name__ == "__main__":
    sys.exit(main())
