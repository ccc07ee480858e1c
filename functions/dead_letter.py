"""dead-letter: the broker gave up on an event; mark its Tenant Failed with the reason.

Every Trigger's ``deadLetterSink``. Knative sends the original event with extensions
``knativeerrordest`` (who failed), ``knativeerrorcode`` (their last HTTP status) and
``knativeerrordata`` (their response body, base64, cut at 1024 characters). Our functions answer
errors as ``{"error": message}``, so that message becomes the Tenant's ``status.message``.
Nothing is changed for a Tenant that is gone, replaced, at a newer generation, or already Ready.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared import events
from shared.http import Step, function_app
from shared.kube import Kube
from shared.reconcile import mark_failed
from shared.runtime import Runtime
from shared.tenant import TenantRef

NAME = "dead-letter"
log = logging.getLogger(__name__)


def failure_reason(event: BaseCloudEvent) -> str:
    """A one-line reason from the knativeerror* extensions."""
    dest = str(event.get_extension("knativeerrordest") or "the subscriber")
    code = str(event.get_extension("knativeerrorcode") or "no response")
    detail = ""
    raw = event.get_extension("knativeerrordata")
    if raw:
        try:
            text = base64.b64decode(str(raw), validate=False).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            text = ""
        try:
            parsed = json.loads(text)
            detail = str(parsed.get("error", "")) if isinstance(parsed, dict) else ""
        except ValueError:
            detail = ""
        detail = detail or text.strip()
    service = dest.rstrip("/").rsplit("/", 1)[-1].split(".")[0] or dest
    reason = f"{event.get_type()} could not be delivered to {service}: last answer {code}"
    return f"{reason}: {detail}" if detail else reason


def handle(kube: Kube, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    reason = failure_reason(event)
    log.warning("dead-lettered event received", extra={"reason": reason})
    mark_failed(kube, ref, reason, reason="DeliveryFailed")
    return None


def create_app() -> Flask:
    rt = Runtime.start(NAME)
    return function_app(
        Step(
            name=NAME,
            accepts=frozenset(
                {
                    events.APISERVER_ADD,
                    events.APISERVER_UPDATE,
                    events.PROVISIONING,
                    events.READY,
                    events.KUBECONFIG_STORED,
                }
            ),
            handle=lambda event, ref: handle(rt.kube, event, ref),
            on_permanent=rt.mark_failed,
        )
    )
