"""A request a worker finishes (a stop string) and a rid the scheduler reuses as soon as the frontend
saw that finish. The worker hands the scheduler's notice to its socket before the frontend's
deltas, so a worker SIGKILLed right after the step seldom leaves the frontend knowing of a finish
the scheduler client hears of only after the replay (add_request of the rid then waited
REUSE_NOTICE_WAIT_S and raised RequestIdInUse: 3 of 90 rounds with the deltas sent first, 0 of
270 with the notice first, some under load). The real-process race runs a bounded sample here,
the long one with DETOK_SLOW=1."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import pytest

from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from detok.scheduler.client import RequestIdInUse
from detok.wire.params import DecodeParams
from detok.tokenizer.factory import load_tokenizer
from detok.wire.to_workers import Registration
from detok.worker.outputs import Outputs
from detok.worker.serving_loop import ServingLoop
from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(600)
SLOW = bool(os.environ.get("DETOK_SLOW"))


class _Recorder:
    def __init__(self, name: str, sent: list[tuple[str, object]]) -> None:
        self.name, self.sent = name, sent

    def send(self, data: object, flags: int = 0) -> None:
        self.sent.append((self.name, data))


def test_the_notice_is_handed_to_its_socket_before_any_frontends_deltas() -> None:
    sent: list[tuple[str, object]] = []
    loop = ServingLoop.__new__(ServingLoop)  # only `_send`'s collaborators, no sockets
    loop.encoder = SimpleNamespace(encode=lambda message: message)
    loop.notify = _Recorder("notify", sent)
    sockets = {"fe0": _Recorder("fe0", sent), "fe1": _Recorder("fe1", sent)}
    loop.frontends = SimpleNamespace(get=lambda reply_to: (sockets[reply_to], None))
    loop._send(Outputs([("fe0", "deltas 0"), ("fe1", "deltas 1")], "notice"))  # type: ignore[arg-type]
    assert sent == [("notify", "notice"), ("fe0", "deltas 0"), ("fe1", "deltas 1")]


def test_a_rid_reused_once_the_frontend_saw_its_stop_is_accepted_though_its_worker_was_killed() -> None:
    tok = load_tokenizer(str(hf_qwen2_dir()))
    ids = tok.encode(" one two three STOP four")
    rounds = 60 if SLOW else 6
    refused = 0
    with DetokPool(str(hf_qwen2_dir()), workers=1, transport="ipc") as pool:
        with pool.client() as client, DeltaReceiver(None) as rx:
            for i in range(rounds):
                rid = 1000 + i % 3
                stream = rx.open(rid)
                client.add_request(Registration(rid, rx.endpoint, [], DecodeParams(stop=("STOP",))))
                client.send_step([rid], ids[:5], counts=[5], starts=[0])  # the stop string is in this step
                client.flush()
                pid = pool.pids()[0]
                assert pid
                os.kill(pid, signal.SIGKILL)  # right after: its notice and deltas may or may not be out
                deadline = time.monotonic() + 60
                finish = None
                while finish is None and time.monotonic() < deadline:
                    rx.poll_blocking(0.01)
                    client.poll()
                    delta = stream.take()
                    if delta is not None and delta.finish is not None:
                        finish = delta.finish
                assert finish is not None and finish.reason == "stop" and finish.matched == "STOP"
                try:
                    client.add_request(Registration(rid, rx.endpoint, [], DecodeParams()))
                except RequestIdInUse:
                    refused += 1
                    while time.monotonic() < deadline:  # the replay finishes it: then the rid is free
                        client.poll()
                        time.sleep(0.01)
                        try:
                            client.add_request(Registration(rid, rx.endpoint, [], DecodeParams()))
                            break
                        except RequestIdInUse:
                            pass
                client.abort(rid)
    assert refused == 0
