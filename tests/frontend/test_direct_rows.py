"""A received batch's text rows written as they are dispatched (`push_rows` in
`detok/_native/_directrows.c`, installed as `DeltaReceiver.direct_rows` by the HTTP frontend).

- Differential, on real receivers, streams, consumers and compiled pushers: any sequence of batches
  (rows in order, replayed, with gaps, empty, for closed rids, finished in the same batch, token
  counts; clients that pause; several batches in one loop turn) gives each request the same text
  and the same final state with the direct rows as without; with one batch per turn and one row
  per request in it (as the workers send), the same chunks byte for byte and the same deltas.
- A row is written by the dispatch itself (before the loop's turn ends) exactly where the Python
  path would push its text alone; a write that raises reaches the consumer as the Python path hands
  it over; hostile arguments are clean errors; no reference is leaked.
"""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.streaming.chunks import ChunkRenderer
from detok.api.typed_responses import TypedChoice
from detok.receiver.receiver import DeltaReceiver
from detok.receiver.request_stream import RequestDelta, RequestStream
from detok.receiver.token_logprobs import TokenLogprobs
from detok.wire.params import Finish
from detok.wire.packing import pack_u32
from detok.wire.to_frontends import CallFragment, DeltaBatch, RequestFinished, TypedRow

_chunkpush = pytest.importorskip("detok._native._chunkpush", reason="built without its C extensions")
TextPusher, push_rows = _chunkpush.TextPusher, _chunkpush.push_rows

pytestmark = pytest.mark.timeout(120)


class _Conn:
    def __init__(self, log: list[str] | None = None) -> None:
        self.flow = types.SimpleNamespace(write_paused=False)
        self.cycle = types.SimpleNamespace(disconnected=False)
        self.out: list[bytes] = []
        self.fail: BaseException | None = None
        self.log = log if log is not None else []  # the text written and taken, in order
        self.items: list[Any] = []  # the logprobs items written and taken, in order
        self.events: list[bytes] = []  # a parsed request's chunks, written by the pusher or rendered by its consumer
        self.reasoning: list[str] = []  # the reasoning written and taken (shown), in order
        self.args: list[tuple[int, str]] = []  # tool-call argument fragments written and taken (shown), in order

    def write(self, data: bytes) -> None:
        if self.fail is not None:
            raise self.fail
        self.out.append(data)
        text, items = _parts(data)
        self.log.append(text)
        self.items += items
        self.events.append(data)
        delta = msgspec.json.decode(data.split(b"\r\n", 1)[1][len(b"data: "):-4])["choices"][0]["delta"]
        if delta.get("reasoning"):
            self.reasoning.append(delta["reasoning"])
        for call in delta.get("tool_calls", ()):
            self.args.append((call["index"], call["function"]["arguments"]))


_RENDER = ChunkRenderer("chat", "chatcmpl-1", 1, "m")
_PREFIX, _SUFFIX = _RENDER.text_frame(0)
_MID, _ITEMS_END = _RENDER.items_frame()


def _items_mode(rid: int) -> bool:  # (the odd rids' responses have chat logprobs rendered by the workers)
    return rid % 2 == 1


_TYPED = 2  # (this rid's request is parsed: reasoning and content rows, DeltaBatch.kinds)


