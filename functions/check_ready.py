"""check-ready: is the vCluster up? The 15 s poll is the broker's delayed re-delivery.

Takes ``io.kubeopera.tenant.provisioning``. Ready means (``waiting_for``): the helm release is
``deployed``, the vCluster's StatefulSet has rolled out its current spec with every replica
ready (``observedGeneration``, ``updatedReplicas``, ``readyReplicas``: after a quota change that
is the new revision, not the previous boot), Secret ``vc-{release}`` (written by vcluster)
has key ``config``, and that very kubeconfig works: the vCluster's API answers ``/readyz``, and
has its ``kubernetes`` Service and cluster DNS (``shared.adapters.vcluster_api``). A vCluster that says it is
up but cannot be used through the kubeconfig can stay so (one booted with the wrong Service range
does for ever), so that wait, unlike the boot's normal course, is written on the Tenant: its
message and its ``Ready`` condition (reason ``VClusterNotServing``), when it changes. Not yet: 503 with
``Retry-After: READY_POLL_SECONDS``, so the broker asks again after that long (design.md
section 4). The StatefulSet is read first: while a control plane that exists is still rolling
out, helm's record is not read (one LIST of Secrets less per such poll); a failed release is
then seen once it has rolled out or when there is none (install fails a Tenant whose helm failed;
this is the backstop, with the provision timeout). Replies ``io.kubeopera.tenant.ready``. Every
``lifecycle.HEARTBEAT_POLLS`` polls it writes ``lastPolledAt`` on the Tenant (in the same write
as the message, if both), so that resync leaves a live poll alone and re-drives only a lost one.

When to give up is this function's decision alone, never the broker's (``poll_verdict``):

- a release that helm reports ``failed`` fails the Tenant;
- still not ready ``PROVISION_TIMEOUT_SECONDS`` after the Tenant entered Provisioning
  (``lastSyncedAt``, set by install) fails it with reason ``ProvisionTimeout``;
- the Trigger allows a fixed number of re-deliveries (``retry: 44``), which at a short poll would
  run out before the timeout. So after ``RENEW_AFTER_POLLS`` polls of one event (counted from the
  event's ``time``) check-ready answers with a fresh ``io.kubeopera.tenant.provisioning`` instead
  of a 503: the broker delivers it at once, with a full retry budget. The timeout then holds
  whatever the settings are, as long as ``READY_POLL_SECONDS`` is at most the Trigger's
  ``retryAfterMax`` (15 s; ``shared.settings`` refuses more).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.adapters.release import ReleaseRecords, Releases
from shared.adapters.vcluster_api import VClusterProbe
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import NotReadyYet, PermanentError, ProvisionTimeout, TemporaryError, TenantError
from shared.model import event_types, health, lifecycle
from shared.model.cluster import Rollout
from shared.model.naming import VCLUSTER_CONFIG_KEY, TenantNames
from shared.model.release import DEPLOYED, FAILED
from shared.model.tenant import (
    COND_READY,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantRef,
    parse_time,
    rfc3339,
    utcnow,
)
from shared.observability import metrics
from shared.runtime import Cluster, Runtime
from shared.settings import Settings
from shared.steps import access, availability
from shared.steps.reconcile import live_tenant, write_status

NAME = "check-ready"
log = logging.getLogger(__name__)



class Poll(enum.Enum):
    AGAIN = "again"  # 503 + Retry-After: the broker re-delivers this event
    RENEW = "renew"  # reply a fresh event: a new retry budget


def poll_verdict(
    tenant: Tenant, waiting: str, settings: Settings, now: datetime, event_time: datetime | None
) -> TenantError | Poll:
    """What to answer while the vCluster is not ready: give up (an error to raise), ask again
    after the poll interval (``Poll.AGAIN``), or renew the event (``Poll.RENEW``)."""
    elapsed = lifecycle.timed_out(tenant, now, settings.provision_timeout_seconds)
    if elapsed is not None:
        return ProvisionTimeout(lifecycle.timeout_message(elapsed, settings.provision_timeout_seconds, waiting))
    if events.renewal_due(event_time, now, settings.ready_poll_seconds):
        return Poll.RENEW
    return Poll.AGAIN


NOT_SERVING = lifecycle.NOT_SERVING_REASON  # the Ready condition's reason while the kubeconfig does not work yet


def waiting_for(
    release_status: str, rollout: Rollout | None, has_config: bool, names: TenantNames, api_missing: str | None = None
) -> str | None:
    """What the vCluster is still waiting for, None when it is ready: the release deployed, the
    StatefulSet's current spec rolled out with every replica ready (so after an upgrade the new
    revision runs, not the previous one), vcluster's kubeconfig Secret written, and nothing
    missing when the vCluster's API is asked through it (``api_missing``)."""
    where = f"{names.namespace}/{names.release}"
    if release_status != DEPLOYED:
        return f"helm release {where} is {release_status}"
    if rollout is None:
        return f"waiting for StatefulSet {where} to exist"
    if not rollout.done:
        return (
            f"waiting for StatefulSet {where} to roll out generation {rollout.generation} "
            f"(observed {rollout.observed_generation}; {rollout.updated_replicas} updated and "
            f"{rollout.ready_replicas} ready of {rollout.replicas})"
        )
    if not has_config:
        return f"waiting for vcluster to write Secret {names.namespace}/{names.vcluster_secret}"
    return api_missing


