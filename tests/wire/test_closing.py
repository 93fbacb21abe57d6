"""Owners of sockets and threads close when told, when their `with` ends, when garbage-collected
and at interpreter exit, without hanging: the CURVE authenticator thread stops before the context
is terminated."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from detok.receiver.receiver import DeltaReceiver
from detok.scheduler.client import SchedulerClient
from detok.wire import security
from detok.wire.security import CurveKeys, SocketSecurity

pytestmark = pytest.mark.timeout(60)
KEYS = CurveKeys.generate()


def test_client_and_receiver_stop_their_authenticators_with_and_at_gc() -> None:
    before = len(security._authenticators)
    with DeltaReceiver("tcp://127.0.0.1:*", keys=KEYS) as rx, SchedulerClient(["tcp://127.0.0.1:1"], "tcp://127.0.0.1:*", keys=KEYS) as client:
        assert len(security._authenticators) == before + 2
    assert rx.closed and client.closed and len(security._authenticators) == before
    rx.close(), client.close()  # idempotent
    DeltaReceiver("tcp://127.0.0.1:*", keys=KEYS)  # dropped at once
    SchedulerClient(["tcp://127.0.0.1:1"], "tcp://127.0.0.1:*", keys=KEYS)
    gc.collect()
    assert len(security._authenticators) == before


def test_socket_security_is_a_context_manager() -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    with SocketSecurity(KEYS) as sec:
        sec.bind(sock, "tcp://127.0.0.1:*")
        assert len(security._authenticators) >= 1
    sock.close(linger=0)
    ctx.term()  # returns: the authenticator stopped with the `with`


def test_a_script_that_closes_nothing_exits_at_once(tmp_path) -> None:
    """Interpreter exit with a tcp client and receiver never closed: weakref.finalize closes them."""
    script = tmp_path / "leave.py"
    script.write_text(
        "from detok.receiver.receiver import DeltaReceiver\n"
        "from detok.scheduler.client import SchedulerClient\n"
        "from detok.wire.security import CurveKeys\n"
        "keys = CurveKeys.generate()\n"
        "rx = DeltaReceiver('tcp://127.0.0.1:*', keys=keys)\n"
        "client = SchedulerClient([rx.endpoint], 'tcp://127.0.0.1:*', keys=keys)\n"
        "client.flush()\n"
        "print('done')\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "done" and "Traceback" not in out.stderr, out.stderr
