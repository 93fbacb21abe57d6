"""Whether the peer that binds an endpoint can be reached now, seen from the connecting side.

A frontend on another host than the scheduler (`detok frontend`) has no supervisor to tell it
whether the scheduler runs; what it can know is whether its connection to the scheduler's request
inbox stands. `ConnectionWatch` holds one more connection to that endpoint (a PUSH socket that
never sends, so the inbox never gets a message from it) and follows libzmq's socket monitor:
a completed handshake (CURVE included: a peer with other keys never counts) means up, a
disconnect means down. ZMTP heartbeats make a peer that vanished without closing its connection
(a host or a network gone) count as down after `HEARTBEAT_TIMEOUT_S`.

`arrivals()` counts the handshakes: a peer that comes back after a disconnect may be a new process
(a restarted scheduler pod) that knows nothing of the requests sent to the old one, so the
frontend treats each arrival after the first as a new scheduler generation.
"""

from __future__ import annotations

import os
import threading
from typing import Final

import zmq
from zmq.utils.monitor import recv_monitor_message

from detok.wire.security import CurveKeys, SocketSecurity

HEARTBEAT_INTERVAL_S: Final = 1.0
HEARTBEAT_TIMEOUT_S: Final = 3.0  # no heartbeat answer for this long: the connection is down
_POLL_MS: Final = 200  # how often the watcher thread looks whether it should stop
_EVENTS: Final = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                  | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class ConnectionWatch:
    def __init__(self, endpoint: str, *, keys: CurveKeys | str | os.PathLike[str] | None = None,
                 insecure: bool = False) -> None:
        self.endpoint = endpoint
        self._security = SocketSecurity(keys, insecure)
        self._security.check(endpoint)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.linger = 0
        self._sock.heartbeat_ivl = int(HEARTBEAT_INTERVAL_S * 1000)
        self._sock.heartbeat_timeout = int(HEARTBEAT_TIMEOUT_S * 1000)
        self._monitor = self._sock.get_monitor_socket(_EVENTS)
        self._lock = threading.Lock()
        self._up = False
        self._arrivals = 0
        self._stop = threading.Event()
        self._security.connect(self._sock, endpoint)
        # the monitor socket is used by this thread only from here on (thread start is a barrier)
        self._thread = threading.Thread(target=self._follow, name="detok-connection-watch", daemon=True)
        self._thread.start()

    def up(self) -> bool:
        with self._lock:
            return self._up

    def arrivals(self) -> int:
        """Completed handshakes so far (0 before the first)."""
        with self._lock:
            return self._arrivals

    def generation(self) -> int:
        """1 until the peer comes back after a disconnect, then +1 at each return."""
        return max(1, self.arrivals())

    def detail(self) -> dict[str, object]:
        with self._lock:
            return {"endpoint": self.endpoint, "connected": self._up, "connections": self._arrivals}

    def _follow(self) -> None:
        while not self._stop.is_set():
            if not self._monitor.poll(_POLL_MS):
                continue
            event = recv_monitor_message(self._monitor)["event"]
            with self._lock:
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._up = True
                    self._arrivals += 1
                else:  # disconnected, or a handshake the peer refused (other keys)
                    self._up = False

    def close(self) -> None:
        """Stop following and close the sockets. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._security.close()
        self._ctx.term()

    def __enter__(self) -> ConnectionWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
