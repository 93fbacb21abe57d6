"""`detok frontend`: the HTTP frontend alone, e.g. on another host than the pool and the scheduler.

It binds its `DeltaReceiver` where the workers can reach it (`--receiver tcp://ADDR:PORT`: that
address travels as each request's `reply_to`, so bind a routable address, not 0.0.0.0) and sends
requests to the scheduler's inbox (`--scheduler tcp://HOST:PORT`); over tcp both sockets use the
deployment's CURVE keys (`--keys DIR`, the directory `detok keygen` wrote; every detok process of
the deployment holds the same keys). It does not supervise the pool or the scheduler: its `/health`
says "scheduler": true while its connection to the scheduler's inbox stands (`ConnectionWatch`),
else 503 (new requests get a 503, those in flight when it dropped end with an error). Run several
of these behind one load balancer, over a `detok serve --inbox tcp://...` (deploy/helm/detok).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from detok.api import limits
from detok.serve.serve_cli import DEFAULT_MODEL_NAME, _non_negative_float, _positive_int, add_parsing_arguments


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "frontend",
        help="the OpenAI-compatible HTTP frontend alone, over a scheduler and pool elsewhere (CURVE tcp)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scheduler", required=True, metavar="ENDPOINT",
                   help="the scheduler's request inbox, e.g. tcp://10.0.0.2:7100")
    p.add_argument("--receiver", required=True, metavar="ENDPOINT",
                   help="where this frontend receives text deltas, an address the workers reach, e.g. "
                        "tcp://10.0.0.5:7200 (port 0 or * picks one)")
    p.add_argument("--keys", default=None, metavar="DIR", help="the deployment's CURVE keys (detok keygen DIR)")
    p.add_argument("--insecure", action="store_true", help="tcp without CURVE (trusted networks only)")
    p.add_argument("--tokenizer", default=None, metavar="SOURCE",
                   help="the tokenizer the pool uses (default: the embedded Qwen2 one, as `detok serve`'s)")
    p.add_argument("--chat-template", default=None, metavar="FILE_OR_STRING",
                   help="a chat template (file or the template itself) instead of the tokenizer's")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=None, help=f"HTTP port (default: {limits.DEFAULT_PORT}; 0: any)")
    p.add_argument("--served-model-name", default=DEFAULT_MODEL_NAME,
                   help="the model name the API answers to (default: %(default)s)")
    p.add_argument("--max-model-len", type=_positive_int, default=32768,
                   help="prompt + output tokens a request may take (default: %(default)s)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 routes")
    p.add_argument("--stream-interval", type=_positive_int, default=1, metavar="N",
                   help="deltas joined into one streamed chunk after a choice's first (default: %(default)s)")
    p.add_argument("--max-connections", type=_positive_int, default=limits.MAX_CONNECTIONS,
                   help="open connections at once; one more gets a 503 (default: %(default)s)")
    p.add_argument("--timeout-keep-alive", type=float, default=limits.KEEP_ALIVE_S, metavar="S",
                   help="seconds an idle kept-alive connection stays open (default: %(default)s)")
    p.add_argument("--shutdown-drain", type=_non_negative_float, default=limits.SHUTDOWN_DRAIN_S, metavar="S",
                   help="on SIGTERM, seconds open requests get to finish before they end with an error "
                        "(default: %(default)s)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="(default: %(default)s)")
    add_parsing_arguments(p)
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from detok.metrics import use_metrics_dir

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from detok.serve.serve import ServeConfig, _bind, _url_host

    listener = _bind(args.host, args.port)
    from detok.wire.owned_dirs import OwnedDir, remove_orphans

    remove_orphans()
    metrics_dir = OwnedDir("detok-frontend-metrics-")  # locked while this process lives
    metrics_root = str(metrics_dir.path)
    use_metrics_dir(metrics_root)
    from detok.serve.frontend_process import FrontendParts, serve_frontend
    from detok.tokenizer.factory import load_tokenizer
    from detok.wire.security import InsecureTransportError

    cfg = ServeConfig.from_args(args)
    if args.tokenizer is None:
        from detok.tokenizer.default import default_tokenizer_dir

        args.tokenizer = str(default_tokenizer_dir())
    tokenizer = load_tokenizer(args.tokenizer, chat_template=args.chat_template)
    from detok.parsing.registry import ParserConfigError
    from detok.parsing.tokens import check_parsers

    try:  # the pool's workers must run the same detok (their families are this package's)
        check_parsers(tokenizer, args.reasoning_parser, args.tool_call_parser)
    except ParserConfigError as e:
        raise SystemExit(f"detok frontend: {e}") from None
    from detok.wire.connection_watch import ConnectionWatch

    try:  # the scheduler counts as up while this frontend's connection to its inbox stands
        watch = ConnectionWatch(args.scheduler, keys=args.keys, insecure=args.insecure)
    except InsecureTransportError as e:
        print(f"detok frontend: {e}", file=sys.stderr)
        return 2
    parts = FrontendParts(tokenizer, args.scheduler, args.receiver, lambda: {"scheduler": watch.up()},
                          lambda: {"scheduler": watch.detail()}, watch.generation, metrics_root, cfg.http_limits(),
                          scheduler_serving=watch.up, keys=args.keys, insecure=args.insecure)
    base = f"http://{_url_host(args.host)}:{listener.getsockname()[1]}"

    def banner(server: Any) -> None:
        def wait() -> None:
            while not server.started and not server.should_exit:
                threading.Event().wait(0.02)
            if server.started:
                print(f"detok frontend is up\n  OpenAI API : {base}/v1   (model \"{args.served_model_name}\")\n"
                      f"  scheduler  : {args.scheduler}\n  receiver   : {server.config.app.state.detok.link.receiver.endpoint}",
                      flush=True)

        threading.Thread(target=wait, daemon=True).start()

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        serve_frontend(cfg, parts, listener, banner)
    except InsecureTransportError as e:
        print(f"detok frontend: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        watch.close()
        listener.close()
        metrics_dir.remove()
    return 0
