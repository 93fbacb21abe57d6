"""Worker hot-loop benchmark: one worker's message handling in-process, no sockets.

    python bench/worker.py [--tokenizer SRC] [--concurrency 1024] [--tokens 256] [--rounds 3]
                           [--frontends 4] [--repeats 3] [--logprobs K] [--json]

The pool benchmark's workload (staggered continuous batching, bench/pool_drivers.py) is encoded
into `DetokBatch` messages up front; each configuration then decodes every message, runs
`WorkerCore.handle_batch` and encodes the `DeltaBatch`es it produces, as the worker process does
between its recv and send. Configurations, interleaved over the repetitions (median kept):
  compiled     the compiled step, every request owned by one frontend
  compiled-Nfe the same with requests spread over N frontends (per-frontend split of each step)
  numpy        the numpy/Python path (no extension), one frontend
  compiled+logprobsK  (with --logprobs K) every request asks for logprobs with K alternatives:
               the worker also makes K+1 token strings per token (bench/pool_drivers.LogprobTable)
One JSON line per configuration with --json: ns per token, ratio to `compiled`, output bytes per token.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/worker.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import statistics
import sys
import time
from typing import Any

from bench import _common
import msgspec
import numpy as np
from bench.pool_drivers import LogprobTable, Workload, steps

import detok
from detok import wire
from detok.wire.to_workers import DetokBatch, EndRequest, Registration
from detok.scheduler.step_logprobs import LogprobArrays
from detok.worker.core import WorkerCore, warmed_table


def encode_workload(w: Workload, frontends: int, logprobs: LogprobTable | None = None,
                    logprobs_form: str = "entries") -> list[bytes]:
    encoder = msgspec.msgpack.Encoder()
    params = detok.DecodeParams()
    want = None if logprobs is None else logprobs.k
    messages = []
    for i, step in enumerate(steps(w)):
        new = [Registration(k, f"ipc:///frontend-{k % frontends}", w.contexts[k % w.concurrency], params, logprobs=want,
                            logprobs_form=logprobs_form)  # type: ignore[arg-type]
               for k in step.new.tolist()]
        ends = [EndRequest(k, "length") for k in step.ending.tolist()]
        lp = None
        if logprobs is not None:
            arrays = LogprobArrays.checked(logprobs.columns(step, w.concurrency), len(step.ks), None)
            lp = arrays.packed(arrays.rows)
        messages.append(encoder.encode(DetokBatch(
            i, 0.0, new, step.ks.astype("<u8").tobytes(), step.positions.astype("<u4").tobytes(), b"",
            step.tokens.astype("<u4").tobytes(), ends, lp,
        )))
    return messages


def run_once(tok: Any, messages: list[bytes], compiled: bool) -> tuple[float, int]:
    """Seconds to handle every message, and the bytes sent to frontends."""
    table = warmed_table(tok)  # built before the clock, as a worker does before it reports ready
    table.compiled = compiled and table.compiled
    core = WorkerCore(tok, 0, idle_timeout_s=3600, table=table)
    decoder, encoder = wire.worker_inbound_decoder(), wire.new_encoder()
    sent = 0
    t0 = time.perf_counter()
    for raw in messages:
        for _, batch in core.handle_batch(decoder.decode(raw)).deltas:
            sent += len(encoder.encode(batch))
    return time.perf_counter() - t0, sent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--concurrency", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--frontends", type=int, default=4, help="frontends of the multi-frontend configuration")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kinds", default="corpus,multilingual", help="token stream kinds (bench/_common.py)")
    p.add_argument("--logprobs", type=int, default=None, metavar="K", help="add a configuration with top-K logprobs")
    args = p.parse_args()
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    streams = _common.make_streams(tok, args.tokens, args.concurrency, args.seed, tuple(args.kinds.split(",")))
    outputs = np.ascontiguousarray(np.array([s.ids for s in streams], dtype=np.uint32).T)
    workload = Workload([list(s.context) for s in streams], outputs, args.rounds)
    tokens = workload.requests * workload.tokens
    multi = f"compiled-{args.frontends}fe"
    configs = {"compiled": (1, True), multi: (args.frontends, True), "numpy": (1, False)}
    messages = {name: encode_workload(workload, fe) for name, (fe, _) in configs.items()}
    if args.logprobs is not None:
        name = f"compiled+logprobs{args.logprobs}"
        configs[name] = (1, True)
        messages[name] = encode_workload(workload, 1, LogprobTable.make(outputs, args.logprobs, tok.vocab_size, args.seed))
    times: dict[str, list[float]] = {name: [] for name in configs}
    sent: dict[str, int] = {}
    bar = _common.progress(args.repeats * len(configs), "worker loop", args.no_progress)
    for _ in range(args.repeats):
        for name, (_, compiled) in configs.items():
            seconds, sent[name] = run_once(tok, messages[name], compiled)
            times[name].append(seconds)
            bar.update(1)
    bar.close()
    base = statistics.median(times["compiled"])
    for name in configs:
        t = statistics.median(times[name])
        record = {"bench": "worker", "config": name, "tokens": tokens, "ns_per_token": round(t / tokens * 1e9, 1),
                  "ratio_vs_compiled": round(t / base, 2), "out_bytes_per_token": round(sent[name] / tokens, 2)}
        _common.report(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