class _World:
    """One receiver with streams whose consumers take what their pushers leave (as the app's)."""

    def __init__(self, rx: DeltaReceiver, rids: list[int], direct: bool, items: bool = False,
                 show_reasoning: bool | None = None, parallel: bool = True) -> None:
        rx.direct_rows = push_rows if direct else None
        self.rx = rx
        self.logs: dict[int, list[str]] = {rid: [] for rid in rids}
        self.conns = {rid: _Conn(self.logs[rid]) for rid in rids}
        self.taken: dict[int, list[RequestDelta]] = {rid: [] for rid in rids}
        self.errors: dict[int, list[str]] = {rid: [] for rid in rids}
        self.ticks = {rid: 0 for rid in rids}
        self.streams = {rid: rx.open(rid) for rid in rids}
        self.typed = TypedChoice("reasoning", bool(show_reasoning), parallel, True, True)
        self.show = show_reasoning
        for rid, stream in self.streams.items():
            conn = self.conns[rid]
            frame = (_MID, _ITEMS_END) if items and _items_mode(rid) else ()
            typed: dict[str, Any] = {}
            if show_reasoning is not None and rid == _TYPED:
                typed = {"typed": True, "reasoning": _RENDER.field_prefix(0, "reasoning") if show_reasoning else None,
                         "sent_args": self.typed.sent_args, "calls_prefix": _RENDER.field_prefix(0, "tool_calls"),
                         "parallel": parallel}
            take = RequestStream.take_items if frame else RequestStream.take_text
            stream.push_to(TextPusher(lambda s: False, conn.flow, conn.cycle, conn.write,
                                      lambda rid=rid: self._tick(rid), _PREFIX, _SUFFIX, *frame, take=take, **typed))
        self.tasks = [asyncio.ensure_future(self._consume(rid)) for rid in rids]

    def _tick(self, rid: int) -> None:
        self.ticks[rid] += 1

    async def _consume(self, rid: int) -> None:
        stream = self.streams[rid]
        while True:
            try:
                delta = await anext(stream)
            except StopAsyncIteration:
                return
            except OSError as e:  # a write that raised, handed over to the consumer
                self.errors[rid].append(str(e))
                continue
            self.taken[rid].append(delta)
            self.logs[rid].append(delta.text)
            if rid == _TYPED and self.show is not None:
                # (as the app's consumer renders a parsed choice's delta: one tick if it sends anything)
                chunks = self.typed.chunks(_RENDER, 0, delta, None)
                if chunks:
                    self._tick(rid)
                self.conns[rid].events += [b"%x\r\n%b\r\n" % (len(c), c) for c in chunks]
                if delta.reasoning and self.typed.include_reasoning:
                    self.conns[rid].reasoning.append(delta.reasoning)
                self.conns[rid].args += [(d.index, d.arguments) for d in self.typed._calls_of(delta) if d.arguments]
            if delta.logprobs is not None:
                self.conns[rid].items += [msgspec.json.decode(i) for i in delta.logprobs.items or ()]

    def text(self, rid: int) -> str:
        return "".join(self.logs[rid])


def _RENDER_TEXT(chunk: bytes) -> str:  # noqa: N802 - the text of a chunk the pusher wrote
    return _parts(chunk)[0]


def _parts(chunk: bytes) -> tuple[str, list[Any]]:
    """(text, logprobs items) of a chunk a pusher wrote, framed as uvicorn frames it."""
    size, rest = chunk.split(b"\r\n", 1)
    body = rest[:-2]
    assert int(size, 16) == len(body) and rest.endswith(b"\r\n")
    assert body.startswith(_RENDER.field_prefix(0, "")[:-3]) and body.endswith(b"\n\n")  # (up to the delta)
    choice = msgspec.json.decode(body[len(b"data: "):-2])["choices"][0]
    logprobs = choice["logprobs"]
    return choice["delta"].get("content", ""), (logprobs["content"] if logprobs is not None else [])


@pytest.fixture(scope="module")
def receivers():
    a, b = DeltaReceiver(), DeltaReceiver()
    yield a, b
    a.close()
    b.close()


_TEXTS = st.text(alphabet=st.sampled_from("ab é\n\"\\😀"), max_size=4)


