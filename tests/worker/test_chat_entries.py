"""Chat logprobs rendered by the workers (`logprobs_form="chat"`, detok.worker.chat_entries): the
items are byte for byte what the frontend's writer makes of the entries form, for any ids (outside
the vocabulary, bytes: tokens), floats (NaN, infinities, below OpenAI's floor), k and alternatives,
compiled and in Python; through a WorkerCore whatever the grouping, with replays, mixed forms and
several frontends; and a receiver refuses items that do not fit."""

from __future__ import annotations

import math
import os

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.streaming import chat_logprobs_json as frontend_writer
from detok.receiver.token_logprobs import RawToken, TokenLogprobs, split_logprobs
from detok.wire.params import DecodeParams
from detok.wire.to_frontends import DeltaLogprobs
from detok.wire.to_workers import EndRequest, MAX_TOP_LOGPROBS, Registration
from detok.worker.chat_entries import ChatFragments
from detok.worker.core import WorkerCore
from detok.worker.logprobs import TokenStrings
from tests.helpers.logprob_helpers import EntryCollector, lp_batch

FE, FE2 = "ipc:///tmp/detok-test/ce0", "ipc:///tmp/detok-test/ce1"
EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "40"))


def frontend_object(strings: TokenStrings, ids, lps, counts, top_ids, top_lps, k: int, compiled: bool) -> bytes:
    """What the frontend writes for these entries in the entries form (its token strings as the
    worker sends them: a bytes: string arrives as a RawToken)."""
    def token(i: int) -> str:
        text, raw = strings.string(i)
        return RawToken.parse(text) if raw else text

    as_f32 = lambda v: np.asarray(v, dtype=np.float32).astype(np.float64).tolist()  # noqa: E731 - as the wire carries them
    entries = TokenLogprobs(0, list(ids), [token(i) for i in ids], as_f32(lps), list(counts), list(top_ids),
                            [token(i) for i in top_ids], as_f32(top_lps))
    if compiled:
        return frontend_writer.chat_object(entries, k)
    return frontend_writer._structs_encoded(entries, k)


