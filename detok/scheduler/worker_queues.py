"""The scheduler client's sockets to the workers, never blocking: each worker socket has a bounded
queue; a send that would block is kept in that worker's backlog (order preserved, retried first on
the next send) and the worker is reported full, so the scheduler can throttle admission."""

from __future__ import annotations

import collections
from collections.abc import Sequence

import zmq

from detok.wire.endpoints import make_socket
from detok.wire.security import SocketSecurity


class WorkerQueues:
    def __init__(self, ctx: zmq.Context, endpoints: Sequence[str], security: SocketSecurity, hwm: int) -> None:
        self._sockets: list[zmq.Socket] = []
        for endpoint in endpoints:
            sock = make_socket(ctx, zmq.PUSH, hwm=hwm)
            security.connect(sock, endpoint)
            self._sockets.append(sock)
        self._backlog: list[collections.deque[bytes]] = [collections.deque() for _ in endpoints]

    def send(self, w: int, message: bytes) -> None:
        backlog = self._backlog[w]
        if backlog:
            self.drain(w)
        if backlog:
            backlog.append(message)
            return
        try:
            self._sockets[w].send(message, zmq.NOBLOCK, copy=len(message) < 65536)
        except zmq.Again:
            backlog.append(message)

    def drain(self, w: int) -> None:
        backlog, sock = self._backlog[w], self._sockets[w]
        while backlog:
            try:
                sock.send(backlog[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            backlog.popleft()

    def full(self) -> list[int]:
        """Workers with messages waiting for room in their queue."""
        return [w for w, backlog in enumerate(self._backlog) if backlog]

    def backlog(self, w: int) -> int:
        return len(self._backlog[w])

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