@st.composite
def _plans(draw: Any) -> list[list[tuple[str, Any]]]:
    """Loop turns, each a list of actions: ("pause", rid, bool) first (a client that stops or
    starts reading, seen by both paths alike), then ("batch", rows, finished)."""
    nrids = draw(st.integers(1, 4))
    lengths: dict[Any, int] = {rid: 0 for rid in range(nrids)}
    lengths.update({(_TYPED, kind): 0 for kind in (1, 2)})
    calls = 0  # the parsed request's tool calls opened (TypedRow headers applied)
    tokens = {rid: 0 for rid in range(nrids)}
    turns = []
    for _ in range(draw(st.integers(1, 8))):
        actions: list[tuple[str, Any]] = []
        for _ in range(draw(st.integers(1, 2))):
            if draw(st.integers(0, 5)) == 0:
                actions.append(("pause", draw(st.integers(0, nrids - 1)), draw(st.booleans())))
                continue
            rows, finished, kinds = [], [], []
            for rid in draw(st.lists(st.integers(0, nrids + 1), max_size=4)):  # (nrids, nrids+1: not open)
                text = draw(_TEXTS)
                kind = draw(st.sampled_from([1, 1, 2, 2, 3, 3])) if rid == _TYPED and nrids > _TYPED else 0
                key = (rid, kind, calls - 1) if kind == 3 else (rid, kind) if kind else rid
                have = lengths.get(key, 0)
                offset = draw(st.sampled_from([have, have, have, max(0, have - 1), have + 1]))
                rows.append((rid, text, offset))
                kinds.append(kind)
                if key in lengths and offset <= have:
                    lengths[key] = max(have, offset + len(text))
            if draw(st.integers(0, 6)) == 0:
                rid = draw(st.integers(0, nrids - 1))
                finished.append(rid)
            runs = []  # (rid, first, entries, rendered): the logprob runs of the items-mode requests' rows
            for rid in [r for r, _, _ in rows if r < nrids and _items_mode(r)] + draw(st.lists(st.integers(0, nrids - 1), max_size=1)):
                if not _items_mode(rid) or draw(st.integers(0, 5)) == 0:
                    continue
                have = tokens[rid]
                first = draw(st.sampled_from([have, have, have, max(0, have - 1), have + 1]))
                count = draw(st.integers(1, 2))
                runs.append((rid, first, count, rid != 3))  # (a request's entries are all rendered or none)
                if first <= have:
                    tokens[rid] = max(have, first + count)
            headers = []  # a new tool call opened (or an earlier one's header again: a replay)
            if nrids > _TYPED and draw(st.integers(0, 3)) == 0:
                index = draw(st.sampled_from([calls, calls, max(0, calls - 1)]))
                headers.append(TypedRow(_TYPED, calls=[CallFragment(index, f"call_{index}", "f", "", 0)]))
                calls = max(calls, index + 1)
            actions.append(("batch", rows, finished, [r for r in runs if r[0] != _TYPED], kinds if any(kinds) else None,
                            headers))
        turns.append(sorted(actions, key=lambda a: a[0] != "pause"))
    return [[("rids", nrids, draw(st.booleans()), draw(st.booleans()))], *turns]


def _batch(rows: list[tuple[int, str, int]], finished: list[int], counter: list[int],
           runs: list[tuple[int, int, int, bool]] = (), kinds: list[int] | None = None,
           typed: list[TypedRow] | None = None) -> DeltaBatch:
    batch = DeltaBatch.from_rows(0, 0.0, [r for r, _, _ in rows], [t for _, t, _ in rows], [o for _, _, o in rows],
                                 [RequestFinished(rid, Finish("length"), 7) for rid in finished])
    counter[0] += 1
    batch.num_tokens = pack_u32([counter[0] + k for k in range(len(rows))])
    if kinds:
        batch.kinds = bytes(kinds)
    if typed:
        batch.typed = typed
    if runs:  # (split_logprobs, patched below, gives them as the receiver's entries)
        batch.logprobs = [_entry(rid, _run(rid, first, count, rendered)) for rid, first, count, rendered in runs]
    return batch


def _entry(rid: int, run: TokenLogprobs) -> tuple[int, TokenLogprobs, int, list[bytes] | None]:
    """An entry-row as split_logprobs gives it."""
    return rid, run, run.first, run.items


def _run(rid: int, first: int, count: int, rendered: bool) -> TokenLogprobs:
    ids = list(range(first, first + count))
    items = [msgspec.json.encode({"rid": rid, "token": i}) for i in ids] if rendered else None
    return TokenLogprobs(first, ids, [""] * count, [-0.5] * count, [0] * count, [], [], [], items)


@pytest.fixture(autouse=True)
def _entries_as_given(monkeypatch) -> None:
    import detok.receiver.receiver as receiver

    monkeypatch.setattr(receiver, "split_logprobs", lambda pairs: list(pairs))


async def _play(world: _World, plan: list[list[tuple[str, Any]]]) -> None:
    counter = [0]
    await asyncio.sleep(0)  # the consumers wait
    for actions in plan[1:]:
        for action in actions:
            if action[0] == "pause":
                world.conns[action[1]].flow.write_paused = action[2]
            else:
                world.rx.dispatch(_batch(action[1], action[2], counter, action[3], action[4], action[5]))
        await asyncio.sleep(0)  # one loop turn: the pushes of the Python path
        await asyncio.sleep(0)
    for conn in world.conns.values():
        conn.flow.write_paused = False
    world.rx.fail_all("end")
    for _ in range(4):
        await asyncio.sleep(0)


