"""`DeadRanges`: a dead frontend's rid range refuses late requests for a while, then forgets;
however many frontends die, at most MAX_DEAD_RANGES are held."""

from __future__ import annotations

import msgspec

from detok.api.scheduler_link import MAX_FRONTENDS, rid_base, rid_range
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import AbortRange, scheduler_request_decoder
from scheduler_stub.rid_ranges import MAX_DEAD_RANGES, DeadRanges, range_error


def test_a_dead_range_holds_its_rids_only():
    dead = DeadRanges()
    first, end = rid_range(3, 7)
    dead.add(first, end)
    assert dead.holds(first) and dead.holds(first + 12345) and dead.holds(end - 1)
    assert not dead.holds(end) and not dead.holds(first - 1)
    assert not dead.holds(rid_base(3, 8) + 1)  # the restarted frontend's rids run


def test_a_dead_range_is_forgotten_after_its_hold():
    dead = DeadRanges(hold_s=0.0)
    dead.add(*rid_range(0, 0))
    assert not dead.holds(1) and len(dead) == 0


def test_endless_restarts_hold_a_bounded_number_of_ranges():
    dead = DeadRanges()
    for n in range(5 * MAX_DEAD_RANGES):
        dead.add(*rid_range(n % MAX_FRONTENDS, n // MAX_FRONTENDS))
        assert len(dead) <= MAX_DEAD_RANGES
    assert len(dead) == MAX_DEAD_RANGES
    last = 5 * MAX_DEAD_RANGES - 1
    assert dead.holds(rid_range(last % MAX_FRONTENDS, last // MAX_FRONTENDS)[0])
    assert not dead.holds(rid_range(0, 0)[0])  # the oldest went first


def test_abort_range_travels_and_hostile_ranges_are_refused():
    message = AbortRange(*rid_range(MAX_FRONTENDS - 1, 127))
    assert scheduler_request_decoder().decode(new_encoder().encode(message)) == message
    assert range_error(message) is None and message.end == 2**63
    for first, end in ((5, 5), (6, 5), (-1, 4), (0, 2**63 + 1)):
        assert range_error(AbortRange(first, end)) is not None
    assert msgspec.msgpack.decode(new_encoder().encode(message))[0] == "abort_range"