def worker_object(fragments: ChatFragments, ids, lps, counts, top_ids, top_lps, k: int) -> bytes:
    n = len(ids)
    items, lengths = fragments.render(np.asarray(ids, np.uint32), np.full(n, k, np.int32), np.asarray(lps, np.float32),
                                      np.asarray(counts, np.uint32), np.asarray(top_ids, np.uint32),
                                      np.asarray(top_lps, np.float32))
    ends = np.cumsum(np.frombuffer(lengths, "<u4")).tolist()
    assert len(ends) == n and (not n or ends[-1] == len(items))
    parts = [items[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    assert all(parts)
    return b'{"content":[' + b",".join(parts) + b"]}"


floats = st.one_of(
    st.floats(-30.0, 0.0, width=32),
    st.sampled_from([0.0, -0.0, -9999.0, -9999.5, -1e5, -1e-8, math.inf, -math.inf, math.nan, 3.5]),
)


@st.composite
def step_columns(draw, vocab: int):
    k = draw(st.integers(0, MAX_TOP_LOGPROBS), label="k")
    n = draw(st.integers(0, 8), label="entries")
    any_id = st.one_of(st.integers(0, vocab - 1), st.integers(vocab, 2**32 - 1))
    ids = draw(st.lists(any_id, min_size=n, max_size=n), label="ids")
    counts = draw(st.lists(st.integers(0, k), min_size=n, max_size=n), label="top_counts")  # capped at k, as sent
    top_ids = []
    for sid, c in zip(ids, counts):  # the sampled id among its alternatives or not, as a scheduler sends
        top_ids += draw(st.lists(st.one_of(st.just(sid), any_id), min_size=c, max_size=c))
    lps = draw(st.lists(floats, min_size=n, max_size=n), label="logprobs")
    top_lps = draw(st.lists(floats, min_size=len(top_ids), max_size=len(top_ids)), label="top_logprobs")
    return ids, lps, counts, top_ids, top_lps, k


@pytest.mark.parametrize("source", ["qwen", "spm"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_items_are_the_frontend_writers_bytes(source: str, compiled: bool, qwen, spm, data) -> None:
    tok = {"qwen": qwen, "spm": spm}[source]
    strings = TokenStrings.of(tok)
    fragments = ChatFragments(strings)  # (own fragments: the compiled flag is this test's)
    if compiled and not fragments.compiled:
        pytest.skip("the compiled writer is not built")
    fragments.compiled = compiled
    columns = data.draw(step_columns(tok.vocab_size))
    expected = frontend_object(strings, *columns, compiled=data.draw(st.booleans(), label="frontend compiled"))
    assert worker_object(fragments, *columns) == expected
    json = msgspec.json.decode(expected)
    assert all(len(c["top_logprobs"]) <= max(columns[-1], 0) for c in json["content"])


def test_a_bytes_token_keeps_its_own_bytes(spm) -> None:
    """A byte-fallback piece (<0xE5>) is named `bytes:\\xe5` with its byte in `bytes`."""
    strings = TokenStrings.of(spm)
    byte_id = next(i for i in range(spm.vocab_size) if strings.string(i)[1])
    text, data = strings.string_and_bytes(byte_id)
    got = msgspec.json.decode(worker_object(ChatFragments.of(strings), [byte_id], [-0.5], [0], [], [], 0))
    assert got["content"][0]["token"] == text and text.startswith("bytes:")
    assert bytes(got["content"][0]["bytes"]) == data and len(data) == 1


def test_malformed_columns_raise(qwen) -> None:
    fragments = ChatFragments(TokenStrings.of(qwen))
    if not fragments.compiled:
        pytest.skip("the compiled writer is not built")
    ids, ks, lps = np.array([1, 2], np.uint32), np.array([1, 1], np.int32), np.array([-1, -2], np.float32)
    with pytest.raises(ValueError, match="top_counts past"):
        fragments.render(ids, ks, lps, np.array([1, 1], np.uint32), np.array([5], np.uint32), np.array([-3], np.float32))
    from detok._native._chatentries import render

    fragments.fill(np.array([1, 2, 5], np.uint32))
    table, buf = fragments._table, fragments._buf
    with pytest.raises(ValueError, match="top_counts past"):  # the compiled writer checks it too
        render(ids.tobytes(), ks.tobytes(), lps.astype(np.float64).tobytes(), b"[-1.0,-2.0]",
               np.array([1, 1], "<u4").tobytes(), (5).to_bytes(4, "little"), np.float64(-3).tobytes(), b"[-3.0]",
               table, buf)
    with pytest.raises(ValueError, match="different lengths"):
        render(b"\0" * 8, b"\0" * 4, b"\0" * 16, b"[1,2]", b"\0" * 8, b"", b"", b"[]", table, buf)
    one = ((7).to_bytes(4, "little"), b"\0" * 4, b"\0" * 8, b"[0.0]", b"\0" * 4, b"", b"", b"[]")
    with pytest.raises(ValueError, match="no fragments"):  # an id whose fragments were never made
        render(*one, np.full((10, 3), -1, np.int64), buf)
    with pytest.raises(ValueError, match="no fragments"):  # a row pointing past the buffer
        render(*one, np.full((10, 3), 1 << 40, np.int64), buf)
    with pytest.raises(ValueError, match="whole items"):
        render(*one, b"\0" * 20, buf)


# ---- through the worker ----------------------------------------------------------------------
def reg(rid: int, k: int, form: str, reply_to: str = FE) -> Registration:
    return Registration(rid, reply_to, [], DecodeParams(), logprobs=k, logprobs_form=form)  # type: ignore[arg-type]


def joined_object(col: EntryCollector, rid: int) -> bytes:
    """The chat logprobs object of a rid's runs joined as a non-streamed body joins its chunks'."""
    runs = [run for _, r, run in col.runs if r == rid]
    seen, parts = 0, []
    for run in runs:  # (a receiver drops what it already has: replays)
        if run.end > seen:
            parts.append(frontend_writer.chat_logprobs_json(run.tail(seen), K))
            seen = run.end
    return bytes(frontend_writer.joined_chat_logprobs(parts))


K = 4


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_chat_form_equals_the_entries_form_whatever_the_grouping(qwen, compiled: bool, data) -> None:
    """Two requests, the same tokens and numbers, one in each form, stepped in different groupings
    (with overlapping replays) and to two frontends: the same logprobs object, and the chat form's
    runs carry no strings and no alternatives."""
    ids = data.draw(st.lists(st.integers(0, qwen.vocab_size - 1), min_size=1, max_size=30), label="ids")
    core = WorkerCore(qwen)
    fragments = ChatFragments.of(TokenStrings.of(qwen))
    saved, fragments.compiled = fragments.compiled, compiled and fragments.compiled
    try:
        col = EntryCollector()
        entries_rid, chat_rid, other_rid = 10, 11, 12
        col.take(core.handle_batch(lp_batch([], [], [], new=[reg(entries_rid, K, "entries"), reg(chat_rid, K, "chat"),
                                                                reg(other_rid, 2, "chat", FE2)])))
        seeds = {chat_rid: entries_rid, other_rid: entries_rid}
        for rid in (entries_rid, chat_rid, other_rid):
            p = 0
            while p < len(ids):
                n = data.draw(st.integers(1, 5), label="step")
                back = data.draw(st.integers(0, min(p, 2)), label="replayed")  # a replay from an earlier token
                chunk = ids[p - back : p + n]
                both = [rid, entries_rid] if rid != entries_rid and p - back == p else [rid]
                batch_ids = chunk * len(both)
                col.take(core.handle_batch(lp_batch(both, [p - back] * len(both), batch_ids, [len(chunk)] * len(both),
                                                    sent_k={r: 6 for r in both}, vocab=qwen.vocab_size, seeds=seeds)))
                p += len(chunk) - back
        col.take(core.handle_batch(lp_batch([], [], [], ends=[EndRequest(r, "length") for r in (entries_rid, chat_rid, other_rid)])))
    finally:
        fragments.compiled = saved
    for _, rid, run in col.runs:
        assert (run.items is not None) == (rid != entries_rid)
        if run.items is not None:
            assert run.tokens == [""] * len(run) and run.top_ids == [] and len(run.items) == len(run)
    assert joined_object(col, chat_rid) == joined_object(col, entries_rid)
    got = msgspec.json.decode(joined_object(col, other_rid))["content"]
    want = msgspec.json.decode(joined_object(col, entries_rid))["content"]
    # every token's entry, up to an end-of-sequence id drawn among them (the request ends there)
    ends = [i + 1 for i, t in enumerate(ids) if t in qwen.eos_token_ids]
    assert [c["token"] for c in got] == [c["token"] for c in want] and len(got) == (ends[0] if ends else len(ids))
    assert all(len(c["top_logprobs"]) == 2 for c in got)  # its own k


def test_a_replayed_run_is_cut_by_token_index(qwen) -> None:
    core = WorkerCore(qwen)
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(5, 2, "chat")])))
    col.take(core.handle_batch(lp_batch([5], [0], [100, 200, 300], [3], sent_k={5: 3}, vocab=qwen.vocab_size)))
    col.take(core.handle_batch(lp_batch([5], [1], [200, 300, 400], [3], sent_k={5: 3}, vocab=qwen.vocab_size)))
    first, again = col.runs[0][2], col.runs[1][2]
    assert again.first == 1 and again.items[:2] == first.items[1:]  # type: ignore[index]
    tail = again.tail(3)
    assert tail.first == 3 and tail.items == again.items[2:] and tail.token_ids == [400]  # type: ignore[index]
    joined = TokenLogprobs.concat([first, tail])
    assert joined.items == first.items + tail.items and joined.token_ids == [100, 200, 300, 400]  # type: ignore[operator]
    with pytest.raises(ValueError, match="rendered and unrendered"):
        TokenLogprobs.concat([first, TokenLogprobs(3, [1], [""], [0.0], [0], [], [], [])])


