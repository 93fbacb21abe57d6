"""The chart's rendered pods as local processes (deploy.local_pods), played through a pod's life
with clients streaming through the frontends' Service all along. Each scenario reports what the
clients saw: requests served, errors (an HTTP error or an error event, ended properly), streams cut
(the connection lost without `[DONE]`), requests that found no ready endpoint.

`make test` runs the short play (a frontend killed, one replaced by a rolling update); `make
k8s-test` runs the whole one (scale 1 -> 3, a kill, a rolling update of every frontend, the engine
restarted) and writes the report to $DETOK_K8S_REPORT.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

pytest.importorskip("helm_python", reason="the test extras (helm-python-sdk) render the chart")

from deploy.chart import render  # noqa: E402
from deploy.local_pods import LocalCluster, LocalPod  # noqa: E402
from deploy.wiring import wiring_errors  # noqa: E402

ENGINE, FRONTEND, SERVICE = "detok-engine", "detok-frontend", "detok"
START_TIMEOUT_S = 150.0  # the engine loads the tokenizer in its scheduler, workers and frontend
DRAIN_S, PRE_STOP_S, GRACE_S = 3, 1, 10
SHORT_TOKENS = 30  # ~0.6 s at the stub's 20 ms steps: finishes well inside preStop + the drain
LONG_TOKENS = 2000  # ~40 s: outlives the drain
VALUES: dict[str, Any] = {
    "engine": {"workers": 2, "extraArgs": ["--no-spare"], "shutdownDrainSeconds": 2,
               "terminationGracePeriodSeconds": 5},
    "frontend": {"shutdownDrainSeconds": DRAIN_S, "preStopSleepSeconds": PRE_STOP_S,
                 "terminationGracePeriodSeconds": GRACE_S, "autoscaling": {"enabled": False}},
}
REPORT: dict[str, Any] = {}


@dataclass
class Outcome:
    kind: str  # served, error, cut, no endpoint
    pod: str
    detail: str = ""


def stream(address: tuple[str, int] | None, pod: str, max_tokens: int,
           under_way: threading.Event | None = None) -> Outcome:
    """One streamed chat completion; `under_way` is set at its first event."""
    if address is None:
        return Outcome("no endpoint", "")
    body = {"model": "detok-stub", "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}]}
    done, error = False, ""
    try:
        with httpx.stream("POST", f"http://{address[0]}:{address[1]}/v1/chat/completions", json=body,
                          timeout=httpx.Timeout(60.0, connect=2.0)) as r:
            if r.status_code != 200:
                r.read()
                return Outcome("error", pod, f"HTTP {r.status_code}")
            for line in r.iter_lines():
                if under_way is not None and line.startswith("data: "):
                    under_way.set()
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: ") and '"error"' in line[:20]:
                    error = json.loads(line[6:])["error"]["message"]
    except httpx.ConnectError as e:
        return Outcome("no endpoint", pod, str(e))
    except httpx.HTTPError as e:
        return Outcome("cut", pod, f"{type(e).__name__}: {e}")
    if not done:
        return Outcome("cut", pod, "no [DONE]")
    return Outcome("error", pod, error) if error else Outcome("served", pod)


class Traffic:
    """Clients streaming through the Service: each picks the next ready endpoint (round robin)."""

    def __init__(self, cluster: LocalCluster, clients: int, max_tokens: int = SHORT_TOKENS) -> None:
        self.cluster, self.max_tokens = cluster, max_tokens
        self.outcomes: list[Outcome] = []
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def _pick(self) -> tuple[tuple[str, int] | None, str]:
        ready = self.cluster.endpoints(SERVICE)
        if not ready:
            return None, ""
        address = ready[next(self._turn) % len(ready)]
        pod = next((p.name for p in self.cluster.pods.get(FRONTEND, []) if p.ip == address[0]), "?")
        return address, pod

    def _client(self) -> None:
        while not self._stop.is_set():
            address, pod = self._pick()
            outcome = stream(address, pod, self.max_tokens)
            self.outcomes.append(outcome)
            if outcome.kind == "no endpoint":
                time.sleep(0.2)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        for t in self._threads:
            t.join(90)
        counts = collections.Counter(o.kind for o in self.outcomes)
        details = collections.Counter(f"{o.kind}: {o.detail}" for o in self.outcomes if o.kind != "served")
        return {"requests": len(self.outcomes), **{k: counts.get(k, 0) for k in ("served", "error", "cut", "no endpoint")},
                "by pod": dict(collections.Counter(o.pod for o in self.outcomes if o.kind == "served")),
                "not served": dict(details)}


def _served_by(outcomes: list[Outcome], pod: str) -> int:
    return sum(o.kind == "served" and o.pod == pod for o in outcomes)


def _wait(condition: Any, timeout_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout_s, f"not {what} within {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - t0


@pytest.fixture
def cluster(tmp_path) -> Iterator[LocalCluster]:
    from detok.wire.security import generate_keys

    objects = render(VALUES)
    assert wiring_errors(objects) == []
    public, secret = generate_keys(tmp_path / "keys")
    c = LocalCluster(objects, tmp_path / "pods", {"detok-keys": {"detok.key": public.read_bytes(),
                                                                 "detok.key_secret": secret.read_bytes()}})
    try:
        yield c
    finally:
        c.close()
        if os.environ.get("DETOK_K8S_REPORT") and REPORT:
            with open(os.environ["DETOK_K8S_REPORT"], "w") as f:
                json.dump(REPORT, f, indent=1)


def _start(cluster: LocalCluster, frontends: int) -> tuple[LocalPod, list[LocalPod]]:
    engine = cluster.add_pod(ENGINE)
    pods = cluster.scale(FRONTEND, frontends)
    cluster.wait_ready([engine, *pods], START_TIMEOUT_S)
    return engine, pods


def _kill_a_frontend(cluster: LocalCluster) -> dict[str, Any]:
    """A frontend's container killed mid-stream: its streams are cut, the others keep serving, the
    kubelet restarts it and it serves again."""
    victim = cluster.pods[FRONTEND][0]
    traffic = Traffic(cluster, clients=4)
    # streams under way on every frontend before the kill
    _wait(lambda: all(_served_by(traffic.outcomes, p.name) for p in cluster.pods[FRONTEND]), START_TIMEOUT_S,
          "served by every frontend")
    killed_at = len(traffic.outcomes)
    victim.kill()
    back = _wait(lambda: victim.restarts == 1 and victim.ready, START_TIMEOUT_S, "the killed frontend ready again")
    back_at = len(traffic.outcomes)
    _wait(lambda: _served_by(traffic.outcomes[back_at:], victim.name), START_TIMEOUT_S, "the restarted frontend serving")
    report = traffic.stop()
    after = [o for o in traffic.outcomes[killed_at:] if o.pod != victim.name]
    report.update(killed=victim.name, back_ready_after_s=round(back, 1), restarts=victim.restarts,
                  others_after_the_kill={"served": sum(o.kind == "served" for o in after), "not served":
                                         sum(o.kind != "served" for o in after)})
    assert victim.restarts == 1
    assert report["others_after_the_kill"]["not served"] == 0, report  # the others keep serving
    assert report["others_after_the_kill"]["served"] > 0
    assert all(o.pod == victim.name for o in traffic.outcomes if o.kind in ("cut", "error")), report
    return report


def _roll_frontends(cluster: LocalCluster, replace: int) -> dict[str, Any]:
    """The Deployment's rolling update (maxSurge 1, maxUnavailable 0): a new pod, ready, then an old
    one deleted (out of the endpoints, preStop, SIGTERM, drain). Short streams all finish; a stream
    longer than the drain ends with the drain's error event and [DONE], never cut."""
    old = list(cluster.pods[FRONTEND])[:replace]
    traffic = Traffic(cluster, clients=4)
    long_streams: list[Outcome] = []
    took = []
    for pod in old:
        new = cluster.add_pod(FRONTEND)
        cluster.wait_ready([new], START_TIMEOUT_S)
        under_way = threading.Event()
        long = threading.Thread(target=lambda p=pod: long_streams.append(stream((p.ip, p.port("http")), p.name,
                                                                                LONG_TOKENS, under_way)))
        long.start()
        assert under_way.wait(START_TIMEOUT_S), long_streams
        took.append(cluster.delete_pod(pod))
        long.join(60)
        assert pod.exit_code() == 0, pod.log()[-2000:]  # drained and exited inside the grace period
        rolled_at = len(traffic.outcomes)
        _wait(lambda n=new: _served_by(traffic.outcomes[rolled_at:], n.name), START_TIMEOUT_S, "the new frontend serving")
    report = traffic.stop()
    report.update(replaced=[p.name for p in old], seconds_to_delete=[round(t, 1) for t in took],
                  streams_longer_than_the_drain=[f"{o.kind}: {o.detail}" for o in long_streams])
    assert report["cut"] == 0 and report["error"] == 0 and report["no endpoint"] == 0, report
    assert all(o.kind == "error" and "shutting down" in o.detail for o in long_streams), report
    assert all(t < GRACE_S for t in took)
    return report


