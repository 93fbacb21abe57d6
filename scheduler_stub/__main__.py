"""`python -m scheduler_stub`: the stand-in scheduler, next to a running pool or headless.

  next to `detok pool` (which prints its worker and notice endpoints); frontends send
  GenerateRequest / Abort to the requests endpoint:
    python -m scheduler_stub run --tokenizer SRC --workers-endpoints E0,E1 --notify-endpoint N
        --requests-endpoint tcp://127.0.0.1:5600
  headless, on a pool of its own, reporting throughput:
    python -m scheduler_stub headless --tokenizer SRC --workers 2 --requests 2000 --concurrency 256
"""

from __future__ import annotations

import argparse
import sys

from scheduler_stub.stub import StepPolicy


def _policy_args(p: argparse.ArgumentParser, step_ms: float) -> None:
    p.add_argument("--tokenizer", default=None, help="tokenizer source (default: the embedded Qwen2 one)")
    p.add_argument("--workload", default="corpus", help="corpus, corpus:PATH, random or trace:PATH")
    p.add_argument("--step-ms", type=float, default=step_ms, help="step interval in ms (0: as fast as possible)")
    p.add_argument("--max-batch", type=int, default=256, help="most requests generating at once")
    p.add_argument("--tokens-per-step", type=int, default=1, help="tokens per request per step")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scheduler_stub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve frontends next to a pool started with `detok pool`")
    _policy_args(run, 20.0)
    run.add_argument("--workers-endpoints", required=True, help="comma-separated worker endpoints, in shard order")
    run.add_argument("--notify-endpoint", required=True, help="where workers send stop notices (the stub binds it)")
    run.add_argument("--requests-endpoint", required=True, help="where frontends send requests (the stub binds it)")
    run.add_argument("--keys", default=None, metavar="DIR",
                     help="the deployment's CURVE keys (detok keygen DIR), needed for tcp endpoints")
    run.add_argument("--insecure", action="store_true", help="allow tcp endpoints without keys")
    headless = sub.add_parser("headless", help="drive a new pool with synthetic requests and report throughput")
    _policy_args(headless, 0.0)
    headless.add_argument("--workers", type=int, default=2, help="detok worker processes")
    headless.add_argument("--requests", type=int, default=1000, help="requests in all")
    headless.add_argument("--concurrency", type=int, default=256, help="requests in flight at once")
    headless.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (EOS ignored)")
    headless.add_argument("--stop", action="append", default=[], help="a stop string for every request (repeatable)")
    headless.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return parser


def _tokenizer(source: str | None) -> str:
    if source:
        return source
    from detok.tokenizer.default import default_tokenizer_dir

    return str(default_tokenizer_dir())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    policy = StepPolicy(args.step_ms / 1000.0, args.max_batch, args.tokens_per_step)
    if args.command == "run":
        from detok.wire.security import CurveKeys, InsecureTransportError, KeyFileError, SocketSecurity
        from scheduler_stub.process import PoolEndpoints, StubConfig, run_standalone

        try:
            keys = CurveKeys.load(args.keys) if args.keys else None
            security = SocketSecurity(keys, args.insecure)
            for endpoint in (args.requests_endpoint, args.notify_endpoint, *args.workers_endpoints.split(",")):
                security.check(endpoint)
        except (InsecureTransportError, KeyFileError) as e:
            print(f"scheduler stub: {e}", file=sys.stderr)
            return 2
        cfg = StubConfig(_tokenizer(args.tokenizer), args.requests_endpoint, args.workload, policy,
                         keys=keys, insecure=args.insecure)
        return run_standalone(cfg, PoolEndpoints(args.workers_endpoints.split(","), args.notify_endpoint))
    from scheduler_stub.headless import HeadlessConfig, run_headless

    result = run_headless(
        HeadlessConfig(
            _tokenizer(args.tokenizer), args.workers, args.requests, args.concurrency, args.max_tokens,
            args.workload, policy, tuple(args.stop),
        )
    )
    if args.json:
        print(result.to_json())
    else:
        print(
            f"{result.requests} requests, {result.tokens} tokens in {result.seconds:.2f} s: "
            f"{result.tokens_per_s:,.0f} tokens/s through the pool ({result.steps} steps); "
            f"detok latency p50 {result.detok_latency_p50_ms:.2f} ms, p99 {result.detok_latency_p99_ms:.2f} ms; "
            f"finishes {result.finish_reasons}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
