"""What one request costs a worker's `StreamTable`, by its parameters: `open`, the step per token
and `finish`, in this process's CPU time.

    python bench/table_requests.py [--tokenizer SOURCE] [--requests 300] [--tokens 16] [--repeats 5]
                                   [--streams | --batch] [--cold] [--json]

`--requests` requests of `--tokens` corpus ids each (a 5-id prompt tail) are opened, stepped one
id per request per `step_packed` call and finished, as a worker does; the best of `--repeats`
rounds is kept per figure. Parameter sets: none; a stop id that is an end-of-sequence id; a stop
id the text holds (`.`: each request stops at its first); `min_tokens`; two stop strings whose
first characters the text holds often (a newline, `U`); a stop string whose first one it rarely does.
With `--streams`, the same requests as `detok.DecodeStream`s (the per-stream API) instead; with
`--batch`, set up and ended by `open_many` / `finish_many` (one call per phase: an engine's step
admitting and ending a batch). With `--cold`, 64 MB are written before each phase (the set-up, the
steps, the end), so each starts with the caches holding none of the table: a serving worker's
case, whose other work evicts a request's state between its set-up, steps and end.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/table_requests.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import detok
from bench import _common
from detok.stream.table import StreamTable


def parameter_sets(tok: Any) -> dict[str, detok.DecodeParams]:
    eos = sorted(tok.eos_token_ids)
    dot = tok.encode(".")[-1]
    return {
        "none": detok.DecodeParams(),
        "stop id (end-of-sequence)": detok.DecodeParams(stop_token_ids=tuple(eos[:1])),
        "stop id (in the text)": detok.DecodeParams(stop_token_ids=(dot,)),
        "min_tokens=4": detok.DecodeParams(min_tokens=4),
        "two stop strings": detok.DecodeParams(stop=["\n\n", "User:"]),
        "stop string ###": detok.DecodeParams(stop=["###"]),
    }


@functools.cache
def _thrash_buffer() -> bytearray:
    return bytearray(64 << 20)


def _evict(cold: bool) -> None:
    """Write 64 MB (more than this box's caches) so the next phase starts cold."""
    if cold:
        buf = _thrash_buffer()
        buf[::64] = bytes(len(buf) // 64)


def measure(tok: Any, params: detok.DecodeParams, streams: Sequence[Any], repeats: int, batch: bool = False,
            cold: bool = False) -> dict[str, float]:
    table = StreamTable(tok)
    n, length = len(streams), len(streams[0].ids)
    rids = np.arange(n, dtype="<u8").tobytes()
    columns = [np.array(c, dtype="<u4").tobytes() for c in zip(*(s.ids for s in streams))]
    starts = [np.full(n, i, dtype="<u4").tobytes() for i in range(length)]
    table.open(n, [], params)  # the decode mode's tables built before any clock (as a worker's)
    table.close(n)
    best = [float("inf")] * 3
    clock = time.process_time_ns
    rid_list, prompts = list(range(n)), [s.context for s in streams]
    for _ in range(repeats):
        _evict(cold)
        t0 = clock()
        if batch:
            table.open_many(rid_list, prompts, params)
        else:
            for rid, s in enumerate(streams):
                table.open(rid, s.context, params)
        open_ns = clock() - t0
        _evict(cold)
        t1 = clock()
        for i in range(length):
            table.step_packed(rids, starts[i], b"", columns[i])
        steps_ns = clock() - t1
        _evict(cold)
        t2 = clock()
        if batch:
            table.finish_many(rid_list, "length")
        else:
            for rid in range(n):
                table.finish(rid, "length")
        t3 = clock()
        best = [min(best[0], open_ns / n), min(best[1], steps_ns / (n * length)), min(best[2], (t3 - t2) / n)]
    return {"open_ns": round(best[0]), "step_ns_per_token": round(best[1], 1), "finish_ns": round(best[2])}


def measure_streams(tok: Any, params: detok.DecodeParams, streams: Sequence[Any], repeats: int) -> dict[str, float]:
    """The same requests as `detok.DecodeStream`s (an embedder's per-stream API): created,
    stepped one int id at a time interleaved, finished."""
    length = len(streams[0].ids)
    ids = [s.ids for s in streams]
    detok.DecodeStream(tok, [], params).finish()  # the decode mode's tables built before any clock
    best = [float("inf")] * 3
    clock = time.process_time_ns
    for _ in range(repeats):
        t0 = clock()
        live = [detok.DecodeStream(tok, s.context, params) for s in streams]
        t1 = clock()
        for i in range(length):
            for stream, own in zip(live, ids):
                stream.step(own[i])
        t2 = clock()
        for stream in live:
            stream.finish("length")
        t3 = clock()
        n = len(streams)
        best = [min(best[0], (t1 - t0) / n), min(best[1], (t2 - t1) / (n * length)), min(best[2], (t3 - t2) / n)]
    return {"open_ns": round(best[0]), "step_ns_per_token": round(best[1], 1), "finish_ns": round(best[2])}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_common_args(p)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--streams", action="store_true",
                      help="measure detok.DecodeStream per request instead (created, step(id) per token, finished)")
    mode.add_argument("--batch", action="store_true", help="set up and end the requests with open_many / finish_many")
    p.add_argument("--cold", action="store_true", help="write 64 MB before each phase: caches start cold")
    args = p.parse_args(argv)
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    streams = _common.make_streams(tok, args.tokens, args.requests, args.seed, ("corpus",))
    sets = parameter_sets(tok)
    bar = _common.progress(len(sets), "table requests", args.no_progress)
    for name, params in sets.items():
        figures = (measure_streams(tok, params, streams, args.repeats) if args.streams else
                   measure(tok, params, streams, args.repeats, args.batch, args.cold))
        row = {"bench": "stream-requests" if args.streams else "table-requests", "params": name,
               "requests": args.requests, "tokens": args.tokens, "batch": args.batch, "cold": args.cold, **figures}
        bar.update(1)
        if args.json:
            _common.emit(row)
        else:
            print(f"{name:28} open {row['open_ns']:6} ns  step {row['step_ns_per_token']:7} ns/token  "
                  f"finish {row['finish_ns']:6} ns")
    bar.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
