"""`detok serve`: the whole stack in one process tree, the HTTP frontend in this process.

Order matters in two places. Metrics: prometheus_client picks its multiprocess store at import,
so the metrics directory is set before anything imports it. Shutdown (`detok.serve.shutdown`):
on SIGINT/SIGTERM the frontend refuses new requests, lets open responses finish for a short drain
time, ends the rest with an error event and `[DONE]`, then uvicorn stops, then the scheduler stub,
then the pool; a signal during the clean-up is ignored, since every step of it is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from detok.api import limits

if TYPE_CHECKING:
    import uvicorn

    from detok.serve.stack import Stack

log = logging.getLogger("detok.serve")

_RESERVED_FDS = 256  # file descriptors kept for sockets, pipes and files other than HTTP connections


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    model: str | None = None  # a GGUF run by the reference engine instead of the stub
    tokenizer: str | None = None
    chat_template: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    workers: int = 2
    no_spare: bool = False
    step_ms: float = 20.0
    max_batch: int = 256
    tokens_per_step: int | tuple[int, int] = 1  # (MIN, MAX): a seeded random count per request per step
    workload: str = "corpus"
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    reasoning_field: str = "reasoning"
    served_model_name: str = "detok-stub"
    max_model_len: int = 32768
    api_key: str | None = None
    demo: bool = False
    log_level: str = "warning"
    max_body_bytes: int = limits.MAX_BODY_BYTES
    http_header_timeout: float = limits.HEADER_TIMEOUT_S
    http_body_timeout: float = limits.BODY_TIMEOUT_S
    max_connections: int = limits.MAX_CONNECTIONS
    timeout_keep_alive: float = limits.KEEP_ALIVE_S
    shutdown_drain: float = limits.SHUTDOWN_DRAIN_S
    stream_interval: int = 1
    frontends: int = 1  # HTTP processes over one port (>1: child processes, see detok.serve.frontends)
    inbox: str | None = None  # the scheduler's request inbox for remote frontends (tcp), see StackConfig
    keys: str | None = None  # the deployment's CURVE keys directory (tcp endpoints)
    insecure: bool = False

    def http_limits(self) -> limits.HttpLimits:
        """One frontend process's limits: the stack's connection bound divided among the frontends
        (each process counts its own connections; together they hold at most --max-connections)."""
        # connections past the process's file descriptor limit would fail in accept() instead
        room = max(16, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - _RESERVED_FDS)
        share = max(1, self.max_connections // self.frontends)
        if share > room:
            log.warning("--max-connections %d lowered to %d per frontend (the open-files limit, less %d for the "
                        "stack)", self.max_connections, room, _RESERVED_FDS)
        return limits.HttpLimits(
            max_body_bytes=self.max_body_bytes,
            header_timeout_s=self.http_header_timeout,
            body_timeout_s=self.http_body_timeout,
            max_connections=min(share, room),
            keep_alive_s=self.timeout_keep_alive,
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names})


class _Shutdown(BaseException):
    """SIGTERM outside uvicorn's own handling (start-up, clean-up): unwind like Ctrl-C."""


# Called first on a SIGTERM, from the handler: the stack's `expect_stop` once it exists. A SIGTERM
# to the whole process group (systemd's default stop) stops the stub and the spare workers at the
# same moment; told first, the stack's supervisors do not restart them while this process unwinds.
_on_sigterm: list[Callable[[], None]] = []


def _raise_shutdown(_signum: int, _frame: FrameType | None) -> None:
    for hook in _on_sigterm:
        hook()
    raise _Shutdown


