"""Namespaces (a Tenant's ``vcluster-<t>``) and the PersistentVolumes its claims were bound to.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Mapping
from datetime import datetime

from shared.adapters.kube.calls import Apis, call, found_or_none, paged, precondition, unless_absent
from shared.adapters.kube.client import k8s
from shared.errors import Conflict
from shared.model.cluster import NamespaceInfo, OwnedNamespace, Volume
from shared.model.naming import LABEL_OWNER_UID

log = logging.getLogger(__name__)


# The conditions the namespace controller sets on a namespace it is deleting, True while it waits.
NAMESPACE_DELETION_CONDITIONS = (
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
    "NamespaceDeletionContentFailure",
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
)


class Namespaces(Apis):
    """Namespaces and the volumes once bound in them."""


    def get_namespace(self, name: str) -> NamespaceInfo | None:
        """The namespace's labels and whether it is being deleted, or None if there is none."""
        current = found_or_none(f"get namespace {name}", lambda: self._core.read_namespace(name))
        if current is None:
            return None
        conditions = (current.status.conditions or []) if current.status is not None else []
        remaining = "; ".join(
            str(c.message) for c in conditions if c.type in NAMESPACE_DELETION_CONDITIONS and c.status == "True"
        )
        return NamespaceInfo(
            dict(current.metadata.labels or {}), current.metadata.deletion_timestamp is not None, remaining
        )

    def list_owned_namespaces(self) -> list[OwnedNamespace]:
        """Every namespace that names a Tenant as its owner (label ``kubeopera.io/owner-uid``):
        one LIST, a page of ``PAGE`` at a time, however many there are."""
        listed = paged(
            "list namespaces", functools.partial(self._core.list_namespace, label_selector=LABEL_OWNER_UID)
        )
        return [
            OwnedNamespace(
                ns["metadata"]["name"],
                dict(ns["metadata"].get("labels") or {}),
                datetime.fromisoformat(ns["metadata"]["creationTimestamp"]),
                ns["metadata"].get("deletionTimestamp") is not None,
            )
            for ns in listed
        ]

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> bool:
        """Create the namespace with ``labels``; False if it exists already (then nothing changed)."""
        body = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=dict(labels)))
        try:
            call(f"create namespace {name}", lambda: self._core.create_namespace(body))
        except Conflict:
            return False
        log.info("namespace created", extra={"namespace": name})
        return True

    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        patch = {"metadata": {"labels": dict(labels)}}
        call(f"label namespace {name}", lambda: self._core.patch_namespace(name, patch))

    def delete_namespace(self, name: str) -> None:
        """Start the namespace's deletion (its objects and PVCs go with it); absent is fine."""
        with contextlib.suppress(Conflict):  # 409: its deletion is already under way
            unless_absent(f"delete namespace {name}", lambda: self._core.delete_namespace(name))


    def volumes_claimed_in(self, namespace: str) -> list[Volume]:
        """Every PersistentVolume whose ``claimRef`` is in ``namespace`` (one LIST of the
        cluster's volumes: a claim reference cannot be selected on)."""
        result = call("list persistentvolumes", lambda: self._core.list_persistent_volume())
        return [
            Volume(
                name=str(i.metadata.name),
                claim=f"{i.spec.claim_ref.namespace}/{i.spec.claim_ref.name}",
                reclaim_policy=str(i.spec.persistent_volume_reclaim_policy or ""),
                phase=str((i.status.phase if i.status else None) or ""),
                resource_version=str(i.metadata.resource_version),
            )
            for i in result.items
            if i.spec.claim_ref is not None and i.spec.claim_ref.namespace == namespace
        ]

    def delete_volume(self, name: str, resource_version: str) -> None:
        """Delete the version read; gone already is fine."""
        unless_absent(
            f"delete persistentvolume {name}",
            lambda: self._core.delete_persistent_volume(name, body=precondition(resource_version)),
        )