def test_a_frontend_killed_and_one_replaced(cluster: LocalCluster) -> None:
    t0 = time.monotonic()
    _start(cluster, 2)
    REPORT["short: start (engine + 2 frontends) s"] = round(time.monotonic() - t0, 1)
    REPORT["short: a frontend killed"] = _kill_a_frontend(cluster)
    REPORT["short: one frontend replaced (rolling update)"] = _roll_frontends(cluster, 1)
    print(json.dumps(REPORT, indent=1))


def _engine_health(engine: LocalPod) -> dict[str, Any]:
    return httpx.get(f"http://{engine.ip}:{engine.port('http')}/health", timeout=5).json()


def _scale_one_to_three(cluster: LocalCluster, engine: LocalPod) -> dict[str, Any]:
    first = cluster.pods[FRONTEND][0]
    pid = first.proc.pid if first.proc else None
    traffic = Traffic(cluster, clients=3)
    new = cluster.scale(FRONTEND, 3)
    ready = _wait(lambda: all(p.ready for p in new), START_TIMEOUT_S, "the new frontends ready")
    time.sleep(3.0)
    report = traffic.stop()
    health = _engine_health(engine)
    report.update(new_ready_after_s=round(ready, 1), engine_restarts={
        "scheduler": health["detail"]["scheduler"]["restarts"], "pool": health["detail"]["pool"]["restarts"]})
    assert all(p.name in report["by pod"] for p in new), report  # the new ones serve
    assert first.proc is not None and first.proc.pid == pid and first.restarts == 0  # nothing restarts
    assert engine.restarts == 0 and report["engine_restarts"] == {"scheduler": 0, "pool": 0}
    assert report["served"] == report["requests"], report
    return report