# ---- the receiver's checks --------------------------------------------------------------------
def one_row(n: int, items: bytes, lengths: list[int]) -> DeltaLogprobs:
    u32 = lambda v: np.asarray(v, "<u4").tobytes()  # noqa: E731
    return DeltaLogprobs((7).to_bytes(8, "little"), u32([0]), u32([n]), u32(range(n)), np.zeros(n, "<f4").tobytes(),
                         u32([0] * n), b"", b"", b"", u32([0] * n), b"", items, u32(lengths))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_receiver_cuts_items_and_refuses_what_does_not_fit(compiled: bool, monkeypatch) -> None:
    from detok.receiver import token_logprobs

    if compiled and token_logprobs._rows is None:
        pytest.fail("the compiled cut is not built (detok/_native/_logprobrows.c)")
    if not compiled:
        monkeypatch.setattr(token_logprobs, "_rows", None)
    [(rid, run, _, _)] = split_logprobs(one_row(2, b'{"a":1}{"b":22}', [7, 8]))
    assert rid == 7 and run.items == [b'{"a":1}', b'{"b":22}']
    with pytest.raises(ValueError, match="do not fit"):
        split_logprobs(one_row(2, b'{"a":1}{"b":22}', [7, 9]))
    with pytest.raises(ValueError, match="do not fit"):
        split_logprobs(one_row(2, b'{"a":1}', [7]))
    with pytest.raises(ValueError, match="partly rendered"):
        split_logprobs(one_row(2, b'{"a":1}', [7, 0]))
    with pytest.raises(ValueError, match="partly rendered"):
        split_logprobs(one_row(2, b'{"a":1}', [0, 7]))
    with pytest.raises(ValueError, match="do not fit"):  # lengths with no items at all
        split_logprobs(one_row(2, b"", [7, 8]))
    [(_, plain, _, _)] = split_logprobs(one_row(2, b"", []))
    assert plain.items is None
    two = DeltaLogprobs(np.array([7, 8], "<u8").tobytes(), np.array([0, 0], "<u4").tobytes(),
                        np.array([1, 2], "<u4").tobytes(), bytes(12), bytes(12), bytes(12), b"", b"", b"",
                        bytes(12), b"", b"{}[]", np.array([0, 2, 2], "<u4").tobytes())
    [(_, unrendered, _, none), (_, rendered, first, items)] = split_logprobs(two)  # a batch of both forms
    assert unrendered.items is None and rendered.items == [b"{}", b"[]"]
    assert none is None and first == rendered.first and items is rendered.items  # (what push_rows reads)


