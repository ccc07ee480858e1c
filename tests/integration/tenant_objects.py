"""Tenants for the schema's edge tests: a valid body to vary, and what the real API server answers
when it is created (the object it stored, or the causes of its refusal)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from shared.model.tenant import GROUP, PLURAL, VERSION

USER_ID = "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
CLOUD_SPACE_ID = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"


def tenant_body(
    name: str,
    *,
    tenant_name: str | None = None,
    cpu: str | int = "2",
    memory: str | int = "4Gi",
    group: str = GROUP,
) -> dict[str, Any]:
    """A valid Tenant (the README's example) but for what the test changes."""
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "userID": USER_ID,
            "tenantName": tenant_name or name,
            "cloudSpaceID": CLOUD_SPACE_ID,
            "quota": {"cpu": cpu, "memory": memory},
        },
    }


@dataclass(frozen=True)
class Cause:
    """One cause of a refusal, as the API server lists it in ``details.causes``."""

    field: str
    reason: str
    message: str


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    causes: tuple[Cause, ...]

    def on(self, field: str) -> list[Cause]:
        return [c for c in self.causes if c.field == field]


def create(
    api: k8s.CustomObjectsApi, namespace: str, body: dict[str, Any], *, group: str = GROUP
) -> dict[str, Any] | Refusal:
    """Create the Tenant for real: the stored object, or the API server's refusal."""
    try:
        created: dict[str, Any] = api.create_namespaced_custom_object(group, VERSION, namespace, PLURAL, body)
    except ApiException as refused:
        return refusal_of(refused)
    return created


def refusal_of(error: ApiException) -> Refusal:
    status = json.loads(error.body)
    causes = (status.get("details") or {}).get("causes") or []
    return Refusal(
        status=int(error.status),
        message=str(status.get("message", "")),
        causes=tuple(Cause(str(c.get("field")), str(c.get("reason")), str(c.get("message"))) for c in causes),
    )


def admitted(result: dict[str, Any] | Refusal) -> dict[str, Any]:
    assert not isinstance(result, Refusal), f"refused: {result.message}"
    return result


def refused(result: dict[str, Any] | Refusal) -> Refusal:
    assert isinstance(result, Refusal), f"admitted: {result.get('spec')}"
    assert result.status == 422, result
    return result
