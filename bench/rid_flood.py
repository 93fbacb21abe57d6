"""A worker's memory after floods of unknown rids: RSS before, at peak, and after.

    python -m bench.rid_flood [--tokenizer SRC] [--floods 150000,400000,1250000] [--after-s 30] [--json]

A real worker process (DetokPool, one worker, no spare) gets one `DetokBatch` of N rids that no
one registered (one token each; 1.25M rids is a 20 MB message) per flood, the scheduler client
draining the stop notices naming them. Reported per flood: the worker's RSS before, its peak
(sampled every 50 ms while it works, and VmHWM), and its RSS 5 s (or `--after-s` s, if sooner)
and `--after-s` s after the flood was answered (a small request sent after the flood gets its
text); then the same request is served again, to show the worker still serves.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import numpy as np

import detok
from bench import _common
from detok.wire.to_workers import Registration

_TIMEOUT_S = 600.0


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


class _Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.stop, self.peak = pid, threading.Event(), 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _rss_mb(self.pid))
            time.sleep(0.05)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--floods", default="150000,400000,1250000", help="rids per flood, comma-separated")
    p.add_argument("--after-s", type=float, default=30.0, help="when the last RSS is read after a flood")
    args = p.parse_args()
    source = args.tokenizer[0] if args.tokenizer else str(_common.FIXTURES / "hf" / "qwen2")
    tok = detok.load_tokenizer(source)
    probe_ids = tok.encode(" probe text")
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver

    with DetokPool(source, workers=1, spare=False, idle_timeout_s=3600, hwm=100) as pool:
        rx = DeltaReceiver()
        client = pool.client()
        pid = pool.pids()[0]
        assert pid
        probe = [0]

        def serve_probe() -> float:
            probe[0] += 1
            t0 = time.monotonic()
            stream = rx.open(probe[0])
            client.add_request(Registration(probe[0], rx.endpoint, [], detok.DecodeParams()))
            client.send_step([probe[0]], [probe_ids[0]])
            while True:
                if time.monotonic() - t0 > _TIMEOUT_S:
                    raise RuntimeError("the worker did not answer in time")
                client.flush()
                client.poll()
                rx.poll_blocking(0.05)
                delta = stream.take()
                if delta is not None and delta.text:
                    client.end(probe[0])
                    client.flush()
                    return time.monotonic() - t0

        def settle(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                client.poll()
                rx.poll_blocking(0.1)

        try:
            serve_probe()
            settle(2.0)
            steady = _rss_mb(pid)
            first = 10**9
            for n in (int(x) for x in args.floods.split(",")):
                before = _rss_mb(pid)
                sampler = _Sampler(pid)
                sampler.start()
                t0 = time.monotonic()
                client.send_step(np.arange(first, first + n, dtype=np.uint64), np.full(n, probe_ids[0], dtype=np.uint32),
                                 starts=np.zeros(n, dtype=np.uint32))
                first += n
                answered = serve_probe() + 0.0
                took = time.monotonic() - t0
                early_s = min(5.0, args.after_s)
                settle(early_s)
                early = _rss_mb(pid)
                settle(args.after_s - early_s)
                sampler.stop.set()
                sampler.join()
                after = _rss_mb(pid)
                _common.report(args.json, {
                    "bench": "rid_flood", "rids": n, "message_mb": round(n * 16 / 1e6, 1),
                    "rss_steady_mb": round(steady, 1), "rss_before_mb": round(before, 1),
                    "rss_peak_mb": round(max(sampler.peak, _rss_mb(pid)), 1), "vm_hwm_mb": round(_rss_mb(pid, "VmHWM"), 1),
                    f"rss_after_{early_s:g}s_mb": round(early, 1), f"rss_after_{args.after_s:g}s_mb": round(after, 1),
                    "flood_answered_s": round(took, 3), "probe_s": round(answered, 3),
                })
            serve_probe()
        finally:
            client.close()
            rx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
