"""Frontend CPU per streamed chunk, from /proc, side by side: `detok serve` from this tree and from
another source tree (e.g. main), each under the same load (bench/load.py's client), chat, without
and with top-N logprobs.

    python bench/frontend_cpu.py --before-src /tmp/main_src --users 512 --duration 10 --json

Per variant and mode: the serving processes' CPU (user + system, /proc/PID/stat) over the load
point, divided by the text-bearing chunks the clients received. The serving process tree is the
`detok serve` process (the HTTP frontend) and its children (scheduler stub, workers; with
`--frontends N`, the N frontend processes); "frontend" sums the HTTP processes only.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Sequence

import httpx
import uvloop

from bench.load import LoadConfig, SpawnedServer, run_point

_TICK = os.sysconf("SC_CLK_TCK")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this tree ('after')


def process_tree(root: int) -> dict[int, str]:
    """pid -> command line of `root` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return out


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of `pid` so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK  # utime, stime


def _client_cpu() -> float:
    """CPU of this process and its reaped children (the load client's processes, joined by run_point)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


def roles(url: str, root: int, tree: dict[int, str]) -> dict[int, str]:
    """pid -> its part of the stack, from /health's detail (the pids of every part)."""
    detail = httpx.get(url.removesuffix("/v1") + "/health", timeout=30).json()["detail"]
    named = {root: "serve"}
    if detail.get("scheduler", {}).get("pid"):
        named[detail["scheduler"]["pid"]] = "stub"
    for w in detail.get("pool", {}).get("workers", []):
        named[w["pid"]] = f"worker{w['index']}"
    for f in detail.get("frontends", []):
        named[f["pid"]] = f"frontend{f['index']}"
    return {pid: named.get(pid, "other") for pid in tree}


