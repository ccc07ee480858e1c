"""dead-letter: the broker gave up on an event; mark its Tenant Failed with the reason.

Every Trigger's ``deadLetterSink``. Knative sends the original event with extensions
``knativeerrordest`` (who failed), ``knativeerrorcode`` (their last HTTP status) and
``knativeerrordata`` (their response body, base64, cut at 1024 characters). Our functions answer
errors as ``{"error": message}``, so that message becomes the Tenant's ``status.message``.
Nothing is changed for a Tenant that is gone, replaced, at a newer generation, or already Ready,
nor when the step's last answer said another process had the work in hand (``"inHand": true``,
``errors.WorkInHand``): a second delivery that waited on another pod's helm run is not a failure;
nor for an event made before the Tenant's last recorded failure (the step marked it Failed itself
and answered 422, or a retry has superseded the event: ``lifecycle.failed_since``), nor for
install's dead letter once install has recorded its outcome for that generation after the
event was made (Provisioning, ``lastSyncedAt`` not older than the event's ``time``): a duplicate
(the router's and resync's for one change) failing, or a stale one from before a retry, says
nothing about a Tenant that is provisioning fine.

Which step gave up is named by ``knativeerrordest`` when it names a function's Service, and
otherwise by the event's type; what its dead letter means is that step's row of
``shared.model.lifecycle.STEPS``: Failed with reason ``DeliveryFailed`` (install, check-ready,
store-kubeconfig, notify-api), Failed with reason ``CleanupFailed`` (cleanup, resync's re-drive of
it included), or nothing (the router: the change it could not route is re-driven by resync; a
step's hint, such as check-ready's look at a changed vCluster: its poll goes on).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.delivery.http import IN_HAND, Step, function_app
from shared.model import lifecycle
from shared.model.tenant import Phase, Tenant, TenantRef, parse_time
from shared.runtime import Cluster, Runtime
from shared.steps.reconcile import fail, live_tenant

NAME = "dead-letter"
log = logging.getLogger(__name__)


def failed_step(event: BaseCloudEvent) -> lifecycle.Step | None:
    """The step that gave up on ``event`` (None: a type no step takes)."""
    dest = str(event.get_extension("knativeerrordest") or "")
    named = [step for step in lifecycle.STEPS if step.function in dest]
    if named:
        return max(named, key=lambda step: len(step.function))  # the most precise name
    return lifecycle.STEP_FOR_TYPE.get(event.get_type())


def last_answer(event: BaseCloudEvent) -> tuple[str, dict[str, object]]:
    """The failed step's last answer body (``knativeerrordata``): its text, and its JSON object
    (``{}`` when it is none)."""
    raw = event.get_extension("knativeerrordata")
    if not raw:
        return "", {}
    try:
        text = base64.b64decode(str(raw), validate=False).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return "", {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return text, {}
    return text, parsed if isinstance(parsed, dict) else {}


def failure_reason(event: BaseCloudEvent, step: lifecycle.Step | None) -> str:
    """A one-line reason from the knativeerror* extensions, naming the step that gave up."""
    code = str(event.get_extension("knativeerrorcode") or "no response")
    text, body = last_answer(event)
    detail = str(body.get("error", "")) or text.strip()
    to = step.function if step else "its subscriber"
    reason = f"{event.get_type()} could not be delivered to {to}: last answer {code}"
    return f"{reason}: {detail}" if detail else reason


def install_outcome_recorded(tenant: Tenant, ref: TenantRef, event: BaseCloudEvent) -> bool:
    """Did install record its outcome for this generation after the dead-lettered event was made?
    Then the step did its work in another delivery (the router's and resync's events for one
    change, or a stale event from before a retry): the failure of this one changes nothing."""
    sent = event.get_time()  # when the router or resync made it
    recorded = parse_time(tenant.status.last_synced_at)  # whole seconds (RFC 3339 as written)
    return (
        tenant.status.phase == Phase.PROVISIONING
        and tenant.status.observed_generation == ref.generation
        and sent is not None
        and recorded is not None
        and recorded >= sent.replace(microsecond=0)
    )


def failure_recorded_since(tenant: Tenant, event: BaseCloudEvent) -> bool:
    """Was the Tenant's last failure recorded after the event was made? Then the step
    recorded its own failure (it marks the Tenant Failed, then answers 422, which the broker
    dead-letters), or another did since; and a retry after it supersedes this event: failing the
    retried Tenant again for it would undo the retry."""
    failed = lifecycle.failed_since(tenant)  # whole seconds: within the second of the event, it acts
    sent = event.get_time()
    return failed is not None and sent is not None and sent < failed


def handle(kube: Cluster, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    step = failed_step(event)
    reason = failure_reason(event, step)
    dest = str(event.get_extension("knativeerrordest") or "")
    verdict = step.dead_letter_of(event.get_type()) if step is not None else lifecycle.DeadLetter.NOTHING
    if verdict == lifecycle.DeadLetter.NOTHING:
        log.warning("dead letter of a step whose failure fails no Tenant; resync re-drives", extra={"reason": reason})
        return None
    if last_answer(event)[1].get(IN_HAND) is True:
        # The step's last answer was that another process was doing the very work (errors.WorkInHand):
        # that process answers for the outcome, and resync re-drives a Tenant whose holder died.
        log.info("dead letter of work another process had in hand; not a failure", extra={"reason": reason})
        return None
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    if failure_recorded_since(tenant, event):
        log.info("dead letter of an event older than the Tenant's last failure; nothing new", extra={"reason": reason})
        return None
    if step == lifecycle.INSTALL and install_outcome_recorded(tenant, ref, event):
        log.info("dead letter of an install whose outcome is recorded since; not a failure", extra={"reason": reason})
        return None
    log.warning("dead-lettered event received", extra={"reason": reason, "destination": dest})
    fail(kube, tenant, reason, reason=verdict.value)
    return None


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=lifecycle.TENANT_EVENT_TYPES,
            handle=lambda event, ref: handle(rt.kube, event, ref),
            on_permanent=rt.mark_failed,
        ),
        rt.sender_check(),
    )
