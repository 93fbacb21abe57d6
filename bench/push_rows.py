"""Frontend CPU per streamed chunk in the receiving loop, in-process, side by side: a batch's rows
written as they are dispatched (`direct`: `DeltaReceiver.direct_rows` = the compiled `push_rows`,
what the HTTP frontend installs) against the Python path (`push-queue`: feed, wake, queue, then
each stream's compiled `TextPusher` at the end of the loop's turn), without logprobs and with chat
logprobs rendered by the workers (top-K items).

    python bench/push_rows.py [--tokenizer SRC] [--logprobs 5] [--concurrency 256] [--tokens 128]
                              [--repeats 5] [--json]

The pool benchmark's workload runs through a WorkerCore once (off the clock); each configuration
then feeds the resulting DeltaBatch messages, one per event-loop turn, to a DeltaReceiver whose
streams each have a waiting consumer task and a compiled pusher writing to a sink (no socket: the
`write` syscall is the same either way and not measured here). CPU time of this process over the
messages (decode, dispatch, pushes, the chunks' bytes), interleaved repetitions, median kept;
one JSON line per configuration with --json.
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
from bench.logprobs_frontend import frontend_messages, workload_args, workload_of
from detok import wire
from detok.frontend.chunks import ChunkRenderer
from detok.receiver.receiver import DeltaReceiver


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


async def _feed(messages: list[bytes], rids: list[int], items: bool, direct: bool) -> tuple[float, int]:
    from detok.frontend._chunkpush import TextPusher, push_rows

    rx = DeltaReceiver()
    rx.direct_rows = push_rows if direct else None
    render = ChunkRenderer("chat", "chatcmpl-bench", 1, "m")
    prefix, suffix = render.text_frame(0)
    frame = render.items_frame() if items else ()
    sink = _Sink()
    streams = [rx.open(rid) for rid in rids]
    for stream in streams:
        stream.push_to(TextPusher(lambda s: False, sink.flow, sink.cycle, sink.write, None, prefix, suffix, *frame))

    async def consume(stream: Any) -> None:
        async for _ in stream:  # (what the pusher leaves: the finish, held entries)
            pass

    tasks = [asyncio.ensure_future(consume(s)) for s in streams]
    await asyncio.sleep(0)
    decoder = wire.frontend_inbound_decoder()
    t0 = time.process_time()
    for raw in messages:
        rx.dispatch(decoder.decode(raw))
        await asyncio.sleep(0)  # one loop turn: the Python path's pushes, the consumers' wake-ups
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    seconds = time.process_time() - t0
    rx.close()
    return seconds, sink.chunks


def run_once(messages: list[bytes], rids: list[int], items: bool, direct: bool) -> tuple[float, int]:
    """CPU seconds to handle every message with or without the direct rows, and chunks written."""
    return asyncio.run(_feed(messages, rids, items, direct))


def main() -> int:
    args = workload_args(__doc__, 5)
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
            seconds, chunks[mode, direct] = run_once(messages, rids, items, direct)
            times[mode, direct].append(seconds)
            bar.update(1)
    bar.close()
    for mode in modes:
        queue, direct = statistics.median(times[mode, False]), statistics.median(times[mode, True])
        for name, t in (("push-queue", queue), ("direct", direct)):
            record = {"bench": "push_rows", "logprobs": mode, "config": name, "tokens": tokens,
                      "chunks": chunks[mode, name == "direct"], "ns_per_token": round(t / tokens * 1e9, 1),
                      "x_vs_push_queue": round(queue / t, 2) if t else None}
            _common.report(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
