"""Leases: the per-namespace work lock's (``shared.steps.locks``; whether a hold is free is
``shared.model.cluster.LeaseHold``), the claim markers of a cloudSpaceID (``shared.steps.claims``)
and the fleet upgrade's rollout slots and halt record, made as claims are (``shared.steps.rollout``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared.adapters.kube.calls import Apis, call, created, found_or_none, precondition, unless_absent
from shared.adapters.kube.client import k8s
from shared.errors import Conflict
from shared.model.cluster import LeaseHold, Marker
from shared.model.tenant import (
    API_VERSION,
    KIND,
    Tenant,
)


class Leases(Apis):
    """Leases: locks and claim markers."""


    def acquire_lease(self, namespace: str, name: str, holder: str, seconds: int) -> str | None:
        """Hold Lease ``name`` for ``seconds`` if it is free, expired or already ``holder``'s;
        return the resourceVersion of our hold (for ``release_lease``), None if someone else has it."""
        now = datetime.now(UTC)
        spec = k8s.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=seconds, acquire_time=now, renew_time=now)
        body: Any = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace), spec=spec)
        try:
            made = call(
                f"create lease {namespace}/{name}", lambda: self._coordination.create_namespaced_lease(namespace, body)
            )
            return str(made.metadata.resource_version)
        except Conflict:
            pass
        current = call(
            f"get lease {namespace}/{name}", lambda: self._coordination.read_namespaced_lease(name, namespace)
        )
        hold = LeaseHold(
            holder=str(current.spec.holder_identity or ""),
            renewed=current.spec.renew_time or current.spec.acquire_time,
            duration_seconds=int(current.spec.lease_duration_seconds or 0),
        )
        if not hold.free_for(holder, now):
            return None
        body.metadata.resource_version = current.metadata.resource_version
        try:
            taken = call(
                f"take over lease {namespace}/{name}",
                lambda: self._coordination.replace_namespaced_lease(name, namespace, body),
            )
        except Conflict:
            return None  # someone else took it first
        return str(taken.metadata.resource_version)

    def release_lease(self, namespace: str, name: str, resource_version: str) -> None:
        """Give up our hold (the version ``acquire_lease`` returned); gone or taken over is fine."""
        options = precondition(resource_version)
        with contextlib.suppress(Conflict):  # expired and taken over by another holder: theirs now
            unless_absent(
                f"delete lease {namespace}/{name}",
                lambda: self._coordination.delete_namespaced_lease(name, namespace, body=options),
            )


    def create_claim(self, tenant: Tenant, name: str, labels: Mapping[str, str]) -> bool:
        """Create Lease ``name`` in the Tenant's namespace, held by the Tenant and owned by it (the
        garbage collector removes it with the Tenant); False if one of that name exists already."""
        meta = k8s.V1ObjectMeta(
            name=name,
            namespace=tenant.namespace,
            labels=dict(labels),
            owner_references=[
                k8s.V1OwnerReference(api_version=API_VERSION, kind=KIND, name=tenant.name, uid=tenant.uid)
            ],
        )
        body: Any = k8s.V1Lease(metadata=meta, spec=k8s.V1LeaseSpec(holder_identity=tenant.key))
        return created(
            f"create lease {tenant.namespace}/{name}",
            lambda: self._coordination.create_namespaced_lease(tenant.namespace, body),
        )

    def get_claim(self, namespace: str, name: str) -> Marker | None:
        found = found_or_none(
            f"get lease {namespace}/{name}", lambda: self._coordination.read_namespaced_lease(name, namespace)
        )
        if found is None:
            return None
        return Marker(dict(found.metadata.labels or {}), str(found.metadata.resource_version))

    def list_claims(self, namespace: str, label_selector: str) -> dict[str, Marker]:
        """The Leases of ``namespace`` matching the selector, by name (the rollout's, for the command)."""
        found = call(
            f"list leases {namespace} {label_selector}",
            lambda: self._coordination.list_namespaced_lease(namespace, label_selector=label_selector),
        )
        return {
            str(i.metadata.name): Marker(dict(i.metadata.labels or {}), str(i.metadata.resource_version))
            for i in found.items
        }

    def delete_claim(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version read; gone already, or changed meanwhile (409), is left as it is."""
        with contextlib.suppress(Conflict):
            unless_absent(
                f"delete lease {namespace}/{name}",
                lambda: self._coordination.delete_namespaced_lease(
                    name, namespace, body=precondition(resource_version)
                ),
            )

