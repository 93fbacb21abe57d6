"""What a worker sends to a frontend: FrontendInbound = DeltaBatch.

Char `offset`s come out (index of a delta's first char within the request's text), so a replay
to a restarted worker can be de-duplicated by the receiver. A `DeltaBatch`'s texts are one UTF-8
blob with per-row char lengths rather than a list of str: the worker's compiled step writes it
without a Python object per row, and msgpack carries it as one bin field (see `detok.wire.packing`).

Requests with output parsing (`Registration.parsing`) get `TypedRow`s instead of text rows: their
reasoning text, content text and tool-call fragments, each stream with its own char offset, so a
receiver drops what a replay repeats exactly as it does for text. `RequestFinished.calls` counts the
tool calls the worker's parser emitted: OpenAI's finish_reason "tool_calls" is decided from it and
the reason (`openai_finish_reason`), never from the frontend's own reading of the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from detok.wire.params import Finish
from detok.wire.packing import join_texts, pack_rids, pack_u32, split_text, unpack_rids, unpack_u32


class RequestFinished(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A request ended; `num_tokens` is how many output tokens the worker consumed for it. `gen`:
    the registration generation it ended (0: unknown), so a receiver can tell a replayed finish of
    an earlier request with the same rid from the current one's. `calls`: how many tool calls its
    parser emitted (0 without tool parsing)."""

    rid: int
    finish: Finish
    num_tokens: int
    gen: int = 0
    calls: int = 0


def openai_finish_reason(finish: Finish, calls: int) -> str:
    """OpenAI's finish_reason: "tool_calls" only when a call was emitted and the model stopped by
    itself (EOS, a stop token or string); "length" stays "length" (vLLM #53269 rewrote it)."""
    return "tool_calls" if calls > 0 and finish.reason == "stop" else finish.reason


