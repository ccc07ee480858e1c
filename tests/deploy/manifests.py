"""Helpers of the deployment checks: where the manifests are, reading them, rendering the
overlays, running the Knative checker."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EVENTING = REPO / "eventing"
TRIGGERS = EVENTING / "triggers"
DEPLOY = REPO / "deploy"
SERVICES = DEPLOY / "base" / "services"
RBAC = DEPLOY / "base" / "rbac"
FUNCTIONS = REPO / "functions"
OVERLAYS = ("dev", "prod")
CONFIG_FEATURES_PATCH = EVENTING / "config-features-patch.yaml"
WITHOUT_RETRYAFTER = EVENTING / "without-retryafter"
WITHOUT_SENDER_IDENTITY = DEPLOY / "components" / "without-sender-identity"
KAFKA_BROKER = EVENTING / "kafka-broker"
DOCKERFILE = REPO / "Dockerfile"

# What a function's Knative Service passes the image: the gunicorn app of its module.
APP_ARGUMENT = re.compile(r"functions\.(?P<module>\w+):create_app\(\)")


def documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a (multi-document) text."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def file_documents(path: Path) -> list[dict[str, Any]]:
    return documents(path.read_text(encoding="utf-8"))


def function_modules() -> dict[str, str]:
    """Knative Service -> its module in functions/, read off deploy/base/services: each file holds one
    Service whose container args are ``["functions.<module>:create_app()"]``."""
    found: dict[str, str] = {}
    for path in sorted(SERVICES.glob("*.yaml")):
        (service,) = file_documents(path)
        (container,) = service["spec"]["template"]["spec"]["containers"]
        args = container.get("args") or []
        matched = APP_ARGUMENT.fullmatch(args[0]) if len(args) == 1 else None
        assert matched is not None, f"{path.name}: args {args} are not one functions.<module>:create_app()"
        found[service["metadata"]["name"]] = matched["module"]
    return found


# Every function (Service -> module); each Service has a Trigger of the same name, but for the
# dead-letter sink, which has none, and the vCluster watch, to which nothing is delivered.
FUNCTION_MODULES = function_modules()
WATCH = "tenant-vcluster-watch"
# The Services the broker delivers to: every one but the vCluster watch.
RECEIVERS = {name: module for name, module in FUNCTION_MODULES.items() if name != WATCH}


def objects_of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The objects of one kind, by name."""
    return {doc["metadata"]["name"]: doc for doc in docs if doc.get("kind") == kind}


def kustomize(kubectl: Path, folder: Path) -> str:
    proc = subprocess.run([str(kubectl), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {folder} failed:\n{proc.stderr}"
    return proc.stdout


def render_without_retryafter(kubectl: Path, workdir: Path) -> str:
    """The prod overlay with the eventing/without-retryafter Component, as a cluster without
    Knative's delivery-retryafter flag would use it (kustomize wants relative paths)."""
    return render_prod_with(kubectl, workdir, WITHOUT_RETRYAFTER)


def render_prod_with(kubectl: Path, workdir: Path, *components: Path) -> str:
    """The prod overlay with kustomize Components (eventing/without-retryafter, deploy/components/...)."""
    workdir.mkdir(parents=True, exist_ok=True)
    prod = os.path.relpath(DEPLOY / "overlays" / "prod", workdir)
    (workdir / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {prod}\ncomponents:\n"
        + "".join(f"  - {os.path.relpath(component, workdir)}\n" for component in components)
    )
    return kustomize(kubectl, workdir)


def run_checker(binary: Path, *args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run tools/knative-check."""
    return subprocess.run([str(binary), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120)


def dockerfile_env() -> dict[str, str]:
    """The environment the image sets: the ENV instructions of the Dockerfile's last stage."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    last_stage = re.split(r"^FROM\s", text, flags=re.M)[-1]
    env: dict[str, str] = {}
    for instruction in re.findall(r"^ENV\s+(.*)$", last_stage, re.M):
        for pair in shlex.split(instruction):
            name, sep, value = pair.partition("=")
            assert sep, f"ENV {instruction}: use the NAME=value form"
            env[name] = value
    return env


def dockerfile_entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    found = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert len(found) == 1, "the Dockerfile must have exactly one exec-form ENTRYPOINT"
    entrypoint: list[str] = yaml.safe_load(found[0])
    return entrypoint


def impersonating(service_account: str, namespace: str = "kubeopera-system") -> list[str]:
    """kubectl's flags to act as a ServiceAccount, with the groups the API server gives it."""
    return [
        f"--as=system:serviceaccount:{namespace}:{service_account}",
        "--as-group=system:serviceaccounts",
        f"--as-group=system:serviceaccounts:{namespace}",
        "--as-group=system:authenticated",
    ]


def kubectl_run(
    kubectl: Path, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl, allowed to fail: for checks of what the API server refuses."""
    return subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
