"""Frontend CPU per streamed chunk in the receiving loop, in-process, side by side: a batch's rows
written as they are dispatched (`direct`: `DeltaReceiver.direct_rows` = the compiled `push_rows`,
what the HTTP frontend installs) against the Python path (`push-queue`: feed, wake, queue, then
each stream's compiled `TextPusher` at the end of the loop's turn), without logprobs and with chat
logprobs rendered by the workers (top-K items).

    python bench/push_rows.py [--tokenizer SRC] [--logprobs 5] [--concurrency 256] [--tokens 128]
                              [--repeats 5] [--evict-kb 0] [--json]

The pool benchmark's workload runs through a WorkerCore once (off the clock); each configuration
then feeds the resulting DeltaBatch messages, one per event-loop turn, to a DeltaReceiver whose
streams each have a waiting consumer task and a compiled pusher writing to its own sink (one
connection's objects per request; no socket: the `write` syscall is the same either way and not
measured here). CPU time of this process over the messages (decode, dispatch, pushes, the chunks'
bytes), interleaved repetitions, median kept; one JSON line per configuration with --json.
--evict-kb N writes N KiB between two messages, off the clock: a serving frontend's other work
(its other connections, the kernel's socket buffers) leaves a batch's streams out of the caches,
which the loop alone here does not.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/push_rows.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import asyncio
import gc
import statistics
import sys
import time
import types
from typing import Any

from bench import _common
from bench.logprobs_frontend import frontend_messages, workload_of, workload_parser
from detok import wire
from detok.streaming.chunks import ChunkRenderer
from detok.receiver.receiver import DeltaReceiver
from detok.receiver.request_stream import RequestStream


class _Sink:
    """A connection that reads: uvicorn's flow and cycle as the pusher reads them, and a write."""

    def __init__(self) -> None:
        self.flow = types.SimpleNamespace(write_paused=False)
        self.cycle = types.SimpleNamespace(disconnected=False)
        self.chunks = 0
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.chunks += 1
        self.bytes += len(data)


async def _feed(messages: list[bytes], rids: list[int], items: bool, direct: bool,
                evict: bytearray | None) -> tuple[float, int]:
    from detok._native._chunkpush import TextPusher, push_rows

    rx = DeltaReceiver()
    rx.direct_rows = push_rows if direct else None
    render = ChunkRenderer("chat", "chatcmpl-bench", 1, "m")
    prefix, suffix = render.text_frame(0)
    frame = render.items_frame() if items else ()
    # one connection per request, as a serving frontend has: each stream's objects its own
    sinks = [_Sink() for _ in rids]
    streams = [rx.open(rid) for rid in rids]
    for stream, sink in zip(streams, sinks):
        take = RequestStream.take_items if frame else RequestStream.take_text
        stream.push_to(TextPusher(lambda s: False, sink.flow, sink.cycle, sink.write, None, prefix, suffix, *frame,
                                  take=take))

    async def consume(stream: Any) -> None:
        async for _ in stream:  # (what the pusher leaves: the finish, held entries)
            pass

    tasks = [asyncio.ensure_future(consume(s)) for s in streams]
    await asyncio.sleep(0)
    decoder = wire.frontend_inbound_decoder()
    seconds, clock = 0.0, time.process_time
    for raw in messages:
        if evict is not None:  # (off the clock) what a serving frontend's other work does to the caches
            evict[::64] = bytes([evict[0] ^ 1]) * len(range(0, len(evict), 64))
        t0 = clock()
        rx.dispatch(decoder.decode(raw))
        await asyncio.sleep(0)  # one loop turn: the Python path's pushes, the consumers' wake-ups
        seconds += clock() - t0
    t0 = clock()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    seconds += clock() - t0
    rx.close()
    return seconds, sum(sink.chunks for sink in sinks)


def run_once(messages: list[bytes], rids: list[int], items: bool, direct: bool,
             evict: bytearray | None = None) -> tuple[float, int]:
    """CPU seconds to handle every message with or without the direct rows, and chunks written;
    with `evict`, a buffer whose every cache line is written between two messages (off the clock)."""
    return asyncio.run(_feed(messages, rids, items, direct, evict))


def main() -> int:
    parser = workload_parser(__doc__, 5)
    parser.add_argument("--evict-kb", type=int, default=0, help="write a buffer of this many KiB between two messages, "
                        "off the clock: caches as a serving frontend's other work leaves them (0: as the loop alone does)")
    args = parser.parse_args()
    evict = bytearray(args.evict_kb * 1024) if args.evict_kb else None
    tok, workload, table = workload_of(args)
    modes = {"none": (frontend_messages(tok, workload, None), False),
             f"top-{args.logprobs}": (frontend_messages(tok, workload, table, "chat"), True)}
    rids = list(range(workload.requests))
    tokens = workload.requests * workload.tokens
    times: dict[tuple[str, bool], list[float]] = {(m, d): [] for m in modes for d in (False, True)}
    chunks: dict[tuple[str, bool], int] = {}
    gc.collect()
    gc.freeze()  # (the prepared messages out of the collector's reach, as a serving frontend's heap)
    bar = _common.progress(args.repeats * len(times), "push rows", args.no_progress)
    for _ in range(args.repeats):
        for mode, direct in times:
            messages, items = modes[mode]
            seconds, chunks[mode, direct] = run_once(messages, rids, items, direct, evict)
            times[mode, direct].append(seconds)
            bar.update(1)
    bar.close()
    for mode in modes:
        queue, direct = statistics.median(times[mode, False]), statistics.median(times[mode, True])
        for name, t in (("push-queue", queue), ("direct", direct)):
            record = {"bench": "push_rows", "logprobs": mode, "config": name, "tokens": tokens,
                      "chunks": chunks[mode, name == "direct"], "ns_per_token": round(t / tokens * 1e9, 1),
                      "x_vs_push_queue": round(queue / t, 2) if t else None, "evict_kb": args.evict_kb}
            _common.report(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
