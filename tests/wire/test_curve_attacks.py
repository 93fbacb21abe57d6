"""A foreign process on the network against a pool over tcp (real worker process, real sockets on
127.0.0.1): the five attacks numbered in `_attack`, by a peer without keys (plain zmq), by one with its own
CURVE keypair, and by raw bytes. With the deployment's CURVE keys none has any effect while keyed
traffic streams exactly; the same attacks against an explicitly insecure pool all succeed (the
control: the attacks are real).

"No effect" is proven by events, not by waiting a while: every attacking zmq socket reports a failed
CURVE handshake on its socket monitor (no message can pass a failed handshake) and the server closes
every raw connection; the control waits for each attack's effect instead."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

import detok
from detok.scheduler.client import SchedulerClient
from detok.pool.pool import DetokPool
from detok.wire.codec import new_encoder
from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_frontends import DeltaBatch, frontend_inbound_decoder
from detok.wire.to_scheduler import StopNotice, WorkerEvent
from detok.wire.to_workers import DetokBatch, FailRequests, Registration
from detok.receiver.receiver import DeltaReceiver
from detok.wire.security import CurveKeys
from detok.wire.params import DecodeParams, Finish
from tests.helpers.pool_helpers import Collected, Request, reference, workload
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

KEYS = CurveKeys.generate()
WAIT_S = 60.0  # deadline for an event that must come (a loaded box is slow; a hang fails)
SEND_WAIT_S = 2.0  # an attacker's send: queued at once as a rule (see Attacker.send)
_HANDSHAKE_EVENTS = {
    zmq.EVENT_HANDSHAKE_SUCCEEDED: "succeeded",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "failed",
}


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return detok.load_tokenizer("mock")


class Attacker:
    """A foreign peer: `plain` (zmq without CURVE), `curve` (its own keypair, the deployment's
    public server key), or `raw` (bytes on a tcp connection)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.ctx = zmq.Context()
        self.encoder = new_encoder()
        self.sockets: list[zmq.Socket] = []
        self.monitors: list[zmq.Socket] = []  # one per attacking socket: its handshake outcome
        self.outcomes: list[str | None] = []
        self.unsent = 0  # messages no connection took (a keyed server refused the handshake first)
        self.raw: list[socket.socket] = []
        self.inbox = self._socket(zmq.PULL)  # where it asks for deltas; it is no detok peer, so no keys
        port = self.inbox.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.decoder = frontend_inbound_decoder()

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.linger = 0
        self.sockets.append(sock)
        return sock

    def send(self, endpoint: str, message: object) -> None:
        data = self.encoder.encode(message)
        if self.kind == "raw":
            host, port = endpoint[len("tcp://"):].rsplit(":", 1)
            conn = socket.create_connection((host, int(port)), timeout=5)
            self.raw.append(conn)
            # a ZMTP 3 greeting (NULL mechanism), then the message as a frame, then junk
            greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
            try:
                conn.sendall(greeting + b"\x02" + len(data).to_bytes(8, "big") + data + b"\x00" * 64)
            except OSError:
                pass  # the server may drop the connection at once
            return
        sock = self._socket(zmq.PUSH)
        if self.kind == "curve":
            own = CurveKeys.generate()
            sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = own.secret, own.public, KEYS.public
        monitor = sock.get_monitor_socket()
        monitor.linger = 0
        self.monitors.append(monitor)
        self.outcomes.append(None)
        sock.connect(endpoint)
        # queued at once as a rule; a socket whose connection is already refused may not take it
        # (EAGAIN, seen once in a full run): the message never left, which is no effect either
        sock.sndtimeo = int(SEND_WAIT_S * 1000)
        try:
            sock.send(data)
        except zmq.Again:
            self.unsent += 1

    def _read_monitors(self) -> bool:
        for i, monitor in enumerate(self.monitors):
            while self.outcomes[i] is None and monitor.poll(0):
                event = recv_monitor_message(monitor)["event"]
                self.outcomes[i] = _HANDSHAKE_EVENTS.get(event)
        return all(o is not None for o in self.outcomes)

    def handshakes(self) -> list[str]:
        """The first handshake outcome of every attacking socket ("failed" or "succeeded"), waited for."""
        wait_until(self._read_monitors, WAIT_S, 0.01, lambda: f"{self.kind}: handshakes {self.outcomes}")
        return [o for o in self.outcomes if o is not None]

    def raw_refused(self) -> bool:
        """Each raw connection was closed by the server (what it sent before, a greeting, is ignored)."""
        for conn in self.raw:
            conn.settimeout(WAIT_S)
            try:
                while conn.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            except TimeoutError:
                return False
        return True

    def refused(self) -> bool:
        """Nothing this attacker sent can have been taken: every handshake failed, every raw
        connection was closed (events waited for)."""
        return self.raw_refused() if self.kind == "raw" else set(self.handshakes()) == {"failed"}

    def received(self) -> list[DeltaBatch]:
        got = []
        while self.inbox.poll(0):
            got.append(self.decoder.decode(self.inbox.recv()))
        return got

    def close(self) -> None:
        for conn in self.raw:
            conn.close()
        for monitor in self.monitors:
            monitor.close(0)
        for sock in self.sockets:
            sock.close(0)
        self.ctx.term()