def _bind(host: str, port: int | None) -> socket.socket:
    """The listening socket, bound before anything starts so a taken port fails in milliseconds,
    the default port as much as an explicit one (0 picks a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    port = limits.DEFAULT_PORT if port is None else port
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        hint = " (pick another with --port; 0 picks a free one)" if e.errno == errno.EADDRINUSE else ""
        raise SystemExit(f"detok serve: cannot listen on {host}:{port}: {e.strerror}{hint}") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def run_serve(cfg: ServeConfig) -> int:
    from detok.metrics import use_metrics_dir

    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from detok.wire.owned_dirs import OwnedDir, remove_orphans

    listener = _bind(cfg.host, cfg.port)
    remove_orphans()  # what a SIGKILLed stack left in the temp dir (never a running one's)
    metrics_dir = OwnedDir("detok-metrics-")
    metrics_root = str(metrics_dir.path)
    use_metrics_dir(metrics_root)  # before anything imports prometheus_client
    signal.signal(signal.SIGTERM, _raise_shutdown)
    # Ctrl-C stops the stack even when started with SIGINT ignored (a background job of a script,
    # `nohup`): Python then installs no KeyboardInterrupt handler, while uvicorn's own handler in
    # the one-frontend case would still react - the same command must not behave differently
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stack = None
    try:
        stack = _start_stack(cfg, metrics_root)
        _on_sigterm.append(stack.expect_stop)
        return _serve_http(cfg, stack, listener, metrics_root)
    except (KeyboardInterrupt, _Shutdown):
        print("\ndetok serve: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # clean-up is bounded: let it finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if stack is not None:
            _on_sigterm.remove(stack.expect_stop)
            stack.close()
        listener.close()
        metrics_dir.remove()


def _start_stack(cfg: ServeConfig, metrics_root: str) -> Stack:
    # imported here, after the metrics directory is set: the pool's modules import prometheus_client
    from detok.serve.stack import Stack, StackConfig, StackStartError
    from scheduler_stub.stub import StepPolicy

    if cfg.tokenizer is None:
        from detok.tokenizer.default import default_tokenizer_dir

        source = str(default_tokenizer_dir())
    else:
        source = cfg.tokenizer
    per_step = cfg.tokens_per_step
    low, high = per_step if isinstance(per_step, tuple) else (per_step, per_step)
    policy = StepPolicy(cfg.step_ms / 1000.0, cfg.max_batch, low, high if high != low else None)
    stack = Stack(
        StackConfig(
            tokenizer=source,
            chat_template=cfg.chat_template,
            workers=cfg.workers,
            spare=not cfg.no_spare,
            workload=cfg.workload,
            policy=policy,
            model=cfg.model,
            metrics_dir=metrics_root,
            log_level=cfg.log_level.upper(),
            reasoning_parser=cfg.reasoning_parser,
            tool_parser=cfg.tool_call_parser,
            inbox=cfg.inbox,
            keys=cfg.keys,
            insecure=cfg.insecure,
        )
    )
    scheduler = f"the reference engine on {cfg.model}" if cfg.model else "the scheduler stub"
    print(f"detok serve: starting {cfg.workers} detok workers and {scheduler} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    ahead = None
    if cfg.frontends == 1:  # this process serves HTTP: its imports overlap the workers' start
        from detok.serve.frontend_process import import_frontend

        ahead = threading.Thread(target=import_frontend, name="detok-frontend-import", daemon=True)
        ahead.start()
    try:
        stack.start()
    except StackStartError as e:
        stack.close()
        raise SystemExit(f"detok serve: {e}") from None
    except BaseException:
        stack.close()
        raise
    finally:
        if ahead is not None:
            ahead.join()  # (bounded: imports; never a half-imported module left at exit)
    print(f"detok serve: stack ready in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    log.info("process tree: frontend %d, scheduler stub %s, detok workers %s", os.getpid(), stack.stub_pid,
             stack.pool.pids() if stack.pool is not None else [])
    return stack


def _serve_http(cfg: ServeConfig, stack: Stack, listener: socket.socket, metrics_root: str) -> int:
    from detok.serve.frontend_process import FrontendParts, serve_frontend

    if cfg.frontends > 1:
        return _serve_many(cfg, stack, listener, metrics_root)
    assert stack.tokenizer is not None
    parts = FrontendParts(stack.tokenizer, stack.requests_endpoint, stack.receiver_endpoint, stack.health,
                          stack.health_detail, lambda: stack.scheduler_generation, metrics_root, cfg.http_limits(),
                          scheduler_serving=stack.scheduler_serving, keys=cfg.keys, insecure=cfg.insecure)
    base = f"http://{_url_host(cfg.host)}:{listener.getsockname()[1]}"

    def banner(server: uvicorn.Server) -> None:
        server.on_sigterm = stack.expect_stop  # type: ignore[attr-defined]  (a DrainingServer: uvicorn's handler meanwhile)
        threading.Thread(target=_after_start, args=(lambda: server.started, lambda: server.should_exit, cfg, base),
                         name="detok-serve-banner", daemon=True).start()

    serve_frontend(cfg, parts, listener, banner)
    return 0


def _serve_many(cfg: ServeConfig, stack: Stack, listener: socket.socket, metrics_root: str) -> int:
    """The frontends as child processes over `listener`; this process supervises until a signal."""
    from detok.serve.frontend_process import FrontendSpec
    from detok.serve.frontends import FrontendStartError, FrontendSupervisor
    from detok.serve.health_share import HealthBoard

    health_file = os.path.join(metrics_root, "..", os.path.basename(metrics_root) + ".health.json")
    listener.set_inheritable(True)
    http = cfg.http_limits()

    def spec(index: int, generation: int) -> FrontendSpec:
        return FrontendSpec(cfg, index, generation, stack.cfg.tokenizer, stack.requests_endpoint, metrics_root,
                            health_file, http)

    from detok.api.scheduler_link import RangeAborter

    aborter = RangeAborter(stack.requests_endpoint, keys=cfg.keys, insecure=cfg.insecure)  # a dead frontend's requests stop in the scheduler
    frontends = FrontendSupervisor(cfg.frontends, spec, listener, cfg.shutdown_drain, metrics_root,
                                   on_death=aborter.abort)

    def snapshot() -> dict[str, object]:
        components: dict[str, bool] = dict(stack.health())
        components["frontends"] = frontends.all_up()
        detail = dict(stack.health_detail(), frontends=frontends.status())
        return {"components": components, "detail": detail, "generation": stack.scheduler_generation}

    board = HealthBoard(health_file, snapshot)
    try:
        print(f"detok serve: starting {cfg.frontends} HTTP frontends ...", file=sys.stderr, flush=True)
        try:
            frontends.start(120.0)
        except FrontendStartError as e:
            raise SystemExit(f"detok serve: {e}") from None
        log.info("frontends: pids %s, %d connections each at most", frontends.pids(), http.max_connections)
        base = f"http://{_url_host(cfg.host)}:{listener.getsockname()[1]}"
        _after_start(lambda: True, lambda: False, cfg, base)
        while True:
            time.sleep(3600)  # until SIGINT / SIGTERM unwinds this (run_serve's handlers)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping is bounded: let it finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        frontends.stop()
        aborter.close()  # after stop(): the watcher, its only user, has ended
        board.close()
        with contextlib.suppress(OSError):
            os.unlink(health_file)


def _after_start(started: Callable[[], bool], exiting: Callable[[], bool], cfg: ServeConfig, base: str) -> None:
    """Once the server accepts connections: the demo, if asked, then where everything is."""
    while not started():
        if exiting():
            return
        time.sleep(0.02)
    if cfg.demo:
        from detok.serve.demo import stream_demo_chat

        try:
            stream_demo_chat(f"{base}/v1", cfg.served_model_name, cfg.api_key)
        except Exception as e:  # the demo is a show; the server stays up for real clients
            print(f"detok serve: the demo request failed: {e}", file=sys.stderr, flush=True)
    _print_banner(cfg, base)


def _print_banner(cfg: ServeConfig, base: str) -> None:
    tokenizer = cfg.tokenizer or "embedded Qwen2 (default)"
    auth = f" -H 'Authorization: Bearer {cfg.api_key}'" if cfg.api_key else ""
    scheduler = (f"reference engine (CPU, context {cfg.max_model_len})" if cfg.model else
                 f"scheduler stub ({cfg.workload}, {cfg.step_ms:g} ms steps, batch <= {cfg.max_batch})")
    print(
        f"\ndetok serve is up: {cfg.frontends} HTTP frontend{'s' if cfg.frontends > 1 else ''}, "
        f"{cfg.workers} detok workers, {scheduler}, tokenizer {tokenizer}\n"
        f"  OpenAI API : {base}/v1   (model \"{cfg.served_model_name}\")\n"
        f"  metrics    : {base}/metrics\n"
        f"  health     : {base}/health\n"
        f"  try        : curl -N {base}/v1/chat/completions -H 'Content-Type: application/json'{auth} "
        f"-d '{{\"model\": \"{cfg.served_model_name}\", \"stream\": true, "
        f"\"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'\n"
        "Press Ctrl-C to stop.",
        flush=True,
    )
