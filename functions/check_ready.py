"""check-ready: is the vCluster up? The 15 s poll is the broker's delayed re-delivery.

Takes ``io.kubeopera.tenant.provisioning``. Ready means: the helm release is ``deployed`` and
Secret ``vc-{release}`` (written by vcluster) has key ``config``. Not yet: 503 with
``Retry-After: 15``, so the broker asks again in 15 s (design.md section 4). A release that
helm reports ``failed``, or a Tenant still not ready after ``PROVISION_TIMEOUT_SECONDS`` since
it entered Provisioning, is a permanent failure. Replies ``io.kubeopera.tenant.ready``.
"""

from __future__ import annotations

import logging
from datetime import datetime

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared import events
from shared.errors import NotReadyYet, PermanentError, TemporaryError, TenantError
from shared.helm import FAILED, Helm
from shared.http import Step, function_app
from shared.kube import Kube
from shared.naming import VCLUSTER_CONFIG_KEY
from shared.reconcile import live_tenant
from shared.runtime import Runtime
from shared.settings import Settings
from shared.tenant import Phase, Tenant, TenantRef, parse_time, utcnow

NAME = "check-ready"
log = logging.getLogger(__name__)


def handle(
    kube: Kube,
    helm: Helm,
    settings: Settings,
    event: BaseCloudEvent,
    ref: TenantRef,
    now: datetime | None = None,
) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if tenant.status.phase != Phase.PROVISIONING:
        log.info("tenant is not Provisioning; nothing to check", extra={"phase": str(tenant.status.phase)})
        return None
    names = tenant.spec.names
    release = helm.release(names.release, names.namespace)
    if release is None:
        raise TemporaryError(f"helm release {names.namespace}/{names.release} does not exist (yet)", retry_after=5)
    if release.status == FAILED:
        raise PermanentError(f"helm release {names.release} revision {release.revision} failed")
    if not release.deployed:
        waiting = f"helm release {names.release} is {release.status}"
    elif kube.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY) is None:
        waiting = f"waiting for vcluster to write Secret {names.namespace}/{names.vcluster_secret}"
    else:
        log.info("vCluster is ready", extra={"release": names.release, "revision": release.revision})
        return events.make(events.READY, NAME, tenant.ref)
    raise not_ready(tenant, waiting, settings, now or utcnow())


def not_ready(tenant: Tenant, waiting: str, settings: Settings, now: datetime) -> TenantError:
    """Ask again after the poll interval, or give up once the provision timeout has passed
    (counted from ``lastSyncedAt``, which install sets on entering Provisioning)."""
    since = parse_time(tenant.status.last_synced_at)
    elapsed = (now - since).total_seconds() if since else 0.0
    if elapsed > settings.provision_timeout_seconds:
        return PermanentError(f"not ready {elapsed:.0f}s after provisioning began: {waiting}")
    return NotReadyYet(waiting, retry_after=settings.ready_poll_seconds)


def create_app() -> Flask:
    rt = Runtime.start(NAME)
    helm = rt.helm()
    return function_app(
        Step(
            name=NAME,
            accepts=frozenset({events.PROVISIONING}),
            handle=lambda event, ref: handle(rt.kube, helm, rt.settings, event, ref),
            on_permanent=rt.mark_failed,
        )
    )
