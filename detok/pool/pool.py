"""`DetokPool`: N detokenizer worker processes under a supervisor, ready for a scheduler to use.

    with detok.DetokPool("path/to/tokenizer.json", workers=4) as pool:
        client = pool.client()          # a SchedulerClient, for the scheduler process
        receiver_endpoint = ...         # each frontend binds a DeltaReceiver and sends its endpoint
                                        # as `reply_to` in its requests

Endpoints: each worker binds one input endpoint (`pool.endpoints`, ipc files in a private 0700
directory, or tcp ports); the scheduler client binds `pool.notify_endpoint`, where workers send
StopNotices and the supervisor sends WorkerEvents. tcp needs the deployment's CURVE keys
(`keys=`, see detok.wire.security; `pool.client()` uses them too) or an explicit `insecure=True`. Metrics go to `pool.metrics_dir`
(`PROMETHEUS_MULTIPROC_DIR` if set, else a private directory; serve it with
`detok.metrics.render_metrics`).

Shutdown: `close()` (or leaving the `with`, or garbage collection, or interpreter exit via
`weakref.finalize`) stops the workers with SIGTERM (bounded wait, then SIGKILL) and removes the
ipc directory. If the parent process dies without closing, its workers get SIGTERM from the kernel
and the last one out removes the ipc directory.
"""

from __future__ import annotations

import logging
import os
import socket
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from detok.metrics import ENV as METRICS_ENV
from detok.pool.supervisor import STALL_TIMEOUT_S, PoolStartError, SlotInfo, Supervisor
from detok.wire.endpoints import IpcDir, tcp_endpoint
from detok.wire.security import CurveKeys, SocketSecurity
from detok.worker.process import WorkerConfig

if TYPE_CHECKING:
    from detok.parsing.types import OutputParsing, ToolSpec
    from detok.scheduler.client import SchedulerClient
    from detok.tokenizer.base import Tokenizer

log = logging.getLogger("detok.pool")

__all__ = ["DetokPool", "PoolStartError", "SlotInfo"]


