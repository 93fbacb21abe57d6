"""Plain zmq sockets standing in for detok workers: what a SchedulerClient sends, decoded, and a way
to send it notices as a worker or the supervisor would."""

from __future__ import annotations

import msgspec
import zmq

from detok import wire as p
from detok.wire.endpoints import IpcDir


class FakeWorkers:
    def __init__(self, ipc: IpcDir, n: int) -> None:
        self.ctx = zmq.Context()
        self.endpoints = [ipc.endpoint(f"w{i}") for i in range(n)]
        self.notify = ipc.endpoint("notify")
        self.inputs = []
        for e in self.endpoints:
            s = self.ctx.socket(zmq.PULL)
            s.bind(e)
            self.inputs.append(s)
        self.decoder = p.worker_inbound_decoder()

    def recv(self, w: int, timeout: float = 60.0, *, resets: bool = False):
        """The next message to worker w; a new client's reset (an empty Replay for any process)
        is skipped unless `resets`."""
        while True:
            assert self.inputs[w].poll(int(timeout * 1000)), f"nothing reached worker {w}"
            msg = self.decoder.decode(self.inputs[w].recv())
            if resets or not (isinstance(msg, p.Replay) and msg.instance == 0):
                return msg

    def pending(self, w: int) -> int:
        n = 0
        while self.inputs[w].poll(50):
            self.inputs[w].recv()
            n += 1
        return n

    def notice(self, msg: msgspec.Struct) -> None:
        s = self.ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 1000)
        s.connect(self.notify)
        s.send(p.new_encoder().encode(msg))
        s.close()

    def close(self) -> None:
        for s in self.inputs:
            s.close(0)
        self.ctx.term()