def _restart_the_engine(cluster: LocalCluster, engine: LocalPod) -> dict[str, Any]:
    """The engine's container dies; the kubelet restarts it (same pod, same address). The frontends
    go not-ready (their link to the inbox is down), their streams in flight end with an error event,
    then all serve again."""
    frontends = list(cluster.pods[FRONTEND])
    traffic = Traffic(cluster, clients=3)
    time.sleep(2.0)
    engine.kill()
    down = _wait(lambda: not any(p.ready for p in frontends), 15.0, "every frontend not ready")
    up = _wait(lambda: all(p.ready for p in frontends), START_TIMEOUT_S, "the frontends ready again")
    time.sleep(3.0)
    report = traffic.stop()
    report.update(frontends_not_ready_after_s=round(down, 1), ready_again_after_s=round(down + up, 1),
                  engine_restarts=engine.restarts, frontend_restarts=sum(p.restarts for p in frontends))
    assert engine.restarts == 1 and report["frontend_restarts"] == 0
    assert report["cut"] == 0, report  # the requests the dead engine held end with an error event
    late = traffic.outcomes[-3:]
    assert all(o.kind == "served" for o in late), report
    return report


@pytest.mark.slow
def test_the_pods_life(cluster: LocalCluster) -> None:
    t0 = time.monotonic()
    engine, _ = _start(cluster, 1)
    REPORT["start (engine + 1 frontend) s"] = round(time.monotonic() - t0, 1)
    REPORT["frontends scale 1 -> 3"] = _scale_one_to_three(cluster, engine)
    REPORT["a frontend killed"] = _kill_a_frontend(cluster)
    REPORT["rolling update of the frontends"] = _roll_frontends(cluster, 3)
    REPORT["the engine restarts"] = _restart_the_engine(cluster, engine)
    REPORT["total s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(REPORT, indent=1))
