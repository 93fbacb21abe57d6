"""The deltas of a response's choices (one RequestStream each) merged as they arrive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from detok.receiver.receiver import RequestDelta, RequestStream


async def merged_deltas(streams: Sequence[RequestStream]) -> AsyncIterator[tuple[int, RequestDelta]]:
    """(choice index, delta) of several streams as they arrive, each stream's in order; one
    stream is iterated directly (the common n=1 case costs no task)."""
    if len(streams) == 1:
        async for delta in streams[0]:
            yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, RequestDelta | None]] = asyncio.Queue()

    async def pump(index: int, stream: RequestStream) -> None:
        async for delta in stream:
            queue.put_nowait((index, delta))
        queue.put_nowait((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
