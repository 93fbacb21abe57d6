"""The Helm chart, rendered offline by Helm's own library: valid for Kubernetes 1.30 and the newest
schemas kubernetes-validate bundles, strictly (unknown fields are errors), and wired (selectors,
ports, probes, the keys Secret, the engine's inbox, the HPA's target, the dashboard's metrics).
Each check is shown to fail on a manifest broken the way it guards against."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("helm_python", reason="the test extras (helm-python-sdk) render the chart")
pytest.importorskip("kubernetes_validate", reason="the test extras validate the manifests")

from deploy.chart import (  # noqa: E402
    OLDEST_KUBERNETES, ChartError, newest_kubernetes, parse_set, render, schema_errors, to_yaml)
from deploy.wiring import wiring_errors  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "reference engine, no HPA, API key": {
        "model": "/models/smollm2.gguf", "modelVolume": {"persistentVolumeClaim": {"claimName": "models"}},
        "frontend": {"autoscaling": {"enabled": False}, "replicas": 3,
                                          "apiKeySecret": {"name": "detok-api", "key": "key"}},
    },
    "custom metric, no annotations, no dashboard": {
        "frontend": {"autoscaling": {"customMetrics": [{"type": "Pods", "pods": {
            "metric": {"name": "detok_frontend_requests_per_second"},
            "target": {"type": "AverageValue", "averageValue": "50"}}}]}},
        "metrics": {"prometheusAnnotations": False, "grafanaDashboard": {"enabled": False}},
    },
}


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render()


def _find(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_is_valid_and_wired(variant: str) -> None:
    objects = render(VARIANTS[variant])
    for version in (OLDEST_KUBERNETES, newest_kubernetes()):
        assert schema_errors(objects, version) == []
    assert wiring_errors(objects) == []


def test_the_objects_the_chart_holds(objects: list[dict[str, Any]]) -> None:
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    assert kinds == ["ConfigMap/detok-dashboard", "Deployment/detok-engine", "Deployment/detok-frontend",
                     "HorizontalPodAutoscaler/detok-frontend", "PodDisruptionBudget/detok-frontend",
                     "Service/detok", "Service/detok-engine"]
    engine = _find(objects, "Deployment", "-engine")["spec"]["template"]["spec"]["containers"][0]
    assert engine["args"][:5] == ["serve", "--host=0.0.0.0", "--port=8000", "--inbox=tcp://0.0.0.0:7100",
                                  "--keys=/etc/detok/keys"]
    frontend = _find(objects, "Deployment", "-frontend")["spec"]["template"]["spec"]
    assert frontend["containers"][0]["args"][:3] == ["frontend", "--scheduler=tcp://detok-engine:7100",
                                                     "--receiver=tcp://$(POD_IP):7200"]
    assert frontend["securityContext"]["runAsNonRoot"] and frontend["securityContext"]["runAsUser"] == 10001
    hpa = _find(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    dashboard = json.loads(_find(objects, "ConfigMap")["data"]["detok-dashboard.json"])
    assert len(dashboard["panels"]) >= 10


def test_a_misspelt_field_fails_the_strict_schemas(objects: list[dict[str, Any]]) -> None:
    broken = _break_field(objects)
    for version in (OLDEST_KUBERNETES, newest_kubernetes()):
        errors = schema_errors(broken, version)
        assert len(errors) == 1 and "readinesProbe" in errors[0], errors
    # and the wiring sees the probe gone
    assert any("readiness" in e for e in wiring_errors(broken))


def _break(objects: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    broken = copy.deepcopy(objects)
    frontend = _find(broken, "Deployment", "-frontend")
    container = frontend["spec"]["template"]["spec"]["containers"][0]
    engine = _find(broken, "Deployment", "-engine")["spec"]["template"]["spec"]["containers"][0]
    if how == "service selector":
        _find(broken, "Service", "detok")["spec"]["selector"]["app.kubernetes.io/component"] = "frontends"
    elif how == "deployment selector":
        frontend["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "engine-x"
    elif how == "pdb selector":
        _find(broken, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "x"
    elif how == "probe port":
        container["readinessProbe"]["httpGet"]["port"] = "metrics"
    elif how == "keys path":
        container["args"] = [a.replace("--keys=/etc/detok/keys", "--keys=/etc/detok/key") for a in container["args"]]
    elif how == "secret file name":
        frontend["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"][1]["path"] = "secret.key"
    elif how == "secret mode":
        frontend["spec"]["template"]["spec"]["volumes"][0]["secret"]["defaultMode"] = 0o444
    elif how == "inbox port":
        engine["args"] = [a.replace("--inbox=tcp://0.0.0.0:7100", "--inbox=tcp://0.0.0.0:7101") for a in engine["args"]]
    elif how == "receiver address":
        container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] = "status.hostIP"
    elif how == "grace period":
        frontend["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 10
    elif how == "hpa target":
        _find(broken, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] = "detok-frontends"
    elif how == "writable root":
        container["securityContext"]["readOnlyRootFilesystem"] = False
    elif how == "dashboard metric":
        cm = _find(broken, "ConfigMap")
        cm["data"]["detok-dashboard.json"] = cm["data"]["detok-dashboard.json"].replace(
            "detok_worker_tokens_total", "detok_worker_token_total")
    return broken


@pytest.mark.parametrize("how", ["service selector", "deployment selector", "pdb selector", "probe port", "keys path",
                                 "secret file name", "secret mode", "inbox port", "receiver address", "grace period",
                                 "hpa target", "writable root", "dashboard metric"])
def test_each_wiring_mistake_is_named(objects: list[dict[str, Any]], how: str) -> None:
    errors = wiring_errors(_break(objects, how))
    assert errors, how
    assert schema_errors(_break(objects, how), OLDEST_KUBERNETES) == []  # only the wiring check sees these


@pytest.mark.parametrize("values, message", [
    ({"frontend": {"terminationGracePeriodSeconds": 10}}, "no shorter than preStopSleepSeconds"),
    ({"engine": {"terminationGracePeriodSeconds": 5}}, "no shorter than engine.shutdownDrainSeconds"),
])
def test_the_chart_refuses_a_grace_period_shorter_than_the_drain(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartError, match=message):
        render(values)


def test_set_values_as_helm_types_them() -> None:
    assert parse_set(["frontend.replicas=3", "model=smollm2", "engine.scheduler.stepMs=5"]) == {
        "frontend": {"replicas": 3}, "model": "smollm2", "engine": {"scheduler": {"stepMs": 5}}}
    with pytest.raises(ChartError):
        parse_set(["frontend.replicas"])


def test_the_kubernetes_validate_command_agrees(objects: list[dict[str, Any]], tmp_path) -> None:
    """The same verdicts from the `kubernetes-validate --strict` command on the rendered file."""
    command = Path(sys.executable).parent / "kubernetes-validate"
    good, bad = tmp_path / "detok.yaml", tmp_path / "broken.yaml"
    good.write_text(to_yaml(objects))
    bad.write_text(to_yaml(_break_field(objects)))
    for version in (OLDEST_KUBERNETES, newest_kubernetes()):
        ok = subprocess.run([str(command), "--strict", "--quiet", "-k", version, str(good)], capture_output=True,
                            text=True, timeout=120)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        broken = subprocess.run([str(command), "--strict", "--quiet", "-k", version, str(bad)], capture_output=True,
                                text=True, timeout=120)
        assert broken.returncode != 0 and "readinesProbe" in broken.stdout + broken.stderr


def _break_field(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    broken = copy.deepcopy(objects)
    container = _find(broken, "Deployment", "-frontend")["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    return broken
