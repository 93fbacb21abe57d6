"""Wire messages: every union round-trips through its socket's typed decoder, tags keep the
unions apart, messages are msgpack arrays (no field names, no pickle), bad bytes are rejected."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from detok import wire as p
from detok.wire.params import DecodeParams, Finish

PARAMS = DecodeParams(stop=("\n\n", "END"), stop_token_ids=(7,), min_tokens=2)


def _batch() -> p.DetokBatch:
    return p.DetokBatch(
        seq=3,
        sent_at=1234.5,
        new=[p.Registration(2**62 + 5, "ipc:///tmp/x/fe", [1, 2, 3], PARAMS, ignore_eos=True)],
        rids=p.pack_rids([2**62 + 5, 9]),
        starts=p.pack_u32([0, 17]),
        counts=p.pack_u32([3, 1]),
        tokens=p.pack_u32([1, 70000, 128255, 4]),
        ends=[p.EndRequest(9, "length"), p.EndRequest(11, "stop", 128001)],
    )


@pytest.mark.parametrize(
    ("message", "decoder"),
    [
        (_batch(), p.worker_inbound_decoder),
        (p.FailRequests([1, 2], ["ipc:///a", "tcp://h:1"], "detok worker 0 died"), p.worker_inbound_decoder),
        (
            p.DeltaBatch.from_rows(1, 2.5, [1, 2], ["he", "\u5317\U0001fae8"], [0, 40], [p.RequestFinished(2, Finish("stop", "END"), 12)]),
            p.frontend_inbound_decoder,
        ),
        (p.StopNotice(0, [5], [Finish("stop", 7)], [6]), p.scheduler_notice_decoder),
        (p.WorkerEvent(1, "died", 4242, 2, "killed by SIGKILL"), p.scheduler_notice_decoder),
        (p.GenerateRequest(1, [1, 2, 3], PARAMS, 64, "ipc:///fe", seed=3, temperature=0.5), p.scheduler_request_decoder),
        (p.Abort(1), p.scheduler_request_decoder),
        (p.WorkerLoaded(10, "bytes", 0.5), p.supervisor_inbound_decoder),
        (p.WorkerReady(0, 10, "tcp://127.0.0.1:5555"), p.supervisor_inbound_decoder),
        (p.WorkerStartFailed(10, "TokenizerLoadError: nope"), p.supervisor_inbound_decoder),
        (p.WorkerHeartbeat(10), p.supervisor_inbound_decoder),
        (p.AssignSlot(0, "ipc:///w0", 2, "killed"), p.supervisor_command_decoder),
        (p.StopWorker(), p.supervisor_command_decoder),
    ],
)
def test_round_trip(message: msgspec.Struct, decoder) -> None:
    data = p.new_encoder().encode(message)
    assert decoder().decode(data) == message
    # array_like: the message is a msgpack array whose first item is the tag, no field names
    raw = msgspec.msgpack.decode(data)
    assert isinstance(raw, list)
    assert b"reply_to" not in data and b"rids" not in data


def test_no_pickle_on_the_wire() -> None:
    data = p.new_encoder().encode(_batch())
    assert not data.startswith(b"\x80")  # pickle protocol header
    with pytest.raises(msgspec.DecodeError):
        p.worker_inbound_decoder().decode(pickle.dumps({"rid": 1}))


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00", b"\xff" * 64, b"hello world", msgspec.msgpack.encode(["batch", 1]), msgspec.msgpack.encode(["nope", 1, 2])],
)
def test_garbage_is_rejected_by_the_typed_decoder(garbage: bytes) -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        p.worker_inbound_decoder().decode(garbage)


def test_a_message_for_another_socket_is_rejected() -> None:
    delta = p.new_encoder().encode(p.DeltaBatch(0, 0.0, b"", b"", b"", b"", []))
    with pytest.raises(msgspec.ValidationError):
        p.worker_inbound_decoder().decode(delta)


def test_invalid_decode_params_do_not_decode() -> None:
    # DecodeParams validates itself on decode too: a bad value never reaches a stream.
    bad = msgspec.msgpack.encode(["generate", 1, [1], [True, True, [""]], 4, "ipc:///fe"])
    with pytest.raises(msgspec.ValidationError):
        p.scheduler_request_decoder().decode(bad)


def test_delta_rows() -> None:
    batch = p.DeltaBatch.from_rows(0, 0.0, [2**62, 5, 6], ["a\U0001fae8", "", "北京"], [7, 0, 3])
    assert batch.text == "a\U0001fae8北京".encode() and p.unpack_u32(batch.lengths).tolist() == [2, 0, 2]
    assert list(batch.rows()) == [(2**62, "a\U0001fae8", 7), (5, "", 0), (6, "北京", 3)]


@pytest.mark.parametrize(
    ("text", "lengths", "rids"),
    [
        ("abc".encode(), [1, 1], [1, 2]),  # lengths add up to fewer chars than the text
        ("abc".encode(), [2, 2], [1, 2]),  # to more
        (b"\xff\xfe", [1, 1], [1, 2]),  # not UTF-8
        ("ab".encode(), [1, 1], [1]),  # a length per row, but fewer rids
    ],
)
def test_delta_rows_that_do_not_fit_are_a_value_error(text: bytes, lengths: list[int], rids: list[int]) -> None:
    batch = p.DeltaBatch(0, 0.0, p.pack_rids(rids), text, p.pack_u32(lengths), p.pack_u32([0] * len(lengths)), [])
    with pytest.raises(ValueError):
        list(batch.rows())


def test_packed_columns() -> None:
    ids = [0, 1, 65535, 65536, 128255, 2**32 - 1]
    assert p.unpack_u32(p.pack_u32(ids)).tolist() == ids
    assert len(p.pack_u32(ids)) == 4 * len(ids)
    rids = [0, 2**63 - 1, 12345678901234]
    assert p.unpack_rids(p.pack_rids(rids)).tolist() == rids
    with pytest.raises(ValueError, match="multiple of 4"):
        p.unpack_u32(b"\x00" * 5)
    with pytest.raises(OverflowError):
        p.pack_u32([2**32])


def test_packed_token_ids_are_smaller_than_msgpack_ints_for_large_vocabularies() -> None:
    ids = list(range(100_000, 101_024))  # Llama-3 ids above 65535 take 5 bytes as msgpack ints
    assert len(msgspec.msgpack.encode(p.pack_u32(ids))) < len(msgspec.msgpack.encode(ids))


def test_registration_for_takes_the_prompt_tail() -> None:
    req = p.GenerateRequest(9, list(range(100)), PARAMS, 16, "ipc:///fe", ignore_eos=True)
    reg = p.registration_for(req)
    assert reg == p.Registration(9, "ipc:///fe", list(range(100 - p.CONTEXT_TOKENS, 100)), PARAMS, True)
