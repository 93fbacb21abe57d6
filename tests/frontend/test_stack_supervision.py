"""`detok serve`'s process tree (the Stack, real processes): the scheduler stub survives hostile
requests sent straight to its inbox (they fail cleanly), and a killed stub is restarted and serves
again, with `health()`, `health_detail()` and `scheduler_generation` telling."""

from __future__ import annotations

import os
import signal
import time

import pytest
import zmq

from detok.serve.stack import Stack, StackConfig
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import GenerateRequest
from detok.receiver.receiver import DeltaReceiver
from detok.receiver.request_stream import RequestStream
from detok.wire.params import DecodeParams, Finish
from scheduler_stub.stub import StepPolicy

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def stack():
    s = Stack(StackConfig("mock", workers=1, spare=False, policy=StepPolicy(0.002, 64)))
    s.start()
    yield s
    s.close()


class _Frontend:
    """What the HTTP frontend does with the stack's endpoints: requests out, deltas in."""

    def __init__(self, stack: Stack) -> None:
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.connect(stack.requests_endpoint)
        self.rx = DeltaReceiver(stack.receiver_endpoint)
        self.encoder = new_encoder()

    def send(self, rid: int, seed: int | None = 0, reply_to: str | None = None, max_tokens: int = 8) -> None:
        request = GenerateRequest(rid, [1, 2, 3], DecodeParams(), max_tokens, reply_to or self.rx.endpoint, seed)
        self.push.send(self.encoder.encode(request))

    def finish_of(self, rid: int, timeout: float = 30.0, stream: RequestStream | None = None) -> tuple[str, Finish]:
        # a stream opened before the request was sent must be passed in: once its finish arrived,
        # `open(rid)` starts a new stream for the rid (ids are reusable once finished)
        stream = stream if stream is not None else self.rx.open(rid)
        text = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.rx.poll_blocking(0.05)
            while (delta := stream.take()) is not None:
                text += delta.text
                if delta.finish is not None:
                    return text, delta.finish
        raise AssertionError(f"rid {rid} never finished")

    def close(self) -> None:
        self.push.close(0)
        self.rx.close()
        self.ctx.term()


@pytest.fixture
def frontend(stack):
    f = _Frontend(stack)
    yield f
    f.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_hostile_seeds_fail_cleanly_and_the_stub_goes_on(stack, frontend):
    pid, generation = stack.stub_pid, stack.scheduler_generation  # relative: another test may restart it first
    # msgpack carries ints in [-2**63, 2**64): every seed above int64 can reach the stub
    hostile = {1: 2**63, 3: 2**64 - 1}
    streams = {}
    for rid, seed in hostile.items():
        streams[rid] = frontend.rx.open(rid)
        frontend.send(rid, seed)
    frontend.send(4, 5, reply_to="udp://nowhere:1")  # an endpoint no worker may connect to: logged, dropped
    for rid, seed in hostile.items():
        text, finish = frontend.finish_of(rid, stream=streams[rid])
        assert text == "" and finish.reason == "error" and str(seed) in (finish.message or "")
    for rid, seed in ((5, 2**63 - 1), (6, -(2**63))):  # the extremes of the range are fine
        frontend.send(rid, seed)
        text, finish = frontend.finish_of(rid)
        assert finish.reason == "length" and text
    assert stack.stub_pid == pid and _alive(pid) and stack.health()["scheduler"]
    assert stack.scheduler_generation == generation  # never restarted


def test_a_killed_stub_is_restarted_and_serves_again(stack, frontend):
    frontend.send(10, max_tokens=4)
    assert frontend.finish_of(10)[1].reason == "length"
    old, generation = stack.stub_pid, stack.scheduler_generation  # relative: the module's stack is shared
    restarts = stack.health_detail()["scheduler"]["restarts"]  # type: ignore[index]
    assert old is not None and stack.health() == {"pool": True, "scheduler": True}
    assert stack.scheduler_serving()
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 120  # a hang fails; a slow box only takes longer
    while stack.scheduler_serving() and stack.scheduler_generation == generation:  # (admission's check)
        assert time.monotonic() < deadline, stack.health_detail()
        time.sleep(0.001)
    seen_down = False
    while not (stack.health()["scheduler"] and stack.scheduler_generation == generation + 1):
        assert time.monotonic() < deadline, stack.health_detail()
        seen_down |= not stack.health()["scheduler"]
        time.sleep(0.005)
    assert seen_down and stack.stub_pid != old and _alive(stack.stub_pid)  # type: ignore[arg-type]
    detail = stack.health_detail()
    assert detail["scheduler"] == {"state": "up", "pid": stack.stub_pid, "generation": generation + 1,
                                   "restarts": restarts + 1}
    assert detail["pool"]["workers"][0]["state"] == "serving"  # type: ignore[index]
    # the frontend's sockets reconnect by themselves: the new stub serves
    frontend.send(11, seed=7, max_tokens=6)
    text, finish = frontend.finish_of(11)
    assert finish.reason == "length" and text
    assert stack.health() == {"pool": True, "scheduler": True}
