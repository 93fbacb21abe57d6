"""ZMQ endpoint helpers: a private ipc directory, tcp endpoints, and sockets with bounded linger.

One host: `ipc://` files in a private temp dir (mode 0700, so other users cannot connect), removed
on close. Across hosts: `tcp://`; binding `tcp://host:*` picks a free port, read back with
`bound_endpoint`.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Final

import zmq

from detok.wire.owned_dirs import OwnedDir

# A closed socket may keep unsent messages this long, never forever: shutdown stays bounded.
LINGER_MS: Final = 1000
RECONNECT_MS: Final = 10
RECONNECT_MAX_MS: Final = 1000
# AF_UNIX paths are limited to 108 bytes on Linux (104 on macOS), terminating NUL included.
_MAX_IPC_PATH: Final = 103
_V4_MAPPED: Final = re.compile(r"^tcp://\[::ffff:(\d+\.\d+\.\d+\.\d+)\]:(\d+)$")
# Longest endpoint a peer may name (e.g. a registration's reply_to): an ipc path is at most
# _MAX_IPC_PATH bytes, a tcp host name at most 253 chars plus a port.
MAX_ENDPOINT_CHARS: Final = 300


class IpcDir:
    """A private directory (mode 0700) for ipc endpoint files, removed by `remove()`."""

    def __init__(self, prefix: str = "detok-", parent: str | None = None) -> None:
        # mkdtemp creates the directory with mode 0700 atomically; its owner lock tells a later
        # start that this one is alive (detok.wire.owned_dirs)
        self._owned = OwnedDir(prefix, parent or _short_tmp())
        self.path = self._owned.path

    def endpoint(self, name: str) -> str:
        path = self.path / name
        if len(str(path)) > _MAX_IPC_PATH:
            raise ValueError(
                f"ipc path {str(path)!r} is longer than {_MAX_IPC_PATH} bytes (AF_UNIX limit); "
                "use a shorter TMPDIR"
            )
        return f"ipc://{path}"

    def remove(self) -> None:
        self._owned.remove()

    def __repr__(self) -> str:
        return f"IpcDir({str(self.path)!r})"


def _short_tmp() -> str:
    # A deep $TMPDIR (macOS, some CI runners) overflows AF_UNIX paths; /tmp is short everywhere.
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) <= 40 or not os.path.isdir("/tmp") else "/tmp"


def ipc_path(endpoint: str) -> Path | None:
    """The file of an `ipc://` endpoint, None for other transports."""
    return Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None


def tcp_endpoint(host: str = "127.0.0.1", port: int | None = None) -> str:
    """`tcp://host:port`, or `tcp://host:*` (any free port) when port is None."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"tcp://{host}:{'*' if port is None else port}"


def bound_endpoint(socket: zmq.Socket) -> str:
    """The endpoint a socket last bound, with a wildcard tcp port resolved."""
    value = socket.getsockopt(zmq.LAST_ENDPOINT)
    return value.decode() if isinstance(value, bytes) else str(value)


def unmapped(endpoint: str) -> str:
    """An IPv4-mapped IPv6 tcp address, as IPv6-enabled sockets report IPv4 binds, as plain IPv4
    (`tcp://[::ffff:0.0.0.0]:5555` -> `tcp://0.0.0.0:5555`)."""
    mapped = _V4_MAPPED.match(endpoint)
    return f"tcp://{mapped.group(1)}:{mapped.group(2)}" if mapped else endpoint


def connectable(endpoint: str) -> str:
    """A bound endpoint rewritten so peers can connect to it (wildcard host -> loopback, an
    IPv4-mapped IPv6 address -> plain IPv4)."""
    endpoint = unmapped(endpoint)
    for wildcard in ("tcp://0.0.0.0:", "tcp://*:"):
        if endpoint.startswith(wildcard):
            return "tcp://127.0.0.1:" + endpoint[len(wildcard) :]
    if endpoint.startswith("tcp://[::]:"):
        return "tcp://[::1]:" + endpoint[len("tcp://[::]:") :]
    return endpoint


def endpoint_error(endpoint: str) -> str | None:
    """Why a peer-supplied endpoint cannot be connected to (None if its form is fine): only
    `ipc://PATH` and `tcp://HOST:PORT`, bounded in length, no NUL."""
    if not isinstance(endpoint, str) or not endpoint:
        return "an empty endpoint"
    if len(endpoint) > MAX_ENDPOINT_CHARS:
        return f"an endpoint longer than {MAX_ENDPOINT_CHARS} chars"
    if "\0" in endpoint:
        return "an endpoint containing NUL"
    if endpoint.startswith("ipc://"):
        if not 0 < len(endpoint.encode()) - len("ipc://") <= _MAX_IPC_PATH:
            return f"an ipc path that is empty or longer than {_MAX_IPC_PATH} bytes"
        return None
    if endpoint.startswith("tcp://"):
        host, sep, port = endpoint[len("tcp://") :].rpartition(":")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            return f"{endpoint!r} is not tcp://HOST:PORT"
        return None
    return f"{endpoint[:40]!r} is neither ipc:// nor tcp://"


def make_socket(ctx: zmq.Context, kind: int, *, hwm: int | None = None) -> zmq.Socket:
    """A socket with bounded linger (and a queue bound, for PUSH/PULL)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    if hwm is not None:
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.IPV6, 1)  # accept IPv6 as well as IPv4 tcp endpoints
    # A connecting socket whose peer went away retries soon (zmq's default is every 100 ms): a
    # replacement worker is bound within milliseconds, and its replay waits for this reconnect.
    # Backing off to 1 s spares a peer that stays down.
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
    return sock
