"""Helpers of the deployment checks: where the manifests are, reading them, rendering the
overlays, running the Knative checker."""

from __future__ import annotations

import os
import re
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
KAFKA_BROKER = EVENTING / "kafka-broker"
DOCKERFILE = REPO / "Dockerfile"

# The fixed contract: Python module -> Knative Service (-> Trigger of the same name, but for the
# dead-letter sink, which has none).
FUNCTION_MODULES = {
    "tenant-install": "install",
    "tenant-check-ready": "check_ready",
    "tenant-store-kubeconfig": "store_kubeconfig",
    "tenant-notify-api": "notify_api",
    "tenant-dead-letter": "dead_letter",
    "tenant-cleanup": "cleanup",
    "tenant-resync": "resync",
}


def documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a (multi-document) text."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def file_documents(path: Path) -> list[dict[str, Any]]:
    return documents(path.read_text(encoding="utf-8"))


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


def render_prod_with(kubectl: Path, workdir: Path, component: Path) -> str:
    """The prod overlay with one of eventing/'s kustomize Components."""
    workdir.mkdir(parents=True, exist_ok=True)
    prod = os.path.relpath(DEPLOY / "overlays" / "prod", workdir)
    (workdir / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {prod}\ncomponents:\n  - {os.path.relpath(component, workdir)}\n"
    )
    return kustomize(kubectl, workdir)


def run_checker(binary: Path, *args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run tools/knative-check."""
    return subprocess.run([str(binary), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120)


def dockerfile_entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    found = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert len(found) == 1, "the Dockerfile must have exactly one exec-form ENTRYPOINT"
    entrypoint: list[str] = yaml.safe_load(found[0])
    return entrypoint
