"""bench/report.py's drawing half: docs/benchmarks.md and its plots from saved results (a canned
results file of a quick run, tests/fixtures/bench_report/results.json), and the page in the
repository is the one its own results file gives."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.report_render import render

ROOT = Path(__file__).resolve().parents[2]
CANNED = ROOT / "tests" / "fixtures" / "bench_report" / "results.json"


@pytest.fixture
def results() -> dict[str, Any]:
    return json.loads(CANNED.read_text(encoding="utf-8"))


def _plots(page: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(benchmarks/([\w.]+)\)", page)


def test_the_page_states_the_machine_the_date_and_every_result(results: dict[str, Any], tmp_path: Path) -> None:
    page = render(results, tmp_path)
    machine = results["machine"]
    assert machine["cpu"] in page and f"{machine['cores']} cores" in page and results["date"] in page
    for heading in ("## Pool throughput", "## Decode cost of a short request", "## Frontend CPU per streamed chunk",
                    "## Latency under load", "## Replay after a worker's death"):
        assert heading in page
    pool = next(r for r in results["pool"] if r.get("pipeline") == "detok")
    assert f"{pool['tokens_per_s']:,}" in page  # the table's cell
    recovery = next(r for r in results["replay"] if r.get("metric") == "recovery")
    assert f"{recovery['recovery_ms_p50']:,.1f}" in page
    for command in (c for cs in results["commands"].values() for c in cs):
        assert command in page


def test_every_plot_the_page_shows_is_written_as_svg(results: dict[str, Any], tmp_path: Path) -> None:
    page = render(results, tmp_path)
    shown = _plots(page)
    assert sorted(shown) == ["frontend_cpu.svg", "latency.svg", "pool_tokens_per_s.svg", "replay.svg"]
    for name in shown:
        assert ET.parse(tmp_path / name).getroot().tag.endswith("svg")
    first = {name: (tmp_path / name).read_bytes() for name in shown}
    render(results, tmp_path)
    assert first == {name: (tmp_path / name).read_bytes() for name in shown}, "a plot differs between two drawings"


def test_a_benchmark_without_results_leaves_its_section_out(results: dict[str, Any], tmp_path: Path) -> None:
    partial = copy.deepcopy(results)
    del partial["replay"], partial["frontend_cpu"]
    page = render(partial, tmp_path / "plots")
    assert "## Pool throughput" in page and "## Replay" not in page and "## Frontend CPU" not in page
    assert sorted(_plots(page)) == ["latency.svg", "pool_tokens_per_s.svg"]


def test_quick_results_carry_a_warning_and_measured_ones_none(results: dict[str, Any], tmp_path: Path) -> None:
    assert "Smoke-test figures" in render(results, tmp_path)
    assert "Smoke-test figures" not in render({**results, "quick": False}, tmp_path)


def test_the_docs_page_is_drawn_from_its_results_file(tmp_path: Path) -> None:
    saved = json.loads(report.RESULTS.read_text(encoding="utf-8"))
    assert report.PAGE.read_text(encoding="utf-8") == render(saved, tmp_path), (
        "docs/benchmarks.md is not what docs/benchmarks/results.json gives: python bench/report.py --from-json "
        "docs/benchmarks/results.json"
    )
    assert {name for name in _plots(report.PAGE.read_text(encoding="utf-8"))} <= {p.name for p in report.PLOTS.glob("*.svg")}


def test_every_benchmark_command_has_json_output() -> None:
    for quick in (True, False):
        for argvs in report.commands(quick).values():
            for argv in argvs:
                assert argv[0].startswith("bench/") and (ROOT / argv[0]).is_file() and "--json" in argv
