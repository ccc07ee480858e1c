"""The rules every step keeps before and after it acts (design.md section 2).

- ``live_tenant``: the event is a hint; re-read the Tenant and return it only if it is the same
  object (uid) at the same generation the event was about. Anything else is acknowledged and
  ignored by the caller.
- ``write_status``: status writes carry the resourceVersion we read; a ``Conflict`` bubbles up
  and the HTTP layer re-runs the whole step on fresh data. A phase change is also recorded as a
  Kubernetes Event on the Tenant (``kubectl describe kt NAME`` shows its history).
- ``mark_failed``: phase Failed with a message and a reason, unless the Tenant already moved on
  (Ready, or a newer generation), so a late failure never overwrites a success.
"""

from __future__ import annotations

import logging
from typing import Protocol

from shared.model import lifecycle
from shared.model.tenant import (
    COND_READY,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantEvent,
    TenantRef,
    rfc3339,
    utcnow,
)
from shared.observability import metrics


class TenantStore(Protocol):
    """What the rules every step keeps need of the Kubernetes adapter (``shared.adapters.kube.Kube``)."""

    def get_tenant(self, namespace: str, name: str) -> Tenant | None: ...
    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant: ...
    def record_event(self, tenant: Tenant, event: TenantEvent) -> None: ...

log = logging.getLogger(__name__)

MESSAGE_MAX = 1024


def accept_retry(kube: TenantStore, tenant: Tenant) -> Tenant:
    """Install's first status write for a Tenant, before anything else: a Failed one patched to
    Pending by hand is marked as a retry (``RetryAccepted``, ``lastSyncedAt`` now), so that its
    provision timeout and dead letters count from the retry, not from the failure it kept. A new
    Tenant needs none: it reads Pending from the CRD's default since its creation (should install
    never get to it, resync marks when it asked, ``lifecycle.provision_started``)."""
    if not lifecycle.unacknowledged_retry(tenant):
        return tenant
    return write_status(kube, tenant, retry_update(tenant, lifecycle.RETRY_ACCEPTED_REASON, "retry accepted"))


def retry_update(tenant: Tenant, reason: str, what: str) -> StatusUpdate:
    """Pending again after a failure, marked with when (``lastSyncedAt``) and why (the Ready
    condition's ``reason``: ``lifecycle.RETRY_REQUESTED_REASON`` or ``RETRY_ACCEPTED_REASON``):
    events made before it are superseded (``lifecycle.failed_since``) and the provision timeout
    counts from it (``lifecycle.provision_started``). The failure's message is kept after it."""
    now = rfc3339(utcnow())
    message = f"{what} at {now}; was: {tenant.status.message}"[:MESSAGE_MAX]
    return StatusUpdate(
        phase=Phase.PENDING,
        fields={"message": message, "lastSyncedAt": now},
        conditions=(Condition(COND_READY, "False", reason, message, tenant.generation),),
    )


def live_tenant(kube: TenantStore, ref: TenantRef) -> Tenant | None:
    tenant = kube.get_tenant(ref.namespace, ref.name)
    if tenant is None:
        log.info("tenant is gone; event ignored")
        return None
    if tenant.uid != ref.uid:
        log.info("event is about another incarnation of the tenant; ignored", extra={"event_uid": ref.uid})
        return None
    if ref.generation and tenant.generation != ref.generation:
        log.info(
            "event is about another generation; ignored",
            extra={"event_generation": ref.generation, "live_generation": tenant.generation},
        )
        return None
    return tenant


def write_status(kube: TenantStore, tenant: Tenant, update: StatusUpdate) -> Tenant:
    updated = kube.patch_tenant_status(tenant, update)
    before, after = tenant.status.phase, updated.status.phase
    if before != after:
        metrics.PHASE_TRANSITIONS.labels(before.value, after.value).inc()
    log.info("status written", extra={"phase": after.value, "generation": tenant.generation})
    event = update.event_for(tenant)
    if event is not None:
        kube.record_event(updated, event)
    return updated


def failed_update(tenant: Tenant, message: str, reason: str = "ProvisioningFailed") -> StatusUpdate:
    message = message[:MESSAGE_MAX]
    return StatusUpdate(
        phase=Phase.FAILED,
        fields={"message": message, "lastSyncedAt": rfc3339(utcnow())},
        conditions=(Condition(COND_READY, "False", reason, message, tenant.generation),),
    )


def mark_failed(kube: TenantStore, ref: TenantRef, message: str, reason: str = "ProvisioningFailed") -> bool:
    """Set phase Failed if the tenant is still the one the event named and is not settled."""
    tenant = live_tenant(kube, ref)
    return tenant is not None and fail(kube, tenant, message, reason)


def fail(kube: TenantStore, tenant: Tenant, message: str, reason: str = "ProvisioningFailed") -> bool:
    """``mark_failed`` for a Tenant already read (as the event named it): Failed unless it is
    Failed already or Ready at its generation."""
    if tenant.status.phase == Phase.FAILED:
        return False
    if tenant.ready_at_generation():
        log.warning("failure reported for a tenant that is Ready; left Ready", extra={"reason": reason})
        return False
    write_status(kube, tenant, failed_update(tenant, message, reason))
    log.warning("tenant marked Failed", extra={"reason": reason, "failure": message[:MESSAGE_MAX]})
    return True
