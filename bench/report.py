"""Run the headline benchmarks and regenerate docs/benchmarks.md with its tables and plots.

    python bench/report.py                        # the full set (tens of minutes; a quiet machine)
    python bench/report.py --quick                # the smallest sizes: checks the generator, measures nothing
    python bench/report.py --from-json FILE       # redraw the page from results saved earlier
    python bench/report.py --only pool,replay     # run some, keep the other results of the saved file

Each benchmark runs as its own process with --json; its JSON lines are kept, grouped by benchmark,
with the machine, the date and the commands, in docs/benchmarks/results.json. The page and its
plots (docs/benchmarks/*.svg) are then drawn from that file alone (bench/report_render.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/report.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "benchmarks.md"
PLOTS = REPO / "docs" / "benchmarks"
RESULTS = PLOTS / "results.json"
TOKENIZER = "tests/fixtures/hf/qwen2"  # in every clone; the pipelines all decode its ids


def commands(quick: bool) -> dict[str, list[list[str]]]:
    """Benchmark -> the command lines whose JSON lines make its results (argv after `python`)."""
    if quick:
        pool = [["bench/pool.py", "--json", "--no-progress", "--tokenizer", TOKENIZER, "--workers", "1",
                 "--tokens", "64", "--concurrency", str(c), "--rounds", "1", "--step-interval-ms", "0"] for c in (8, 32)]
        return {
            "pool": pool,
            "decode": [["bench/decode.py", "--json", "--no-progress", "--per-request", "--per-request-tokens", "16",
                        "--repeats", "1", "--tokenizer", TOKENIZER]],
            "frontend_cpu": [["bench/frontend_cpu.py", "--json", "--users", "4", "--frontends", "1,2", "--logprobs", "0",
                              "--duration", "2", "--max-tokens", "16"]],
            "load": [["bench/load.py", "--spawn", "--json", "--no-progress", "--endpoint", "chat", "--concurrency", "2,4",
                      "--duration", "2", "--max-tokens", "16"]],
            "replay": [["bench/replay.py", "--json", "--no-progress", "--tokenizer", TOKENIZER, "--concurrency", "8",
                        "--tokens", "200", "--step-ms", "5", "--kills", "1", "--kill-every-s", "0.5", *spare]
                       for spare in ([], ["--no-spare"])],
        }
    pool = [["bench/pool.py", "--json", "--no-progress", "--tokenizer", TOKENIZER, "--workers", "1", "--tokens", str(t),
             "--concurrency", str(c), "--rounds", "4", "--step-interval-ms", "0"] for t in (64, 256) for c in (64, 256, 1024)]
    return {
        "pool": pool,
        "decode": [["bench/decode.py", "--json", "--no-progress", "--per-request", "--repeats", "3", "--tokenizer", TOKENIZER]],
        "frontend_cpu": [["bench/frontend_cpu.py", "--json", "--users", "64,256,1024", "--frontends", "1,2", "--logprobs", "0",
                          "--duration", "10", "--procs", "2"]],
        "load": [["bench/load.py", "--spawn", "--json", "--no-progress", "--endpoint", "chat", "--concurrency",
                  "16,64,256,1024", "--duration", "10", "--procs", "2"]],
        "replay": [["bench/replay.py", "--json", "--no-progress", "--tokenizer", TOKENIZER, "--concurrency", "256",
                    "--tokens", "2000", "--step-ms", "5", "--kills", "4", "--kill-every-s", "2.5", *spare]
                   for spare in ([], ["--no-spare"])],
    }


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def run(argv: list[str]) -> list[dict[str, Any]]:
    """The JSON lines one benchmark printed (its other output goes to this process's stderr)."""
    print("$ python " + " ".join(argv), file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, *argv], cwd=REPO, stdout=subprocess.PIPE, text=True, check=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def collect(quick: bool, only: set[str] | None, previous: dict[str, Any] | None) -> dict[str, Any]:
    results: dict[str, Any] = dict(previous or {})
    results.update(machine=machine(), date=datetime.date.today().isoformat(), quick=quick)
    ran = results.setdefault("commands", {})
    for bench, argvs in commands(quick).items():
        if only is not None and bench not in only:
            continue
        results[bench] = [row for argv in argvs for row in run(argv)]
        ran[bench] = ["python " + " ".join(argv) for argv in argvs]
    return results


def write(results: dict[str, Any], page: Path = PAGE, plots: Path = PLOTS) -> None:
    from bench.report_render import render  # matplotlib: a second of imports, only when drawing

    plots.mkdir(parents=True, exist_ok=True)
    (plots / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    page.write_text(render(results, plots), encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the smallest sizes: checks the generator, measures nothing")
    parser.add_argument("--from-json", metavar="FILE", type=Path, help="draw the page from saved results, run nothing")
    parser.add_argument("--only", metavar="NAMES", help="comma list of benchmarks to run (pool, decode, frontend_cpu, "
                                                        "load, replay); the others' results are kept from the saved file")
    args = parser.parse_args()
    if args.from_json is not None:
        write(json.loads(args.from_json.read_text(encoding="utf-8")))
        return 0
    only = set(args.only.split(",")) if args.only else None
    previous = json.loads(RESULTS.read_text(encoding="utf-8")) if only is not None and RESULTS.exists() else None
    write(collect(args.quick, only, previous))
    print(f"wrote {PAGE.relative_to(REPO)} and {PLOTS.relative_to(REPO)}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