@dataclass
class Evidence:
    own_decoding: bool = False  # the attacker's own request was decoded for it
    injected: bool = False  # the victim's text differs from the oracle
    hijacked: bool = False  # the victim's text went to the attacker (or its stream hangs)
    forged_stop: bool = False  # the scheduler client stopped a request on a forged StopNotice
    forged_death: bool = False  # ... or failed requests on a forged WorkerEvent(died)
    forged_delta: bool = False  # the frontend took a forged DeltaBatch
    details: list[str] = field(default_factory=list)


def _attack(tok, pool: DetokPool, client: SchedulerClient, rx: DeltaReceiver, attackers: list[Attacker],
            keyed: bool) -> Evidence:
    """Victims A (injection), B (hijack), C (forged stop), D (forged delta) stream on the pool's
    only worker while each attacker tries each attack; then everything is checked. `keyed`: the
    attacks are proven refused by events (handshakes failed, connections closed); else (the
    control) each effect is waited for."""
    ev = Evidence()
    stopped: list = []

    def settle(effect: object) -> None:
        """Until the attacks sent so far are decided: refused (keyed) or `effect()` seen (control)."""
        if keyed:
            for attacker in attackers:
                if not attacker.refused():
                    ev.details.append(f"{attacker.kind}: an attack was not refused {attacker.outcomes}")
        else:
            try:
                wait_until(effect, WAIT_S, 0.02)  # type: ignore[arg-type]
            except AssertionError as e:
                ev.details.append(f"control: an effect never came: {e}")
        stopped.extend(client.poll())

    victims = workload(tok, 4, 30, seed=5, first_rid=500)
    a, b, c, d = victims
    got = Collected(rx, [v.rid for v in victims])
    for v in victims:
        client.add_request(Registration(v.rid, rx.endpoint, v.context, v.params))
    half = 12
    for k in range(half):
        client.send_step([v.rid for v in victims], [v.tokens[k] for v in victims], starts=[k] * len(victims))
    deadline = time.monotonic() + WAIT_S
    while any(not got.text[v.rid] for v in victims) and time.monotonic() < deadline:
        got.pump(0.05)
    worker = pool.endpoints[0]
    junk = tok.encode(" INJECTED")
    own = Request(9_999, [], tok.encode(" free decoding"))
    for attacker in attackers:
        # 1. its own request, decoded for free
        attacker.send(worker, DetokBatch(1, time.time(), [Registration(own.rid, attacker.endpoint, [], DecodeParams())],
                                         pack_rids([own.rid] * len(own.tokens)), pack_u32(range(len(own.tokens))), b"",
                                         pack_u32(own.tokens), []))
        # 2. text injected into A's stream at its current position
        attacker.send(worker, DetokBatch(2, time.time(), [], pack_rids([a.rid]), pack_u32([half]),
                                         pack_u32([len(junk)]), pack_u32(junk), []))
        # 3. B hijacked: its finish sent to the attacker (B's frontend waits forever), then B registered
        #    again with the attacker's reply_to
        attacker.send(worker, FailRequests([b.rid], [attacker.endpoint], "x"))
        attacker.send(worker, DetokBatch(3, time.time(), [Registration(b.rid, attacker.endpoint, b.context, b.params)],
                                         b"", b"", b"", b"", []))
        # 4. a forged StopNotice for C on the scheduler client's notice socket
        attacker.send(pool.notify_endpoint, StopNotice(0, [c.rid], [Finish("stop", "forged")]))
        # 6. a forged delta for D straight to the frontend
        attacker.send(rx.endpoint, DeltaBatch.from_rows(0, time.time(), [d.rid], [" FORGED"], [len(got.text[d.rid])]))
    settle(lambda: stopped.extend(client.poll()) or any(s.rid == c.rid for s in stopped))
    ev.forged_stop = any(s.rid == c.rid for s in stopped)
    # 5. a forged WorkerEvent(died): the client would fail every live request of worker 0
    for attacker in attackers:
        attacker.send(pool.notify_endpoint, WorkerEvent(0, "died", 1, 1, "forged death"))
    settle(lambda: stopped.extend(client.poll()) or any(e.kind == "died" for e in client.events))
    ev.forged_death = any(e.kind == "died" for e in client.events) or any(s.finish.reason == "error" for s in stopped)
    for k in range(half, 30):
        client.send_step([v.rid for v in victims], [v.tokens[k] for v in victims], starts=[k] * len(victims))
    for v in victims:
        client.end(v.rid, "length")
    client.flush()
    try:  # (the control's B is hijacked: its finish went to the attacker, its stream never ends)
        got.wait_finished([v.rid for v in victims if keyed or v is not b], timeout=WAIT_S)
    except AssertionError as e:
        ev.details.append(str(e))
    to_attacker: list[DeltaBatch] = []

    def attacker_got(rid: int) -> bool:
        to_attacker.extend(batch for attacker in attackers for batch in attacker.received())
        return any(r == rid and t for batch in to_attacker for r, t, _ in batch.rows()) or any(
            f.rid == rid for batch in to_attacker for f in batch.finished)

    if not keyed:  # the control: the attacker's own decoding and B's hijacked text reach it
        settle(lambda: attacker_got(own.rid) and attacker_got(b.rid))
    attacker_got(-1)  # whatever arrived (keyed: nothing can, every handshake failed)
    about = {r for batch in to_attacker for r, t, _ in batch.rows() if t} | {
        f.rid for batch in to_attacker for f in batch.finished}
    ev.own_decoding = own.rid in about
    ev.hijacked = b.rid in about or got.finish.get(b.rid) != Finish("length")
    for v, flag in ((a, "injected"), (d, "forged_delta")):
        want = reference(tok, v)[0]
        if got.text[v.rid] != want or got.finish.get(v.rid) != Finish("length"):
            setattr(ev, flag, True)
            ev.details.append(f"{flag}: {got.text[v.rid]!r} != {want!r} ({got.finish.get(v.rid)})")
    return ev


