"""What the worker core hands to its process loop: DeltaBatch columns per frontend and the notice."""

from __future__ import annotations

import struct

import numpy as np
from dataclasses import dataclass, field

from detok.stream.step_results import PackedStep
from detok.stream.typed_fast import TAG_MASK
from detok.wire.packing import group_rows
from detok.wire.to_frontends import DeltaBatch, DeltaLogprobs, RequestFinished, TypedRow
from detok.wire.to_scheduler import StopNotice
from detok.worker import logprobs as lp_entries

_U64 = struct.Struct("<Q").pack
_U32 = struct.Struct("<I").pack


@dataclass(eq=False)
class FrontendColumns:
    """The DeltaBatch columns being filled for one frontend, as packed chunks: a whole step's
    columns (`add_packed`) and single rows (`add`) alike, joined once when the message is taken."""

    reply_to: str
    tag: int  # this frontend's tag in the table (rows come back with it)
    rids: list[bytes] = field(default_factory=list)
    text: list[bytes] = field(default_factory=list)
    lengths: list[bytes] = field(default_factory=list)
    offsets: list[bytes] = field(default_factory=list)
    num_tokens: list[bytes] = field(default_factory=list)
    finished: list[RequestFinished] = field(default_factory=list)
    logprobs: list[DeltaLogprobs] = field(default_factory=list)
    typed: list[TypedRow] = field(default_factory=list)  # rows of parsed requests
    # per chunk of rows: their kinds (uint8 each) or None (plain text rows); see DeltaBatch.kinds
    kinds: list[bytes | None] = field(default_factory=list)
    any_kinds: bool = False
    live: int = 0  # live requests of this frontend in the table

    def add(self, rid: int, text: str, offset: int, num_tokens: int) -> None:
        self.add_packed(_U64(rid), text.encode(), _U32(len(text)), _U32(offset), _U32(num_tokens))

    def add_typed(self, row: TypedRow) -> None:
        self.typed.append(row)

    def add_packed(self, rids: bytes, text: bytes, lengths: bytes, offsets: bytes, num_tokens: bytes,
                   kinds: bytes = b"") -> None:
        self.kinds.append(kinds or None)
        if kinds:
            self.any_kinds = True
        self.rids.append(rids)
        self.text.append(text)
        self.lengths.append(lengths)
        self.offsets.append(offsets)
        self.num_tokens.append(num_tokens)

    @property
    def pending(self) -> bool:
        return bool(self.rids or self.finished or self.logprobs or self.typed)

    def take(self, worker: int, sent_at: float) -> DeltaBatch | None:
        if not self.pending:
            return None
        join = b"".join
        lp = lp_entries.join_parts(self.logprobs) if self.logprobs else None
        kinds = b""
        if self.any_kinds:  # rows without kinds are plain text (0)
            kinds = join([k if k is not None else bytes(len(r) // 8) for k, r in zip(self.kinds, self.rids)])
        batch = DeltaBatch(
            worker, sent_at, join(self.rids), join(self.text), join(self.lengths), join(self.offsets), self.finished, lp,
            join(self.num_tokens),
            self.typed or None,
            kinds,
        )
        self.rids, self.text, self.lengths, self.offsets, self.finished, self.logprobs = [], [], [], [], [], []
        self.num_tokens, self.kinds, self.any_kinds = [], [], False
        if self.typed:
            self.typed = []
        return batch


@dataclass
class Outputs:
    """What one input message produced: deltas per frontend endpoint and a notice for the scheduler."""

    deltas: list[tuple[str, DeltaBatch]]
    notice: StopNotice | None


class Frontends:
    """The frontends this worker's live requests reply to: their columns by endpoint and by tag
    (the tag a request's rows carry in the table; 0 is reserved for unknown rids)."""

    def __init__(self) -> None:
        self._by_endpoint: dict[str, FrontendColumns] = {}
        self._by_tag: dict[int, FrontendColumns] = {}
        self._next_tag = 1

    def columns_for(self, reply_to: str) -> FrontendColumns:
        out = self._by_endpoint.get(reply_to)
        if out is None:
            # below TAG_MASK (the table's kind bits are above), 0 reserved
            while self._next_tag in self._by_tag or not 0 < self._next_tag < TAG_MASK:
                self._next_tag = self._next_tag % (TAG_MASK - 1) + 1
            out = self._by_endpoint[reply_to] = self._by_tag[self._next_tag] = FrontendColumns(reply_to, self._next_tag)
            self._next_tag += 1
        return out

    def by_tag(self, tag: int) -> FrontendColumns | None:
        return self._by_tag.get(tag)

    def owners(self) -> list[FrontendColumns]:
        """The frontends that own live requests."""
        return [c for c in self._by_endpoint.values() if c.live]

    def route(self, rids: bytes, result: PackedStep) -> None:
        """Several frontends own live requests: each gets its rows' columns, split by the tag its
        requests were opened with (rows of unknown rids, tag 0, go nowhere)."""
        by_tag = self._by_tag
        tags = np.frombuffer(result.tags, dtype="<u4")
        num_tokens = np.frombuffer(result.num_tokens, dtype="<u4")
        kinds = np.frombuffer(result.kinds, dtype=np.uint8) if result.kinds else None
        for tag, own_rids, text, lengths, offsets in group_rows(
            result.tags, result.byte_lengths, result.text, rids, result.lengths, result.offsets
        ):
            out = by_tag.get(tag)
            if out is not None:
                own = tags == tag
                out.add_packed(own_rids, text, lengths, offsets, num_tokens[own].tobytes(),
                               kinds[own].tobytes() if kinds is not None else b"")

    def drop_idle(self) -> None:
        """Forget frontends with nothing live and nothing pending."""
        for reply_to in [k for k, c in self._by_endpoint.items() if c.live == 0 and not c.pending]:
            del self._by_tag[self._by_endpoint.pop(reply_to).tag]

    def take(self, worker: int, sent_at: float) -> list[tuple[str, DeltaBatch]]:
        deltas = []
        for reply_to, out in self._by_endpoint.items():
            batch = out.take(worker, sent_at)
            if batch is not None:
                deltas.append((reply_to, batch))
        return deltas

    def endpoints(self) -> list[str]:
        return list(self._by_endpoint)

    def live_requests_of(self, reply_to: str) -> int:
        out = self._by_endpoint.get(reply_to)
        return out.live if out is not None else 0
