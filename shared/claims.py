"""Ownership checks against the cluster: read whose an object is, and refuse what is not ours.

The rules are pure (``shared.ownership``); this module does the reading they need: the labels of
the namespace and the kubeconfig Secret, the owner's Tenant when the labels name another one,
and the Tenants that ask for the same ``tenantName`` or ``cloudSpaceID`` (by the CRD's
selectable fields, so one small list each). Each check raises the error ``refusal`` chose:
``OwnershipConflict`` (the Tenant is Failed, nothing touched) or ``TemporaryError`` while the
owner is being deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.kube import Kube
from shared.ownership import (
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
)
from shared.tenant import Tenant


def check_rivals(kube: Kube, tenant: Tenant) -> None:
    """Refuse if an older Tenant asks for the same tenantName or cloudSpaceID."""
    spec = tenant.spec
    others = kube.list_tenants(tenant.namespace, f"spec.tenantName={spec.tenant_name}")
    others += kube.list_tenants(tenant.namespace, f"spec.cloudSpaceID={spec.cloud_space_id}")
    other = rival(tenant, others)
    if other is not None:
        raise rival_refusal(tenant, other)


def require(kube: Kube, tenant: Tenant, verdict: Verdict, thing: Thing, field: str, value: str) -> Verdict:
    """Return ``verdict`` if this Tenant may act on ``thing``; otherwise raise its refusal."""
    if verdict.usable:
        return verdict
    state: OwnerState | None = None
    if verdict.claim == Claim.OTHER and verdict.owner is not None:
        live = kube.get_tenant(verdict.owner.namespace, verdict.owner.name)
        state = owner_state(verdict.owner, live)
    raise refusal(tenant, thing, field, value, verdict, state)


def namespace_thing(tenant: Tenant) -> Thing:
    name = tenant.spec.names.namespace
    return Thing("namespace", name, f"kubectl delete namespace {name}")


def release_thing(tenant: Tenant) -> Thing:
    names = tenant.spec.names
    return Thing(
        "helm release", f"{names.namespace}/{names.release}", f"helm uninstall {names.release} -n {names.namespace}"
    )


def secret_thing(tenant: Tenant, secret_namespace: str) -> Thing:
    name = tenant.spec.names.kubeconfig_secret
    return Thing("Secret", f"{secret_namespace}/{name}", f"kubectl delete secret {name} -n {secret_namespace}")


def namespace_verdict(kube: Kube, tenant: Tenant) -> Verdict:
    """Whose is namespace vcluster-<tenantName>, refusing when it is not this Tenant's."""
    found = kube.get_namespace(tenant.spec.names.namespace)
    verdict = judge(None if found is None else found.labels, tenant, legacy_namespace_labels(tenant))
    return require(kube, tenant, verdict, namespace_thing(tenant), "tenantName", tenant.spec.tenant_name)


def release_guard(kube: Kube, tenant: Tenant) -> Callable[[Mapping[str, Any] | None], None]:
    """A helm guard (``shared.helm.Guard``) that refuses a release this Tenant does not own."""

    def guard(values: Mapping[str, Any] | None) -> None:
        verdict = judge(release_labels(values), tenant, legacy_release_labels(tenant))
        require(kube, tenant, verdict, release_thing(tenant), "tenantName", tenant.spec.tenant_name)

    return guard
