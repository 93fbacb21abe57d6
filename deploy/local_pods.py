"""The rendered pods run as local processes, with a kubelet's and the controllers' part played here.

What is taken from the manifests, as a node would: each container's command and args (`$(VAR)`
expanded from its env), its env (the downward API's `status.podIP` filled in), its ports, its
probes (startup, readiness, liveness: httpGet, polled at their periods with their thresholds), its
volumes (a Secret becomes a folder holding its items under the same file names and mode; an
emptyDir a fresh folder), its preStop sleep and the pod's terminationGracePeriodSeconds.

What stands in for the cluster: each pod gets its own loopback address (127.A.B.N: the same ports
in every pod, as on a pod network), an address of "every interface" (0.0.0.0) in its args becomes
that address, a mount path in its args becomes the local folder, and `tcp://SERVICE:PORT` becomes
the selected pod's address and target port. A Service's client side (`LocalCluster.endpoints`)
lists the ready pods it selects, as the endpoints controller does. Root filesystems are not
read-only here, and nothing is confined: processes run as this user with the image's environment
(TMPDIR and the caches in the pod's emptyDir).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

Obj = dict[str, Any]

# a kubelet restarts a crashed container after 10 s, doubling to 5 min; here a fixed short pause
RESTART_BACKOFF_S: Final = 0.5
_TICK_S: Final = 0.05
# one loopback address per pod, 127.A.B.10 and up; A.B drawn per process so that two runs on one
# machine do not meet on the same addresses and ports
_NET = random.SystemRandom().randrange(1 << 16)
_ADDRESSES = (f"127.{_NET >> 8}.{_NET & 255}.{n}" for n in itertools.count(10))


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args ($$ escapes; unknown names stay)."""
    return re.sub(r"\$\$|\$\((\w+)\)", lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


@dataclass
class Probe:
    spec: Obj
    port: int
    failures: int = 0
    successes: int = 0
    next_at: float = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def run(self, ip: str, now: float) -> bool:
        self.next_at = now + self.spec.get("periodSeconds", 10)
        get = self.spec["httpGet"]
        try:
            with urllib.request.urlopen(f"http://{ip}:{self.port}{get.get('path', '/')}",
                                        timeout=self.spec.get("timeoutSeconds", 1)) as r:
                ok = 200 <= r.status < 400
        except (urllib.error.URLError, OSError, ValueError):
            ok = False
        if ok:
            self.successes += 1
            self.failures = 0
        else:
            self.failures += 1
            self.successes = 0
        return ok

    def failed(self) -> bool:
        return self.failures >= self.spec.get("failureThreshold", 3)


@dataclass
class LocalPod:
    """One pod of a workload, with its one container, its kubelet loop and its state."""

    cluster: LocalCluster
    workload: Obj
    name: str
    ip: str = field(default_factory=lambda: next(_ADDRESSES))
    restarts: int = 0  # container restarts (a crash, a failed liveness probe)
    ready: bool = False
    terminating: bool = False
    events: list[tuple[float, str]] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.spec = self.workload["spec"]["template"]["spec"]
        self.container = self.spec["containers"][0]
        self.root = Path(self.cluster.workdir) / self.name
        self.volumes = self._make_volumes()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._kubelet, name=f"kubelet-{self.name}", daemon=True)

    # ---- what the node prepares -------------------------------------------------------------
    def _make_volumes(self) -> dict[str, Path]:
        """Each mount path -> its local folder."""
        folders: dict[str, Path] = {}
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        for mount in self.container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            folder = self.root / "volumes" / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                secret = volume["secret"]
                data = self.cluster.secrets[secret["secretName"]]
                for item in secret.get("items") or [{"key": k, "path": k} for k in data]:
                    path = folder / item["path"]
                    path.write_bytes(data[item["key"]])
                    path.chmod(item.get("mode", secret.get("defaultMode", 0o644)))
                folder.chmod(0o755)
            folders[mount["mountPath"]] = folder
        return folders

    def env(self) -> dict[str, str]:
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        tmp = self.volumes.get("/tmp", self.root / "tmp")
        env.update(TMPDIR=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"), HF_HOME=str(tmp / "hf"), HF_HUB_OFFLINE="1",
                   PYTHONUNBUFFERED="1", HOME=str(tmp))
        for item in self.container.get("env", []):
            if "value" in item:
                env[item["name"]] = _expand(item["value"], env)
            elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") in ("status.podIP",
                                                                                     "status.podIPs"):
                env[item["name"]] = self.ip
            elif "fieldRef" in item.get("valueFrom", {}):
                field_path = item["valueFrom"]["fieldRef"]["fieldPath"]
                env[item["name"]] = {"metadata.name": self.name}.get(field_path, "")
        return env

    def argv(self) -> list[str]:
        env = self.env()
        words = [*(self.container.get("command") or ["detok"]), *self.container.get("args", [])]
        # a mount path (as a whole path or a prefix of one) -> its folder, in one pass
        mounts = re.compile(r"(?<![\w/.-])(" + "|".join(re.escape(m) for m in sorted(self.volumes, key=len, reverse=True))
                            + r")(?=/|$|[^\w.-])") if self.volumes else None
        out = []
        for word in words:
            word = _expand(word, env).replace("0.0.0.0", self.ip)
            if mounts is not None:
                word = mounts.sub(lambda m: str(self.volumes[m.group(1)]), word)
            out.append(self.cluster.resolve_services(word))
        return out

    def port(self, name_or_number: str | int) -> int:
        for p in self.container.get("ports", []):
            if name_or_number in (p.get("name"), p["containerPort"]):
                return int(p["containerPort"])
        raise KeyError(f"{self.name}: no port {name_or_number!r}")

    # ---- the kubelet ----------------------------------------------------------------------------
    def start(self) -> LocalPod:
        self._thread.start()
        return self

    def _note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    def _spawn(self) -> None:
        log = open(self.root / "container.log", "ab")  # noqa: SIM115 (the child holds it)
        with log:
            self.proc = subprocess.Popen(self.argv(), env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.root, start_new_session=True)
        self._note(f"started pid {self.proc.pid}")

    def _probes(self) -> tuple[Probe | None, Probe | None, Probe | None]:
        made = []
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = self.container.get(kind)
            made.append(Probe(spec, self.port(spec["httpGet"]["port"])) if spec else None)
        return made[0], made[1], made[2]

    def _kubelet(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    return
                self._spawn()
            startup, readiness, liveness = self._probes()
            started = startup is None
            while not self._stop.is_set():
                now = time.monotonic()
                assert self.proc is not None
                if self.proc.poll() is not None:
                    self._note(f"exited {self.proc.returncode}")
                    break
                if not started and startup is not None and startup.due(now):
                    if startup.run(self.ip, now):
                        started = True
                        self._note("started (startup probe)")
                    elif startup.failed():
                        self._note("startup probe failed: killed")
                        self._kill()
                        break
                if started and readiness is not None and readiness.due(now):
                    ok = readiness.run(self.ip, now)
                    if ok and readiness.successes >= readiness.spec.get("successThreshold", 1) and not self.ready:
                        self.ready = True
                        self._note("ready")
                    elif readiness.failed() and self.ready:
                        self.ready = False
                        self._note("not ready")
                if started and liveness is not None and liveness.due(now):
                    if not liveness.run(self.ip, now) and liveness.failed():
                        self._note("liveness probe failed: killed")
                        self._kill()
                        break
                self._stop.wait(_TICK_S)
            self.ready = False
            if self._stop.wait(RESTART_BACKOFF_S):
                return
            self.restarts += 1

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def kill(self) -> None:
        """The container dies at once (SIGKILL to its processes); the kubelet restarts it."""
        self._note("SIGKILL")
        self._kill()

    def delete(self, *, force: bool = False) -> float:
        """Delete the pod as the API server and the kubelet do: out of the endpoints at once, the
        preStop sleep, SIGTERM, SIGKILL after the grace period. Returns the seconds it took."""
        t0 = time.monotonic()
        self.terminating = True
        self.ready = False
        with self._lock:
            self._stop.set()
        self._thread.join()
        grace = 0 if force else self.spec.get("terminationGracePeriodSeconds", 30)
        pre_stop = self.container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        if not force:
            time.sleep(min(pre_stop, grace))
        if self.proc is not None and self.proc.poll() is None:
            self._note("SIGTERM")
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(max(0.0, grace - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                self._note("grace period over: SIGKILL")
                self._kill()
        # what the container left (a SIGKILL leaves its process group's children)
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._note("deleted")
        return time.monotonic() - t0

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def log(self) -> str:
        path = self.root / "container.log"
        return path.read_text(errors="replace") if path.exists() else ""


class LocalCluster:
    """The rendered objects' workloads as local pods; Services resolved to their ready pods."""

    def __init__(self, objects: list[Obj], workdir: str | os.PathLike[str], secrets: dict[str, dict[str, bytes]]) -> None:
        self.objects = objects
        self.workdir = Path(workdir)
        self.secrets = secrets
        self.pods: dict[str, list[LocalPod]] = {}  # workload name -> its live pods
        self._names = itertools.count(1)

    def workload(self, name: str) -> Obj:
        return next(o for o in self.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)

    def service(self, name: str) -> Obj:
        return next(o for o in self.objects if o["kind"] == "Service" and o["metadata"]["name"] == name)

    def _selected(self, selector: dict[str, str]) -> list[LocalPod]:
        labels = lambda p: p.workload["spec"]["template"]["metadata"]["labels"]  # noqa: E731
        return [p for pods in self.pods.values() for p in pods
                if all(labels(p).get(k) == v for k, v in selector.items())]

    def endpoints(self, service: str, port: str | int | None = None) -> list[tuple[str, int]]:
        """The ready pods a Service selects, as (address, target port)."""
        svc = self.service(service)
        svc_port = svc["spec"]["ports"][0] if port is None else next(
            p for p in svc["spec"]["ports"] if port in (p["port"], p.get("name")))
        return [(p.ip, p.port(svc_port.get("targetPort", svc_port["port"])))
                for p in self._selected(svc["spec"]["selector"]) if p.ready and not p.terminating]

    def resolve_services(self, word: str) -> str:
        """tcp://SERVICE:PORT -> tcp://POD_ADDRESS:TARGET_PORT (the first pod the Service selects, ready
        or not: a Service's address exists before its pods are ready)."""
        def one(m: re.Match[str]) -> str:
            name, port = m.group(1), int(m.group(2))
            try:
                svc = self.service(name)
            except StopIteration:
                return m.group(0)
            svc_port = next(p for p in svc["spec"]["ports"] if p["port"] == port)
            pods = self._selected(svc["spec"]["selector"])
            if not pods:
                raise RuntimeError(f"Service {name} selects no running pod yet")
            return f"tcp://{pods[0].ip}:{pods[0].port(svc_port.get('targetPort', port))}"

        return re.sub(r"tcp://([a-z0-9-]+):(\d+)", one, word)

    def add_pod(self, workload_name: str) -> LocalPod:
        pod = LocalPod(self, self.workload(workload_name), f"{workload_name}-{next(self._names)}")
        self.pods.setdefault(workload_name, []).append(pod)
        return pod.start()

    def scale(self, workload_name: str, replicas: int) -> list[LocalPod]:
        """Add pods up to `replicas` (the ReplicaSet controller's part); returns the new ones."""
        return [self.add_pod(workload_name) for _ in range(replicas - len(self.pods.get(workload_name, [])))]

    def delete_pod(self, pod: LocalPod, *, force: bool = False) -> float:
        took = pod.delete(force=force)
        self.pods[pod.workload["metadata"]["name"]].remove(pod)
        return took

    def wait_ready(self, pods: list[LocalPod], timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not all(p.ready for p in pods):
            if time.monotonic() > end:
                late = [p for p in pods if not p.ready]
                raise TimeoutError(f"not ready within {timeout_s:g} s: " + "; ".join(
                    f"{p.name} {p.events[-3:]} log: {p.log()[-800:]}" for p in late))
            time.sleep(_TICK_S)

    def close(self) -> None:
        for pods in list(self.pods.values()):
            for pod in list(pods):
                self.delete_pod(pod, force=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
