"""store-kubeconfig: copy the vCluster's kubeconfig where KubeOpera looks for it.

Takes ``io.kubeopera.tenant.ready``. Reads key ``config`` of Secret ``vc-{release}`` in the
vCluster namespace and creates or updates Secret ``tenant-{cloudSpaceID}-kubeconfig`` in the
Tenant namespace (key ``kubeconfig``, labels ``kubeopera.io/tenant-id`` and
``kubeopera.io/managed-by=tenant-controller``); an identical Secret is left untouched. Replies
``io.kubeopera.tenant.kubeconfig.stored`` with the Secret's name, never its content.
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared import events
from shared.errors import TemporaryError
from shared.http import Step, function_app
from shared.kube import Kube
from shared.naming import (
    KUBECONFIG_KEY,
    LABEL_MANAGED_BY,
    LABEL_TENANT_ID,
    MANAGED_BY,
    VCLUSTER_CONFIG_KEY,
)
from shared.reconcile import live_tenant
from shared.runtime import Runtime
from shared.settings import Settings
from shared.tenant import Phase, TenantRef

NAME = "store-kubeconfig"
log = logging.getLogger(__name__)


def handle(kube: Kube, settings: Settings, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if tenant.status.phase not in (Phase.PROVISIONING, Phase.READY):
        log.info("tenant is neither Provisioning nor Ready; nothing to store")
        return None
    names = tenant.spec.names
    config = kube.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY)
    if config is None:
        raise TemporaryError(f"Secret {names.namespace}/{names.vcluster_secret} has no key {VCLUSTER_CONFIG_KEY!r}")
    changed = kube.upsert_secret(
        settings.tenant_namespace,
        names.kubeconfig_secret,
        {KUBECONFIG_KEY: config},
        {LABEL_TENANT_ID: names.cloud_space_id, LABEL_MANAGED_BY: MANAGED_BY},
    )
    log.info("kubeconfig stored", extra={"secret": names.kubeconfig_secret, "changed": changed})
    return events.make(events.KUBECONFIG_STORED, NAME, tenant.ref, kubeconfigSecret=names.kubeconfig_secret)


def create_app() -> Flask:
    rt = Runtime.start(NAME)
    return function_app(
        Step(
            name=NAME,
            accepts=frozenset({events.READY}),
            handle=lambda event, ref: handle(rt.kube, rt.settings, event, ref),
            on_permanent=rt.mark_failed,
        )
    )
