"""Namespaces, as admin: create (with labels), ask for deletion (the namespace controller
finishes it), and wait for ``default`` while the API server bootstraps."""

from __future__ import annotations

import time

from testbed.controlplane.client import kubectl
from testbed.controlplane.model import ControlPlane


def create_namespace(cp: ControlPlane, name: str, labels: dict[str, str] | None = None) -> None:
    """Create a namespace (as admin)."""
    kubectl(cp, "create", "namespace", name)
    if labels:
        kubectl(cp, "label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))


def delete_namespace(cp: ControlPlane, name: str) -> None:
    """Ask for the namespace's deletion (the namespace controller finishes it); do not wait."""
    kubectl(cp, "delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def wait_for_default_namespace(cp: ControlPlane, timeout: float) -> None:
    """/readyz can pass a moment before the bootstrap controller has made ``default``."""
    deadline = time.monotonic() + timeout
    while True:
        result = kubectl(cp, "get", "namespace", "default", "-o", "name", check=False)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace default did not appear: {result.stderr.strip()}")
        time.sleep(0.2)
