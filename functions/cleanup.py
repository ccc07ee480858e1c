"""cleanup: a deleted Tenant takes its vCluster with it, and only what it owns.

Takes ``io.kubeopera.tenant.cleanup``: the router's (a Tenant whose deletion has begun, as the
ApiServerSource's update shows it: install put the finalizer ``kubeopera.io/cleanup`` on the
Tenant, so ``kubectl delete`` only sets its ``deletionTimestamp``, design.md section 3) and
resync's (a deletion that never started or stalled). It re-reads the Tenant; for one that is being
deleted, with the finalizer on (``lifecycle.wants_cleanup``), holding the work lock of its
namespace (``shared.steps.locks``: no install of it runs meanwhile, in any pod):

1. phase Deleting (Event ``CleanupStarted``);
2. if namespace ``vcluster-{tenantName}`` is this Tenant's (``shared.model.ownership``): ``helm
   uninstall`` of its release, then the namespace is deleted (its PVCs and everything else in it
   go with it); if the kubeconfig Secret is this Tenant's, it is deleted. Whatever belongs to
   someone else is left alone, with a Warning Event saying so. When helm's history of the release
   was tampered with (``shared.adapters.release``: a Secret with its labels that helm did not write), helm
   is not asked what to delete: the uninstall is skipped with a Warning Event ``ReleaseTampered``
   and the namespace deleted all the same;
3. while the namespace still exists (Terminating), 503 with ``Retry-After:
   CLEANUP_POLL_SECONDS``: the broker asks again, as it does for check-ready. What it waits for
   (the namespace controller's own words: which resources, which finalizers remain) is the
   Tenant's message, written with ``lastSyncedAt`` whenever it changes. cleanup gives up only when
   it has not changed for ``CLEANUP_STALL_SECONDS`` (Failed, reason ``CleanupFailed``, saying what
   is stuck): a deletion that moves, however slowly (a pod with a long grace period), is waited
   for. The broker's retry budget never decides: after ``RENEW_AFTER_POLLS`` polls of one event
   cleanup answers with a fresh ``io.kubeopera.tenant.cleanup``, as check-ready renews its poll;
4. once everything is gone: a PersistentVolume that one of the namespace's claims was bound to
   and that outlived it (reclaim policy ``Retain``: the vCluster's data, its CA key among it) is
   reported with a Warning Event ``VolumeRetained`` and in the log, or deleted when
   ``DELETE_RETAINED_VOLUMES`` is true (Event ``VolumeDeleted``); the Tenant's claim of its
   cloudSpaceID is released (Lease ``cloudspace-<cloudSpaceID>``, ``shared.steps.claims``; another
   Tenant's is left alone), Event ``CleanupFinished``, the finalizer is removed (which lets the
   API server delete the Tenant), and kubeopera-api is told the CloudSpace is ``deleted``
   (non-fatal, once, and not when another Tenant still claims the same ``cloudSpaceID``).

The same event with ``orphan`` (resync's, for a ``vcluster-*`` namespace whose owner Tenant no
longer exists, ``ownership.orphaned_by``) removes that namespace and the stored kubeconfig of the
gone Tenant, after checking again under the namespace's work lock that it is gone.

Every step is safe to repeat; a Tenant that never got far (no namespace, no Secret), is Failed,
or whose namespace is already gone goes straight to step 4. A cleanup that the broker gave up on
(dead-lettered: Failed, reason ``CleanupFailed``) waits, as every Failed Tenant does, until its
phase is patched to Pending (``kubeopera-tenants retry``).
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.adapters.kubeopera_api import CloudSpaceUpdate
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import BadEvent, CleanupStalled, NamespaceTerminating, NotReadyYet, ReleaseTampered
from shared.model import deletion, event_types, lifecycle
from shared.model.cluster import NamespaceInfo
from shared.model.deletion import Do, Progress
from shared.model.naming import LABEL_OWNER_UID, LABEL_TENANT_ID, TenantNames, tenant_name_in
from shared.model.ownership import Verdict, judge, legacy_namespace_labels, legacy_secret_labels
from shared.model.tenant import (
    Phase,
    StatusUpdate,
    Tenant,
    TenantEvent,
    TenantRef,
    parse_time,
    rfc3339,
    utcnow,
)
from shared.observability import metrics
from shared.runtime import Callbacks, Cluster, HelmRuns, Runtime
from shared.settings import Settings
from shared.steps import claims
from shared.steps.locks import work_lock
from shared.steps.reconcile import mark_failed, write_status

NAME = "cleanup"
CLEANUP_FAILED = lifecycle.CLEANUP_FAILED
log = logging.getLogger(__name__)


def handle(
    kube: Cluster, helm: HelmRuns, api: Callbacks, settings: Settings, event: BaseCloudEvent, ref: TenantRef
) -> BaseCloudEvent | None:
    data = event.get_data()
    orphan = data.get("orphan") if isinstance(data, dict) else None
    if orphan is not None:
        _remove_orphan(kube, settings, ref, orphan)
        return None
    tenant = _to_clean(kube, ref)
    if tenant is None:
        return None
    # Under the namespace's work lock (shared.steps.locks): an install that read the Tenant before its
    # deletion began finishes what it makes first, and this then sees it and removes it. The
    # Tenant is read again under it (that install wrote its status).
    with work_lock(kube, settings.tenant_namespace, tenant.spec.names):
        tenant = _to_clean(kube, ref)
        return None if tenant is None else _clean(kube, helm, api, settings, event, tenant)


def _to_clean(kube: Cluster, ref: TenantRef) -> Tenant | None:
    """The Tenant of ``ref`` when it has cleanup's work: being deleted, finalizer on, not given up."""
    tenant = kube.get_tenant(ref.namespace, ref.name)
    if tenant is None or tenant.uid != ref.uid or not tenant.deleting or not tenant.has_finalizer:
        log.info("nothing to clean up (tenant gone, replaced, not being deleted, or already cleaned)")
        return None
    if lifecycle.gave_up(tenant):
        log.info("cleanup failed before; it waits for its phase to be patched to Pending")
        return None
    return tenant


