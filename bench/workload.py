"""What the benchmarks provision: a Tenant manifest with fresh ids, and provisioning one to Ready."""

from __future__ import annotations

import time
import uuid

import yaml

from shared.adapters.kube import Kube
from shared.model.tenant import Phase
from testbed.local.stack import TENANT_NAMESPACE, Stack


def tenant(name: str) -> dict[str, object]:
    """A Tenant named ``name`` (its tenantName too), with a new userID and cloudSpaceID."""
    return {
        "apiVersion": "kubeopera.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name, "namespace": TENANT_NAMESPACE},
        "spec": {
            "userID": str(uuid.uuid4()),
            "tenantName": name,
            "cloudSpaceID": str(uuid.uuid4()),
            "quota": {"cpu": "1", "memory": "1Gi"},
        },
    }


def provision(stack: Stack, kube: Kube, name: str, poll: float = 0.05, timeout: float = 120.0) -> None:
    """Create Tenant ``name`` with kubectl and return once it is Ready."""
    stack.kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant(name)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = kube.get_tenant(TENANT_NAMESPACE, name)
        if found is not None and found.status.phase == Phase.READY:
            return
        time.sleep(poll)
    raise RuntimeError(f"{name} not Ready within {timeout:.0f} s")
