"""Ownership checks against the cluster: read whose an object is, and refuse what is not ours.

The rules are pure (``shared.model.ownership``); this module does the reading they need: the labels of
the namespace and the kubeconfig Secret, the owner's Tenant when the labels name another one,
and the Tenants that ask for the same ``tenantName`` or ``cloudSpaceID`` (by the CRD's
selectable fields, so one small list each). Each check raises the error ``refusal`` chose:
``OwnershipConflict`` (the Tenant is Failed, nothing touched) or ``TemporaryError`` while the
owner is being deleted. The helm guard judges the values of the release the helm adapter read
(its one read of helm's history, which refuses a tampered one: ``shared.adapters.release``).

``claim_cloud_space`` makes "one cloudSpaceID, one vCluster" atomic. ``check_rivals`` compares
creation times, which the API server keeps to the second, and breaks a tie by name: of two
Tenants created in one second, the one that sorts first counts as the older even when the other
was provisioned before it existed, and both would go on. Before anything is made, install therefore
creates Lease ``cloudspace-<cloudSpaceID>`` in the Tenants' namespace, labelled with the Tenant's
uid and owned by it: the API server lets exactly one create of a name succeed, and the other
Tenant finds the claim another's and is Failed (``already used by``). A claim whose Tenant no
longer exists is a leftover of no value (the garbage collector would remove it with its owner):
it is deleted, at the version read, and claimed anew. cleanup releases the claim last
(``release_cloud_space``), so that a new Tenant may take the cloudSpaceID at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from shared.errors import TemporaryError
from shared.model.cluster import Marker, NamespaceInfo
from shared.model.ownership import (
    Claim,
    OwnerState,
    Thing,
    Verdict,
    judge,
    legacy_namespace_labels,
    legacy_release_labels,
    owner_state,
    refusal,
    release_labels,
    rival,
    rival_refusal,
    secret_labels,
)
from shared.model.tenant import Tenant


class ClaimSource(Protocol):
    """What the ownership checks read and write through the Kubernetes adapter
    (``shared.adapters.kube.Kube``): Tenants, namespaces, claim markers."""

    def get_tenant(self, namespace: str, name: str) -> Tenant | None: ...
    def list_tenants(self, namespace: str, field_selector: str) -> list[Tenant]: ...
    def get_namespace(self, name: str) -> NamespaceInfo | None: ...
    def create_claim(self, tenant: Tenant, name: str, labels: Mapping[str, str]) -> bool: ...
    def get_claim(self, namespace: str, name: str) -> Marker | None: ...
    def delete_claim(self, namespace: str, name: str, resource_version: str) -> None: ...

log = logging.getLogger(__name__)

# Create; or find a leftover, delete it and create again; once more in case it was released
# meanwhile. More means the claim keeps changing hands: a temporary error, asked again later.
CLAIM_ATTEMPTS = 3

# Who may write helm's records in vcluster-* besides tenant-install (deploy/base/policy/tenant-helm-records.yaml).
CLEANUP_IDENTITY = "system:serviceaccount:kubeopera-system:tenant-cleanup"


def check_rivals(kube: ClaimSource, tenant: Tenant) -> None:
    """Refuse if an older Tenant asks for the same tenantName or cloudSpaceID."""
    spec = tenant.spec
    others = kube.list_tenants(tenant.namespace, f"spec.tenantName={spec.tenant_name}")
    others += kube.list_tenants(tenant.namespace, f"spec.cloudSpaceID={spec.cloud_space_id}")
    other = rival(tenant, others)
    if other is not None:
        raise rival_refusal(tenant, other)


def claim_thing(tenant: Tenant) -> Thing:
    name = tenant.spec.names.cloud_space_claim
    return Thing("claim", f"Lease {tenant.namespace}/{name}", f"kubectl delete lease {name} -n {tenant.namespace}")


def claim_cloud_space(kube: ClaimSource, tenant: Tenant) -> None:
    """Hold this Tenant's cloudSpaceID (Lease ``cloudspace-<cloudSpaceID>``), or raise the
    refusal: ``OwnershipConflict`` while another Tenant holds it, ``TemporaryError`` while that
    Tenant is being deleted. Labelled as the kubeconfig Secret is (the cloudSpaceID and the owner)."""
    name = tenant.spec.names.cloud_space_claim
    for _ in range(CLAIM_ATTEMPTS):
        if kube.create_claim(tenant, name, secret_labels(tenant)):
            log.info("cloudSpaceID claimed", extra={"claim": name})
            return
        found = kube.get_claim(tenant.namespace, name)
        if found is None:
            continue  # released meanwhile: create again
        verdict = judge(found.labels, tenant, {})
        if verdict.claim == Claim.OURS:
            return
        state = owner_of(kube, verdict)
        if state == OwnerState.GONE:
            log.info("claim left by a Tenant that is gone; released", extra={"claim": name})
            kube.delete_claim(tenant.namespace, name, found.resource_version)
            continue
        raise refusal(tenant, claim_thing(tenant), "cloudSpaceID", tenant.spec.cloud_space_id, verdict, state)
    raise TemporaryError(f"{claim_thing(tenant)} changed hands while it was read; asking again", retry_after=1)


def release_cloud_space(kube: ClaimSource, tenant: Tenant) -> None:
    """Delete this Tenant's claim of its cloudSpaceID (another's, or none, is left as it is)."""
    name = tenant.spec.names.cloud_space_claim
    found = kube.get_claim(tenant.namespace, name)
    if found is not None and judge(found.labels, tenant, {}).claim == Claim.OURS:
        kube.delete_claim(tenant.namespace, name, found.resource_version)


def require(kube: ClaimSource, tenant: Tenant, verdict: Verdict, thing: Thing, field: str, value: str) -> Verdict:
    """Return ``verdict`` if this Tenant may act on ``thing``; otherwise raise its refusal."""
    if verdict.usable:
        return verdict
    raise refusal(tenant, thing, field, value, verdict, owner_of(kube, verdict))


def owner_of(kube: ClaimSource, verdict: Verdict) -> OwnerState | None:
    """Whether the other Tenant a verdict names is still there (None: the verdict names none)."""
    if verdict.claim != Claim.OTHER or verdict.owner is None:
        return None
    return owner_state(verdict.owner, kube.get_tenant(verdict.owner.namespace, verdict.owner.name))


def namespace_thing(tenant: Tenant) -> Thing:
    name = tenant.spec.names.namespace
    return Thing("namespace", name, f"kubectl delete namespace {name}")


def release_thing(tenant: Tenant) -> Thing:
    """A release; removed by hand as tenant-cleanup, since policy/tenant-helm-records.yaml
    reserves helm's records in vcluster-* for tenant-install and tenant-cleanup."""
    names = tenant.spec.names
    return Thing(
        "helm release",
        f"{names.namespace}/{names.release}",
        f"helm uninstall {names.release} -n {names.namespace} --kube-as-user {CLEANUP_IDENTITY}",
    )


