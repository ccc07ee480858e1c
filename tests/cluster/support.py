"""What the cluster tier's tests share: Tenants, waiting, and exec in a function's pod."""

from __future__ import annotations

import json
from typing import Any

import yaml
from e2e.support import wait_for

from testbed.cluster.scaling import cold_start, is_ready
from testbed.cluster.stack import NAMESPACE, ClusterStack


def tenant(name: str, cloud_space_id: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "kubeopera.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
                "tenantName": name,
                "cloudSpaceID": cloud_space_id,
                "quota": {"cpu": "1", "memory": "2Gi"},
            },
        }
    )


def phase(cluster: ClusterStack, name: str) -> str | None:
    found: dict[str, Any] = json.loads(
        cluster.kubectl("get", "tenant", name, "-n", NAMESPACE, "-o", "json", "--ignore-not-found") or "{}"
    )
    value = found.get("status", {}).get("phase")
    return str(value) if value else None


def running_pod(cluster: ClusterStack, service: str) -> str:
    """The name of a Ready pod of the function, waking it with a request while it has none. One
    request is not always enough: a pod on its way to zero can answer it and then go (CI of 82cc550
    waited 60 s for a pod after such a wake), so each look that finds none wakes it again."""

    def ready() -> str | None:
        return next((str(p["metadata"]["name"]) for p in cluster.pods(service) if is_ready(p)), None)

    def woken() -> str | None:
        found = ready()
        if found is None:
            cold_start(cluster.ingress_url, f"{service}.{NAMESPACE}.svc.cluster.local")
        return found

    return wait_for(f"a Ready pod of {service}", woken, timeout=120, interval=2)


def exec_python(cluster: ClusterStack, pod: str, code: str) -> str:
    """Run Python in the function container of a pod (the image has no shell)."""
    return cluster.kubectl("exec", "-n", NAMESPACE, pod, "-c", "function", "--", "python3", "-c", code)