@settings(max_examples=150, deadline=None)
@given(plan=_plans())
def test_any_batches_give_the_same_output_with_the_direct_rows_as_without(receivers, plan) -> None:
    nrids = plan[0][0][1]
    rids = list(range(nrids))
    # one batch a turn, one row per request in it (as the workers send: one row per request a step)
    single = all(sum(a[0] == "batch" for a in actions) <= 1 for actions in plan[1:]) and all(
        len({r for r, _, _ in a[1]}) == len(a[1]) for actions in plan[1:] for a in actions if a[0] == "batch")

    async def run(rx: DeltaReceiver, direct: bool) -> _World:
        for rid in [*rids, nrids, nrids + 1]:
            rx.discard(rid)
        world = _World(rx, rids, direct, items=True, show_reasoning=plan[0][0][2], parallel=plan[0][0][3])
        await _play(world, plan)
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)
        return world

    loop = asyncio.new_event_loop()
    try:
        direct = loop.run_until_complete(run(receivers[0], True))
        python = loop.run_until_complete(run(receivers[1], False))
    finally:
        loop.close()
    for rid in rids:
        assert direct.text(rid) == python.text(rid)
        assert direct.conns[rid].items == python.conns[rid].items
        assert "".join(direct.conns[rid].reasoning) == "".join(python.conns[rid].reasoning)
        for index in {i for i, _ in direct.conns[rid].args + python.conns[rid].args}:  # each call's arguments
            assert "".join(a for i, a in direct.conns[rid].args if i == index) == "".join(
                a for i, a in python.conns[rid].args if i == index)
        assert direct.typed.sent_args == python.typed.sent_args
        a, b = direct.streams[rid], python.streams[rid]
        assert (a._received, a._tokens, a._next_token, a.finish, a.num_tokens) == (
            b._received, b._tokens, b._next_token, b.finish, b.num_tokens)
        assert [d.finish for d in direct.taken[rid]][-1:] == [d.finish for d in python.taken[rid]][-1:]
        if single and rid == _TYPED:  # a parsed request: the same chunks, whoever wrote them, and ticks
            assert direct.conns[rid].events == python.conns[rid].events
            assert direct.ticks[rid] == python.ticks[rid]
        elif single:  # one batch a turn: the same chunks, deltas and clock ticks
            assert direct.conns[rid].out == python.conns[rid].out
            assert direct.taken[rid] == python.taken[rid]
            assert direct.ticks[rid] == python.ticks[rid]


def test_a_row_is_written_by_the_dispatch_itself_only_where_the_python_path_would_push_it(receivers) -> None:
    async def run() -> None:
        rx = receivers[0]
        for rid in (1, 2, 3):
            rx.discard(rid)
        world = _World(rx, [1, 2, 3], direct=True)
        await asyncio.sleep(0)  # the consumers wait
        world.conns[2].flow.write_paused = True
        rx.dispatch(_batch([(1, "Hi", 0), (2, "Yo", 0), (3, "", 0)], [], [0]))
        # written before the loop's turn: the open, waiting, reading stream's row alone
        assert [_RENDER_TEXT(c) for c in world.conns[1].out] == ["Hi"] and world.conns[2].out == []
        assert rx.pushes._streams == [world.streams[2]] and world.streams[2]._chunks == ["Yo"]
        rx.dispatch(_batch([(1, "!", 2)], [1], [0]))  # finished in this batch: the consumer's
        assert len(world.conns[1].out) == 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [d.text for d in world.taken[1]] == ["!"] and world.taken[1][0].finish == Finish("length")
        assert [d.text for d in world.taken[2]] == ["Yo"]  # (a paused client: its consumer takes it)
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())


def test_a_row_and_its_rendered_entries_are_written_together_by_the_dispatch(receivers) -> None:
    async def run() -> None:
        rx = receivers[0]
        for rid in (1, 3):
            rx.discard(rid)
        world = _World(rx, [1, 3], direct=True, items=True)  # (rid 3's entries are not rendered)
        await asyncio.sleep(0)
        rx.dispatch(_batch([(1, "Hi", 0), (3, "Yo", 0)], [], [0], [(1, 0, 2, True), (3, 0, 1, False)]))
        assert [_parts(c) for c in world.conns[1].out] == [("Hi", [{"rid": 1, "token": 0}, {"rid": 1, "token": 1}])]
        assert world.streams[1]._next_token == 2 and world.streams[1]._logprobs == []
        assert world.conns[3].out == [] and world.streams[3]._chunks == ["Yo"]  # (the Python path's)
        rx.dispatch(_batch([(1, "!", 2)], [], [0]))  # a row without its entries: the Python path's
        assert len(world.conns[1].out) == 1 and world.streams[1]._chunks == ["!"]
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())