def test_parts_joined_for_one_frontend_keep_their_items(qwen) -> None:
    """`join_parts` (several parts of one batch for one frontend, the rare path): items and their
    lengths follow their entries, zeros for a part without items."""
    from detok.worker.logprobs import _pack, join_parts

    strings = TokenStrings.of(qwen)
    u32 = lambda v: np.asarray(v, np.uint32)  # noqa: E731
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731

    def part(rid: int, chat_k: int | None) -> DeltaLogprobs:
        return _pack(strings, np.array([rid]), np.array([0]), np.array([2]), u32([100, 200]), f32([-0.5, -1.5]),
                     u32([1, 1]), u32([300, 400]), f32([-2.0, -3.0]),
                     np.array([chat_k]) if chat_k is not None else None)

    joined = join_parts([part(1, None), part(2, 2), part(3, None), part(4, 0)])
    rows = {rid: run for rid, run, _, _ in split_logprobs(joined)}
    assert rows[1].items is None and rows[3].items is None and rows[1].tokens[0] == strings.string(100)[0]
    assert rows[1].top_ids == [300, 400] and rows[2].top_ids == []
    for rid, k in ((2, 2), (4, 0)):
        alone = {r: run for r, run, _, _ in split_logprobs(part(rid, k))}[rid]
        assert rows[rid].items == alone.items and len(alone.items) == 2  # type: ignore[arg-type]
        assert all(len(msgspec.json.decode(i)["top_logprobs"]) == k for i in alone.items)  # type: ignore[union-attr]


# ---- the new field on the wire ------------------------------------------------------------------
def test_logprobs_form_on_the_wire_old_senders_and_foreign_values() -> None:
    """An older sender's registration and request (no logprobs_form) decode as "entries"; a value
    that is neither form is refused by the typed decoders (a foreign peer's message is dropped)."""
    from detok import wire
    from detok.wire.to_scheduler import GenerateRequest, scheduler_request_decoder
    from detok.wire.to_workers import DetokBatch

    enc = msgspec.msgpack.Encoder()
    request = GenerateRequest(7, [1, 2], DecodeParams(), 4, FE, logprobs=2, logprobs_form="chat")
    as_array = msgspec.msgpack.decode(enc.encode(request))
    decode = scheduler_request_decoder().decode
    assert decode(enc.encode(as_array)).logprobs_form == "chat"
    assert decode(enc.encode(as_array[:-1])).logprobs_form == "entries"  # an older sender
    with pytest.raises(msgspec.ValidationError):
        decode(enc.encode([*as_array[:-1], "html"]))
    reg = msgspec.msgpack.decode(enc.encode(Registration(7, FE, [], DecodeParams(), logprobs=2, logprobs_form="chat")))
    empty = msgspec.msgpack.decode(enc.encode(DetokBatch(0, 0.0, [], b"", b"", b"", b"", [], None)))
    at = 1 + DetokBatch.__struct_fields__.index("new")  # (after the tag)

    def batch(registration: list) -> bytes:
        return enc.encode([*empty[:at], [registration], *empty[at + 1 :]])

    worker_decode = wire.worker_inbound_decoder().decode
    assert worker_decode(batch(reg)).new[0].logprobs_form == "chat"
    assert worker_decode(batch(reg[:-1])).new[0].logprobs_form == "entries"
    with pytest.raises(msgspec.ValidationError):
        worker_decode(batch([*reg[:-1], 3]))
