"""router: the one door for Tenant changes; it sends on only those that are work.

Takes the ApiServerSource's ``dev.knative.apiserver.resource.add`` / ``.update`` / ``.delete``
of a Tenant (``tenant-source``). It decides from that object and the event's kind alone, with
``shared.model.lifecycle`` (``next_step``), whether a step has work: it replies
``io.kubeopera.tenant.install`` (a new Tenant, a restored one: an add is no step's write; a new
generation, a Failed Tenant patched back to Pending, a settled one without our finalizer) or
``io.kubeopera.tenant.cleanup`` (a deletion cleanup has not started), or answers 204 and nothing
goes on. (A vCluster's StatefulSet changes reach check-ready from the vCluster
watch, ``functions.vcluster_watch``, not through here.)

Most Tenant changes are the pipeline's own status writes coming back
through the ApiServerSource; before the router each of them woke install and cleanup (a helm-
carrying pod, on a cluster scaled to zero) to answer 204.

The reply is a hint like any event (design.md rule 1): install and cleanup re-read the Tenant
and decide again. A router that is down, or wrong, loses nothing: the broker re-delivers, and
resync re-drives every Tenant that waits for install or cleanup (``functions.resync``). Its
dead letter fails no Tenant (``lifecycle.DeadLetter.NOTHING``). An object it cannot read as a
Tenant goes to install, whose re-read of the live Tenant says what is wrong with it.

It reads nothing from the API server and writes nothing: its only Kubernetes right is the
TokenReview of sender identity (``deploy/base/rbac/sender-identity.yaml``), which every
function holds to know that a delivery comes from the broker.
"""

from __future__ import annotations

import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import PermanentError
from shared.model import event_types, lifecycle
from shared.model.tenant import Tenant, TenantRef
from shared.runtime import Runtime

NAME = "router"
log = logging.getLogger(__name__)


def route(event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    """The step's event for this Tenant change, or None when it is no work."""
    data = event.get_data()
    try:
        tenant = Tenant.from_object(data if isinstance(data, dict) else {})
    except PermanentError as err:  # install re-reads the live Tenant and fails it, saying why
        log.warning("tenant object not readable; install decides", extra={"error": str(err)})
        return events.make(event_types.INSTALL, NAME, ref)
    kind = event.get_type()
    created = kind == event_types.APISERVER_ADD
    step = None if kind == event_types.APISERVER_DELETE else lifecycle.next_step(tenant, created)
    if step is None:
        log.debug("no work in this change")
        return None
    log.info("work for a step", extra={"step": lifecycle.STEP_FOR_TYPE[step].function})
    return events.make(step, NAME, ref)


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    return function_app(
        Step(name=NAME, namespace=rt.settings.tenant_namespace, accepts=lifecycle.ROUTER.takes, handle=route),
        rt.sender_check(),
    )