@pytest.mark.parametrize("show", [True, False])
def test_a_parsed_requests_reasoning_and_content_rows_are_written_by_the_dispatch(receivers, show) -> None:
    async def run() -> None:
        rx = receivers[0]
        rx.discard(_TYPED)
        world = _World(rx, [_TYPED], direct=True, show_reasoning=show)
        await asyncio.sleep(0)
        conn, stream = world.conns[_TYPED], world.streams[_TYPED]
        rx.dispatch(_batch([(_TYPED, "Hi", 0)], [], [0], kinds=[2]))  # (no typed state yet: the Python path's)
        assert conn.out == [] and stream._typed is not None
        for _ in range(3):
            await asyncio.sleep(0)
        assert [d.text for d in world.taken[_TYPED]] == ["Hi"] and world.ticks[_TYPED] == 1  # (the consumer's)
        rx.dispatch(_batch([(_TYPED, "Why", 0)], [], [0], kinds=[1]))
        assert stream._typed.reasoning == 3 and stream._typed.new_reasoning == []
        written = [_RENDER.field(0, "reasoning", "Why")] if show else []
        assert conn.out == [b"%x\r\n%b\r\n" % (len(c), c) for c in written]
        assert world.ticks[_TYPED] == 1 + len(written)
        rx.dispatch(_batch([(_TYPED, " there", 2)], [], [0], kinds=[2]))
        assert conn.out[-1] == b"%x\r\n%b\r\n" % (len(_RENDER.text(0, " there")), _RENDER.text(0, " there"))
        assert stream._typed.content == 8 and stream._chunks == []
        rx.dispatch(_batch([(_TYPED, "{}", 0)], [], [0], kinds=[3]))  # (no call opened yet: the Python path's)
        assert len(conn.out) == len(written) + 1
        rx.dispatch(_batch([], [], [0], typed=[TypedRow(_TYPED, calls=[CallFragment(0, "call_0", "f", "", 0)])]))
        for _ in range(3):
            await asyncio.sleep(0)  # (a call's header: the consumer's)
        rx.dispatch(_batch([(_TYPED, '{"a"', 0)], [], [0], kinds=[3]))
        fragment = _RENDER.field(0, "tool_calls", [{"index": 0, "function": {"arguments": '{"a"'}}])
        assert conn.out[-1] == b"%x\r\n%b\r\n" % (len(fragment), fragment)
        assert world.typed.sent_args == {0: 4} and stream._typed.args == {0: 4}
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())


@pytest.mark.parametrize("error", [OSError("gone"), KeyboardInterrupt()])
def test_a_write_that_raises_reaches_the_consumer_as_the_python_path_hands_it(receivers, error) -> None:
    async def run() -> None:
        rx = receivers[0]
        rx.discard(5)
        world = _World(rx, [5], direct=True)
        await asyncio.sleep(0)
        world.conns[5].fail = error
        if isinstance(error, OSError):
            rx.dispatch(_batch([(5, "x", 0)], [], [0]))
            await asyncio.sleep(0)
            assert world.errors[5] == ["gone"] and world.streams[5]._pusher is None
            assert world.streams[5]._received == 1  # (taken, as the Python pusher's take is)
        else:  # not an Exception: raised through the dispatch, as the Python path's push raises it
            with pytest.raises(KeyboardInterrupt):
                rx.dispatch(_batch([(5, "x", 0)], [], [0]))
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())


def test_hostile_arguments_are_clean_errors() -> None:
    ok: list[Any] = [{}, RequestStream, [1], ["a"], [0], None, None, None, None]
    with pytest.raises(TypeError):
        push_rows(*ok[:8])
    for k, bad in [(0, []), (1, 3), (2, (1,)), (3, "a"), (4, None), (5, (1,)), (6, [1]), (7, (1,)), (7, [None]),
                   (7, [(1, 2, 3)]), (8, "x"), (8, [1])]:
        args = list(ok)
        args[k] = bad
        with pytest.raises(TypeError):
            push_rows(*args)
    with pytest.raises(ValueError, match="length"):
        push_rows({}, RequestStream, [1, 2], ["a"], [0], None, None, None, None)
    with pytest.raises(ValueError, match="length"):
        push_rows({}, RequestStream, [1], ["a"], [0], [1, 2], None, None, None)
    # rows whose stream is not exactly the type, or whose text is not a str: the caller's, untouched
    other = types.SimpleNamespace(_received=0)
    assert push_rows({1: other, 2: object()}, RequestStream, [1, 2, 3], ["a", "b", "c"], [0, 0, 0], None, None, None, None) == [0, 1]
    assert other._received == 0
    assert push_rows({}, RequestStream, [1], ["a"], [0], None, None, None, None) is None