def _clean(ev: Evidence) -> bool:
    return not (ev.own_decoding or ev.injected or ev.hijacked or ev.forged_stop or ev.forged_death or ev.forged_delta)


def test_foreign_peers_have_no_effect_on_a_keyed_pool(tok) -> None:
    with DetokPool("mock", workers=1, transport="tcp", spare=False, keys=KEYS) as pool:
        pid = pool.pids()[0]
        client, rx = pool.client(), DeltaReceiver("tcp://127.0.0.1:*", keys=KEYS)
        attackers = [Attacker(kind) for kind in ("plain", "curve", "raw")]
        try:
            ev = _attack(tok, pool, client, rx, attackers, keyed=True)
            assert _clean(ev) and not ev.details, ev
            assert rx.malformed == 0 and all(e.kind == "ready" for e in client.events)
        finally:
            for attacker in attackers:
                attacker.close()
            client.close()
            rx.close()
        assert pool.pids()[0] == pid and pool.restarts == 0


def test_the_same_attacks_succeed_without_keys(tok) -> None:
    """The control: on a pool run with insecure=True every attack works, so the test above can fail."""
    with DetokPool("mock", workers=1, transport="tcp", spare=False, insecure=True) as pool:
        client = pool.client()
        rx = DeltaReceiver("tcp://127.0.0.1:*", insecure=True)
        attacker = Attacker("plain")
        try:
            ev = _attack(tok, pool, client, rx, [attacker], keyed=False)
            assert attacker.unsent == 0  # every attack left (so each effect below can be its doing)
        finally:
            attacker.close()
            client.close()
            rx.close()
    assert ev.own_decoding and ev.injected and ev.hijacked and ev.forged_stop and ev.forged_death and ev.forged_delta, ev
    # every effect came and the victims other than B finished (the other details are the effects)
    assert not [d for d in ev.details if not d.startswith(("injected", "forged_delta"))], ev.details
