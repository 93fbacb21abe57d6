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
import sys
from collections.abc import Sequence

import uvloop

from bench.load import LoadConfig, SpawnedServer, run_point

_TICK = os.sysconf("SC_CLK_TCK")


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


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def role(cmdline: str, pid: int, root: int) -> str:
    if pid == root:
        return "serve"
    if "detok-frontend" in cmdline or "frontend_process" in cmdline:
        return "frontend"
    if "resource_tracker" in cmdline:
        return "tracker"
    return "child"


def measure(label: str, env: dict[str, str], serve_args: Sequence[str], users: int, duration: float,
            logprobs: int | None, procs: int) -> dict[str, object]:
    server = SpawnedServer(serve_args, env=env)
    try:
        cfg = LoadConfig(server.url, endpoint="chat", duration_s=duration, grace_s=30.0, logprobs=logprobs)
        uvloop.run(run_point(LoadConfig(server.url, endpoint="chat", duration_s=1.0, logprobs=logprobs), 8, False))
        tree = process_tree(server.proc.pid)
        before = {pid: cpu_seconds(pid) for pid in tree}
        result = uvloop.run(run_point(cfg, users, False, procs))
        used = {pid: cpu_seconds(pid) - before[pid] for pid in tree}
    finally:
        server.close()
    root = server.proc.pid
    http = [pid for pid, cmd in tree.items() if role(cmd, pid, root) in ("serve", "frontend")]
    if any(role(cmd, pid, root) == "frontend" for pid, cmd in tree.items()):
        http = [pid for pid, cmd in tree.items() if role(cmd, pid, root) == "frontend"]
    frontend_cpu = sum(used[p] for p in http)
    chunks = max(1, result.text_chunks)
    return {
        "variant": label, "logprobs": logprobs, "users": users, "chunks": result.text_chunks,
        "tokens_per_s": round(result.output_tokens_per_s), "errors": result.errors,
        "ttft_p50_ms": round(result.ttft_p50_ms, 1), "ttft_p99_ms": round(result.ttft_p99_ms, 1),
        "itl_p50_ms": round(result.itl_p50_ms, 1), "itl_p99_ms": round(result.itl_p99_ms, 1),
        "frontend_cpu_s": round(frontend_cpu, 2), "frontend_us_per_chunk": round(frontend_cpu / chunks * 1e6, 1),
        "process_cpu_s": {f"{role(tree[p], p, root)}:{p}": round(used[p], 2) for p in tree if used[p] > 0.005},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before-src", default=None, help="a source tree to run as 'before' (its detok/ first on PYTHONPATH)")
    p.add_argument("--users", type=int, default=512)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--logprobs", default="0,5", help="comma list: 0 = none, N = top-N logprobs")
    p.add_argument("--procs", type=int, default=1, help="client processes")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    serve_args = ["--max-batch", "1024", "--no-spare", *args.serve_arg]
    variants: list[tuple[str, dict[str, str]]] = []
    if args.before_src:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.before_src))
        variants.append(("before", env))
    variants.append(("after", dict(os.environ)))
    for n in [int(x) for x in args.logprobs.split(",")]:
        for label, env in variants:
            row = measure(label, env, serve_args, args.users, args.duration, n or None, args.procs)
            print(json.dumps(row) if args.json else
                  f"{label:6s} logprobs={n}  {row['frontend_us_per_chunk']:6.1f} us/chunk  "
                  f"{row['tokens_per_s']} tok/s  TTFT p50/p99 {row['ttft_p50_ms']}/{row['ttft_p99_ms']} ms  "
                  f"ITL p50/p99 {row['itl_p50_ms']}/{row['itl_p99_ms']} ms  errors {row['errors']}  "
                  f"chunks {row['chunks']}  cpu {row['process_cpu_s']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
