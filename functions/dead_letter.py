"""dead-letter: the broker gave up on an event; mark its Tenant Failed with the reason.

Every Trigger's ``deadLetterSink``. Knative sends the original event with extensions
``knativeerrordest`` (who failed), ``knativeerrorcode`` (their last HTTP status) and
``knativeerrordata`` (their response body, base64, cut at 1024 characters). Our functions answer
errors as ``{"error": message}``, so that message becomes the Tenant's ``status.message``.
Nothing is changed for a Tenant that is gone, replaced, at a newer generation, or already Ready,
nor when the step's last answer said another process had the work in hand (``"inHand": true``,
``errors.WorkInHand``): a second delivery that waited on another pod's helm run is not a failure;
nor for install's dead letter once install has recorded its outcome for that generation after the
event was made (Provisioning, ``lastSyncedAt`` not older than the event): one of its many no-op
deliveries failing, or a stale one from before a retry, says nothing about a Tenant that is
provisioning fine.

Tenant updates go to two functions (install, and cleanup for a Tenant being deleted); which one
gave up is named by ``knativeerrordest`` when it names a function's Service, and otherwise by
the event: an update showing a deletion was cleanup's (install leaves those alone). resync's own
re-drives (``io.kubeopera.tenant.install`` and ``.cleanup``) end here too when their step gives
up, so a re-driven install that keeps failing ends Failed instead of Pending for ever.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from datetime import UTC, datetime

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from functions.cleanup import shows_deletion
from shared import events
from shared.http import IN_HAND, Step, function_app
from shared.kube import Kube
from shared.reconcile import live_tenant, mark_failed
from shared.runtime import Runtime
from shared.tenant import Phase, Tenant, TenantRef, parse_time

NAME = "dead-letter"
log = logging.getLogger(__name__)

# Which function an event type is delivered to (design.md section 3); names the step that failed
# without depending on how the broker spells the subscriber's address.
CLEANUP_STEP = "tenant-cleanup"
STEP_FOR_TYPE = {
    events.APISERVER_ADD: "tenant-install",
    events.APISERVER_UPDATE: "tenant-install",
    events.INSTALL: "tenant-install",  # resync's re-drive of install
    events.PROVISIONING: "tenant-check-ready",
    events.READY: "tenant-store-kubeconfig",
    events.KUBECONFIG_STORED: "tenant-notify-api",
    events.CLEANUP: CLEANUP_STEP,  # resync's re-drive of cleanup
}
STEPS = (*dict.fromkeys(STEP_FOR_TYPE.values()), CLEANUP_STEP)


def failed_step(event: BaseCloudEvent) -> str:
    """The function that gave up on ``event``."""
    dest = str(event.get_extension("knativeerrordest") or "")
    named = [step for step in STEPS if step in dest]
    if named:
        return named[0]
    if event.get_type() in events.APISERVER_TYPES and shows_deletion(event):
        return CLEANUP_STEP
    return STEP_FOR_TYPE.get(event.get_type(), "its subscriber")


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


def failure_reason(event: BaseCloudEvent) -> str:
    """A one-line reason from the knativeerror* extensions."""
    code = str(event.get_extension("knativeerrorcode") or "no response")
    text, body = last_answer(event)
    detail = str(body.get("error", "")) or text.strip()
    reason = f"{event.get_type()} could not be delivered to {failed_step(event)}: last answer {code}"
    return f"{reason}: {detail}" if detail else reason


def sent_at(event: BaseCloudEvent) -> datetime | None:
    """When the Tenant was as the event shows it: the ``lastSyncedAt`` of the object an
    ApiServerSource event carries (``datetime.min``: not synced yet, older than any outcome), else
    the event's ``time`` (resync's and the chain's own events); None when neither says."""
    data = event.get_data()
    if event.get_type() in events.APISERVER_TYPES and isinstance(data, dict):
        status = data.get("status")
        synced = parse_time(status.get("lastSyncedAt")) if isinstance(status, dict) else None
        return synced or datetime.min.replace(tzinfo=UTC)
    return event.get_time()


def install_outcome_recorded(tenant: Tenant, ref: TenantRef, event: BaseCloudEvent) -> bool:
    """Did install record its outcome for this generation after the dead-lettered event was made?
    Then the step did its work in another delivery (its own status write coming back, a quota
    change, resync, a stale event from before a retry): the failure of this one changes nothing."""
    sent = sent_at(event)
    recorded = parse_time(tenant.status.last_synced_at)
    return (
        tenant.status.phase == Phase.PROVISIONING
        and tenant.status.observed_generation == ref.generation
        and sent is not None
        and recorded is not None
        and recorded >= sent
    )


def handle(kube: Kube, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    reason = failure_reason(event)
    dest = str(event.get_extension("knativeerrordest") or "")
    if last_answer(event)[1].get(IN_HAND) is True:
        # The step's last answer was that another process was doing the very work (errors.WorkInHand):
        # that process answers for the outcome, and resync re-drives a Tenant whose holder died.
        log.info("dead letter of work another process had in hand; not a failure", extra={"reason": reason})
        return None
    if failed_step(event) == "tenant-install":
        tenant = live_tenant(kube, ref)
        if tenant is not None and install_outcome_recorded(tenant, ref, event):
            log.info(
                "dead letter of an install whose outcome is recorded since; not a failure", extra={"reason": reason}
            )
            return None
    log.warning("dead-lettered event received", extra={"reason": reason, "destination": dest})
    mark_failed(kube, ref, reason, reason="CleanupFailed" if failed_step(event) == CLEANUP_STEP else "DeliveryFailed")
    return None


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    return function_app(
        Step(
            name=NAME,
            namespace=rt.settings.tenant_namespace,
            accepts=frozenset(STEP_FOR_TYPE),
            handle=lambda event, ref: handle(rt.kube, event, ref),
            on_permanent=rt.mark_failed,
        ),
        rt.sender_check(),
    )
