"""What schemas cannot see in the rendered objects: whether they fit together.

Each check names the object and what does not match. `wiring_errors` returns them all (empty:
wired). The commands are read the way detok reads them: `--keys=DIR`, `--scheduler=ENDPOINT`,
`--receiver=ENDPOINT`, `--inbox=ENDPOINT`, `--shutdown-drain=S` in `--flag=value` form, as the
chart writes them.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

Obj = dict[str, Any]
_WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


def wiring_errors(objects: Sequence[Obj]) -> list[str]:
    errors: list[str] = []
    for check in (_selectors, _service_ports, _probes, _keys, _frontend_reaches_inbox, _receiver_on_pod_ip,
                  _grace_covers_drain, _scrape_ports, _temp_dir, _scale_targets, _dashboard_metrics):
        errors.extend(check(objects))
    return errors


def _name(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _workloads(objects: Sequence[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in _WORKLOADS]


def _pod_labels(workload: Obj) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"].get("labels", {})


def _containers(workload: Obj) -> list[Obj]:
    return workload["spec"]["template"]["spec"]["containers"]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _selected(objects: Sequence[Obj], selector: dict[str, str]) -> list[Obj]:
    return [w for w in _workloads(objects) if _selects(selector, _pod_labels(w))]


def _flags(container: Obj) -> dict[str, str]:
    """--flag=value arguments of a container's command and args."""
    out = {}
    for arg in [*container.get("command", []), *container.get("args", [])]:
        flag, sep, value = str(arg).partition("=")
        if sep and flag.startswith("--"):
            out[flag] = value
    return out


def _port_numbers(container: Obj) -> dict[str | int, int]:
    """A container's ports by name and by number."""
    ports: dict[str | int, int] = {}
    for p in container.get("ports", []):
        ports[p["containerPort"]] = p["containerPort"]
        if "name" in p:
            ports[p["name"]] = p["containerPort"]
    return ports


def _selectors(objects: Sequence[Obj]) -> Iterator[str]:
    for w in _workloads(objects):
        selector = w["spec"]["selector"].get("matchLabels", {})
        if not _selects(selector, _pod_labels(w)):
            yield f"{_name(w)}: its selector {selector} does not match its pods' labels"
    for o in objects:
        if o["kind"] == "Service":
            selector = o["spec"].get("selector", {})
        elif o["kind"] == "PodDisruptionBudget":
            selector = o["spec"]["selector"].get("matchLabels", {})
        else:
            continue
        if not _selected(objects, selector):
            yield f"{_name(o)}: its selector {selector} matches no pods"


def _service_ports(objects: Sequence[Obj]) -> Iterator[str]:
    for svc in (o for o in objects if o["kind"] == "Service"):
        for w in _selected(objects, svc["spec"].get("selector", {})):
            ports = {k: v for c in _containers(w) for k, v in _port_numbers(c).items()}
            for p in svc["spec"]["ports"]:
                target = p.get("targetPort", p["port"])
                if target not in ports:
                    yield f"{_name(svc)}: targetPort {target!r} is no container port of {_name(w)}"


def _probes(objects: Sequence[Obj]) -> Iterator[str]:
    for w in _workloads(objects):
        for c in _containers(w):
            ports = _port_numbers(c)
            if "readinessProbe" not in c or "livenessProbe" not in c:
                yield f"{_name(w)} container {c['name']}: needs a readiness and a liveness probe"
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(kind, {})
                for action in ("httpGet", "tcpSocket", "grpc"):
                    if action in probe and probe[action]["port"] not in ports:
                        yield f"{_name(w)} container {c['name']}: {kind} port {probe[action]['port']!r} is not a container port"
            if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/health":
                yield f"{_name(w)} container {c['name']}: readiness is not on /health"


def _keys(objects: Sequence[Obj]) -> Iterator[str]:
    """Each --keys=DIR is a mount of a Secret volume holding the files `detok keygen` writes."""
    from detok.wire.security import KEY_NAME

    wanted = {f"{KEY_NAME}.key", f"{KEY_NAME}.key_secret"}
    for w in _workloads(objects):
        volumes = {v["name"]: v for v in w["spec"]["template"]["spec"].get("volumes", [])}
        for c in _containers(w):
            keys_dir = _flags(c).get("--keys")
            if keys_dir is None:
                yield f"{_name(w)} container {c['name']}: no --keys (tcp needs the deployment's CURVE keys)"
                continue
            mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == keys_dir.rstrip("/")]
            if not mounts:
                yield f"{_name(w)} container {c['name']}: --keys={keys_dir} is not a mounted volume"
                continue
            secret = volumes.get(mounts[0]["name"], {}).get("secret")
            if secret is None:
                yield f"{_name(w)} container {c['name']}: --keys={keys_dir} is not a Secret volume"
                continue
            items = {i["path"] for i in secret.get("items", [])}
            if items != wanted:
                yield f"{_name(w)}: the keys Secret's files are {sorted(items)}, detok reads {sorted(wanted)}"
            if secret.get("defaultMode", 0o644) & 0o037:  # see detok.wire.security: at most 0640
                yield f"{_name(w)}: the keys Secret's mode {secret.get('defaultMode', 0o644):o} lets others read the secret key"