def secret_thing(tenant: Tenant, secret_namespace: str) -> Thing:
    name = tenant.spec.names.kubeconfig_secret
    return Thing("Secret", f"{secret_namespace}/{name}", f"kubectl delete secret {name} -n {secret_namespace}")


def namespace_verdict(kube: ClaimSource, tenant: Tenant) -> Verdict:
    """Whose is namespace vcluster-<tenantName>, refusing when it is not this Tenant's."""
    return namespace_claim(kube, tenant)[0]


def namespace_claim(kube: ClaimSource, tenant: Tenant) -> tuple[Verdict, Mapping[str, str] | None]:
    """``namespace_verdict`` and the labels it judged (None: no namespace), for install, which
    keeps some of them true (``access.keep_labels``) without reading the namespace again."""
    found = kube.get_namespace(tenant.spec.names.namespace)
    labels = None if found is None else found.labels
    verdict = judge(labels, tenant, legacy_namespace_labels(tenant))
    return require(kube, tenant, verdict, namespace_thing(tenant), "tenantName", tenant.spec.tenant_name), labels


def release_guard(kube: ClaimSource, tenant: Tenant) -> Callable[[Mapping[str, Any] | None], None]:
    """A helm guard (``shared.adapters.helm.Guard``) that refuses a release this Tenant does not own;
    the adapter has refused a tampered history before it asks."""

    def guard(values: Mapping[str, Any] | None) -> None:
        verdict = judge(release_labels(values), tenant, legacy_release_labels(tenant))
        require(kube, tenant, verdict, release_thing(tenant), "tenantName", tenant.spec.tenant_name)

    return guard
