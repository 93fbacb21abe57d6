"""`python -m reference_engine run`: the engine next to a separately started pool (`detok pool`),
the way a real engine embeds `SchedulerClient`; frontends send GenerateRequest / Abort to
--requests-endpoint.

    python -m reference_engine run --model smollm2 --workers-endpoints E0,E1 --notify-endpoint N
        --requests-endpoint ipc:///tmp/engine.sock
"""

from __future__ import annotations

import argparse
import os
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reference_engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve frontends next to a pool started with `detok pool`")
    run.add_argument("--model", required=True, help="a Llama-family .gguf, or smollm2")
    run.add_argument("--workers-endpoints", required=True, help="comma-separated worker endpoints, in shard order")
    run.add_argument("--notify-endpoint", required=True, help="where workers send notices (the engine binds it)")
    run.add_argument("--requests-endpoint", required=True, help="where frontends send requests (the engine binds it)")
    run.add_argument("--max-running", type=int, default=None, help="batch bound (default: MAX_RUNNING_SEQUENCES)")
    run.add_argument("--kv-cache-mib", type=int, default=None, help="KV cache bound in MiB (default: MAX_KV_CACHE_BYTES)")
    run.add_argument("--keys", default=None, metavar="DIR", help="the deployment's CURVE keys, needed for tcp endpoints")
    run.add_argument("--insecure", action="store_true", help="allow tcp endpoints without keys")
    run.add_argument("--log-level", default="WARNING")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from reference_engine.launch import use_one_blas_thread

    use_one_blas_thread()  # before numpy loads (see reference_engine/launch.py)
    import dataclasses

    from detok.wire.security import CurveKeys, InsecureTransportError, KeyFileError, SocketSecurity
    from reference_engine.limits import EngineLimits
    from reference_engine.process import EngineConfig, run_standalone

    try:
        keys = CurveKeys.load(args.keys) if args.keys else None
        security = SocketSecurity(keys, args.insecure)
        for endpoint in (args.requests_endpoint, args.notify_endpoint, *args.workers_endpoints.split(",")):
            security.check(endpoint)
    except (InsecureTransportError, KeyFileError) as e:
        print(f"reference engine: {e}", file=sys.stderr)
        return 2
    limits = EngineLimits()
    if args.max_running is not None:
        limits = dataclasses.replace(limits, max_running=args.max_running)
    if args.kv_cache_mib is not None:
        limits = dataclasses.replace(limits, kv_cache_bytes=args.kv_cache_mib << 20)
    cfg = EngineConfig(args.model, limits, args.log_level.upper(), os.getppid(), keys, args.insecure)
    return run_standalone(cfg, args.workers_endpoints.split(","), args.notify_endpoint, args.requests_endpoint)


if __name__ == "__main__":
    sys.exit(main())