def _clean(
    kube: Cluster, helm: HelmRuns, api: Callbacks, settings: Settings, event: BaseCloudEvent, tenant: Tenant
) -> BaseCloudEvent | None:
    if tenant.status.phase != Phase.DELETING:
        tenant = write_status(
            kube,
            tenant,
            StatusUpdate(
                phase=Phase.DELETING,
                fields={
                    "message": "deleting the vCluster and the stored kubeconfig",
                    "lastSyncedAt": rfc3339(utcnow()),
                },
            ),
        )
    names = tenant.spec.names
    namespace = kube.get_namespace(names.namespace)
    namespace_verdict = judge(None if namespace is None else namespace.labels, tenant, legacy_namespace_labels(tenant))
    secret = kube.get_secret(settings.tenant_namespace, names.kubeconfig_secret)
    secret_verdict = judge(None if secret is None else secret.labels, tenant, legacy_secret_labels(tenant))
    todo = deletion.plan(names.namespace, namespace, namespace_verdict, secret is not None, secret_verdict)

    if todo.namespace is Do.DELETE:
        _uninstall(kube, helm, settings, tenant)
        kube.delete_namespace(names.namespace)
        log.info("namespace deletion started", extra={"namespace": names.namespace})
    elif todo.namespace is Do.LEAVE:
        _left_alone(kube, tenant, str(claims.namespace_thing(tenant)), namespace_verdict)
    if todo.secret is Do.DELETE and secret is not None:
        kube.delete_secret(settings.tenant_namespace, names.kubeconfig_secret, secret.resource_version)
        log.info("kubeconfig Secret deleted", extra={"secret": names.kubeconfig_secret})
    elif todo.secret is Do.LEAVE:
        _left_alone(kube, tenant, str(claims.secret_thing(tenant, settings.tenant_namespace)), secret_verdict)

    if not todo.done:
        return _wait(kube, settings, tenant, event, "waiting for " + todo.waiting_for)
    _retained_volumes(kube, settings, tenant)
    claims.release_cloud_space(kube, tenant)
    kube.record_event(tenant, TenantEvent("Normal", "CleanupFinished", "vCluster and stored kubeconfig removed"))
    # Guarded by the resourceVersion read: of two deliveries finishing at once only one removes
    # the finalizer (the other gets Conflict, re-reads, finds the Tenant gone), so only one tells
    # kubeopera-api. A callback that fails now is not retried: the Tenant is gone.
    kube.set_finalizer(tenant, present=False)
    log.info("cleanup finished; finalizer removed")
    _tell_kubeopera_api(kube, api, tenant)
    return None