@dataclass(frozen=True)
class Seen:
    """The vCluster as one check saw it."""

    waiting: str | None  # what it still waits for (``waiting_for``); None: ready
    api_missing: str | None  # what its API lacks through the kubeconfig, when that is the wait
    rolled_out: bool  # its control plane is up: what is left comes within seconds (the Secret, the API)


def _see(
    kube: Cluster, vcluster: VClusterProbe, names: TenantNames, release_status: str, rollout: Rollout | None
) -> Seen:
    """``rollout``: the StatefulSet as the caller has just read it (None: there is none)."""
    config = _exported(kube, names) if rollout is not None and rollout.done else None
    api_missing = vcluster.missing(config) if config is not None else None
    return Seen(
        waiting_for(release_status, rollout, config is not None, names, api_missing),
        api_missing,
        rollout is not None and rollout.done,
    )


UP_MESSAGE = "vCluster up; storing its kubeconfig"


def _api_missing(kube: Cluster, vcluster: VClusterProbe, names: TenantNames, rollout: Rollout) -> str | None:
    """What a Ready Tenant's vCluster API lacks through the kubeconfig vcluster exported (the one
    stored, as resync checks), None when it answers or no control-plane pod is ready to ask."""
    config = _exported(kube, names) if rollout.ready_replicas > 0 else None
    return vcluster.missing(config) if config is not None else None


def _exported(kube: Cluster, names: TenantNames) -> bytes | None:
    """The kubeconfig vcluster wrote into Secret ``vc-<release>``. Readable through install's
    RoleBinding in this namespace only (shared.steps.access), as is helm's release record; a 403
    on either is temporary."""
    with access.granted_at_run_time(names.namespace):
        return kube.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY)


def _ready(
    kube: Cluster, tenant: Tenant, revision: int, moment: datetime, poll_seconds: int, traceparent: str = ""
) -> BaseCloudEvent | None:
    """The ready event, once per provisioning: written first as condition ``Ready`` reason
    ``VClusterUp`` (with the ``resourceVersion`` read, so of a poll and a look that find the
    vCluster up at once, one writes and the other, refused, reads it again and sends nothing:
    ``lifecycle.ready_announced``). ``traceparent``: the trace it continues, when not this delivery's."""
    names = tenant.spec.names
    if lifecycle.ready_announced(tenant, moment, poll_seconds):
        log.info("the vCluster was seen up just now; its ready event is on its way", extra={"release": names.release})
        return None
    write_status(
        kube,
        tenant,
        StatusUpdate(
            phase=Phase.PROVISIONING,
            fields={"message": UP_MESSAGE, "lastPolledAt": rfc3339(moment)},
            conditions=(Condition(COND_READY, "False", lifecycle.VCLUSTER_UP_REASON, UP_MESSAGE, tenant.generation),),
        ),
    )
    log.info("vCluster is ready", extra={"release": names.release, "revision": revision})
    began = parse_time(tenant.status.last_synced_at)
    if began is not None:
        metrics.TIME_TO_READY.observe(max(0.0, (moment - began).total_seconds()))
    return events.make(event_types.READY, NAME, tenant.ref, traceparent=traceparent)