class CallFragment(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A fragment of one tool call (`detok.parsing.types.ToolCallDelta` with its offset): the first
    of a call carries `id` and `name`; `arguments` starts at char `offset` of the call's arguments."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    offset: int


class TypedRow(msgspec.Struct, array_like=True, gc=False):
    """What one step (or the end) of a parsed request became: reasoning text from char
    `reasoning_offset` of the request's reasoning, content text from char `content_offset` of its
    content, and tool-call fragments. Offsets make replays idempotent, as for text rows."""

    rid: int
    reasoning: str = ""
    reasoning_offset: int = 0
    content: str = ""
    content_offset: int = 0
    calls: list[CallFragment] = []


class DeltaLogprobs(msgspec.Struct, array_like=True, gc=False):
    """Logprob entries of one worker batch for one frontend, packed. An entry-row is a run of
    consecutive output tokens of one request: `counts[r]` entries from token number `firsts[r]`
    (a receiver that already has some of them drops those: replay de-duplication). Per entry, in
    row order: the sampled id and logprob and `top_counts[e]` alternatives (ids and logprobs
    flattened). `text` holds the OpenAI token strings in UTF-8, every entry's first, then every
    alternative's, with `lengths` in chars; `raw` lists (uint32, ascending) the strings that name
    bytes which are not whole UTF-8 characters (`bytes:\\xe5\\x8c`, OpenAI's form).
    `detok.receiver.token_logprobs.split_logprobs` gives the per-request entries."""

    rids: bytes  # uint64 per entry-row
    firsts: bytes  # uint32 per entry-row: output token index of its first entry
    counts: bytes  # uint32 per entry-row
    token_ids: bytes  # uint32 per entry
    logprobs: bytes  # float32 per entry
    top_counts: bytes  # uint32 per entry
    top_ids: bytes  # uint32, flattened
    top_logprobs: bytes  # float32, flattened
    text: bytes  # UTF-8 token strings
    lengths: bytes  # uint32 per string: chars
    raw: bytes = b""  # uint32 string indices
    # Entries of requests registered with logprobs_form "chat": each entry's chat JSON item
    # (`{"token":..,"top_logprobs":[..]}`, detok.worker.chat_entries), back to back, and a uint32
    # byte length per entry of the message (0: an entry not rendered). A rendered entry's string
    # is empty and its alternatives are not sent. Empty: none rendered.
    items: bytes = b""
    item_lengths: bytes = b""


class DeltaBatch(msgspec.Struct, tag="deltas", array_like=True, gc=False):
    """Text deltas of one worker batch for one frontend, columnar. `rids` (uint64), `lengths` and
    `offsets` (uint32) are packed little-endian arrays, and `text` is every row's text in UTF-8,
    back to back (row i's text is the next `lengths[i]` chars). The worker writes these columns
    straight from its tables with no Python object per row and passes the rid column of its input
    through as it is; `texts()` / `rows()` give the per-row strings.

    `texts()[i]` starts at char `offsets[i]` of request `rids[i]`'s output text; a receiver that
    already has more chars drops the overlap (replay de-duplication). Rows with an empty text carry
    nothing (the worker sends a step's columns whole; such a row's offset is not meaningful, and
    its rid may even be unknown to the receiver). `finished` entries apply after the texts of the
    same message. `sent_at` echoes the DetokBatch's scheduler send time.
    """

    worker: int
    sent_at: float
    rids: bytes  # uint64 per row
    text: bytes  # UTF-8, every row's text back to back
    lengths: bytes  # uint32 per row: chars of the row's text
    offsets: bytes  # uint32 per row
    finished: list[RequestFinished]
    logprobs: DeltaLogprobs | None = None  # entries of requests that asked; applied before `finished`
    # uint32 per row: the request's output tokens consumed after the row (usage in every chunk);
    # empty: not given
    num_tokens: bytes = b""
    typed: list[TypedRow] | None = None  # rows of parsed requests; applied before `finished`
    # uint8 per row, or empty (every row plain text): a parsed request's row of one kind of its
    # typed output, decoded on the worker's compiled path (1 reasoning, 2 content, 3 arguments of
    # its last call opened), its offset in that kind's text; applied with the text rows, before `typed`
    kinds: bytes = b""

    @classmethod
    def from_rows(
        cls, worker: int, sent_at: float, rids: Iterable[int], texts: Sequence[str], offsets: Iterable[int],
        finished: Iterable[RequestFinished] = (),
    ) -> DeltaBatch:
        """A DeltaBatch from per-row Python values (tests, hand-made messages)."""
        text, lengths = join_texts(texts)
        return cls(worker, sent_at, pack_rids(rids), text, lengths, pack_u32(offsets), list(finished))

    def texts(self) -> list[str]:
        """The per-row texts; ValueError if `text` and `lengths` do not fit together."""
        return split_text(self.text, self.lengths)

    def token_counts(self) -> list[int] | None:
        """`num_tokens` per row, or None if not given; ValueError if it does not fit the rows."""
        if not self.num_tokens:
            return None
        counts = unpack_u32(self.num_tokens)
        if len(counts) * 8 != len(self.rids):
            raise ValueError(f"{len(self.rids) // 8} rows and {len(counts)} token counts")
        return counts.tolist()  # type: ignore[no-any-return]

    def rows(self) -> zip[tuple[int, str, int]]:
        """(rid, text, offset) per row, as Python objects; ValueError if the columns do not fit."""
        return zip(*self.columns())

    def columns(self) -> tuple[list[int], list[str], list[int]]:
        """The rids, texts and offsets of the rows, as lists of one length; ValueError if the
        columns do not fit."""
        rids, texts, offsets = unpack_rids(self.rids), self.texts(), unpack_u32(self.offsets)
        if not len(rids) == len(texts) == len(offsets):
            raise ValueError(f"{len(rids)} rids, {len(texts)} texts and {len(offsets)} offsets")
        return rids.tolist(), texts, offsets.tolist()


FrontendInbound = DeltaBatch


def frontend_inbound_decoder() -> msgspec.msgpack.Decoder[DeltaBatch]:
    return msgspec.msgpack.Decoder(FrontendInbound)