def detok_source(env: dict[str, str], cwd: str) -> str:
    """The source tree `python -m detok.cli` imports detok from, run with `env` in `cwd`."""
    out = subprocess.run([sys.executable, "-c", "import detok, os; print(os.path.dirname(os.path.dirname(detok.__file__)))"],
                         env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return os.path.realpath(out.stdout.strip())


def measure(label: str, env: dict[str, str], cwd: str, serve_args: Sequence[str], users: int, duration: float,
            logprobs: int | None, procs: int, max_tokens: int = 128, system_chars: int = 0,
            prompt: str | None = None, tools: bool = False) -> dict[str, object]:
    server = SpawnedServer(serve_args, env=env, cwd=cwd)
    root = server.proc.pid
    try:
        cfg = LoadConfig(server.url, endpoint="chat", duration_s=duration, grace_s=30.0, logprobs=logprobs,
                         max_tokens=max_tokens, system_chars=system_chars, prompt=prompt, tools=tools)
        uvloop.run(run_point(LoadConfig(server.url, endpoint="chat", duration_s=1.0, logprobs=logprobs), 8, False))
        tree = process_tree(root)
        named = roles(server.url, root, tree)
        before = {pid: cpu_times(pid) for pid in tree}
        client_before = _client_cpu()
        result = uvloop.run(run_point(cfg, users, False, procs))
        client_cpu = _client_cpu() - client_before
        after = {pid: cpu_times(pid) for pid in tree}
        system = {pid: after[pid][1] - before[pid][1] for pid in tree}
        used = {pid: after[pid][0] - before[pid][0] + system[pid] for pid in tree}
    finally:
        server.close()
    http = [pid for pid, name in named.items() if name.startswith("frontend")] or [root]
    frontend_cpu = sum(used[p] for p in http)
    frontend_sys = sum(system[p] for p in http)
    chunks = max(1, result.text_chunks)
    tokens = max(1, round(result.output_tokens_per_s * result.duration_s))
    return {
        "variant": label, "logprobs": logprobs, "users": users, "chunks": result.text_chunks,
        "tokens_per_s": round(result.output_tokens_per_s), "errors": result.errors,
        "first_error": result.first_error[:200],
        "ttft_p50_ms": round(result.ttft_p50_ms, 1), "ttft_p99_ms": round(result.ttft_p99_ms, 1),
        "itl_p50_ms": round(result.itl_p50_ms, 1), "itl_p99_ms": round(result.itl_p99_ms, 1),
        "frontend_cpu_s": round(frontend_cpu, 2), "frontend_us_per_chunk": round(frontend_cpu / chunks * 1e6, 1),
        "frontend_us_per_token": round(frontend_cpu / tokens * 1e6, 1),
        "requests": result.requests, "max_tokens": max_tokens, "system_chars": system_chars,
        "frontend_us_per_request": round(frontend_cpu / max(1, result.requests) * 1e6, 1),
        "frontend_sys_share": round(frontend_sys / frontend_cpu, 2) if frontend_cpu else 0.0, "ideal_tokens_per_s": users * 50,
        "client_cpu_s": round(client_cpu, 2), "wall_s": result.duration_s,
        "process_cpu_s": {named[p]: round(used[p], 2) for p in tree if used[p] > 0.005},
    }


def serve_extras(label: str, frontends: int, after_args: Sequence[str]) -> list[str]:
    """The serve arguments of one variant's run beyond the shared ones: its frontends (the 'before'
    tree's only when not 1, so a tree without the flag still runs) and this tree's own."""
    if label == "before":
        return ["--frontends", str(frontends)] if frontends != 1 else []
    return ["--frontends", str(frontends), *after_args]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before-src", default=None, help="a source tree to run as 'before' (its detok/ first on PYTHONPATH)")
    p.add_argument("--users", default="512", help="comma list of concurrency levels")
    p.add_argument("--frontends", default="1", help="comma list of --frontends values (this tree only)")
    p.add_argument("--before-frontends", type=int, default=1,
                   help="--frontends of the --before-src tree's runs (1: the flag is not passed)")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--logprobs", default="0,5", help="comma list: 0 = none, N = top-N logprobs")
    p.add_argument("--procs", type=int, default=1, help="client processes")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--after-arg", action="append", default=[], metavar="ARG",
                   help="a serve argument for this tree's runs only (e.g. --after-arg=--stream-interval=4)")
    p.add_argument("--max-tokens", type=int, default=128,
                   help="output tokens per request (a few: the per-request cost, frontend_us_per_request)")
    p.add_argument("--system-chars", type=int, default=0, help="a system message of this many characters per request")
    p.add_argument("--tools", action="store_true", help="every request offers bench/load.py's TOOLS (a tool-call parser's replies)")
    p.add_argument("--prompt", default=None, metavar="TEXT",
                   help="the user message of every request (with --serve-arg=--workload --serve-arg=echo, its output too)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if any(a.split("=")[0] == "--frontends" for a in [*args.serve_arg, *args.after_arg]):
        # (it would reach one tree's runs and be overridden in the others', and the rows mislabelled)
        p.error("set the frontends with --frontends (this tree) and --before-frontends, not --serve-arg/--after-arg")
    serve_args = ["--max-batch", "1024", "--no-spare", *args.serve_arg]
    # Each variant's server runs in its source tree (with it first on PYTHONPATH too): `-m` puts
    # the working directory first on sys.path, so a 'before' run from this tree's root would
    # otherwise import this tree. Checked, not assumed.
    trees = [("after", _REPO)] if not args.before_src else [("before", os.path.abspath(args.before_src)), ("after", _REPO)]
    runs = []
    for label, tree in trees:
        env = dict(os.environ, PYTHONPATH=tree)
        found = detok_source(env, tree)
        if found != os.path.realpath(tree):
            raise SystemExit(f"{label}: detok imports from {found}, not {tree}")
        for f in ([args.before_frontends] if label == "before" else args.frontends.split(",")):
            runs.append((label, env, tree, int(f)))
    for n in [int(x) for x in args.logprobs.split(",")]:
        for users in [int(u) for u in args.users.split(",")]:
            for label, env, tree, frontends in runs:
                extra = serve_extras(label, frontends, args.after_arg)
                row = measure(label, env, tree, [*serve_args, *extra], users, args.duration, n or None, args.procs,
                              args.max_tokens, args.system_chars, args.prompt, args.tools)
                row["frontends"] = frontends
                print(json.dumps(row) if args.json else
                  f"{label:6s} frontends={frontends} users={users} logprobs={n}  "
                  f"{row['frontend_us_per_chunk']:6.1f} us/chunk {row['frontend_us_per_token']:6.1f} us/token "
                  f"{row['frontend_us_per_request']:7.1f} us/request "
                  f"(kernel {row['frontend_sys_share']:.0%})  "
                  f"{row['tokens_per_s']} tok/s  TTFT p50/p99 {row['ttft_p50_ms']}/{row['ttft_p99_ms']} ms  "
                  f"ITL p50/p99 {row['itl_p50_ms']}/{row['itl_p99_ms']} ms  errors {row['errors']}  "
                  f"chunks {row['chunks']}  cpu {row['process_cpu_s']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
