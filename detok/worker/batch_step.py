"""A batch's token rows through the live-request table and out to the frontends: the step's
columns routed (as they are when one frontend owns every live request), token strings for the rows
that want logprobs, and what the step leaves to the core (rows that finished, rows whose rid is
not open), which owns the live requests and settles them. Functions over what they are given: no
state of their own."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from detok.stream.step_results import PackedStep
from detok.wire.packing import unpack_u32
from detok.wire.params import Finish
from detok.wire.to_workers import DetokBatch
from detok.worker import logprobs as lp_entries
from detok.worker.outputs import Frontends


def route_step(frontends: Frontends, batch: DetokBatch, result: PackedStep) -> None:
    """The step's columns to the frontends that own its rows."""
    owners = frontends.owners()
    if len(owners) == 1:
        # One frontend owns every live request: the step's columns go out as they are, no
        # per-rid Python. Rows with empty text stay (most rows have text): unknown or late
        # rids among them are not open at that frontend, or already finished there, so its
        # receiver drops them.
        owners[0].add_packed(batch.rids, result.text, result.lengths, result.offsets, result.num_tokens, result.kinds)
    else:
        frontends.route(batch.rids, result)


def route_logprobs(frontends: Frontends, strings: lp_entries.TokenStrings, batch: DetokBatch, result: PackedStep,
                   wanted: dict[int, int], chat: set[int]) -> None:
    """Token strings of the rows that carry logprobs (`wanted`: rid -> k; `chat`: those whose
    entries go as chat JSON items), to their frontends. Before the rows' finishes are settled:
    finished requests are still live here."""
    for tag, part in lp_entries.step_entries(
        strings, batch.logprobs, batch.rids, batch.starts, batch.counts, batch.tokens,  # type: ignore[arg-type]
        result.num_tokens, result.tags, wanted, chat,
    ):
        out = frontends.by_tag(tag)
        if out is not None:
            out.logprobs.append(part)


def finished_rows(batch: DetokBatch, result: PackedStep) -> Iterator[tuple[int, Finish, int, int]]:
    """(rid, finish, output tokens, the row's token count) of each row the step finished."""
    if not result.finished:
        return
    counts = unpack_u32(batch.counts) if batch.counts else None
    num_tokens = unpack_u32(result.num_tokens)
    for row, rid, finish in result.finished:
        yield rid, finish, num_tokens[row], counts[row] if counts is not None else 1  # type: ignore[misc]


def unknown_rows(batch: DetokBatch, result: PackedStep) -> tuple[np.ndarray, np.ndarray]:
    """The rids of the rows whose rid is not open, and each row's token count, as arrays (a flood
    of them builds no per-row objects)."""
    if batch.counts:
        row_counts = np.frombuffer(batch.counts, dtype="<u4").astype(np.int64)[result.unknown_rows]
    else:
        row_counts = np.ones(len(result.unknown_rows), np.int64)
    return result.unknown_rids, row_counts