def test_no_reference_is_leaked_where_a_run_does_not_fit(receivers) -> None:
    # (an items-mode row whose run starts past the token the stream expects: left to the caller,
    # every object's count as it was, None's included)
    async def run() -> None:
        rx = receivers[0]
        rx.discard(1)
        world = _World(rx, [1], direct=True, items=True)
        await asyncio.sleep(0)
        entries = [_entry(1, _run(1, 5, 1, True))]
        args = (rx._streams, RequestStream, [1], ["x"], [0], None, None, entries, None)
        push_rows(*args)
        nones, runs = sys.getrefcount(None), sys.getrefcount(entries[0][1])
        for _ in range(3000):
            assert push_rows(*args) == [0]
        # (None is shared: a few references come and go elsewhere, one per row would be 3,000)
        nones_after, runs_after = sys.getrefcount(None), sys.getrefcount(entries[0][1])
        assert abs(nones_after - nones) < 50 and runs_after == runs
        assert world.conns[1].out == [] and world.streams[1]._next_token == 0
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())


def test_no_reference_is_leaked_over_many_rows(receivers) -> None:
    async def run() -> None:
        rx = receivers[0]
        rx.discard(9)
        world = _World(rx, [9], direct=True)
        await asyncio.sleep(0)
        stream = world.streams[9]
        text = "a shared text é"
        rows = [9]
        before = (sys.getrefcount(text), sys.getrefcount(stream), sys.getrefcount(rows[0]))
        for k in range(3000):
            assert push_rows(rx._streams, RequestStream, rows, [text], [k * len(text)], [k + 1], None, None, None) is None
        assert len(world.conns[9].out) == 3000
        world.conns[9].out.clear()
        assert (sys.getrefcount(text), sys.getrefcount(stream), sys.getrefcount(rows[0])) == before
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())



class _Subclass(RequestStream):
    """A stream type of RequestStream's fields and one more slot."""

    __slots__ = ("extra",)


def test_push_rows_reads_the_streams_own_fields(receivers) -> None:
    # push_rows reads a stream's StreamFields (its base's storage), of any type derived from it; a
    # type not derived from it is refused; a field unset (deleted) leaves the row to the Python path
    async def run() -> None:
        rx = receivers[0]
        rx.discard(4)
        world = _World(rx, [4], direct=True)
        sub = _Subclass(6, rx)
        conn = _Conn()
        sub.push_to(TextPusher(lambda s: False, conn.flow, conn.cycle, conn.write, None, _PREFIX, _SUFFIX,
                               take=RequestStream.take_text))
        task = asyncio.ensure_future(anext(sub))
        await asyncio.sleep(0)
        plain = world.streams[4]
        for k in range(2):
            assert push_rows({4: plain}, RequestStream, [4], ["ab"], [2 * k], None, None, None, None) is None
            assert push_rows({6: sub}, _Subclass, [6], ["cd"], [2 * k], [k + 1], None, None, None) is None
        assert plain._received == 4 and sub._received == 4 and sub._tokens == 2
        assert [_RENDER_TEXT(c) for c in conn.out] == ["cd", "cd"]
        with pytest.raises(TypeError, match="StreamFields"):
            push_rows({6: sub}, dict, [6], ["e"], [4], None, None, None, None)
        del sub._received
        assert push_rows({6: sub}, _Subclass, [6], ["e"], [4], None, None, None, None) == [0]
        with pytest.raises(AttributeError, match="_received"):
            sub._feed("e", 4)
        assert [_RENDER_TEXT(c) for c in conn.out] == ["cd", "cd"]
        task.cancel()
        rx.fail_all("end")
        await asyncio.wait_for(asyncio.gather(*world.tasks), 5)

    asyncio.run(run())