class DetokPool:
    def __init__(
        self,
        tokenizer: str | os.PathLike[str] | Tokenizer,
        workers: int = 1,
        *,
        transport: Literal["ipc", "tcp"] = "ipc",
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        notify_endpoint: str | None = None,
        idle_timeout_s: float = 300.0,
        spare: bool = True,
        metrics_dir: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 120.0,
        shutdown_timeout_s: float = 5.0,
        hwm: int = 10_000,
        log_level: str = "WARNING",
        keys: CurveKeys | str | os.PathLike[str] | None = None,
        insecure: bool = False,
        stall_timeout_s: float = STALL_TIMEOUT_S,
        replace_stalled: bool = True,
        reasoning_parser: str | None = None,
        tool_parser: str | None = None,
    ) -> None:
        """Start `workers` processes and return once all serve (PoolStartError otherwise).

        `tokenizer` is anything `detok.load_tokenizer` accepts (each worker loads it), or a loaded
        Tokenizer, whose `source` is used. tcp: workers bind `host` on `ports` (free ports if
        None). `notify_endpoint`: where the scheduler client will bind its notice socket (default:
        an ipc file, or a free tcp port). `spare`: keep one loaded process ready to replace a dead
        worker within milliseconds. `keys`: CURVE keys (a `CurveKeys` or the directory `detok
        keygen` wrote) for tcp; tcp without them raises InsecureTransportError unless `insecure`.
        `stall_timeout_s`: a worker whose loop sends no heartbeat for this long is reported stalled
        and, if `replace_stalled`, killed and replaced. `reasoning_parser` / `tool_parser`: the
        parsers the deployment's requests name in their registrations (`OutputParsing`, see
        `output_parsing()`); each worker checks them against the tokenizer at load, so an unknown
        name or a missing marker token is a PoolStartError naming it.
        """
        if reasoning_parser or tool_parser:
            from detok.parsing.registry import reasoning_parser_class, tool_parser_class

            if reasoning_parser:
                reasoning_parser_class(reasoning_parser)  # an unknown name fails here, before any process
            if tool_parser:
                tool_parser_class(tool_parser)
        self.reasoning_parser, self.tool_parser = reasoning_parser, tool_parser
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if ports is not None and len(ports) != workers:
            raise ValueError(f"{len(ports)} ports given for {workers} workers")
        source = str(getattr(tokenizer, "source", tokenizer))
        self.workers = workers
        security = SocketSecurity(keys, insecure)
        self.keys, self.insecure = security.keys, insecure
        if transport == "tcp":
            security.check(tcp_endpoint(host, 0))  # no keys and not insecure: refuse before starting anything
        self._dir = IpcDir(prefix="detok-pool-")
        try:
            if transport == "ipc":
                endpoints = [self._dir.endpoint(f"worker-{i}") for i in range(workers)]
                self.notify_endpoint = notify_endpoint or self._dir.endpoint("notify")
            elif transport == "tcp":
                endpoints = [tcp_endpoint(host, ports[i] if ports else None) for i in range(workers)]
                self.notify_endpoint = notify_endpoint or tcp_endpoint(host, _free_port(host))
            else:
                raise ValueError(f"transport must be 'ipc' or 'tcp', got {transport!r}")
            security.check(self.notify_endpoint)
            metrics = metrics_dir or os.environ.get(METRICS_ENV) or self._dir.path / "metrics"
            self.metrics_dir = Path(metrics)
            self.metrics_dir.mkdir(parents=True, exist_ok=True)
            cfg = WorkerConfig(
                tokenizer=source,
                notify_endpoint=self.notify_endpoint,
                idle_timeout_s=idle_timeout_s,
                metrics_dir=str(self.metrics_dir),
                hwm=hwm,
                log_level=log_level,
                parent_pid=os.getpid(),
                orphan_cleanup_dir=str(self._dir.path),
                keys=self.keys,
                insecure=insecure,
                reasoning_parser=reasoning_parser,
                tool_parser=tool_parser,
            )
            self._supervisor = Supervisor(
                cfg, endpoints, notify_endpoint=self.notify_endpoint, spare=spare, shutdown_timeout_s=shutdown_timeout_s,
                stall_timeout_s=stall_timeout_s, replace_stalled=replace_stalled,
            )
            self._clients: weakref.WeakSet[SchedulerClient] = weakref.WeakSet()  # pool.client()s: closed first
            self._finalizer = weakref.finalize(self, _close, self._supervisor, self._dir, self._clients)
            self._supervisor.start(start_timeout_s)
        except BaseException:
            self._dir.remove()
            raise

    # ---- what a scheduler and a frontend need ----------------------------------------------------
    @property
    def endpoints(self) -> list[str]:
        """Each worker's input endpoint, in shard order."""
        return self._supervisor.endpoints

    @property
    def ipc_dir(self) -> Path:
        return self._dir.path

    def client(self, **options: object) -> SchedulerClient:
        """A SchedulerClient connected to the workers and bound on `notify_endpoint` (one per pool),
        with the pool's keys."""
        from detok.scheduler.client import SchedulerClient

        options = {"keys": self.keys, "insecure": self.insecure, **options}
        client = SchedulerClient(self.endpoints, self.notify_endpoint, **options)  # type: ignore[arg-type]
        self._clients.add(client)  # closed with the pool, if not before
        return client

    def receiver_endpoint(self, name: str = "frontend") -> str:
        """An ipc endpoint in the pool's private directory, for a DeltaReceiver on this host."""
        return self._dir.endpoint(name)

    def output_parsing(
        self, tools: Sequence[ToolSpec] = (), starts_in_reasoning: bool | None = None, call_id_seed: str = ""
    ) -> OutputParsing | None:
        """The `OutputParsing` for a request's registration (`Registration.parsing` or
        `GenerateRequest.parsing`) with this pool's parsers; the tool parser only if `tools` are
        given. None when the pool runs no parser. `call_id_seed` "" seeds call ids from the rid."""
        from detok.parsing.types import OutputParsing

        tool = self.tool_parser if tools else None
        if not (self.reasoning_parser or tool):
            return None
        return OutputParsing(self.reasoning_parser, tool, tuple(tools), starts_in_reasoning, call_id_seed)

    # ---- supervision ----------------------------------------------------------------------------
    def slots(self) -> list[SlotInfo]:
        return self._supervisor.slots()

    def pids(self) -> list[int | None]:
        return [s.pid for s in self._supervisor.slots()]

    def all_pids(self) -> list[int]:
        """Every worker process, spares included."""
        return self._supervisor.all_pids()

    @property
    def restarts(self) -> int:
        return self._supervisor.restarts

    @property
    def stall_replacements(self) -> int:
        """Stalled worker processes killed and replaced so far."""
        return self._supervisor.stall_replacements

    @property
    def restart_seconds(self) -> list[float]:
        """For each restart: seconds from the death being seen to the replacement serving."""
        return self._supervisor.restart_seconds

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Wait until every slot serves (e.g. after a worker died); False on timeout."""
        return self._supervisor.wait_serving(timeout_s)

    # ---- shutdown ---------------------------------------------------------------------------------
    def expect_stop(self) -> None:
        """The pool is about to be closed (a stop signal reached this process, and perhaps its
        workers): a worker that exits from now on is not replaced (see Supervisor.expect_stop)."""
        self._supervisor.expect_stop()

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<DetokPool workers={self.workers} endpoints={self.endpoints}>"


def _close(supervisor: Supervisor, ipc_dir: IpcDir, clients: weakref.WeakSet[SchedulerClient] | None = None) -> None:
    try:
        for client in list(clients or ()):
            client.close()
        supervisor.stop()
    finally:
        ipc_dir.remove()


def _free_port(host: str) -> int:
    """A currently free tcp port on `host` (for an endpoint a peer binds later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
