"""docs/benchmarks.md and its plots, drawn from the results `bench/report.py` collected.

`render(results, plots_dir)` returns the page's Markdown and writes its plots (SVG, matplotlib's
Agg backend) into `plots_dir`. It reads only the `results` dict (the JSON lines each benchmark
printed with --json, grouped by benchmark, plus the machine and the date), so the page can be
drawn again from a saved results file without running anything (`bench/report.py --from-json`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

PLOTS_LINK = "benchmarks"  # the plots' folder, relative to docs/benchmarks.md
PIPELINES = {"detok": "detok", "sglang": "SGLang-style worker", "hf": "HF DecodeStream worker"}
# SVG output that depends on the data only: no date, no random ids
_SVG = {"svg.hashsalt": "detok-benchmarks", "svg.fonttype": "none"}


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def _concurrency_axis(ax: Any, levels: list[int], label: str) -> None:
    """A log2 x axis labelled with the measured levels themselves (64, 256, ... rather than 2^6)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(level) for level in levels])
    ax.minorticks_off()
    ax.set_xlabel(label)


def _table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# ---- pool ---------------------------------------------------------------------------------------


def _pool_rows(results: dict[str, Any]) -> dict[tuple[int, int], dict[str, dict[str, Any]]]:
    """(tokens, concurrency) -> pipeline -> its max-throughput row."""
    grid: dict[tuple[int, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in results.get("pool", []):
        if row.get("mode") == "max" and row.get("pipeline") in PIPELINES:
            grid[(row["tokens"], row["concurrency"])][row["pipeline"]] = row
    return dict(sorted(grid.items()))


def _pool_section(results: dict[str, Any], plots: Path) -> str:
    grid = _pool_rows(results)
    if not grid:
        return ""
    lengths = sorted({tokens for tokens, _ in grid})
    fig, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 3.6), squeeze=False)
    for ax, tokens in zip(axes[0], lengths, strict=True):
        levels = sorted(c for t, c in grid if t == tokens)
        for pipeline, label in PIPELINES.items():
            points = [(c, grid[(tokens, c)][pipeline]["tokens_per_s"]) for c in levels if pipeline in grid[(tokens, c)]]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
        _concurrency_axis(ax, levels, "concurrent requests")
        ax.set_yscale("log")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{tokens} output tokens per request")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, plots / "pool_tokens_per_s.svg")
    rows = []
    for (tokens, concurrency), by_pipeline in grid.items():
        detok = by_pipeline.get("detok", {}).get("tokens_per_s")
        cells = [by_pipeline.get(p, {}).get("tokens_per_s") for p in PIPELINES]
        ratios = [round(detok / c, 1) if detok and c else None for c in cells[1:]]
        mismatches = sum(r.get("mismatches", 0) for r in by_pipeline.values())
        rows.append([tokens, concurrency, *cells, *ratios, mismatches])
    return f"""## Pool throughput

Decoded tokens per second through the whole pipeline (scheduler process, worker processes,
receiver), as fast as the queues take it, for detok's pool and the two designs it replaces: an
SGLang-style detokenizer process (pickled batches, a batch decode of windows per request) and a
worker with one Hugging Face `DecodeStream` per request. Every pipeline decodes the same token
streams; `mismatches` counts requests whose text differs from a full decode (all pipelines are
checked alike).

![tokens/s against concurrency]({PLOTS_LINK}/pool_tokens_per_s.svg)

{_table(["tokens", "concurrency", "detok tok/s", "SGLang-style tok/s", "HF stream tok/s", "× SGLang-style", "× HF stream", "mismatches"], rows)}
"""


# ---- decode per request -------------------------------------------------------------------------


