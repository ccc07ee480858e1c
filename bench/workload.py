"""What the benchmarks provision: a Tenant manifest with fresh ids."""

from __future__ import annotations

import uuid

from testbed.local.stack import TENANT_NAMESPACE


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
