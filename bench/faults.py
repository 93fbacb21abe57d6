"""Faults stay local: requests lost on the healthy workers when one worker is killed (or stopped)
mid-stream, at the pool level (SchedulerClient -> DetokPool -> DeltaReceiver, real processes).

    python bench/faults.py [--tokenizer SRC] [--workers 2] [--requests 400] [--tokens 120]
                           [--signal KILL|STOP] [--spare] [--stall-timeout S] [--json]

Every request gets its tokens one per step (a step every --step-ms); at a third of the way worker
0's process gets the signal. Without --spare (the default) its replacement loads the tokenizer
cold. Reported: requests per worker, `lost_on_healthy` (requests of the other workers that did not
finish with their exact text and reason "length": must be 0), `lost_on_faulty` (the same for the
faulty worker's requests, which are replayed to its replacement: 0 as well), how they
finished (reason and the message naming the cause), seconds from the fault until every request had
finished and until the slot served again.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/faults.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import os
import random
import signal
import sys
import time
from typing import Any

from bench import _common

import detok
from detok.wire.to_workers import Registration
from detok.stream import DecodeStream

_TIMEOUT_S = 300.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--tokens", type=int, default=120)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--signal", choices=["KILL", "STOP"], default="KILL")
    p.add_argument("--spare", action="store_true", help="keep a loaded spare (default: none, cold restart)")
    p.add_argument("--stall-timeout", type=float, default=2.0, help="for --signal STOP")
    args = p.parse_args()
    source = args.tokenizer[0] if args.tokenizer else str(_common.FIXTURES / "hf" / "qwen2")
    record = run(source, args)
    if args.json:
        _common.emit(record)
    else:
        _common.log(" ".join(f"{k}={v}" for k, v in record.items()))
    return 0


def run(source: str, args: argparse.Namespace) -> dict[str, Any]:
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver

    tok = detok.load_tokenizer(source)
    ids = tok.encode(_common.CORPUS.read_text(encoding="utf-8")[:400_000] + _common.MULTILINGUAL * 20)
    rng = random.Random(args.seed)
    starts = [rng.randrange(0, len(ids) - args.tokens - 5) for _ in range(args.requests)]
    requests = {rid: (ids[s : s + 5], ids[s + 5 : s + 5 + args.tokens]) for rid, s in enumerate(starts, 1)}
    with DetokPool(source, workers=args.workers, spare=args.spare, idle_timeout_s=3600,
                   stall_timeout_s=args.stall_timeout) as pool:
        client, rx = pool.client(), DeltaReceiver()
        try:
            streams = {rid: rx.open(rid) for rid in requests}
            text = {rid: "" for rid in requests}
            finish: dict[int, Any] = {}
            for rid, (ctx, _) in requests.items():
                client.add_request(Registration(rid, rx.endpoint, ctx, detok.DecodeParams()))
            victim, fault_at, back_at = pool.pids()[0], 0.0, 0.0
            bar = _common.progress(args.tokens, "steps", args.no_progress)

            def pump(timeout: float) -> None:
                rx.poll_blocking(timeout)
                for rid, stream in streams.items():
                    delta = stream.take()
                    if delta is not None:
                        text[rid] += delta.text
                        if delta.finish is not None:
                            finish[rid] = delta.finish

            live = set(requests)
            for k in range(args.tokens):
                if k == args.tokens // 3:
                    os.kill(victim, getattr(signal, "SIG" + args.signal))  # type: ignore[arg-type]
                    fault_at = time.monotonic()
                live -= {s.rid for s in client.poll()}
                rids = sorted(live)
                ends = [(rid, "length") for rid in rids] if k == args.tokens - 1 else []
                client.send_step(rids, [requests[rid][1][k] for rid in rids], starts=[k] * len(rids), ends=ends)
                pump(args.step_ms / 1000)
                bar.update()
            bar.close()
            deadline = time.monotonic() + _TIMEOUT_S
            all_done_at = 0.0
            while time.monotonic() < deadline and not (all_done_at and back_at):
                client.flush()
                client.poll()
                pump(0.02)
                if not all_done_at and len(finish) == len(requests):
                    all_done_at = time.monotonic()
                if not back_at and pool.slots()[0].serving and pool.pids()[0] != victim:
                    back_at = time.monotonic()
        finally:
            client.close()
            rx.close()
    on_victim = {rid for rid in requests if client.worker_of(rid) == 0}
    lost = lost_on_faulty = 0
    for rid, (ctx, gen) in requests.items():
        want = _reference(tok, ctx, gen)
        wrong = not (rid in finish and finish[rid].reason == "length" and text[rid] == want)
        if rid in on_victim:
            lost_on_faulty += wrong
        else:
            lost += wrong
    victim_reasons: dict[str, int] = {}
    for rid in on_victim:
        reason = finish[rid].reason if rid in finish else "never finished"
        victim_reasons[reason] = victim_reasons.get(reason, 0) + 1
    message = next((finish[r].message for r in on_victim if r in finish and finish[r].message), None)
    return {
        "bench": "faults", "signal": args.signal, "spare": args.spare, "workers": args.workers,
        "requests": args.requests, "on_faulty_worker": len(on_victim), "on_healthy_workers": args.requests - len(on_victim),
        "lost_on_healthy": lost, "lost_on_faulty": lost_on_faulty, "faulty_worker_finishes": victim_reasons, "faulty_worker_message": message,
        "fault_to_all_finished_s": round(all_done_at - fault_at, 3), "fault_to_slot_serving_s": round(back_at - fault_at, 3),
        "restarts": pool.restarts, "stall_replacements": pool.stall_replacements,
    }


def _reference(tok: Any, ctx: list[int], gen: list[int]) -> str:
    stream = DecodeStream(tok, ctx)
    return "".join(stream.step([t]).text for t in gen) + stream.finish("length").text


if __name__ == "__main__":
    sys.exit(main())