def _endpoint(text: str) -> tuple[str, int] | None:
    m = re.fullmatch(r"tcp://([^:/]+):(\d+)", text)
    return (m.group(1), int(m.group(2))) if m else None


def _frontend_reaches_inbox(objects: Sequence[Obj]) -> Iterator[str]:
    """--scheduler=tcp://SERVICE:PORT: a Service of that name, whose port leads to a container
    binding its --inbox on that container port."""
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    for w in _workloads(objects):
        for c in _containers(w):
            scheduler = _flags(c).get("--scheduler")
            if scheduler is None:
                continue
            target = _endpoint(scheduler)
            svc = services.get(target[0]) if target else None
            if target is None or svc is None:
                yield f"{_name(w)}: --scheduler={scheduler} is not tcp://SERVICE:PORT of a Service here"
                continue
            port = next((p for p in svc["spec"]["ports"] if p["port"] == target[1]), None)
            if port is None:
                yield f"{_name(w)}: Service {target[0]} has no port {target[1]}"
                continue
            found = False
            for engine in _selected(objects, svc["spec"].get("selector", {})):
                for ec in _containers(engine):
                    inbox = _endpoint(_flags(ec).get("--inbox", ""))
                    number = _port_numbers(ec).get(port.get("targetPort", port["port"]))
                    found |= inbox is not None and inbox[0] in ("0.0.0.0", "*") and inbox[1] == number
            if not found:
                yield f"{_name(w)}: --scheduler={scheduler} leads to no container binding its --inbox there"


def _receiver_on_pod_ip(objects: Sequence[Obj]) -> Iterator[str]:
    for w in _workloads(objects):
        for c in _containers(w):
            receiver = _flags(c).get("--receiver")
            if receiver is None:
                continue
            m = re.fullmatch(r"tcp://\$\((\w+)\):(\d+)", receiver)
            env = {e["name"]: e for e in c.get("env", [])}
            source = env.get(m.group(1), {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") if m else None
            if source != "status.podIP":
                yield f"{_name(w)}: --receiver={receiver} is not tcp://$(VAR):PORT with VAR the pod's IP"
            elif int(m.group(2)) not in _port_numbers(c):
                yield f"{_name(w)}: the receiver port {m.group(2)} is not a container port"


def _grace_covers_drain(objects: Sequence[Obj]) -> Iterator[str]:
    for w in _workloads(objects):
        spec = w["spec"]["template"]["spec"]
        grace = spec.get("terminationGracePeriodSeconds", 30)
        for c in _containers(w):
            drain = float(_flags(c).get("--shutdown-drain", 0))
            pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            if grace < drain + pre_stop:
                yield f"{_name(w)}: terminationGracePeriodSeconds {grace} < preStop {pre_stop} + drain {drain:g}"


def _scrape_ports(objects: Sequence[Obj]) -> Iterator[str]:
    for w in _workloads(objects):
        annotations = w["spec"]["template"]["metadata"].get("annotations") or {}
        if annotations.get("prometheus.io/scrape") == "true":
            port = int(annotations.get("prometheus.io/port", 0))
            if not any(port in _port_numbers(c) for c in _containers(w)):
                yield f"{_name(w)}: prometheus.io/port {port} is not a container port"


def _temp_dir(objects: Sequence[Obj]) -> Iterator[str]:
    """A read-only root needs a writable /tmp (ipc sockets, metrics files, the tokenizer cache)."""
    for w in _workloads(objects):
        spec = w["spec"]["template"]["spec"]
        if not spec.get("securityContext", {}).get("runAsNonRoot"):
            yield f"{_name(w)}: pods must run as non-root"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in _containers(w):
            if not c.get("securityContext", {}).get("readOnlyRootFilesystem"):
                yield f"{_name(w)} container {c['name']}: the root filesystem is not read-only"
            tmp = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
            if not tmp or "emptyDir" not in volumes.get(tmp[0]["name"], {}):
                yield f"{_name(w)} container {c['name']}: /tmp is not an emptyDir"
            if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
                yield f"{_name(w)} container {c['name']}: resources need requests and limits"


def _scale_targets(objects: Sequence[Obj]) -> Iterator[str]:
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for hpa in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        if (ref["kind"], ref["name"]) not in names:
            yield f"{_name(hpa)}: its target {ref['kind']}/{ref['name']} does not exist"


def _dashboard_metrics(objects: Sequence[Obj]) -> Iterator[str]:
    """Every detok_* series a dashboard panel queries is one detok.metrics defines."""
    import detok.metrics

    source = inspect.getsource(detok.metrics)
    for cm in (o for o in objects if o["kind"] == "ConfigMap"):
        for key, text in cm.get("data", {}).items():
            if not key.endswith(".json"):
                continue
            for panel in json.loads(text)["panels"]:
                for target in panel["targets"]:
                    for series in re.findall(r"\bdetok_\w+", target["expr"]):
                        base = re.sub(r"_(bucket|sum|count)$", "", series)
                        if f'"{base}"' not in source:
                            yield f"{_name(cm)} panel {panel['title']!r}: {series} is no detok metric"