def _remove_orphan(kube: Cluster, settings: Settings, ref: TenantRef, namespace: object) -> None:
    """resync's ``orphan``: namespace ``vcluster-<t>`` and the stored kubeconfig of a Tenant
    (``ref``) that no longer exists. Under the namespace's work lock, everything is checked again:
    the Tenant is gone (none at its name, or one of another uid), the namespace still carries its
    uid and is not already going; then it is deleted (helm's records and the vCluster go with it),
    and the kubeconfig Secret its labels name if that still carries the same uid. Nothing of a
    living Tenant is ever touched. Logged, and counted in ``kubeopera_tenant_orphans_removed_total``."""
    tenant_name = tenant_name_in(namespace) if isinstance(namespace, str) else None
    if not isinstance(namespace, str) or tenant_name is None:
        raise BadEvent(f"event data: orphan must name a vcluster-* namespace, got {namespace!r}")
    found = kube.get_namespace(namespace)
    if found is None or not _left_by(found, ref):
        log.info("orphaned namespace already gone, going, or not the named owner's", extra={"namespace": namespace})
        return
    names = TenantNames.of(tenant_name, found.labels.get(LABEL_TENANT_ID, ""))
    with work_lock(kube, settings.tenant_namespace, names):
        live = kube.get_tenant(ref.namespace, ref.name)
        if live is not None and live.uid == ref.uid:
            log.info("the owner of the namespace exists; it is not an orphan", extra={"namespace": namespace})
            return
        extra = {"namespace": namespace, "owner": ref.key, "ownerUID": ref.uid}
        if _left_by(kube.get_namespace(namespace), ref):
            kube.delete_namespace(namespace)
            metrics.ORPHANS_REMOVED.labels("namespace").inc()
            log.warning("deleted a namespace left behind by a Tenant that no longer exists", extra=extra)
        secret = kube.get_secret(settings.tenant_namespace, names.kubeconfig_secret)
        if secret is not None and secret.labels.get(LABEL_OWNER_UID) == ref.uid:
            kube.delete_secret(settings.tenant_namespace, names.kubeconfig_secret, secret.resource_version)
            metrics.ORPHANS_REMOVED.labels("kubeconfig").inc()
            log.warning("deleted a stored kubeconfig left behind by a Tenant that no longer exists", extra=extra)


def _left_by(found: NamespaceInfo | None, ref: TenantRef) -> bool:
    """The namespace exists, is not already going, and still names ``ref``'s uid as its owner."""
    return found is not None and not found.terminating and found.labels.get(LABEL_OWNER_UID) == ref.uid


def _wait(kube: Cluster, settings: Settings, tenant: Tenant, event: BaseCloudEvent, message: str) -> BaseCloudEvent:
    """The deletion is under way: write what it waits for when that changed (progress); give up
    when it has not changed for ``CLEANUP_STALL_SECONDS``; renew an event polled long enough;
    otherwise poll again after ``CLEANUP_POLL_SECONDS``."""
    now = utcnow()
    moved, still = deletion.progress(
        message, tenant.status.message, parse_time(tenant.status.last_synced_at), now, settings.cleanup_stall_seconds
    )
    if moved is Progress.MOVED:
        write_status(
            kube, tenant, StatusUpdate(phase=Phase.DELETING, fields={"message": message, "lastSyncedAt": rfc3339(now)})
        )
    elif moved is Progress.STALLED:
        raise CleanupStalled(
            f"nothing of the deletion moved for {still:.0f}s (CLEANUP_STALL_SECONDS="
            f"{settings.cleanup_stall_seconds}): {message}"
        )
    if events.renewal_due(event.get_time(), now, settings.cleanup_poll_seconds):
        log.info("renewing the poll event, so the broker's retry budget never ends it")
        return events.make(event_types.CLEANUP, NAME, tenant.ref)
    raise NotReadyYet(message, retry_after=settings.cleanup_poll_seconds)


