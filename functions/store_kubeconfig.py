"""store-kubeconfig: copy the vCluster's kubeconfig where KubeOpera looks for it.

Takes ``io.kubeopera.tenant.ready``. Reads key ``config`` of Secret ``vc-{release}`` in the
vCluster namespace and creates or updates Secret ``tenant-{cloudSpaceID}-kubeconfig`` in the
Tenant namespace (key ``kubeconfig``; with ``VCLUSTER_EXTERNAL_SERVER`` also key
``kubeconfig-external``, the same credentials at the external address; labels ``kubeopera.io/tenant-id``,
``kubeopera.io/managed-by=tenant-controller`` and the owner labels): created at once, and only
when one is there already (409) read, judged and replaced if it differs; an identical Secret is
left untouched. Replies ``io.kubeopera.tenant.kubeconfig.stored`` with the Secret's name, never its
content.

Ownership, both ways (design.md section 1): the kubeconfig is copied only from a namespace that
carries this Tenant's uid, and only into a Secret that is free or this Tenant's. Another owner's
Secret (two Tenants with one ``cloudSpaceID``) fails this Tenant with the owner's name, and not
one byte of it changes.
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.adapters.vcluster_api import UnusableKubeconfig, with_server
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import Conflict, TemporaryError
from shared.model import event_types, lifecycle
from shared.model.naming import KUBECONFIG_EXTERNAL_KEY, KUBECONFIG_KEY, VCLUSTER_CONFIG_KEY
from shared.model.ownership import judge, legacy_secret_labels, secret_labels
from shared.model.tenant import Phase, TenantRef
from shared.runtime import Cluster, Runtime
from shared.settings import Settings
from shared.steps import access, claims
from shared.steps.reconcile import live_tenant

NAME = "store-kubeconfig"
log = logging.getLogger(__name__)


def handle(kube: Cluster, settings: Settings, ref: TenantRef) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if tenant.status.phase not in (Phase.PROVISIONING, Phase.READY) or tenant.deleting:
        log.info("tenant is neither Provisioning nor Ready; nothing to store")
        return None
    names = tenant.spec.names
    claims.namespace_verdict(kube, tenant)  # refuses a namespace that is not this Tenant's
    # Readable through install's Role in this namespace, by name, and nowhere else (shared.steps.access);
    # a 403 here is temporary: the grant may not be in force yet.
    with access.granted_at_run_time(names.namespace):
        config = kube.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY)
    if config is None:
        raise TemporaryError(f"Secret {names.namespace}/{names.vcluster_secret} has no key {VCLUSTER_CONFIG_KEY!r}")
    namespace = settings.tenant_namespace
    labels = secret_labels(tenant)
    data = {KUBECONFIG_KEY: config}
    if external := names.external_server(settings.external_server):
        try:
            data[KUBECONFIG_EXTERNAL_KEY] = with_server(config, external)
        except UnusableKubeconfig as err:
            raise TemporaryError(f"Secret {names.namespace}/{names.vcluster_secret}: {err}") from err
    # Created without a read first: there is none yet for a Tenant provisioned for the first time
    # (one request less). One there already (409: a re-store, or someone else's) is read, judged
    # as ours or refused, and replaced only when it differs.
    try:
        kube.write_secret(namespace, names.kubeconfig_secret, data, labels, None)
        changed = True
    except Conflict:
        current = kube.get_secret(namespace, names.kubeconfig_secret)
        verdict = judge(None if current is None else current.labels, tenant, legacy_secret_labels(tenant))
        thing = claims.secret_thing(tenant, namespace)
        claims.require(kube, tenant, verdict, thing, "cloudSpaceID", names.cloud_space_id)
        changed = not (
            current is not None and current.data == data and all(current.labels.get(k) == v for k, v in labels.items())
        )
        if changed:
            kube.write_secret(
                namespace, names.kubeconfig_secret, data, labels, None if current is None else current.resource_version
            )
    log.info("kubeconfig stored", extra={"secret": names.kubeconfig_secret, "changed": changed})
    return events.make(event_types.KUBECONFIG_STORED, NAME, tenant.ref, kubeconfigSecret=names.kubeconfig_secret)


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=lifecycle.STORE_KUBECONFIG.takes,
            handle=lambda event, ref: handle(rt.kube, rt.settings, ref),
            on_permanent=rt.mark_failed,
        ),
        rt.sender_check(),
    )
