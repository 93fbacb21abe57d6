"""A request the scheduler ends (length, abort, EOS) while the worker holds text: what is released
at the end is what an in-process DecodeStream's `finish` releases, and when that release completes
a stop string (held incomplete bytes become U+FFFD) the request ends at the stop string, with its
reason and match, as DecodeStream says. Found by the rid-reuse pool test in CI: the worker cut the
text at the stop string but reported the scheduler's reason."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detok
from detok.wire.params import DecodeParams, Finish
from detok.wire.to_workers import EndRequest, Registration
from detok.worker.core import WorkerCore
from tests.helpers.reuse_driver import expected
import tests.helpers.stream_roster as stream_roster
from tests.worker.test_worker_core import FE, MIXED, Collector, batch

EOS = 151643
ENDS = [("length", None), ("abort", None), ("stop", EOS)]
FAILED = "the scheduler failed it"


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return stream_roster.get("qwen2")  # (shared by the process's tests: one load and decode plan)


@pytest.fixture(scope="module")
def mixed_ids(tok) -> list[int]:
    return tok.encode(MIXED)


def _end(reason: str, matched: int | None, rid: int) -> EndRequest:
    return EndRequest(rid, reason, matched, FAILED if reason == "error" else None)


@pytest.mark.parametrize(("reason", "matched"), ENDS)
def test_an_end_whose_released_tail_completes_a_stop_string_finishes_at_it(tok, reason: str, matched: int | None) -> None:
    ids = tok.encode(" नमस्ते")
    tokens = ids[:5]  # ' नमस्' and the first byte of 'त': ' नमस्\ufffd' if decoded now
    assert tok.decode(tokens) == " नमस्\ufffd"
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(7, FE, [], DecodeParams(stop=("्\ufffd",)))])))
    for j, t in enumerate(tokens):
        got.take(core.handle_batch(batch([7], [j], [t])))
    assert got.text[7] == " नमस" and 7 not in got.finish  # the virama held: it may begin the stop string
    got.take(core.handle_batch(batch([], [], [], ends=[EndRequest(7, reason, matched)])))
    assert got.text[7] == " नमस"
    assert got.finish[7] == Finish("stop", "्\ufffd")
    assert got.num_tokens[7] == len(tokens)
    assert core.counts.stops == {"string": 1}
    assert got.notices == []  # the scheduler ended it itself: nothing to tell it
    assert 7 not in core.live


def test_a_schedulers_error_keeps_its_reason_when_the_released_tail_completes_a_stop_string(tok) -> None:
    tokens = tok.encode(" नमस्ते")[:5]
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(7, FE, [], DecodeParams(stop=("्\ufffd",)))])))
    got.take(core.handle_batch(batch([7], [0], tokens, counts=[len(tokens)])))
    got.take(core.handle_batch(batch([], [], [], ends=[_end("error", None, 7)])))
    assert got.text[7] == " नमस"  # cut at the stop string all the same
    assert got.finish[7] == Finish("error", None, FAILED)
    assert core.counts.stops == {}


@pytest.mark.parametrize(("reason", "matched"), ENDS)
def test_an_end_whose_released_tail_is_no_stop_keeps_the_schedulers_reason(tok, reason: str, matched: int | None) -> None:
    tokens = tok.encode(" नमस्ते")[:5]
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(7, FE, [], DecodeParams(stop=("्x",)))])))
    got.take(core.handle_batch(batch([7], [0], tokens, counts=[len(tokens)])))
    got.take(core.handle_batch(batch([], [], [], ends=[EndRequest(7, reason, matched)])))
    assert got.text[7] == " नमस्\ufffd"
    assert got.finish[7] == Finish(reason, matched)  # type: ignore[arg-type]
    assert core.counts.stops == {}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_ended_requests_with_stop_strings_match_a_local_stream(tok, mixed_ids, data: st.DataObject) -> None:
    """Any slice of mixed-script text, a stop string cut from its own decoded text (which may end
    in the U+FFFD of an incomplete tail), tokens in any grouping, then each kind of end."""
    start = data.draw(st.integers(0, len(mixed_ids) - 2), label="start")
    n_ctx = data.draw(st.integers(0, min(3, start)), label="context")
    length = data.draw(st.integers(1, min(12, len(mixed_ids) - start)), label="length")
    context, tokens = mixed_ids[start - n_ctx : start], mixed_ids[start : start + length]
    full = tok.decode(context + tokens)[len(tok.decode(context)) :]
    at = data.draw(st.integers(0, max(0, len(full) - 1)), label="at")
    width = data.draw(st.integers(1, 3), label="width")
    stop = full[at : at + width] or "zz"
    params = DecodeParams(stop=(stop,))
    reason, matched = data.draw(st.sampled_from([*ENDS, ("error", None)]), label="end")
    want = expected(tok, context, tokens, params, reason, FAILED if reason == "error" else None, matched)

    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(3, FE, context, params)])))
    pos = 0
    while pos < len(tokens) and 3 not in got.finish:
        size = data.draw(st.integers(1, len(tokens) - pos), label="group")
        got.take(core.handle_batch(batch([3], [pos], tokens[pos : pos + size], counts=[size])))
        pos += size
    got.take(core.handle_batch(batch([], [], [], ends=[_end(reason, matched, 3)])))
    assert (got.text.get(3, ""), got.finish[3]) == want
