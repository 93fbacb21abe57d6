"""The in-process worker loop of bench/worker.py, repeated, for a profiler to sample.

    py-spy record -r 1000 -f raw -o prof.txt -- python bench/worker_loop.py --tokens 64 --loops 8

The workload is bench/worker.py's (staggered continuous batching, one frontend, compiled step),
its messages encoded before the loop; each loop decodes every message, runs
`WorkerCore.handle_batch` and encodes the deltas, and prints its ns per token.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/worker_loop.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import sys

import numpy as np

import detok
from bench import _common
from bench.pool_drivers import Workload
from bench.worker import encode_workload, run_once


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--loops", type=int, default=8)
    args = p.parse_args()
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    streams = _common.make_streams(tok, args.tokens, args.concurrency, args.seed, ("corpus", "multilingual"))
    outputs = np.ascontiguousarray(np.array([s.ids for s in streams], dtype=np.uint32).T)
    workload = Workload([list(s.context) for s in streams], outputs, args.rounds)
    messages = encode_workload(workload, 1)
    tokens = workload.requests * workload.tokens
    for _ in range(args.loops):
        seconds, _ = run_once(tok, messages, True)
        _common.report(args.json, {"bench": "worker-loop", "tokens": args.tokens, "ns_per_token": round(seconds / tokens * 1e9, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
