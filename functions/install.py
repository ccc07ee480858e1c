"""install: turn a Tenant's spec into a vCluster Helm release, then hand over to check-ready.

Takes ``dev.knative.apiserver.resource.add`` / ``.update``. Re-reads the Tenant and leaves it
alone when it is Failed (it waits for a patch to Pending), being deleted, or already
provisioned for its current generation. Otherwise it creates namespace ``vcluster-{tenantName}``
(labelled with the tenant), installs or upgrades release ``vc-{tenantName}`` with ``wait=False``
(an existing release is upgraded, and not touched at all if it already has these values), sets
phase Provisioning and replies ``io.kubeopera.tenant.provisioning``.
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared import events
from shared.errors import TenantError
from shared.helm import Helm
from shared.http import Step, function_app
from shared.kube import Kube
from shared.naming import LABEL_MANAGED_BY, LABEL_TENANT_ID, LABEL_TENANT_NAME, MANAGED_BY
from shared.reconcile import live_tenant, write_status
from shared.runtime import Runtime
from shared.settings import Settings
from shared.tenant import (
    COND_READY,
    COND_RELEASE_INSTALLED,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantRef,
    rfc3339,
    utcnow,
)
from shared.values import vcluster_values

NAME = "install"
log = logging.getLogger(__name__)


def is_settled(tenant: Tenant) -> bool:
    """Provisioning or Ready for the current generation, with its release installed."""
    return (
        tenant.status.phase in (Phase.PROVISIONING, Phase.READY)
        and tenant.status.observed_generation == tenant.generation
        and tenant.status.is_true(COND_RELEASE_INSTALLED, tenant.generation)
    )


def handle(kube: Kube, helm: Helm, settings: Settings, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if tenant.deleting:
        log.info("tenant is being deleted; nothing to install")
        return None
    if tenant.status.phase == Phase.FAILED:
        log.info("tenant is Failed; it waits for its phase to be patched to Pending")
        return None
    if is_settled(tenant):
        log.info("tenant already provisioned for this generation")
        return None
    names = tenant.spec.names
    kube.ensure_namespace(
        names.namespace,
        {LABEL_TENANT_NAME: tenant.name, LABEL_TENANT_ID: names.cloud_space_id, LABEL_MANAGED_BY: MANAGED_BY},
    )
    release = helm.install_or_upgrade(
        names.release, names.namespace, vcluster_values(tenant.spec, settings.environment)
    )
    message = f"helm release {names.release} revision {release.revision} is {release.status}; waiting for the vCluster"
    write_status(
        kube,
        tenant,
        StatusUpdate(
            phase=Phase.PROVISIONING,
            fields={
                "vclusterName": names.release,
                "namespace": names.namespace,
                "observedGeneration": tenant.generation,
                "lastSyncedAt": rfc3339(utcnow()),
                "message": message,
            },
            conditions=(
                Condition(COND_RELEASE_INSTALLED, "True", "Installed", message, tenant.generation),
                Condition(COND_READY, "False", "Provisioning", "waiting for the vCluster", tenant.generation),
            ),
        ),
    )
    return events.make(events.PROVISIONING, NAME, tenant.ref)


def create_app() -> Flask:
    rt = Runtime.start(NAME)
    helm = rt.helm()

    def chart_ready() -> bool:
        try:
            helm.chart()
        except TenantError:
            log.exception("chart not available yet")
            return False
        return True

    return function_app(
        Step(
            name=NAME,
            accepts=frozenset({events.APISERVER_ADD, events.APISERVER_UPDATE}),
            handle=lambda event, ref: handle(rt.kube, helm, rt.settings, event, ref),
            on_permanent=rt.mark_failed,
            ready=chart_ready,
        )
    )
