"""Every quota form the CRD admits (deploy/crd/tenants.yaml; tests/integration/test_tenant_edges.py
shows the API server admitting each) reaches the Helm values as the string it was written as:
``Tenant.from_object`` keeps it, an integer becomes its digits, and ``vcluster_values`` puts it in
both the requests and the limits. The values are JSON that helm reads back unchanged (strings,
never numbers YAML or helm could reinterpret), so a Tenant's values compare equal on every event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.model.tenant import Quota, Tenant
from shared.model.values import vcluster_values

from .fakes import TENANT_NAMESPACE

# (cpu, memory) as the API server stores them: strings as written, or JSON integers.
ADMITTED = [
    ("16", "64Gi"),  # the maximum
    (16, 68719476736),
    ("16000m", "65536Mi"),
    ("1.6e1", "0.0625Ti"),
    ("+16", "68719476736"),
    ("1.5", "1e3"),
    ("1500m", "2Ki"),
    ("1e1", "1.5Gi"),
    ("0.0001", "1.5k"),
    (1, 1),
]


def stored(cpu: str | int, memory: str | int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeopera.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "edge", "namespace": TENANT_NAMESPACE, "uid": "uid-1", "generation": 1},
        "spec": {
            "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
            "tenantName": "edge",
            "cloudSpaceID": "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
            "quota": {"cpu": cpu, "memory": memory},
        },
    }


@pytest.mark.parametrize(("cpu", "memory"), ADMITTED)
def test_an_admitted_quota_is_the_helm_requests_and_limits_as_written(cpu: str | int, memory: str | int) -> None:
    tenant = Tenant.from_object(stored(cpu, memory))
    assert tenant.spec.quota == Quota(cpu=str(cpu), memory=str(memory))
    values = vcluster_values(tenant, "production")
    resources = values["controlPlane"]["statefulSet"]["resources"]
    expected = {"cpu": str(cpu), "memory": str(memory)}
    assert resources == {"requests": expected, "limits": expected}
    assert json.loads(json.dumps(values)) == values


def test_an_integer_quota_becomes_its_digits_not_a_float() -> None:
    quota = Tenant.from_object(stored(16, 68719476736)).spec.quota
    assert (quota.cpu, quota.memory) == ("16", "68719476736")
