"""notify-api: tell kubeopera-api the CloudSpace is active, and set the Tenant Ready.

Takes ``io.kubeopera.tenant.kubeconfig.stored`` (from store-kubeconfig, or from resync for a
Ready Tenant whose callback failed: it is sent again, once per resync pass, until kubeopera-api
takes it). Sends the original operator's PATCH to
``{KUBEOPERA_API_BASE_URL}/api/v1/cloudspaces/{cloudSpaceID}`` (bearer token when one is set,
short timeout). The callback is non-fatal, as it was: refused, timed out or answered non-2xx, the
Tenant still becomes Ready, a warning is logged, and condition ``CallbackDelivered`` says what
happened. A Tenant already Ready for its generation is not re-announced.

A Tenant made Ready after a fleet upgrade in a rollout slot (``status.rollout: Upgrading``,
``shared.model.rollout``) frees its slot: the reply is ``io.kubeopera.tenant.install`` for the next
Tenant that waits for one (``rollout.next_up``), so that the next wave starts now instead of at
resync's next tick; install takes the slot (or answers that there is none).
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.adapters.kubeopera_api import CloudSpaceUpdate
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import TenantError
from shared.model import event_types, health, lifecycle, rollout
from shared.model.tenant import (
    COND_CALLBACK,
    COND_KUBECONFIG_STORED,
    COND_READY,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantRef,
    rfc3339,
    utcnow,
)
from shared.runtime import Callbacks, Cluster, Runtime
from shared.steps.reconcile import live_tenant, write_status

NAME = "notify-api"
log = logging.getLogger(__name__)


def handle(kube: Cluster, api: Callbacks, ref: TenantRef) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    retrying = tenant.ready_at_generation() and not tenant.status.is_true(COND_CALLBACK, tenant.generation)
    if tenant.ready_at_generation() and not retrying:
        log.info("tenant already Ready for this generation; kubeopera-api was told before")
        return None
    if (tenant.status.phase != Phase.PROVISIONING and not retrying) or tenant.deleting:
        log.info("tenant is not Provisioning; nothing to announce")
        return None
    names = tenant.spec.names
    result = api.report(
        CloudSpaceUpdate(
            cloud_space_id=names.cloud_space_id,
            vcluster_id=names.release,
            namespace=names.namespace,
            kubeconfig_secret=names.kubeconfig_secret,
        )
    )
    if result.delivered:
        callback = Condition(COND_CALLBACK, "True", "Delivered", f"kubeopera-api {result.detail}", tenant.generation)
        message = "vCluster ready"
    else:
        log.warning("kubeopera-api callback failed; the tenant is Ready anyway", extra={"detail": result.detail})
        callback = Condition(
            COND_CALLBACK, "False", "CallbackFailed", f"kubeopera-api {result.detail}", tenant.generation
        )
        message = f"vCluster ready; kubeopera-api callback failed ({result.detail})"
    upgraded = tenant.status.rollout == rollout.UPGRADING_MARK  # a fleet upgrade in a slot, done now
    ready = write_status(
        kube,
        tenant,
        StatusUpdate(
            phase=Phase.READY,
            fields={
                "kubeconfigSecret": names.kubeconfig_secret,
                "lastSyncedAt": rfc3339(utcnow()),
                "observedGeneration": tenant.generation,
                "message": message,
                **({"rollout": ""} if upgraded else {}),
            },
            conditions=(
                Condition(COND_KUBECONFIG_STORED, "True", "Stored", names.kubeconfig_secret, tenant.generation),
                callback,
                Condition(COND_READY, "True", "VClusterReady", message, tenant.generation),
                health.available(tenant.generation),  # check-ready has just seen it ready and answering
            ),
        ),
    )
    return _next_wave(kube, ready) if upgraded else None


def _next_wave(kube: Cluster, ready: Tenant) -> BaseCloudEvent | None:
    """The slot ``ready`` held is free: install for the next waiting Tenant (``rollout.next_up``),
    so that the rollout goes on now, not at resync's next tick. Best effort: a failed list is
    logged, and resync's tick sends the wave."""
    try:
        up = rollout.next_up(ready, kube.list_tenants(ready.namespace, ""))
    except TenantError as err:
        log.warning("next Tenant of the rollout not asked for; resync's tick sends it", extra={"error": str(err)})
        return None
    if up is None:
        return None
    log.info("rollout slot free: asking install for the next Tenant", extra={"next": up.key})
    return events.make(event_types.INSTALL, NAME, up.ref)


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    api = rt.kubeopera_api_client()
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=lifecycle.NOTIFY_API.takes,
            handle=lambda event, ref: handle(rt.kube, api, ref),
            on_permanent=rt.mark_failed,
        ),
        rt.sender_check(),
    )
