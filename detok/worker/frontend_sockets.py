"""A worker's sockets to the frontends its requests name (`Registration.reply_to`): connected on
first use, at most `MAX_FRONTENDS` open, the least recently used one without live requests closed
to make room. A frontend that cannot be had (a bad endpoint, the bound reached with every socket
busy, a socket or connect error) is an error for the request that names it, never the worker's."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import zmq

from detok.wire.endpoints import endpoint_error, make_socket
from detok.wire.security import InsecureTransportError, SocketSecurity

# Frontend sockets open at once (each holds file descriptors; 1,100 crashed a worker with EMFILE).
MAX_FRONTENDS: Final = 256


class FrontendSockets:
    def __init__(
        self, ctx: zmq.Context, security: SocketSecurity, hwm: int, worker: int, has_live: Callable[[str], int]
    ) -> None:
        """`has_live(reply_to)`: live requests of that frontend (its socket is never closed)."""
        self._ctx = ctx
        self._security = security
        self._hwm = hwm
        self._worker = worker
        self._has_live = has_live
        self._open: OrderedDict[str, zmq.Socket] = OrderedDict()  # least recently used first

    def get(self, reply_to: str) -> tuple[zmq.Socket | None, str]:
        """The socket to a frontend, connected on first use; (None, why) if it cannot be had."""
        sock = self._open.get(reply_to)
        if sock is not None:
            self._open.move_to_end(reply_to)
            return sock, ""
        error = endpoint_error(reply_to)
        if error is not None:
            return None, f"cannot reach the frontend: {error}"
        if len(self._open) >= MAX_FRONTENDS and not self._close_least_recent_idle():
            return None, (f"detok worker {self._worker} already has {MAX_FRONTENDS} frontends with live requests "
                          f"(MAX_FRONTENDS); a request from one more cannot be served")
        try:
            sock = make_socket(self._ctx, zmq.PUSH, hwm=self._hwm)
        except zmq.ZMQError as e:
            return None, f"cannot open a socket to the frontend: {e}"
        try:
            self._security.connect(sock, reply_to)
        except (zmq.ZMQError, InsecureTransportError) as e:
            sock.close(0)
            return None, f"cannot connect to the frontend {reply_to!r}: {e}"
        self._open[reply_to] = sock
        return sock, ""

    def _close_least_recent_idle(self) -> bool:
        for reply_to in self._open:
            if not self._has_live(reply_to):
                self._open.pop(reply_to).close()
                return True
        return False

    def close_others(self, known: set[str]) -> None:
        """Close the sockets of frontends the worker no longer knows."""
        for reply_to in [r for r in self._open if r not in known]:
            self._open.pop(reply_to).close()

    def close(self) -> None:
        for sock in self._open.values():
            sock.close()  # bounded linger (endpoints.LINGER_MS) lets the last deltas out
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)
