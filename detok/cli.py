"""The `detok` command.

    detok keygen DIR
        the deployment's CURVE keypair for tcp (DIR/detok.key, DIR/detok.key_secret mode 0600)
    detok worker --tokenizer SRC --bind tcp://0.0.0.0:5555 --notify tcp://scheduler:5556 --keys DIR
        one standalone worker (e.g. on another host), until SIGTERM / Ctrl-C
    detok pool --tokenizer SRC --workers N [--transport tcp --host H --keys DIR]
        N workers under a supervisor for an external scheduler and frontend; prints its endpoints
    detok serve ...
        the whole stack (registered by detok.serve.serve_cli when the frontend is installed)

Subcommands are registered by modules exposing `add_parser(subparsers)`; each sets
`func(args) -> int` as its handler.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

# Modules that add their own subcommand; a missing one is skipped (e.g. a build without the frontend).
_PLUGGED_SUBCOMMANDS = ("detok.serve.serve_cli", "detok.serve.remote_cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detok", description="A multiprocess detokenizer worker pool for LLM serving.")
    from detok import __version__

    parser.add_argument("--version", action="version", version=f"detok {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_keygen(subparsers)
    _add_worker(subparsers)
    _add_pool(subparsers)
    for module in _PLUGGED_SUBCOMMANDS:
        try:
            plugin = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is not None and module.startswith(e.name):
                continue  # the module itself is absent: no such subcommand in this build
            raise
        plugin.add_parser(subparsers)
    return parser


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, except the empty ones (None, False: "(default: None)" says nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def _add_security_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keys", default=None, metavar="DIR",
                   help="the deployment's CURVE keys (made by `detok keygen DIR`): tcp sockets authenticate and "
                        "encrypt with them")
    p.add_argument("--insecure", action="store_true",
                   help="allow tcp without keys: anyone who reaches the ports can read and inject text")


def _load_keys(args: argparse.Namespace) -> Any:
    from detok.wire.security import CurveKeys

    return CurveKeys.load(args.keys) if args.keys else None


# ---- detok keygen --------------------------------------------------------------------------------
def _add_keygen(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "keygen",
        help="write the deployment's CURVE keypair for tcp sockets",
        description=(
            "Writes DIR/detok.key (public) and DIR/detok.key_secret (secret, mode 0600). Copy DIR to every host "
            "of the deployment and pass --keys DIR (keys=DIR in Python) to workers, pools, scheduler clients and "
            "frontends: a peer without the secret key cannot connect to any detok tcp socket."
        ),
    )
    p.add_argument("dir", metavar="DIR", help="directory for the keys (created with mode 0700 if missing)")
    p.add_argument("--force", action="store_true", help="replace existing keys")
    p.set_defaults(func=_run_keygen)


def _run_keygen(args: argparse.Namespace) -> int:
    from detok.wire.security import generate_keys

    try:
        public, secret = generate_keys(args.dir, overwrite=args.force)
    except (FileExistsError, OSError) as e:
        print(f"detok keygen: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"public": str(public), "secret": str(secret)}), flush=True)
    return 0


# ---- detok worker --------------------------------------------------------------------------------
def _add_worker(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "worker",
        help="run one standalone detokenizer worker",
        description=(
            "One worker process: binds --bind for DetokBatch messages from the scheduler, connects to "
            "--notify (the scheduler client's notice endpoint) for StopNotices, and to each frontend named "
            "in a registration for deltas. Use tcp:// endpoints to run it on another host. The scheduler "
            "must list the workers in the same order everywhere (--index is this worker's shard)."
        ),
        formatter_class=_DefaultsHelp,
    )
    p.add_argument("--tokenizer", required=True, metavar="SOURCE", help="anything detok.load_tokenizer accepts")
    p.add_argument("--bind", required=True, metavar="ENDPOINT", help="input endpoint to bind, e.g. tcp://0.0.0.0:5555")
    p.add_argument("--notify", default=None, metavar="ENDPOINT", help="scheduler notice endpoint to connect to")
    p.add_argument("--index", type=int, default=0, help="this worker's shard index (names it in messages and metrics)")
    p.add_argument("--idle-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="finish a request with an error after this long without tokens")
    p.add_argument("--metrics-dir", default=None, help="prometheus multiprocess directory (default: none)")
    _add_security_args(p)
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="log level of the worker")
    p.set_defaults(func=_run_worker)


def _run_worker(args: argparse.Namespace) -> int:
    from detok.wire.security import InsecureTransportError, KeyFileError, SocketSecurity
    from detok.worker.process import WorkerConfig, serve

    try:
        keys = _load_keys(args)
        security = SocketSecurity(keys, args.insecure)
        for endpoint in (args.bind, args.notify or ""):
            security.check(endpoint)
    except (InsecureTransportError, KeyFileError) as e:
        print(f"detok worker: {e}", file=sys.stderr)
        return 2
    cfg = WorkerConfig(
        tokenizer=args.tokenizer,
        notify_endpoint=args.notify,
        idle_timeout_s=args.idle_timeout,
        metrics_dir=args.metrics_dir,
        log_level=args.log_level.upper(),
        handle_sigint=True,
        keys=keys,
        insecure=args.insecure,
    )
    return serve(cfg, args.index, args.bind)


# ---- detok pool ----------------------------------------------------------------------------------
def _add_pool(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "pool",
        help="run N workers under a supervisor and print their endpoints",
        description=(
            "Starts N worker processes (restarted within a second if they die), prints one JSON line with "
            "the worker endpoints (shard order), the notice endpoint the scheduler client must bind, and the "
            "metrics directory, then runs until SIGTERM / Ctrl-C."
        ),
        formatter_class=_DefaultsHelp,
    )
    p.add_argument("--tokenizer", required=True, metavar="SOURCE", help="anything detok.load_tokenizer accepts")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--transport", choices=["ipc", "tcp"], default="ipc",
                   help="ipc: one host (private 0700 directory); tcp: across hosts (needs --keys or --insecure)")
    p.add_argument("--host", default="127.0.0.1", help="tcp: address the workers bind")
    p.add_argument("--ports", default="free ports", help="tcp: comma-separated worker ports")
    p.add_argument("--notify", default="chosen by the pool", metavar="ENDPOINT",
                   help="the scheduler client's notice endpoint")
    p.add_argument("--idle-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a request that gets no token for this long finishes with an error")
    p.add_argument("--no-spare", action="store_true", help="do not keep a loaded spare process (slower restarts)")
    p.add_argument("--metrics-dir", default="$PROMETHEUS_MULTIPROC_DIR or a private one",
                   help="prometheus multiprocess directory")
    _add_security_args(p)
    p.add_argument("--stall-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="a worker whose loop sends no heartbeat for this long is stalled")
    p.add_argument("--no-replace-stalled", action="store_true",
                   help="only report stalled workers (/metrics, slots), do not kill and replace them")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="log level of the supervisor and the workers")
    p.set_defaults(func=_run_pool)


def _run_pool(args: argparse.Namespace) -> int:
    from detok.wire.owned_dirs import remove_orphans

    remove_orphans()  # what a SIGKILLed pool or stack left in the temp dir (never a running one's)
    # the help shows what a missing value means; the code takes None
    args.ports = None if args.ports == "free ports" else args.ports
    args.notify = None if args.notify == "chosen by the pool" else args.notify
    args.metrics_dir = None if args.metrics_dir == "$PROMETHEUS_MULTIPROC_DIR or a private one" else args.metrics_dir
    if args.metrics_dir:  # before prometheus_client is imported: the supervisor's own metrics go there too
        from detok.metrics import use_metrics_dir

        use_metrics_dir(args.metrics_dir)
    from detok.pool.pool import DetokPool, PoolStartError
    from detok.wire.security import InsecureTransportError, KeyFileError

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ports = [int(x) for x in args.ports.split(",")] if args.ports else None
    try:
        pool = DetokPool(
            args.tokenizer,
            workers=args.workers,
            transport=args.transport,
            host=args.host,
            ports=ports,
            notify_endpoint=args.notify,
            idle_timeout_s=args.idle_timeout,
            spare=not args.no_spare,
            metrics_dir=args.metrics_dir,
            log_level=args.log_level.upper(),
            keys=_load_keys(args),
            insecure=args.insecure,
            stall_timeout_s=args.stall_timeout,
            replace_stalled=not args.no_replace_stalled,
        )
    except (InsecureTransportError, KeyFileError) as e:  # configuration: exit 2, as `detok worker`
        print(f"detok pool: {e}", file=sys.stderr)
        return 2
    except (PoolStartError, ValueError) as e:
        print(f"detok pool: {e}", file=sys.stderr)
        return 1
    with pool:
        info = {
            "workers": pool.endpoints,
            "listening": [slot.listening for slot in pool.slots()],
            "notify": pool.notify_endpoint,
            "metrics_dir": str(pool.metrics_dir),
            "pids": pool.pids(),
        }
        print(json.dumps(info), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
