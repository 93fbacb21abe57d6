"""Render deploy/helm/detok offline with Helm's own library (PyPI's helm-python-sdk bundles it as a
shared library: the same Go template engine and chart loader as `helm template`, no binary, no
cluster), and validate the objects against the Kubernetes schemas (kubernetes-validate).

    python -m deploy.chart [-o FILE] [--set PATH=VALUE ...]     # what `make k8s-manifests` runs
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

CHART_DIR: Final = Path(__file__).resolve().parent / "helm" / "detok"
RELEASE: Final = "detok"
NAMESPACE: Final = "default"
# the oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and kubernetes-validate's newest
OLDEST_KUBERNETES: Final = "1.30.0"


class ChartError(ValueError):
    """The chart did not render (a template failed, or a value the chart refuses)."""


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE,
           namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The chart's objects for `values` (merged over values.yaml), in template order."""
    from helm_python import Chart
    from helm_python.errors import HelmError

    try:
        with Chart.load(CHART_DIR) as chart:
            rendered = chart.render(values=values, name=release, namespace=namespace, is_install=True)
    except HelmError as e:
        raise ChartError(str(e)) from None
    objects = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return objects


def newest_kubernetes() -> str:
    from kubernetes_validate import utils

    return str(utils.latest_version())


def schema_errors(objects: Sequence[dict[str, Any]], version: str) -> list[str]:
    """Each object against `version`'s schemas, strictly (an unknown field is an error)."""
    from kubernetes_validate import utils

    errors = []
    for obj in objects:
        try:
            utils.validate(obj, version, strict=True)
        except (utils.ValidationError, utils.SchemaNotFoundError) as e:
            name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            errors.append(f"{version} {name}: {str(e).splitlines()[0]}")
    return errors


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def parse_set(assignments: Sequence[str]) -> dict[str, Any]:
    """`a.b=1` pairs as nested values (each value read as YAML, as `helm --set` types them)."""
    values: dict[str, Any] = {}
    for item in assignments:
        path, sep, text = item.partition("=")
        if not sep or not path:
            raise ChartError(f"--set {item!r}: expected PATH=VALUE")
        *parents, leaf = path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(text)
    return values


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.chart", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", default="-", help="file for the rendered objects (default: stdout)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="a value, as helm's --set")
    args = p.parse_args(argv)
    try:
        objects = render(parse_set(args.set))
    except ChartError as e:
        print(f"deploy.chart: {e}", file=sys.stderr)
        return 1
    errors = [e for version in (OLDEST_KUBERNETES, newest_kubernetes()) for e in schema_errors(objects, version)]
    from deploy.wiring import wiring_errors

    errors += wiring_errors(objects)
    if errors:
        print("deploy.chart: the rendered objects are invalid:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    text = to_yaml(objects)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
        kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        print(f"{args.output}: {kinds} (valid for Kubernetes {OLDEST_KUBERNETES} and {newest_kubernetes()})",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
