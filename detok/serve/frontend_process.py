"""One HTTP frontend: the OpenAI app on uvicorn over a listening socket, with its own
`DeltaReceiver` and scheduler link. `detok serve` runs one in its own process; with
`--frontends N` it runs N of these as child processes (`frontend_main`) over one inherited
listening socket, each with its own rid space (`scheduler_link.rid_base`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

    from detok.api.limits import HttpLimits
    from detok.serve.serve import ServeConfig
    from detok.tokenizer.base import Tokenizer

log = logging.getLogger("detok.serve")

_GRACEFUL_SHUTDOWN_S = 2
# gc thresholds of a serving frontend (Python's default: 700, 10, 10): a young collection every
# 20,000 net allocations, an older one every 20 of those
FRONTEND_GC_THRESHOLD = (20_000, 20, 20)
_PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(frozen=True)
class FrontendParts:
    """What a frontend needs from the stack (in-process, or published by the supervisor)."""

    tokenizer: Tokenizer
    requests_endpoint: str
    receiver_endpoint: str | None  # None: an ipc endpoint of its own
    health: Callable[[], dict[str, bool]]
    health_detail: Callable[[], dict[str, object]]
    scheduler_generation: Callable[[], int]
    metrics_dir: str
    http: HttpLimits
    rid_base: int | None = None
    index: int | None = None  # frontend process index (`--frontends N`), sent as a response header
    # a child frontend: a terminal's Ctrl-C reaches the whole process group, and the supervisor then
    # stops each frontend with SIGTERM; the SIGINT is not counted (a second signal skips the drain)
    ignore_sigint: bool = False
    scheduler_serving: Callable[[], bool] | None = None  # health()["scheduler"] alone, cheaper (admission)
    keys: str | None = None  # CURVE keys directory for tcp endpoints (a frontend on another host)
    insecure: bool = False


def import_frontend() -> None:
    """Import the HTTP app and server ahead of `serve_frontend` (fastapi, its pydantic models and
    uvicorn: the largest part of this process's start). `detok serve` runs this in a thread while
    its stack starts, where the process otherwise only waits for its workers; a failure here is
    left to `serve_frontend`'s own imports to report."""
    try:
        import uvicorn  # noqa: F401

        import detok.api.app  # noqa: F401
    except Exception:  # noqa: BLE001 - reported where the frontend really imports it
        log.debug("importing the frontend ahead failed", exc_info=True)


def serve_frontend(cfg: ServeConfig, parts: FrontendParts, listener: socket.socket,
                   on_server: Callable[[uvicorn.Server], None] | None = None) -> None:
    """Serve HTTP on `listener` until a signal stops the server (drained, see detok.serve.shutdown)."""
    import uvicorn

    from detok.api.app import FrontendState, create_app
    from detok.api.http_limits import protocol_class
    from detok.streaming.latency import LatencyRecorder
    from detok.api.scheduler_link import SchedulerLink
    from detok.serve.shutdown import DrainingServer
    from detok.api.validation import ServingLimits
    from detok.metrics import frontend_metrics
    from detok.receiver.receiver import DeltaReceiver

    receiver = DeltaReceiver(parts.receiver_endpoint, keys=parts.keys, insecure=parts.insecure)
    try:
        link = SchedulerLink(parts.requests_endpoint, receiver, base=parts.rid_base, keys=parts.keys,
                             insecure=parts.insecure)
    except BaseException:
        receiver.close()
        raise
    state = FrontendState(
        tokenizer=parts.tokenizer,
        limits=ServingLimits(cfg.served_model_name, cfg.max_model_len, random_seed=cfg.model is not None,
                             reasoning_parser=cfg.reasoning_parser, tool_parser=cfg.tool_call_parser),
        link=link,
        health=parts.health,
        health_detail=parts.health_detail,
        scheduler_generation=parts.scheduler_generation,
        scheduler_serving=parts.scheduler_serving,
        api_key=cfg.api_key,
        latency=LatencyRecorder(frontend_metrics()),
        metrics_dir=parts.metrics_dir,
        http=parts.http,
        stream_interval=cfg.stream_interval,
        frontend_index=parts.index,
        reasoning_field=cfg.reasoning_field,
    )
    verbose = cfg.log_level in ("debug", "info")
    server = DrainingServer(
        uvicorn.Config(
            create_app(state),
            loop="uvloop",
            http=protocol_class(state.http),
            lifespan="on",
            log_level=cfg.log_level,
            access_log=verbose,
            timeout_keep_alive=state.http.keep_alive_s,  # type: ignore[arg-type]  (a float works: call_later)
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
        ),
        state,
        drain_s=cfg.shutdown_drain,
        ignore_sigint=parts.ignore_sigint,
    )
    if on_server is not None:
        on_server(server)
    tune_collector()
    try:
        server.run(sockets=[listener])
    finally:
        link.close()
        receiver.close()


def tune_collector() -> None:
    """The start-up heap (tokenizer, app, templates) kept out of every collection, and collections
    less often: a logprobs stream allocates lists per token, and each older-generation pass would walk
    that heap again."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*FRONTEND_GC_THRESHOLD)


@dataclasses.dataclass(frozen=True)
class FrontendSpec:
    """A frontend child process's start (picklable: it crosses a spawn)."""

    cfg: ServeConfig
    index: int
    generation: int
    tokenizer: str  # a source load_tokenizer takes
    requests_endpoint: str
    metrics_dir: str
    health_file: str
    http: HttpLimits


def _die_with_parent() -> None:
    """SIGTERM this process when the supervisor dies (even by SIGKILL): no orphaned frontends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def frontend_main(spec: FrontendSpec, listener: socket.socket, ready: Connection) -> None:
    """Entry point of a frontend child process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle (see ignore_sigint)
    _die_with_parent()
    parent = os.getppid()
    from detok.metrics import use_metrics_dir

    use_metrics_dir(spec.metrics_dir)
    logging.basicConfig(level=spec.cfg.log_level.upper(),
                        format=f"%(asctime)s %(name)s[frontend {spec.index}] %(levelname)s %(message)s")
    from detok.serve.health_share import HealthView
    from detok.api.scheduler_link import rid_base
    from detok.tokenizer.factory import load_tokenizer

    tokenizer = load_tokenizer(spec.tokenizer, chat_template=spec.cfg.chat_template)
    view = HealthView(spec.health_file)
    parts = FrontendParts(tokenizer, spec.requests_endpoint, None, view.health, view.detail, view.generation,
                          spec.metrics_dir, spec.http, rid_base(spec.index, spec.generation), spec.index,
                          ignore_sigint=True, scheduler_serving=view.scheduler_serving, keys=spec.cfg.keys,
                          insecure=spec.cfg.insecure)

    def report_ready(server: Any) -> None:
        def wait() -> None:
            while not server.started and not server.should_exit:
                threading.Event().wait(0.02)
            if server.started:
                ready.send_bytes(b"ready")
            ready.close()

        threading.Thread(target=wait, name="detok-frontend-ready", daemon=True).start()

    if os.getppid() != parent:  # the supervisor died before prctl took effect
        return
    serve_frontend(spec.cfg, parts, listener, report_ready)