def _retained_volumes(kube: Cluster, settings: Settings, tenant: Tenant) -> None:
    """The namespace is gone; its claims' volumes with reclaim policy Retain are not (the chart's
    StatefulSet retains its claims, and a Retain storage class keeps the volumes): report each,
    or delete it when ``DELETE_RETAINED_VOLUMES`` says so. A volume of reclaim policy Delete is
    its provisioner's to remove."""
    for volume in kube.volumes_claimed_in(tenant.spec.names.namespace):
        if volume.reclaim_policy != "Retain":
            continue
        extra = {"volume": volume.name, "claim": volume.claim, "phase": volume.phase}
        if settings.delete_retained_volumes:
            kube.delete_volume(volume.name, volume.resource_version)
            log.info("retained volume deleted", extra=extra)
            message = f"deleted PersistentVolume {volume.name} (reclaim Retain), once bound to {volume.claim}"
            kube.record_event(tenant, TenantEvent("Normal", "VolumeDeleted", message))
            continue
        log.warning("volume retained after the namespace was deleted", extra=extra)
        message = (
            f"PersistentVolume {volume.name} (reclaim Retain), once bound to {volume.claim}, still holds the "
            f"tenant's data: delete it (kubectl delete pv {volume.name}), or set DELETE_RETAINED_VOLUMES=true"
        )
        kube.record_event(tenant, TenantEvent("Warning", "VolumeRetained", message))


def _uninstall(kube: Cluster, helm: HelmRuns, settings: Settings, tenant: Tenant) -> None:
    """``helm uninstall`` of the Tenant's release, unless helm's history of it was tampered with (a
    Secret with the release's labels that helm did not write: the adapter's one read of it refuses
    it, ``shared.adapters.release.history``): then helm
    is not asked what to delete, since a forged record could name anything. That is logged and
    recorded as a Warning Event ``ReleaseTampered``; the namespace deletion that follows removes
    the release's objects with everything else in the namespace."""
    names = tenant.spec.names
    # helm reads and writes the release's Secrets through install's RoleBinding in this
    # namespace (shared.steps.access); a refusal is a helm failure, temporary like all of them.
    try:
        helm.uninstall(names.release, names.namespace, guard=claims.release_guard(kube, tenant))
    except NamespaceTerminating:
        log.info("namespace deletion already started (by another delivery); no uninstall needed")
    except ReleaseTampered as err:
        message = f"helm uninstall skipped, the namespace is deleted with all in it: {err}"
        log.warning(message)
        kube.record_event(tenant, TenantEvent("Warning", ReleaseTampered.reason, message))


def _left_alone(kube: Cluster, tenant: Tenant, thing: str, verdict: Verdict) -> None:
    whose = f"Tenant {verdict.owner.key}" if verdict.owner is not None else "nobody this Tenant knows of"
    message = f"left {thing} alone: it belongs to {whose}, not to this Tenant"
    log.warning(message)
    kube.record_event(tenant, TenantEvent("Warning", "CleanupSkipped", message))


def _tell_kubeopera_api(kube: Cluster, api: Callbacks, tenant: Tenant) -> None:
    names = tenant.spec.names
    sharing = kube.list_tenants(tenant.namespace, f"spec.cloudSpaceID={names.cloud_space_id}")
    if any(other.uid != tenant.uid for other in sharing):
        log.info("another Tenant claims this cloudSpaceID; kubeopera-api is not told it is deleted")
        return
    result = api.report(
        CloudSpaceUpdate(names.cloud_space_id, names.release, names.namespace, names.kubeconfig_secret, "deleted")
    )
    if not result.delivered:
        log.warning("kubeopera-api deletion callback failed; cleanup goes on", extra={"detail": result.detail})
        kube.record_event(
            tenant, TenantEvent("Warning", "CallbackFailed", f"kubeopera-api was not told: {result.detail}")
        )


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    helm = rt.helm_client()
    api = rt.kubeopera_api_client()
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=lifecycle.CLEANUP.takes,
            handle=lambda event, ref: handle(rt.kube, helm, api, rt.settings, event, ref),
            on_permanent=lambda ref, err: mark_failed(rt.kube, ref, f"cleanup: {err}", CLEANUP_FAILED),
        ),
        rt.sender_check(),
    )
