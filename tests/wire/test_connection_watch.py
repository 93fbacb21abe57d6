"""ConnectionWatch over real CURVE tcp sockets: up once the handshake completes, down when the
peer goes, a new generation when it comes back, never up against a peer with other keys."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import zmq

from detok.wire.connection_watch import ConnectionWatch
from detok.wire.security import CurveKeys, InsecureTransportError, SocketSecurity

DEADLINE_S = 10.0


def _until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < end, f"not {what} within {DEADLINE_S} s"
        time.sleep(0.02)


class _Inbox:
    """A bound PULL socket as the scheduler's inbox binds it."""

    def __init__(self, keys: CurveKeys, port: int = 0) -> None:
        self.ctx = zmq.Context()
        self.security = SocketSecurity(keys)
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.linger = 0
        if port:
            self.security.bind(self.sock, f"tcp://127.0.0.1:{port}")
            self.port = port
        else:
            self.security.bind(self.sock, "tcp://127.0.0.1:0")
            self.port = int(self.sock.last_endpoint.decode().rsplit(":", 1)[1])

    def close(self) -> None:
        self.sock.close(linger=0)
        self.security.close()
        self.ctx.term()


def test_up_down_and_a_new_generation_when_the_peer_returns() -> None:
    keys = CurveKeys.generate()
    inbox = _Inbox(keys)
    with ConnectionWatch(f"tcp://127.0.0.1:{inbox.port}", keys=keys) as watch:
        _until(watch.up, "up")
        assert watch.generation() == 1 and watch.detail()["connected"] is True
        inbox.close()
        _until(lambda: not watch.up(), "down after the peer closed")
        assert watch.generation() == 1
        inbox = _Inbox(keys, inbox.port)  # a new process on the same endpoint (a restarted pod)
        _until(watch.up, "up again")
        assert watch.generation() == 2 and watch.arrivals() == 2
    inbox.close()
    watch.close()  # idempotent


def test_a_peer_with_other_keys_never_counts_as_up() -> None:
    keys = CurveKeys.generate()
    impostor = _Inbox(CurveKeys.generate())
    with ConnectionWatch(f"tcp://127.0.0.1:{impostor.port}", keys=keys) as watch:
        time.sleep(1.0)  # several reconnect attempts
        assert not watch.up() and watch.arrivals() == 0 and watch.generation() == 1
    impostor.close()


def test_tcp_without_keys_is_refused() -> None:
    with pytest.raises(InsecureTransportError):
        ConnectionWatch("tcp://127.0.0.1:1")
