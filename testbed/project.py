"""The clone the test bed runs from, as both tiers read it: where ``deploy/``, ``eventing/`` and the
stand-in chart are, the namespace they put everything in, and which function each Knative Service
runs.

Above ``testbed.local`` and ``testbed.cluster``, which both start the project from these files; neither
imports the other for them.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shared.model.naming import DEFAULT_TENANT_NAMESPACE

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHART_DIR = Path(__file__).resolve().parent / "chart"  # the stand-in vcluster chart
TENANT_NAMESPACE = DEFAULT_TENANT_NAMESPACE  # where deploy/base and eventing/ put everything

_APP_ARGUMENT = re.compile(r"functions\.(?P<module>\w+):create_app\(\)")


class ProjectError(RuntimeError):
    """The clone lacks what the test bed reads from it; the message says what."""


def project_path(*parts: str) -> Path:
    """A file or folder of the clone; ``ProjectError`` if it is missing."""
    path = PROJECT_ROOT.joinpath(*parts)
    if not path.exists():
        raise ProjectError(f"{path} is missing: run from a clone of kubeopera-tenants (pip install -e .)")
    return path


def function_modules(manifests: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Knative Service name -> the module in functions/ it serves, read from each Service's container
    args (``["functions.<module>:create_app()"]``); ``ProjectError`` for a Service that has other args."""
    found: dict[str, str] = {}
    for doc in manifests:
        if (doc.get("apiVersion"), doc.get("kind")) != ("serving.knative.dev/v1", "Service"):
            continue
        name = doc["metadata"]["name"]
        args = doc["spec"]["template"]["spec"]["containers"][0].get("args") or []
        matched = _APP_ARGUMENT.fullmatch(args[0]) if len(args) == 1 else None
        if matched is None:
            expected = "functions.<module>:create_app()"
            raise ProjectError(f"Knative Service {name}: args {args} name no function ({expected})")
        found[name] = matched["module"]
    return found


def cluster_concurrency(manifests: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Knative Service name -> how many requests it serves at once across the cluster: its
    ``containerConcurrency`` times its ``autoscaling.knative.dev/max-scale`` (1 when either is unset
    or 0, which Knative reads as no limit: the caller then chooses)."""
    found: dict[str, int] = {}
    for doc in manifests:
        if (doc.get("apiVersion"), doc.get("kind")) != ("serving.knative.dev/v1", "Service"):
            continue
        template = doc["spec"]["template"]
        per_pod = int(template["spec"].get("containerConcurrency") or 1)
        pods = int(
            (template.get("metadata", {}).get("annotations") or {}).get("autoscaling.knative.dev/max-scale") or 1
        )
        found[doc["metadata"]["name"]] = per_pod * pods
    return found


def export_kubeconfig(admin: Path, out: Path | None) -> Path:
    """A copy of the admin kubeconfig at ``out`` (owner-only), for ``--kubeconfig-out``; the
    kubeconfig to tell the user about."""
    if out is None:
        return admin
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(admin, out)
    os.chmod(out, 0o600)
    return out
