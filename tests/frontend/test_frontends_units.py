"""`--frontends N` without processes: rid spaces, the divided connection bound, the CLI value, the
health a frontend process reads."""

from __future__ import annotations

import argparse
import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detok.serve.health_share import STALE_AFTER_S, HealthBoard, HealthView
from detok.api.scheduler_link import _RID_COUNTER_BITS, MAX_FRONTENDS, rid_base, rid_range
from detok.serve.serve import ServeConfig
from detok.serve.serve_cli import _frontends


@given(a=st.tuples(st.integers(0, MAX_FRONTENDS - 1), st.integers(0, 127)),
       b=st.tuples(st.integers(0, MAX_FRONTENDS - 1), st.integers(0, 127)),
       n=st.integers(1, (1 << _RID_COUNTER_BITS) - 1))
def test_rid_spaces_are_disjoint_and_fit_63_bits(a, b, n):
    rid_a, rid_b = rid_base(*a) | n, rid_base(*b) | n
    assert 0 < rid_a < 1 << 63
    assert (rid_a == rid_b) == (a == b)


@given(a=st.tuples(st.integers(0, MAX_FRONTENDS - 1), st.integers(0, 127)),
       b=st.tuples(st.integers(0, MAX_FRONTENDS - 1), st.integers(0, 127)),
       n=st.integers(1, (1 << _RID_COUNTER_BITS) - 1))
def test_a_dead_frontends_rid_range_holds_its_rids_and_no_other(a, b, n):
    """The AbortRange the supervisor sends for frontend `a` stops exactly `a`'s requests."""
    first, end = rid_range(*a)
    assert (first <= rid_base(*b) | n < end) == (a == b)


def test_rid_base_refuses_an_index_out_of_range():
    with pytest.raises(ValueError):
        rid_base(MAX_FRONTENDS, 0)


def test_the_connection_bound_is_divided_among_the_frontends():
    assert ServeConfig(max_connections=100, frontends=4).http_limits().max_connections == 25
    assert ServeConfig(max_connections=100, frontends=1).http_limits().max_connections == 100


def test_frontends_argument():
    assert _frontends("3") == 3 and _frontends("auto") >= 1
    with pytest.raises(argparse.ArgumentTypeError):
        _frontends("0")


def test_health_view_reads_the_board_and_a_stale_board_means_the_scheduler_is_down(tmp_path):
    path = str(tmp_path / "health.json")
    board = HealthBoard(path, lambda: {"components": {"pool": True, "scheduler": True}, "detail": {"x": 1},
                                       "generation": 3})
    try:
        view = HealthView(path)
        assert view.health() == {"pool": True, "scheduler": True} and view.scheduler_serving() is True
        assert view.detail() == {"x": 1} and view.generation() == 3
    finally:
        board.close()
    with open(path, "w") as f:
        json.dump({"components": {"pool": True, "scheduler": True}, "published": time.time() - STALE_AFTER_S - 1}, f)
    assert HealthView(path).health()["scheduler"] is False and HealthView(path).scheduler_serving() is False
    assert HealthView(str(tmp_path / "missing.json")).health() == {"pool": False, "scheduler": False}
    assert HealthView(str(tmp_path / "missing.json")).scheduler_serving() is False


def test_a_frontend_keeps_its_start_up_heap_out_of_collections():
    """tune_collector (run by every HTTP frontend before it serves): the heap so far frozen, the
    thresholds raised; in a child interpreter, so this test process's collector is untouched."""
    import subprocess
    import sys

    code = ("import gc; from detok.serve.frontend_process import FRONTEND_GC_THRESHOLD, tune_collector; "
            "before = gc.get_freeze_count(); tune_collector(); "
            "print(before, gc.get_freeze_count(), gc.get_threshold() == FRONTEND_GC_THRESHOLD)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    before, after, thresholds = out.split()
    # (3.12 starts with a few hundred objects already in the permanent generation; 3.11 and 3.13 with none)
    assert int(after) - int(before) > 10_000 and thresholds == "True"
