"""detok.wire.security and endpoint validation in-process: key files, refusals, and CURVE sockets that
let the deployment's key in and nobody else (one ZAP authenticator per context, shared)."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from detok.wire.endpoints import endpoint_error
from detok.wire.security import CurveKeys, InsecureTransportError, KeyFileError, SocketSecurity, generate_keys


def test_keygen_writes_a_private_secret_and_loads_back(tmp_path) -> None:
    public, secret = generate_keys(tmp_path / "k")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    keys = CurveKeys.load(tmp_path / "k")
    assert keys.public.decode() in public.read_text() and keys.secret.decode() not in public.read_text()
    assert keys.secret.decode() not in repr(keys)
    with pytest.raises(FileExistsError):
        generate_keys(tmp_path / "k")
    generate_keys(tmp_path / "k", overwrite=True)
    assert CurveKeys.load(tmp_path / "k") != keys


def test_bad_keys_are_refused(tmp_path) -> None:
    with pytest.raises(KeyFileError, match="detok keygen"):
        CurveKeys.load(tmp_path)
    generate_keys(tmp_path)
    secret = tmp_path / "detok.key_secret"
    for mode in (0o604, 0o644, 0o660, 0o610):  # others, or group write / execute: never
        os.chmod(secret, mode)
        with pytest.raises(KeyFileError, match="other users"):
            CurveKeys.load(tmp_path)
    os.chmod(secret, 0o640)
    if os.geteuid() == 0:  # group read is allowed only when root owns the file (a Kubernetes Secret)
        CurveKeys.load(tmp_path)
        os.chown(secret, 12345, -1)
    with pytest.raises(KeyFileError, match="other users"):
        CurveKeys.load(tmp_path)
    a, b = CurveKeys.generate(), CurveKeys.generate()
    with pytest.raises(KeyFileError, match="does not belong"):
        CurveKeys(a.public, b.secret)


def test_tcp_needs_keys_or_an_explicit_insecure() -> None:
    with pytest.raises(InsecureTransportError):
        SocketSecurity().check("tcp://127.0.0.1:5555")
    SocketSecurity(insecure=True).check("tcp://127.0.0.1:5555")
    SocketSecurity(CurveKeys.generate()).check("tcp://127.0.0.1:5555")
    SocketSecurity().check("ipc:///tmp/x")


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [("ipc:///tmp/a", None), ("tcp://10.0.0.1:5555", None), ("tcp://[::1]:1", None), ("tcp://host.example:80", None),
     ("", "empty"), ("udp://h:1", "neither"), ("tcp://h", "HOST:PORT"), ("tcp://h:0", "HOST:PORT"),
     ("tcp://h:70000", "HOST:PORT"), ("tcp://:5", "HOST:PORT"), ("ipc://", "ipc path"), ("ipc://" + "a" * 104, "ipc path"),
     ("tcp://" + "h" * 300 + ":1", "longer"), ("ipc:///a\0b", "NUL")],
)
def test_endpoint_form(endpoint: str, problem: str | None) -> None:
    error = endpoint_error(endpoint)
    assert (error is None) if problem is None else (error is not None and problem in error), error


def _deliver(ctx: zmq.Context, endpoint: str, security: SocketSecurity | None, curve: CurveKeys | None = None) -> zmq.Socket:
    push = ctx.socket(zmq.PUSH)
    push.linger = 0
    if security is not None:
        security.connect(push, endpoint)
    else:
        if curve is not None:
            push.curve_secretkey, push.curve_publickey, push.curve_serverkey = curve.secret, curve.public, curve.public
        push.connect(endpoint)
    return push


def test_only_the_deployment_key_gets_through_and_authenticators_are_shared() -> None:
    keys = CurveKeys.generate()
    ctx = zmq.Context()
    first, second = SocketSecurity(keys), SocketSecurity(keys)
    pulls = [ctx.socket(zmq.PULL) for _ in range(2)]
    for pull, owner in zip(pulls, (first, second)):  # two owners binding in one context share one ZAP handler
        pull.linger = 0
        owner.bind(pull, "tcp://127.0.0.1:*")
    first.close()  # the second owner's socket still authenticates
    endpoint = pulls[1].getsockopt(zmq.LAST_ENDPOINT).decode()
    intruder = CurveKeys.generate()
    pushes = [_deliver(ctx, endpoint, None), _deliver(ctx, endpoint, None, intruder),
              _deliver(ctx, endpoint, SocketSecurity(keys))]
    for i, push in enumerate(pushes):
        push.send(b"%d" % i)
    got = []
    while pulls[1].poll(1500):
        got.append(pulls[1].recv())
    assert got == [b"2"]
    for sock in (*pulls, *pushes):
        sock.close(0)
    second.close()
    ctx.term()  # returns: no authenticator left holding the context