def _tell_polling(kube: Cluster, tenant: Tenant, api_missing: str | None, now: datetime, poll_seconds: int) -> None:
    """One status write at most, while the vCluster is not ready: what its API lacks, once per
    change (the message and the ``Ready`` condition's reason ``VClusterNotServing``), and the
    poll's heartbeat ``lastPolledAt`` when due (``lifecycle.heartbeat_due``: resync then knows
    the chain is alive). Never ``lastSyncedAt``: the provision timeout still counts from install."""
    fields: dict[str, object] = {}
    conditions: tuple[Condition, ...] = ()
    if api_missing is not None and tenant.status.message != api_missing:
        fields["message"] = api_missing
        conditions = (Condition(COND_READY, "False", NOT_SERVING, api_missing, tenant.generation),)
    if lifecycle.heartbeat_due(tenant, now, poll_seconds):
        fields["lastPolledAt"] = rfc3339(now)
    if fields:
        write_status(kube, tenant, StatusUpdate(phase=Phase.PROVISIONING, fields=fields, conditions=conditions))


def handle(
    kube: Cluster,
    releases: Releases,
    settings: Settings,
    event: BaseCloudEvent,
    ref: TenantRef,
    now: datetime | None = None,
    *,
    vcluster: VClusterProbe,
) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if tenant.status.phase != Phase.PROVISIONING or tenant.deleting:
        log.info("tenant is not Provisioning; nothing to check", extra={"phase": str(tenant.status.phase)})
        return None
    names = tenant.spec.names
    moment = now or utcnow()
    # The StatefulSet first: while a control plane that exists is still rolling out, that is what
    # the poll waits for, and helm's record (one LIST of Secrets) is read only once it is done or
    # when there is none (the release failed, or is not there yet).
    rollout = kube.get_rollout(names.namespace, names.release)
    if rollout is not None and not rollout.done:
        seen = Seen(waiting_for(DEPLOYED, rollout, False, names), None, False)
        return _poll_on(kube, tenant, seen, settings, moment, event)
    with access.granted_at_run_time(names.namespace):
        release = releases.release(names.release, names.namespace)
    if release is None:
        raise TemporaryError(f"helm release {names.namespace}/{names.release} does not exist (yet)", retry_after=5)
    if release.status == FAILED:
        raise PermanentError(f"helm release {names.release} revision {release.revision} failed")
    seen = _see(kube, vcluster, names, release.status, rollout)
    if seen.waiting is None:
        return _ready(kube, tenant, release.revision, moment, settings.ready_poll_seconds)
    return _poll_on(kube, tenant, seen, settings, moment, event)


def _poll_on(
    kube: Cluster, tenant: Tenant, seen: Seen, settings: Settings, moment: datetime, event: BaseCloudEvent
) -> BaseCloudEvent | None:
    """Not ready: give up, renew the event, or ask again after the poll interval (``poll_verdict``)."""
    waiting = seen.waiting or "the vCluster"
    verdict = poll_verdict(tenant, waiting, settings, moment, event.get_time())
    if isinstance(verdict, TenantError):
        raise verdict
    _tell_polling(kube, tenant, seen.api_missing, moment, settings.ready_poll_seconds)
    if verdict == Poll.RENEW:
        log.info("renewing the poll event, so the broker's retry budget never ends it", extra={"waiting": waiting})
        return events.make(event_types.PROVISIONING, NAME, tenant.ref)
    metrics.READY_POLLS.inc()
    raise NotReadyYet(waiting, retry_after=settings.ready_poll_seconds)


