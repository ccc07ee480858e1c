"""CloudEvents in and out: parse a request (binary or structured), build our own events.

Inbound events are hints (design.md rule 1): this module only extracts *which* Tenant an event
speaks about (a ``TenantRef``); functions re-read the Tenant before acting. The ApiServerSource's
events carry the whole Tenant; our own carry ``{namespace, name, uid, generation}`` (design.md section 3).
Outbound events are written in binary mode, the way Knative delivers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from shared.errors import BadEvent
from shared.model.event_types import APISERVER_TYPES
from shared.model.tenant import KIND, TenantRef

SOURCE_PREFIX: Final = "/kubeopera/tenants/"

_FORMAT = JSONFormat()
# What Kubernetes accepts as a namespace and as an object's name; a reference to anything else
# names no object, and must not reach a URL or a selector.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def parse(headers: Mapping[str, str], body: bytes) -> BaseCloudEvent:
    """A CloudEvent from an HTTP request, binary or structured; ``BadEvent`` says why not."""
    lowered = {k.lower(): v for k, v in headers.items()}
    is_binary = any(k.startswith("ce-") for k in lowered)
    is_structured = lowered.get("content-type", "").startswith("application/cloudevents+json")
    if not (is_binary or is_structured):
        raise BadEvent("not a CloudEvent: expected ce-* headers (binary) or application/cloudevents+json")
    try:
        return ce_http.from_http(ce_http.HTTPMessage(headers=lowered, body=body), _FORMAT, CloudEvent)
    except RecursionError:  # JSON nested deeper than the decoder goes
        raise BadEvent("malformed CloudEvent: its JSON is nested too deeply") from None
    except Exception as err:  # whatever the SDK raises on hostile input means malformed
        # Not only its own exceptions: e.g. a structured event whose "time" is a list makes
        # dateutil raise AttributeError (found by tests/integration/test_hostile_input.py).
        raise BadEvent(f"malformed CloudEvent: {type(err).__name__}: {err}") from None


def tenant_ref(event: BaseCloudEvent) -> TenantRef:
    """Which Tenant the event is about, from the Tenant object or our own event data."""
    data = event.get_data()
    if not isinstance(data, dict):
        raise BadEvent(f"event {event.get_type()} carries no JSON object as data")
    if event.get_type() in APISERVER_TYPES:
        kind = data.get("kind")
        if kind != KIND:
            raise BadEvent(f"event {event.get_type()} is about a {kind!r}, not a {KIND}")
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            raise BadEvent(f"{kind} object in the event has no metadata")
        fields: Mapping[str, Any] = meta
    else:
        fields = data
    try:
        namespace, name, uid = (fields[k] for k in ("namespace", "name", "uid"))
        generation = fields.get("generation", 0)
    except KeyError as missing:
        raise BadEvent(f"event data lacks {missing.args[0]!r}") from None
    if not all(isinstance(v, str) and v for v in (namespace, name, uid)):
        raise BadEvent("event data: namespace, name and uid must be non-empty strings")
    if not (_DNS_LABEL.fullmatch(namespace) and _DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253):
        raise BadEvent("event data: namespace must be a DNS label and name a DNS subdomain, as Kubernetes names are")
    if not _UID.fullmatch(uid):
        raise BadEvent("event data: uid must be up to 128 letters, digits, '-', '.', '_' or ':'")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise BadEvent("event data: generation must be a whole number")
    return TenantRef(namespace=namespace, name=name, uid=uid, generation=generation)


def ref_data(ref: TenantRef) -> dict[str, Any]:
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid, "generation": ref.generation}


# A step that polls through the broker's re-delivery (check-ready, cleanup) answers a fresh event
# instead of a 503 once one event has been polled this many times: the broker then delivers it at
# once, with a full retry budget. Well below the polling Triggers' retries (44, 60), so extra
# re-deliveries (a 503 answered with a shorter Retry-After) never exhaust a budget first.
RENEW_AFTER_POLLS: Final = 20


def renewal_due(event_time: datetime | None, now: datetime, poll_seconds: int) -> bool:
    """Has the event (sent at ``event_time``) been polled ``RENEW_AFTER_POLLS`` times?"""
    return event_time is not None and (now - event_time).total_seconds() >= RENEW_AFTER_POLLS * poll_seconds


def make(event_type: str, function: str, ref: TenantRef, *, traceparent: str = "", **extra: Any) -> CloudEvent:
    """One of our own events (design.md section 3): source, subject and JSON data set; with
    ``traceparent``, the trace it continues (else the reply continues the delivery's own)."""
    attributes: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "type": event_type,
        "source": f"{SOURCE_PREFIX}{function}",
        "subject": ref.key,
        "time": datetime.now(UTC),
        "datacontenttype": "application/json",
    }
    if traceparent:
        attributes["traceparent"] = traceparent
    return CloudEvent(attributes=attributes, data=ref_data(ref) | extra)


def to_binary(event: BaseCloudEvent) -> tuple[dict[str, str], bytes]:
    message = ce_http.to_binary(event, _FORMAT)
    return dict(message.headers), message.body
