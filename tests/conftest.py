"""Suite-wide switches.

`make test` runs a bounded sample: hypothesis example counts are small and tests marked `slow`
(long soak and fuzz runs) are skipped. `DETOK_SLOW=1` runs them all, with many more examples.

Hermetic: every cache and temporary file of the run (detok's default-tokenizer cache, Hugging Face,
tiktoken, prometheus multiprocess files, matplotlib, tempfile) goes to one temporary folder per test
process, removed at exit; the environment is set here, before any test module imports detok, so the
processes the tests start inherit it. No network (HF_HUB_OFFLINE=1).

No unseen skip: with `DETOK_STRICT_SKIPS=1` (or CI=true; `.ci/run` sets it) a skipped test that is
not marked `slow` fails the run (a missing tokenizer package, the C extension not built), so CI
cannot pass by testing less. Skips are listed in every run's summary (`-rs` in pyproject).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest
import threadpoolctl
from hypothesis import settings

SLOW = os.environ.get("DETOK_SLOW") == "1"
if SLOW:
    os.environ.setdefault("DETOK_EXAMPLES", "300")  # read by the property-test modules at import

# ---- hypothesis profiles -----------------------------------------------------------------------
# "ci" (make test): a property test without its own count runs CI_EXAMPLES examples, and one with a
# larger count of its own at most CI_EXAMPLE_CAP (its own count is its deep run's); "deep"
# (DETOK_SLOW=1) runs every test's own count, and DEEP_EXAMPLES where it has none.
CI_EXAMPLES = 50
CI_EXAMPLE_CAP = 100
DEEP_EXAMPLES = 1000
settings.register_profile("ci", max_examples=CI_EXAMPLES, deadline=None)
settings.register_profile("deep", max_examples=DEEP_EXAMPLES, deadline=None)
settings.load_profile(os.environ.get("DETOK_HYPOTHESIS_PROFILE", "deep" if SLOW else "ci"))

STRICT_SKIPS = os.environ.get("DETOK_STRICT_SKIPS") == "1" or os.environ.get("CI", "").lower() == "true"

# ---- hermetic run folder (one per test process: xdist workers each import this file) -----------
# short: ipc:// socket paths under it (pytest's tmp_path included) must stay under 107 bytes
RUN_DIR = Path(tempfile.mkdtemp(prefix="dt-"))
atexit.register(shutil.rmtree, RUN_DIR, True)
_TMP = RUN_DIR / "t"
_TMP.mkdir()
for _var, _sub in (
    ("DETOK_CACHE_DIR", "detok-cache"),
    ("XDG_CACHE_HOME", "xdg-cache"),
    ("HF_HOME", "hf-home"),
    ("TIKTOKEN_CACHE_DIR", "tiktoken-cache"),
    ("MPLCONFIGDIR", "matplotlib"),
):
    os.environ[_var] = str(RUN_DIR / _sub)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)  # each pool makes its own metrics folder
os.environ.pop("HF_HUB_CACHE", None)  # follows HF_HOME
os.environ["TMPDIR"] = str(_TMP)
tempfile.tempdir = str(_TMP)  # gettempdir() may already be cached

# ---- one BLAS thread per test process ------------------------------------------------------------
# `make test` runs two test processes on two cores, and the reference engine's tests run the model
# in the test process: OpenBLAS's spinning threads lose several times their speed when the other
# core is taken (reference_engine/launch.py gives the engine process one thread for the same
# reason). numpy is loaded before this file (pytest-randomly imports it), so the pool is resized
# now; the variable reaches the processes the tests start.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
threadpoolctl.threadpool_limits(1, user_api="blas")


# ---- the heaviest files first ------------------------------------------------------------------
# `make test` gives each xdist worker whole files (`--dist loadfile`, their module fixtures start
# servers and pools once) in the collection's order (`--no-loadscope-reorder`; xdist's own order,
# by test count, puts the few-test files that start whole stacks last, where one of them can keep
# one worker busy while the other has nothing left). These files take the longest, by a full run's
# per-file times: they go first, in this order, and every other file follows in its shuffled order.
# A schedule only: a file missing here costs wall time, never a result.
HEAVIEST_FIRST = (
    "tests/frontend/test_frontends.py",
    "tests/parsing/test_family_tables.py",
    "tests/test_readme.py",
    "tests/frontend/test_serve.py",
    "tests/stream/test_stream_differential.py",
    "tests/reference_engine/test_engine_pool.py",
    "tests/frontend/test_frontend_live.py",
    "tests/bench/test_heavy_bench.py",
    "tests/pool/test_replay_pool.py",
    "tests/deploy/test_local_pods.py",
    "tests/frontend/test_typed_serve.py",
    "tests/pool/test_rid_reuse.py",
    "tests/test_wheel.py",
    "tests/frontend/test_http_limits.py",
    "tests/bench/test_pool_bench.py",
    "tests/bench/test_baselines.py",
)


def _cap_examples(item: pytest.Item) -> None:
    """The ci profile's bound on a test's own max_examples (hypothesis keeps a test's settings on
    the function `@settings` decorated; `@given` reads them there at each call): CI_EXAMPLE_CAP,
    or the test's `ci_examples(n)` mark: fewer where each example is costly (a long text encoded, a
    table built per example), more where examples are cheap and rare inputs matter (a UTF-8
    decoder's invalid sequences); its own count stays its deep run's."""
    test = getattr(item, "obj", None)
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    mark = item.get_closest_marker("ci_examples")
    cap = mark.args[0] if mark is not None else CI_EXAMPLE_CAP
    if own is not None and own.max_examples > cap:
        test._hypothesis_internal_use_settings = settings(own, max_examples=cap)  # type: ignore[union-attr]


def _heaviest_first(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
    last = len(HEAVIEST_FIRST)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], last))  # (stable: the rest keeps its order)


# (a wrapper around pytest-randomly's, which shuffles once every other hook has run)
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    yield
    _heaviest_first(items)
    if SLOW:
        return
    skip = pytest.mark.skip(reason="long soak / fuzz run: set DETOK_SLOW=1")
    capped = settings._current_profile == "ci"  # type: ignore[attr-defined]
    for item in items:
        if capped:
            _cap_examples(item)
        if "slow" in item.keywords:
            item.add_marker(skip)



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if not STRICT_SKIPS or not report.skipped or hasattr(report, "wasxfail") or "slow" in item.keywords:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped under DETOK_STRICT_SKIPS / CI (install what it needs: make test): {reason}")


def pytest_report_header(config: pytest.Config) -> str:
    return f"detok: run folder {RUN_DIR} (caches, tmp); strict skips {'on' if STRICT_SKIPS else 'off'}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """The order's seed at the end of every run, `-q` included (the header that names it is not
    printed then), so a failing order can be replayed."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int):
        terminalreporter.write_line(f"random order: replay it with -p randomly --randomly-seed={seed}")
