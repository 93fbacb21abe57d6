"""Drive typed (parsed) requests through a WorkerCore and assemble what a frontend would receive."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from detok.parsing.types import OutputParsing, ToolCallDelta
from detok.receiver.typed import TypedState
from detok.wire.params import DecodeParams, Finish
from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_frontends import DeltaBatch
from detok.wire.to_workers import DetokBatch, EndRequest, Registration
from detok.worker.core import WorkerCore

REPLY_TO = "ipc:///nonexistent/typed-test"


@dataclasses.dataclass
class Typed:
    """A request's assembled typed output (as a client would join it)."""

    reasoning: str = ""
    content: str = ""
    calls: dict[int, list[str | None]] = dataclasses.field(default_factory=dict)  # index -> [id, name, args]
    finish: Finish | None = None
    num_calls: int = 0
    text: str = ""  # plain text rows (a request without parsing)

    def key(self) -> tuple[object, ...]:
        """Everything a client sees, to compare two runs."""
        return self.reasoning, self.content, self.calls, self.finish, self.num_calls, self.text


def assemble(batches: Sequence[DeltaBatch], rid: int, state: TypedState | None = None, into: Typed | None = None) -> Typed:
    out = into if into is not None else Typed()
    state = state if state is not None else TypedState()
    for b in batches:
        rows = list(b.rows())
        kinds = b.kinds or bytes(len(rows))
        for (r, text, off), kind in zip(rows, kinds, strict=True):
            if r == rid and kind:  # a row of the worker's compiled path: one stream of typed output
                chunks: list[str] = []
                state.feed_kind(kind, text, off, chunks)
                out.content += "".join(chunks)
                reasoning, calls = state.take()
                out.reasoning += reasoning
                _add_calls(out, calls)
            elif r == rid:
                out.text += text
        for row in b.typed or ():
            if row.rid != rid:
                continue
            reasoning, content, calls = state.accept(row)
            out.reasoning += reasoning
            out.content += content
            _add_calls(out, calls)
        for f in b.finished:
            if f.rid == rid and out.finish is None:
                out.finish, out.num_calls = f.finish, f.calls
    return out


def _add_calls(out: Typed, calls: Sequence[ToolCallDelta]) -> None:
    for d in calls:
        call = out.calls.setdefault(d.index, [None, None, ""])
        if d.id is not None:
            assert call[0] is None, "a call's header came twice"
            call[0], call[1] = d.id, d.name
        else:
            assert call[1] is not None, "arguments before the call's header"
        call[2] = str(call[2]) + d.arguments


def batches_of(core: WorkerCore, outputs: object) -> list[DeltaBatch]:
    return [b for _, b in outputs.deltas]  # type: ignore[attr-defined]


def run_request(
    core: WorkerCore,
    rid: int,
    ids: Sequence[int],
    groups: Sequence[int],
    parsing: OutputParsing | None,
    params: DecodeParams = DecodeParams(),
    end: EndRequest | None = None,
    context: Sequence[int] = (),
) -> list[DeltaBatch]:
    """Register `rid`, send `ids` cut into steps of `groups` sizes (the rest in one step), then `end`."""
    seq = 1
    out = batches_of(core, core.handle_batch(DetokBatch(seq, 0.0, [Registration(rid, REPLY_TO, list(context), params,
                                                                                parsing=parsing)],
                                                        b"", b"", b"", b"", [])))
    pos = 0
    sizes = list(groups)
    while pos < len(ids):
        n = sizes.pop(0) if sizes else len(ids) - pos
        n = max(1, min(n, len(ids) - pos))
        seq += 1
        chunk = list(ids[pos : pos + n])
        out += batches_of(core, core.handle_batch(DetokBatch(seq, 0.0, [], pack_rids([rid]), pack_u32([pos]),
                                                             pack_u32([n]), pack_u32(chunk), [])))
        pos += n
    if end is not None:
        seq += 1
        out += batches_of(core, core.handle_batch(DetokBatch(seq, 0.0, [], b"", b"", b"", b"", [end])))
    return out