def _decode_section(results: dict[str, Any]) -> str:
    rows = [r for r in results.get("decode", []) if r.get("bench") == "decode-per-request"]
    if not rows:
        return ""
    lengths = sorted({r["tokens_per_stream"] for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    by = {(r["impl"], r["tokens_per_stream"]): r for r in rows}
    table = [[impl, *[by.get((impl, n), {}).get("ns_per_token") for n in lengths],
              *[by.get((impl, n), {}).get("x_vs_hf") for n in lengths],
              sum(by.get((impl, n), {}).get("mismatches", 0) for n in lengths)] for impl in impls]
    header = ["implementation", *[f"ns/token at {n}" for n in lengths], *[f"× HF at {n}" for n in lengths], "mismatches"]
    return f"""## Decode cost of a short request

A request's whole cost per token in one process, its set-up and end included (streams created on
the clock), at short output lengths, against the Hugging Face `DecodeStream` per request
(`mismatches`: streams whose text differs from a full decode; `DecodeStream` drops an incomplete
character at the end of the output).

{_table(header, table)}
"""


# ---- frontend CPU -------------------------------------------------------------------------------


def _frontend_section(results: dict[str, Any], plots: Path) -> str:
    rows = [r for r in results.get("frontend_cpu", []) if not r.get("logprobs") and "frontend_us_per_chunk" in r]
    if not rows:
        return ""
    by_frontends: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_frontends[row.get("frontends", 1)].append(row)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for frontends, group in sorted(by_frontends.items()):
        group.sort(key=lambda r: r["users"])
        ax.plot([r["users"] for r in group], [r["frontend_us_per_chunk"] for r in group], marker="o",
                label=f"{frontends} frontend{'s' if frontends > 1 else ''}")
    _concurrency_axis(ax, sorted({r["users"] for r in rows}), "streaming users")
    ax.set_ylabel("frontend CPU per chunk (µs)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, plots / "frontend_cpu.svg")
    table = [[r.get("frontends", 1), r["users"], r["frontend_us_per_chunk"], r.get("tokens_per_s"),
              r.get("ttft_p99_ms"), r.get("errors", 0)] for frontends, group in sorted(by_frontends.items()) for r in group]
    return f"""## Frontend CPU per streamed chunk

CPU time of the HTTP frontend processes (from `/proc`, summed over the frontends) per streamed
chat chunk, with one and two frontend processes on one port, against the number of streaming
users. This is the cost that decides how many users one core of HTTP serves.

![frontend CPU per chunk against users]({PLOTS_LINK}/frontend_cpu.svg)

{_table(["frontends", "users", "µs per chunk", "output tok/s", "TTFT p99 ms", "errors"], table)}
"""


# ---- latency ------------------------------------------------------------------------------------


def _latency_section(results: dict[str, Any], plots: Path) -> str:
    rows = sorted((r for r in results.get("load", []) if "ttft_p50_ms" in r), key=lambda r: r["concurrency"])
    if not rows:
        return ""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, label) in zip(axes, (("ttft", "time to first token"), ("itl", "inter-token latency")), strict=True):
        for pct in ("p50", "p99"):
            ax.plot([r["concurrency"] for r in rows], [r[f"{name}_{pct}_ms"] for r in rows], marker="o", label=pct)
        _concurrency_axis(ax, [r["concurrency"] for r in rows], "streaming users")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, plots / "latency.svg")
    table = [[r["concurrency"], r.get("output_tokens_per_s"), r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"],
              r["itl_p99_ms"], r.get("errors", 0)] for r in rows]
    return f"""## Latency under load

Streamed chat requests against `detok serve` (the stub scheduler steps every 20 ms, so one
request's ideal inter-token latency is 20 ms), measured by the client: time to first token and the
gap between text-bearing chunks, 50th and 99th percentiles.

![TTFT and ITL percentiles against users]({PLOTS_LINK}/latency.svg)

{_table(["users", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "errors"], table)}
"""


# ---- replay -------------------------------------------------------------------------------------


def _replay_section(results: dict[str, Any], plots: Path) -> str:
    rows = [r for r in results.get("replay", []) if r.get("metric") == "recovery"]
    if not rows:
        return ""
    rows.sort(key=lambda r: not r.get("spare", False))
    labels = ["loaded spare" if r.get("spare") else "no spare (cold start)" for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.35
    for i, pct in enumerate(("p50", "p99")):
        ax.bar([x + (i - 0.5) * width for x in range(len(rows))], [r[f"recovery_ms_{pct}"] for r in rows], width,
               label=pct)
    ax.set_xticks(range(len(rows)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("kill → first replayed delta (ms)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, plots / "replay.svg")
    table = [[label, r["kills"], r["recovery_ms_p50"], r["recovery_ms_p99"], r.get("stall_extra_ms_p50"),
              r.get("stall_extra_ms_p99"), r.get("mismatches", 0), r.get("errors", 0)] for label, r in zip(labels, rows, strict=True)]
    memory = next((r for r in results.get("replay", []) if r.get("metric") == "scheduler_memory"), None)
    memory_text = (
        f"\nWhat the scheduler keeps for replay: {_cell(memory['bytes_per_live_request'])} bytes per live request "
        f"and {_cell(memory['bytes_per_token'])} bytes per token id ({_cell(memory['journal_bytes_per_token'])} of them "
        "the journal's packed columns).\n"
        if memory else ""
    )
    return f"""## Replay after a worker's death

A paced scheduler steps its requests over two workers while one worker is SIGKILLed at intervals;
a receiver records every delta. Recovery is the time from the kill to the first replayed delta at
the frontend; the stall is how much longer than a normal step the killed shard's requests waited.
`mismatches` and `errors` count requests whose text was not exact or that failed: replay makes
both zero.

![recovery after a worker's death]({PLOTS_LINK}/replay.svg)

{_table(["replacement", "kills", "recovery p50 ms", "recovery p99 ms", "stall p50 ms", "stall p99 ms", "mismatches", "errors"], table)}
{memory_text}"""


# ---- the page -----------------------------------------------------------------------------------

_METHOD = """## How to run them

Every benchmark prints one JSON line per result with `--json`, and `--help` describes what it
measures. `python bench/report.py` ran the commands above, and keeps what they printed in
`docs/benchmarks/results.json`. Others measure what this page leaves out: `bench/decode.py`
(decode cost per token of every implementation), `bench/worker.py` (one worker's loop
in-process), `bench/parsers.py` and `bench/typed_worker.py` (output parsing), `bench/limits.py`
and `bench/faults.py` (hostile input and faults), `bench/engine.py` (the reference engine).

The load tools serving engineers use first (guidellm, aiperf, inference-perf) run against
`detok serve` as against vLLM: start it once (`detok serve --port 8000 --max-batch 1024`) and point
them at `http://127.0.0.1:8000`. They are not detok dependencies: install each in a virtualenv of
its own.
"""


def render(results: dict[str, Any], plots: Path) -> str:
    """The page for `results`; its plots are written into `plots`."""
    plots.mkdir(parents=True, exist_ok=True)
    machine = results.get("machine", {})
    quick = (
        "\n!!! warning \"Smoke-test figures\"\n    These results come from `bench/report.py --quick` (the smallest sizes, to check the\n"
        "    generator), not from a measurement: regenerate the page with `python bench/report.py` on a\n"
        "    quiet machine before reading anything into them.\n"
        if results.get("quick") else ""
    )
    with plt.rc_context(_SVG):
        sections = [
            _pool_section(results, plots),
            _decode_section(results),
            _frontend_section(results, plots),
            _latency_section(results, plots),
            _replay_section(results, plots),
        ]
    body = "\n".join(s for s in sections if s)
    ran = [command for argvs in results.get("commands", {}).values() for command in argvs]
    if ran:
        body += "\n## The commands\n\n```sh\n" + "\n".join(ran) + "\n```\n"
    return f"""# Benchmarks

<!-- generated by bench/report.py from docs/benchmarks/results.json: edit the generator, not this page -->

**Machine:** {machine.get("cpu", "an unnamed CPU")}, {machine.get("cores", "?")} cores (every process of a run
shares them), {machine.get("os", "")}, Python {machine.get("python", "?")}. **Date:** {results.get("date", "unknown")}.

Regenerate this page with `python bench/report.py`. Absolute figures move with the machine and its
load; ratios measured side by side in one run move less.
{quick}
{body}
{_METHOD}"""