# A look after the control plane rolled out asks again this often, for what vcluster does after its
# pod is ready (it writes Secret vc-<release> then; its API may need a moment), for as long as
# one poll interval from the change: the poll would see it by then anyway.
LOOK_AGAIN_SECONDS = 1


def look(
    kube: Cluster,
    releases: Releases,
    settings: Settings,
    event: BaseCloudEvent,
    ref: TenantRef,
    now: datetime | None = None,
    *,
    vcluster: VClusterProbe,
) -> BaseCloudEvent | None:
    """``io.kubeopera.tenant.vcluster.changed``: the Tenant's StatefulSet changed. A hint, not a
    poll: it never fails a Tenant, writes nothing while the vCluster is not up (the poll's
    heartbeat and messages stay the poll's), and starts no chain.

    - Provisioning: the same check as the poll's; ready replies ``io.kubeopera.tenant.ready``
      at once, once per provisioning (``_ready``). Not ready but rolled out: ask again in
      ``LOOK_AGAIN_SECONDS`` (503), within one poll interval of the change. Anything else is the
      poll's to wait for: 204.
    - Ready: ``VClusterAvailable`` as the StatefulSet and the vCluster's API say now
      (``shared.steps.availability``), as resync's pass would.
    """
    tenant = live_tenant(kube, ref)
    if tenant is None or tenant.deleting:
        return None
    names = tenant.spec.names
    if tenant.status.phase == Phase.READY:
        rollout = kube.get_rollout(names.namespace, names.release)
        if rollout is not None:  # a StatefulSet gone is resync's: it re-installs the release
            api_missing = _api_missing(kube, vcluster, names, rollout)
            availability.keep(kube, tenant, health.availability(rollout, tenant.generation, api_missing))
        return None
    if tenant.status.phase != Phase.PROVISIONING:
        return None
    # The StatefulSet first: a control plane not rolled out yet is the poll's to wait for, and
    # helm's record need not be read for it (one LIST of Secrets less per such look).
    rollout = kube.get_rollout(names.namespace, names.release)
    if rollout is None or not rollout.done:
        log.info("the vCluster's control plane is not rolled out; the poll waits on")
        return None
    with access.granted_at_run_time(names.namespace):
        release = releases.release(names.release, names.namespace)
    if release is None or release.status != DEPLOYED:
        return None
    seen = _see(kube, vcluster, names, release.status, rollout)
    moment = now or utcnow()
    if seen.waiting is None:
        # The rest of the chain goes on in the provisioning's trace (install's, kept on the
        # Tenant), not in the trace of the StatefulSet's change that woke this look.
        return _ready(kube, tenant, release.revision, moment, settings.ready_poll_seconds, tenant.status.traceparent)
    changed = event.get_time()
    if seen.rolled_out and changed is not None and (moment - changed).total_seconds() < settings.ready_poll_seconds:
        raise NotReadyYet(seen.waiting, retry_after=LOOK_AGAIN_SECONDS)
    log.info("not ready at the vCluster's change; the poll waits on", extra={"waiting": seen.waiting})
    return None


def answer(
    kube: Cluster,
    releases: Releases,
    settings: Settings,
    event: BaseCloudEvent,
    ref: TenantRef,
    *,
    vcluster: VClusterProbe,
) -> BaseCloudEvent | None:
    """The poll's event to ``handle``, the vCluster watch's hint to ``look``."""
    step = look if event.get_type() in lifecycle.CHECK_READY.hints else handle
    return step(kube, releases, settings, event, ref, vcluster=vcluster)


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    # helm's record read from the API, not `helm status`: no helm process per poll, and this
    # function never loads helm's client (shared.adapters.release).
    releases = ReleaseRecords(rt.kube)
    vcluster = rt.vcluster_api_client()
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=lifecycle.CHECK_READY.accepts,
            handle=lambda event, ref: answer(rt.kube, releases, rt.settings, event, ref, vcluster=vcluster),
            on_permanent=rt.mark_failed,
        ),
        rt.sender_check(),
    )
