"""Local stand-in for the Knative Broker: routes CloudEvents by the real Trigger YAML, as Knative does.

Tests and the local runner use it instead of a cluster. It reads the same `eventing/triggers/*.yaml`
files that production applies, so local and production routing cannot drift apart. It is not a
product of its own: it does what the multi-tenant channel-based Broker of Knative Eventing v0.48.0
does for our Triggers, and no more. Each behaviour and the source file (knative.dev/eventing@v0.48.0)
it follows:

- Ingest (`POST /` or `POST /<namespace>/<broker>`): a binary or structured CloudEvent is accepted
  with 202; anything else is 400 with the reason; a body over `max_body_bytes` is 413. Structured
  mode wins over binary when Content-Type is `application/cloudevents+json` (sdk-go
  `protocol/http` `NewMessage`); batches are rejected. `pkg/broker/ingress/ingress_handler.go`.
- TTL: ingest sets `knativearrivaltime`, then `knativebrokerttl`: missing or not an integer -> the
  default (255), otherwise decremented (floor 0); an event whose TTL ends <= 0 is refused with 400.
  `pkg/broker/ttl.go` (`TTLDefaulter`), `ingress_handler.go` (`receive`).
- Filters: `spec.filters` (when non-empty) wins over `spec.filter.attributes`; neither means every
  event. Results are three-valued (pass / fail / no filter) and only "fail" stops delivery.
  `filter.attributes`: every key must exist, exact, case-sensitive; an empty value means "present
  and non-empty" (`pkg/eventfilter/attributes/filter.go`). `filters` entries: exact, prefix,
  suffix, all, any, not, with `all`/`any` returning the last child result when none decides
  (`pkg/eventfilter/subscriptionsapi/*.go`, `pkg/broker/filter/filter_handler.go` `filterEvent`).
  `cesql` is refused at load time with a clear error. The filter does not see `knativebrokerttl`.
- Delivery: binary mode (structured when `delivery.format: json`), with `Prefer: reply`; the
  subscriber does not see `knativebrokerttl` (`filter_handler.go`; `pkg/kncloudevents/
  event_dispatcher.go` `send`). W3C `traceparent`/`tracestate`/`baggage` and Knative's pass-through
  headers (`x-request-id`, `knative-*`, `x-b3-*`; `pkg/utils/headers.go`) received with an event
  are sent on with it, and those of a reply response travel with the reply.
- Replies: a 2xx whose body is a CloudEvent (binary or structured) goes back in through ingest with
  the TTL the delivered event carried (ingest then decrements it); an empty body that is not a
  CloudEvent ends the delivery; a non-empty non-CloudEvent body or an invalid CloudEvent is a
  failed delivery with code 502 (`filter_handler.go` `writeResponse`). If ingest refuses the reply
  (TTL exhausted), the delivered event is dead-lettered with code 400 and the broker's URL as
  `knativeerrordest` (`event_dispatcher.go` `send`, reply branch).
- Retries: `retry` extra attempts. Retried: no response, >= 500, 404, 408, 409, 429; everything
  else is final (`pkg/kncloudevents/retries.go` `SelectiveRetry`). Wait before retry n (n = 0 for
  the first retry, go-retryablehttp v0.7.7 `Client.Do`): exponential `delay * 2**n`, linear
  `delay * n`, and 0 unless both `backoffPolicy` and `backoffDelay` are set
  (`RetryConfigFromDeliverySpec`). With `retryAfterMax` set (the `delivery-retryafter` feature is
  assumed enabled), a 429/503 `Retry-After` (seconds or HTTP-date) capped at `retryAfterMax` is
  used when larger than the backoff (`generateBackoffFn`, `parseRetryAfterDuration`).
  `delivery.timeout` bounds each request. A Trigger's `delivery` replaces the Broker's whole
  (`pkg/reconciler/broker/trigger/trigger.go`).
- Dead letter: when retries are exhausted or the code is final, the event as ingested (it still
  carries `knativebrokerttl` and `knativearrivaltime`) goes to the dead-letter sink with
  `knativeerrordest` (subscriber URL), `knativeerrorcode` and `knativeerrordata` (base64 of the
  response body, cut at 1024 characters; for no response: code 500 and the body
  `dispatch error: <error>`), using the same retry policy, without `Prefer: reply`, and its
  response is ignored (`event_dispatcher.go` `send`, `dispatchExecutionInfoTransformers`;
  `pkg/kncloudevents/attributes/knative_error.go`). For a malformed reply Knative's broker-filter
  answers 502 with an empty body, which leaves the dead-lettered event without the three
  extensions; this broker does the same. (v0.48.0 sizes its base64 buffer to the cut length, so
  Go's encoder panics on bodies over 768 bytes; this broker follows the intent: encode, then cut.)

Loading is stricter than Knative where Knative would quietly misbehave: an exact/prefix/suffix
entry with an empty value (Knative drops it, so the Trigger matches everything), unknown delivery
fields and `cesql` are errors. Not supported: `brokerRef`, refs other than Knative Services, OIDC,
EventType auto-creation, and running with `delivery-retryafter` off (drop `retryAfterMax` instead).

Use: `load_triggers(folder)` -> `Broker(triggers, resolve)`; `publish(event)` ingests directly,
`start(host, port)` serves `POST /` (ingest) and `GET /_/deliveries` (every attempt as JSON: time,
broker clock, trigger, target, url, event id/type/subject, attempt, status or error, delay before
the next try, outcome); `wait_idle(timeout)` waits until nothing is scheduled or in flight; `stop()`.
CLI: `python -m shared.local.broker --triggers eventing/triggers --service NAME=URL ... --port N`.

Retries are scheduled on a timer heap served by one scheduler thread and a pool of sender threads,
so a waiting retry never blocks other deliveries. `VirtualClock` lets tests run 15 s Retry-After
schedules instantly: time jumps ahead whenever the broker has nothing to do but wait.
"""

from __future__ import annotations

import argparse
import base64
import heapq
import itertools
import json
import logging
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol, cast
from urllib.parse import quote, unquote, urlsplit

import requests
import yaml
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.common import get_event_factory_for_version
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.exceptions import BaseCloudEventException
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

logger = logging.getLogger(__name__)

DEFAULT_TTL = 255
TTL_ATTRIBUTE = "knativebrokerttl"
ARRIVAL_TIME_ATTRIBUTE = "knativearrivaltime"
ERROR_DEST_ATTRIBUTE = "knativeerrordest"
ERROR_CODE_ATTRIBUTE = "knativeerrorcode"
ERROR_DATA_ATTRIBUTE = "knativeerrordata"
ERROR_DATA_MAX_LENGTH = 1024
RETRIED_4XX = frozenset({404, 408, 409, 429})
RETRY_AFTER_CODES = frozenset({429, 503})
MALFORMED_REPLY_CODE = 502
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"

_CE_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in ' "%')
_JSON_CONTENT_TYPE = re.compile(r"^(application|text)/([a-zA-Z0-9\-\.]+\+)?json(;.*)?$")
_ATTRIBUTE_NAME = re.compile(r"^[a-z][a-z0-9]*$")
_FORWARDED_HEADERS = frozenset({"traceparent", "tracestate", "baggage", "x-request-id"})
_FORWARDED_PREFIXES = ("knative-", "x-b3-")
_DIALECTS = ("exact", "prefix", "suffix", "all", "any", "not", "cesql")
_DURATION = re.compile(
    r"^(?P<sign>[-+])?P"
    r"(?:(?P<Y>\d+(?:[.,]\d+)?)Y)?(?:(?P<Mo>\d+(?:[.,]\d+)?)M)?"
    r"(?:(?P<W>\d+(?:[.,]\d+)?)W)?(?:(?P<D>\d+(?:[.,]\d+)?)D)?"
    r"(?:T(?:(?P<H>\d+(?:[.,]\d+)?)H)?(?:(?P<Mi>\d+(?:[.,]\d+)?)M)?(?:(?P<S>\d+(?:[.,]\d+)?)S)?)?$"
)
_DURATION_SECONDS = {  # rickb777/date/period: a year is 365.2425 days, a month 30.436875 days
    "Y": 365.2425 * 86400, "Mo": 30.436875 * 86400, "W": 7 * 86400, "D": 86400,
    "H": 3600, "Mi": 60, "S": 1,
}


class TriggerError(ValueError):
    """A Trigger file the local broker cannot use (bad YAML, unsupported filter, bad delivery)."""


class BrokerConfigError(ValueError):
    """The broker cannot be built from these Triggers (for example a subscriber it cannot resolve)."""


class InvalidEvent(ValueError):
    """An HTTP message that is not a valid CloudEvent; the message says why."""


# --------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Event:
    """A CloudEvent as the broker carries it: context attributes as their string forms, the data as
    raw bytes, and the HTTP headers that travel with it (trace context, Knative pass-through)."""

    attributes: Mapping[str, str]
    data: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.attributes.get("id", "")

    @property
    def type(self) -> str:
        return self.attributes.get("type", "")

    @property
    def subject(self) -> str | None:
        return self.attributes.get("subject")

    def with_attributes(self, **changes: str | None) -> Event:
        """A copy with attributes set, or removed where the value is None."""
        attributes = dict(self.attributes)
        for key, value in changes.items():
            if value is None:
                attributes.pop(key, None)
            else:
                attributes[key] = value
        return Event(attributes, self.data, dict(self.headers))


@dataclass(frozen=True)
class Destination:
    """Where events go: a Knative Service (by name, resolved by the broker's `resolve`), an
    absolute `uri`, or a Service plus a relative `uri` path."""

    service: str | None = None
    uri: str | None = None

    def describe(self) -> str:
        return f"Service {self.service}" if self.service else f"URI {self.uri}"


@dataclass(frozen=True)
class Delivery:
    """A Trigger's `spec.delivery`; durations are in seconds."""

    retry: int = 0
    backoff_policy: Literal["linear", "exponential"] | None = None
    backoff_delay: float | None = None
    retry_after_max: float | None = None
    timeout: float | None = None
    dead_letter_sink: Destination | None = None
    format: Literal["binary", "json"] = "binary"


@dataclass(frozen=True)
class Filter:
    """One entry of a Trigger's `spec.filters` (one dialect per entry)."""

    dialect: Literal["exact", "prefix", "suffix", "all", "any", "not"]
    attributes: tuple[tuple[str, str], ...] = ()
    children: tuple[Filter, ...] = ()


class Match(Enum):
    """Knative's three filter results; only FAIL stops a delivery."""

    PASS = "pass"
    FAIL = "fail"
    NONE = "no filter"


@dataclass(frozen=True)
class Trigger:
    """The parts of an eventing.knative.dev/v1 Trigger the broker uses."""

    name: str
    broker: str
    subscriber: Destination
    namespace: str | None = None
    filter_attributes: tuple[tuple[str, str], ...] | None = None
    filters: tuple[Filter, ...] = ()
    delivery: Delivery | None = None
    source: str = ""

    def matches(self, event: Event) -> bool:
        """Whether the event is for this Trigger (filter_handler.go `filterEvent`)."""
        if self.filters:
            result = _all(self.filters, event)
        elif self.filter_attributes is not None:
            result = _attributes_filter(self.filter_attributes, event)
        else:
            result = Match.NONE
        return result is not Match.FAIL


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt, as listed by `GET /_/deliveries`."""

    time: str
    clock: float
    trigger: str
    target: Literal["subscriber", "dead-letter"]
    url: str
    event_id: str
    type: str
    subject: str | None
    attempt: int
    status: int | None
    error: str | None
    next_delay: float | None
    outcome: Literal["delivered", "replied", "retrying", "gave-up"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------ pure functions


def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration such as `PT1S`, `PT0.5S`, `PT15S`, `P1D`."""
    found = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if found is None or not any(found.group(k) for k in _DURATION_SECONDS):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    seconds = sum(
        float(found.group(k).replace(",", ".")) * factor
        for k, factor in _DURATION_SECONDS.items()
        if found.group(k)
    )
    return -seconds if found.group("sign") == "-" else seconds


def is_retryable(status: int | None) -> bool:
    """Whether Knative retries this outcome (`None` = no response). retries.go `SelectiveRetry`."""
    return status is None or status >= 500 or status in RETRIED_4XX


def backoff(delivery: Delivery, attempt_num: int) -> float:
    """The policy's wait before retry `attempt_num` (0 for the first retry). retries.go."""
    if delivery.backoff_policy is None or delivery.backoff_delay is None:
        return 0.0
    if delivery.backoff_policy == "exponential":
        return delivery.backoff_delay * float(2**attempt_num)
    return delivery.backoff_delay * attempt_num


def parse_retry_after(value: str | None, now: float) -> float:
    """Seconds asked for by a Retry-After header (delay-seconds or HTTP-date against the wall time
    `now`), 0 when absent or invalid. retries.go `parseRetryAfterDuration`."""
    if not value or not value.strip():
        return 0.0
    text = value.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return float(int(text))
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() - now


def retry_wait(
    delivery: Delivery, attempt_num: int, status: int | None, retry_after: str | None, now: float
) -> float:
    """The wait before retry `attempt_num`: the larger of the backoff and, when `retryAfterMax` is
    set and the code is 429/503, Retry-After capped at `retryAfterMax`. retries.go `generateBackoffFn`."""
    after = 0.0
    if delivery.retry_after_max is not None and status in RETRY_AFTER_CODES:
        after = min(parse_retry_after(retry_after, now), delivery.retry_after_max)
    policy = backoff(delivery, attempt_num)
    return after if after > policy else policy


def error_data(body: bytes) -> str:
    """`knativeerrordata`: base64 of the response body, cut at 1024 characters."""
    return base64.b64encode(body).decode("ascii")[:ERROR_DATA_MAX_LENGTH]


def next_ttl(event: Event, default: int) -> int:
    """The TTL an ingested event gets. ttl.go `TTLDefaulter`."""
    raw = event.attributes.get(TTL_ATTRIBUTE)
    if raw is None:
        return default
    try:
        return max(int(raw.strip()) - 1, 0)
    except ValueError:
        return default


# ------------------------------------------------------------------------------------ encoding


def encoding_of(headers: Mapping[str, str]) -> Literal["binary", "structured", "batch"] | None:
    """How an HTTP message carries a CloudEvent, or None if it carries none (sdk-go `NewMessage`)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    media = lowered.get("content-type", "").split(";")[0].strip().lower()
    if media == STRUCTURED_CONTENT_TYPE:
        return "structured"
    if media.startswith("application/cloudevents-batch"):
        return "batch"
    if "ce-specversion" in lowered:
        return "binary"
    return None


def parse_http(headers: Mapping[str, str], body: bytes) -> Event:
    """The CloudEvent in an HTTP request or response (binary or structured mode)."""
    encoding = encoding_of(headers)
    if encoding is None:
        raise InvalidEvent(
            "not a CloudEvent: no ce-specversion header (binary mode) and Content-Type is not "
            f"{STRUCTURED_CONTENT_TYPE} (structured mode)"
        )
    if encoding == "batch":
        raise InvalidEvent("batched CloudEvents are not supported")
    lowered = {k.lower(): v for k, v in headers.items()}
    if encoding == "binary":
        attributes = {k[3:]: unquote(v) for k, v in lowered.items() if k.startswith("ce-") and len(k) > 3}
        if "content-type" in lowered:
            attributes["datacontenttype"] = lowered["content-type"]
        data = body
    else:
        attributes, data = _parse_structured(body)
    _validate(attributes)
    return Event(attributes, data, forwarded_headers(lowered))


def _parse_structured(body: bytes) -> tuple[dict[str, str], bytes]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidEvent(f"structured CloudEvent body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise InvalidEvent("structured CloudEvent body is not a JSON object")
    attributes: dict[str, str] = {}
    for key, value in document.items():
        if key in ("data", "data_base64") or value is None:
            continue
        if isinstance(value, bool):
            attributes[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            attributes[key] = str(value)
        else:
            raise InvalidEvent(f"attribute {key!r} must be a string, number or boolean")
    data = b""
    if document.get("data_base64") is not None:
        try:
            data = base64.b64decode(document["data_base64"], validate=True)
        except (ValueError, TypeError) as error:
            raise InvalidEvent(f"data_base64 is not base64: {error}") from None
    elif document.get("data") is not None:
        value = document["data"]
        content_type = attributes.get("datacontenttype", "application/json")
        if isinstance(value, str) and not _JSON_CONTENT_TYPE.match(content_type):
            data = value.encode("utf-8")
        else:
            data = json.dumps(value, separators=(",", ":")).encode("utf-8")
    return attributes, data


def _validate(attributes: Mapping[str, str]) -> None:
    """Check the attributes with the CloudEvents SDK's own rules."""
    specversion = attributes.get("specversion", "")
    if specversion not in ("1.0", "0.3"):
        raise InvalidEvent(f"unsupported specversion {specversion!r}")
    values: dict[str, Any] = dict(attributes)
    if "time" in values:
        try:
            values["time"] = datetime.fromisoformat(values["time"])
        except ValueError:
            raise InvalidEvent(f"time is not an RFC 3339 timestamp: {values['time']!r}") from None
    try:
        get_event_factory_for_version(specversion)(values, None)
    except BaseCloudEventException as error:
        raise InvalidEvent(str(error)) from None


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that travel with an event: W3C trace context and Knative's pass-through set."""
    kept: dict[str, str] = {}
    for key, value in headers.items():
        name = key.lower()
        if name in _FORWARDED_HEADERS or name.startswith(_FORWARDED_PREFIXES):
            kept[name] = value
    return kept


def to_binary(event: Event) -> tuple[dict[str, str], bytes]:
    """HTTP headers and body of the event in binary mode."""
    headers: dict[str, str] = {}
    for key, value in event.attributes.items():
        if key == "datacontenttype":
            headers["Content-Type"] = value
        else:
            headers[f"ce-{key}"] = quote(value, safe=_CE_SAFE)
    return headers, event.data


def to_structured(event: Event) -> tuple[dict[str, str], bytes]:
    """HTTP headers and body of the event in structured (JSON) mode."""
    document: dict[str, Any] = dict(event.attributes)
    if event.data:
        content_type = event.attributes.get("datacontenttype", "application/json")
        try:
            if not _JSON_CONTENT_TYPE.match(content_type):
                raise ValueError(content_type)
            document["data"] = json.loads(event.data)
        except ValueError:
            document["data_base64"] = base64.b64encode(event.data).decode("ascii")
    return {"Content-Type": STRUCTURED_CONTENT_TYPE}, json.dumps(document).encode("utf-8")


def from_sdk(event: BaseCloudEvent, headers: Mapping[str, str] | None = None) -> Event:
    """The broker's form of a CloudEvents SDK event."""
    message = to_binary_event(event)
    parsed = parse_http(message.headers, message.body)
    return Event(parsed.attributes, parsed.data, forwarded_headers(headers or {}))


# ------------------------------------------------------------------------------------ filters


def lookup_attribute(event: Event, name: str) -> str | None:
    """An attribute's value for filtering; core attributes always exist (possibly empty),
    extensions only when set. attributes/filter.go `LookupAttribute`."""
    attributes = event.attributes
    if name in ("specversion", "type", "source", "subject", "id", "time", "dataschema",
                "datacontenttype", "datacontentencoding"):
        return attributes.get(name, "")
    if name == "schemaurl":
        return attributes.get("dataschema", "")
    if name == "datamediatype":
        return attributes.get("datacontenttype", "").split(";")[0].strip()
    return attributes.get(name)


def _attributes_filter(expected: tuple[tuple[str, str], ...], event: Event) -> Match:
    for key, value in expected:
        actual = lookup_attribute(event, key)
        if actual is None or (value == "" and actual == ""):
            return Match.FAIL
        if value != "" and value != actual:
            return Match.FAIL
    return Match.PASS


def evaluate(entry: Filter, event: Event) -> Match:
    """The result of one `spec.filters` entry (subscriptionsapi/*_filter.go)."""
    if entry.dialect in ("exact", "prefix", "suffix"):
        for key, value in entry.attributes:
            actual = lookup_attribute(event, key)
            if actual is None:
                return Match.FAIL
            ok = (
                actual == value if entry.dialect == "exact"
                else actual.startswith(value) if entry.dialect == "prefix"
                else actual.endswith(value)
            )
            if not ok:
                return Match.FAIL
        return Match.PASS
    if entry.dialect == "all":
        return _all(entry.children, event)
    if entry.dialect == "any":
        result = Match.NONE
        for child in entry.children:
            result = evaluate(child, event)
            if result is Match.PASS:
                return Match.PASS
        return result
    inner = evaluate(entry.children[0], event)  # not
    return {Match.PASS: Match.FAIL, Match.FAIL: Match.PASS, Match.NONE: Match.NONE}[inner]


def _all(entries: Sequence[Filter], event: Event) -> Match:
    result = Match.NONE
    for child in entries:
        result = evaluate(child, event)
        if result is Match.FAIL:
            return Match.FAIL
    return result


# ------------------------------------------------------------------------------ Trigger files


def load_triggers(folder: Path) -> list[Trigger]:
    """Every eventing.knative.dev/v1 Trigger in the *.yaml files under `folder`; other kinds
    (a kustomization, say) are skipped. Raises TriggerError naming the file on anything unusable."""
    if not folder.is_dir():
        raise TriggerError(f"{folder}: not a directory")
    triggers: list[Trigger] = []
    seen: dict[tuple[str | None, str], str] = {}
    for path in sorted(folder.rglob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as error:
            raise TriggerError(f"{path}: not valid YAML: {error}") from None
        for document in documents:
            if not isinstance(document, dict) or document.get("kind") != "Trigger":
                continue
            trigger = parse_trigger(document, source=str(path))
            key = (trigger.namespace, trigger.name)
            if key in seen:
                raise TriggerError(f"{path}: Trigger {trigger.name} is also defined in {seen[key]}")
            seen[key] = str(path)
            triggers.append(trigger)
    return triggers


def parse_trigger(document: Mapping[str, Any], source: str = "<memory>") -> Trigger:
    """A Trigger from its parsed YAML."""
    metadata = document.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    where = f"{source}: Trigger {name or '<no name>'}"
    if document.get("apiVersion") != "eventing.knative.dev/v1":
        raise TriggerError(f"{where}: apiVersion must be eventing.knative.dev/v1")
    if not isinstance(name, str) or not name:
        raise TriggerError(f"{where}: metadata.name is missing")
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise TriggerError(f"{where}: spec is missing")
    broker = spec.get("broker")
    if not isinstance(broker, str) or not broker:
        raise TriggerError(f"{where}: spec.broker is missing (brokerRef is not supported locally)")
    filter_attributes: tuple[tuple[str, str], ...] | None = None
    if spec.get("filter") is not None:
        plain = spec["filter"]
        if not isinstance(plain, dict) or set(plain) - {"attributes"}:
            raise TriggerError(f"{where}: spec.filter may only hold attributes")
        filter_attributes = _attribute_map(plain.get("attributes") or {}, f"{where}: spec.filter.attributes",
                                           allow_empty_values=True)
    filters = spec.get("filters") or []
    if not isinstance(filters, list):
        raise TriggerError(f"{where}: spec.filters must be a list")
    namespace = metadata.get("namespace")
    return Trigger(
        name=name,
        broker=broker,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
        subscriber=_destination(spec.get("subscriber"), f"{where}: spec.subscriber"),
        filter_attributes=filter_attributes,
        filters=tuple(_filter(entry, f"{where}: spec.filters[{i}]") for i, entry in enumerate(filters)),
        delivery=_delivery(spec["delivery"], f"{where}: spec.delivery") if spec.get("delivery") else None,
        source=source,
    )


def _attribute_map(raw: Any, where: str, allow_empty_values: bool) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise TriggerError(f"{where}: must be a map of attribute name to value")
    pairs: list[tuple[str, str]] = []
    for key, value in raw.items():
        if not isinstance(key, str) or not _ATTRIBUTE_NAME.match(key):
            raise TriggerError(f"{where}: attribute name {key!r} must be lowercase letters and digits")
        if not isinstance(value, str):
            raise TriggerError(f"{where}: value of {key!r} must be a string (quote it in YAML)")
        if not value and not allow_empty_values:
            raise TriggerError(f"{where}: value of {key!r} is empty (Knative would silently drop this filter)")
        pairs.append((key, value))
    return tuple(pairs)


def _filter(raw: Any, where: str) -> Filter:
    if not isinstance(raw, dict):
        raise TriggerError(f"{where}: must be a map with one dialect")
    unknown = set(raw) - set(_DIALECTS)
    if unknown:
        raise TriggerError(f"{where}: unknown filter dialect(s) {sorted(unknown)}")
    dialects = [d for d in _DIALECTS if raw.get(d) not in (None, {}, [], "")]
    if len(dialects) != 1:
        raise TriggerError(f"{where}: exactly one dialect per entry is allowed, found {dialects or 'none'}")
    dialect = dialects[0]
    value = raw[dialect]
    if dialect == "cesql":
        raise TriggerError(f"{where}: cesql filters are not supported by the local broker; "
                           "use exact, prefix, suffix, all, any or not")
    if dialect in ("exact", "prefix", "suffix"):
        leaf = cast(Literal["exact", "prefix", "suffix"], dialect)
        return Filter(leaf, attributes=_attribute_map(value, f"{where}.{dialect}", allow_empty_values=False))
    if dialect == "not":
        return Filter("not", children=(_filter(value, f"{where}.not"),))
    if not isinstance(value, list):
        raise TriggerError(f"{where}.{dialect}: must be a list of filters")
    children = tuple(_filter(child, f"{where}.{dialect}[{i}]") for i, child in enumerate(value))
    return Filter("all" if dialect == "all" else "any", children=children)


def _destination(raw: Any, where: str) -> Destination:
    if not isinstance(raw, dict) or not (raw.get("ref") or raw.get("uri")):
        raise TriggerError(f"{where}: needs ref or uri")
    uri = raw.get("uri")
    if uri is not None and not isinstance(uri, str):
        raise TriggerError(f"{where}.uri must be a string")
    ref = raw.get("ref")
    if ref is None:
        assert uri is not None
        if urlsplit(uri).scheme not in ("http", "https"):
            raise TriggerError(f"{where}.uri must be an absolute http(s) URL when there is no ref")
        return Destination(uri=uri)
    if not isinstance(ref, dict) or ref.get("kind") != "Service" \
            or ref.get("apiVersion") != "serving.knative.dev/v1" or not ref.get("name"):
        raise TriggerError(f"{where}.ref: only serving.knative.dev/v1 Service refs (with a name) "
                           "can be resolved by the local broker")
    if uri is not None and urlsplit(uri).scheme:
        raise TriggerError(f"{where}.uri must be a relative path when a ref is given")
    return Destination(service=str(ref["name"]), uri=uri)


def _delivery(raw: Any, where: str) -> Delivery:
    known = {"retry", "backoffPolicy", "backoffDelay", "retryAfterMax", "timeout", "deadLetterSink", "format"}
    if not isinstance(raw, dict):
        raise TriggerError(f"{where}: must be a map")
    if set(raw) - known:
        raise TriggerError(f"{where}: unknown field(s) {sorted(set(raw) - known)}")
    retry = raw.get("retry", 0)
    if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
        raise TriggerError(f"{where}.retry must be an integer >= 0")
    policy = raw.get("backoffPolicy")
    if policy not in (None, "linear", "exponential"):
        raise TriggerError(f"{where}.backoffPolicy must be linear or exponential")
    fmt = raw.get("format", "binary")
    if fmt not in ("binary", "json"):
        raise TriggerError(f"{where}.format must be binary or json")

    def seconds(key: str) -> float | None:
        if raw.get(key) is None:
            return None
        try:
            value = parse_duration(raw[key])
        except ValueError as error:
            raise TriggerError(f"{where}.{key}: {error}") from None
        if value < 0:
            raise TriggerError(f"{where}.{key} must not be negative")
        return value

    sink = raw.get("deadLetterSink")
    return Delivery(
        retry=retry,
        backoff_policy=policy,
        backoff_delay=seconds("backoffDelay"),
        retry_after_max=seconds("retryAfterMax"),
        timeout=seconds("timeout"),
        dead_letter_sink=_destination(sink, f"{where}.deadLetterSink") if sink is not None else None,
        format=fmt,
    )


# ------------------------------------------------------------------------------------- clocks


class Clock(Protocol):
    """Time for the scheduler: `now()` in seconds, and a wait on the broker's condition."""

    def now(self) -> float: ...

    def wait(self, condition: threading.Condition, timeout: float | None, busy: bool) -> None: ...


class RealClock:
    """Monotonic time, real waits."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, condition: threading.Condition, timeout: float | None, busy: bool) -> None:
        condition.wait(timeout)


class VirtualClock:
    """Time that jumps to the next due retry whenever no delivery is in flight, so backoff and
    Retry-After schedules run at once while recorded times keep their spacing. For tests."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def wait(self, condition: threading.Condition, timeout: float | None, busy: bool) -> None:
        if busy or timeout is None:
            condition.wait()
        elif timeout > 0:
            self._now += timeout


# ------------------------------------------------------------------------------------- broker


@dataclass(frozen=True)
class _Route:
    trigger: Trigger
    url: str
    delivery: Delivery
    dead_letter_url: str | None


@dataclass(frozen=True)
class _Task:
    route: _Route
    target: Literal["subscriber", "dead-letter"]
    event: Event  # what is sent
    ingested: Event  # the event as ingest left it (with its TTL), for the dead-letter sink
    attempt: int = 1


@dataclass(frozen=True)
class _Result:
    status: int | None
    headers: Mapping[str, str]
    body: bytes
    error: str | None


class Broker:
    """A local Knative Broker for `triggers`. `resolve` maps a Knative Service name to its base URL
    (None when unknown). Use `publish` directly or `start` the HTTP ingress."""

    def __init__(
        self,
        triggers: Iterable[Trigger],
        resolve: Callable[[str], str | None],
        *,
        ttl: int = DEFAULT_TTL,
        name: str = "default",
        namespace: str = "kubeopera-system",
        delivery: Delivery | None = None,
        clock: Clock | None = None,
        max_body_bytes: int = 10 * 1024 * 1024,
        request_timeout: float = 300.0,
        workers: int = 16,
        history: int = 10_000,
    ) -> None:
        if ttl <= 0:
            raise BrokerConfigError("ttl must be > 0")
        self._ttl = ttl
        self._name = name
        self._namespace = namespace
        self._clock: Clock = clock or RealClock()
        self._max_body_bytes = max_body_bytes
        self._request_timeout = request_timeout
        self._routes = self._build_routes(triggers, resolve, delivery or Delivery())
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, _Task]] = []
        self._sequence = itertools.count()
        self._in_flight = 0
        self._stopping = False
        self._attempts: deque[Attempt] = deque(maxlen=history)
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._scheduler: threading.Thread | None = None
        self._server: BaseWSGIServer | None = None
        self._server_thread: threading.Thread | None = None
        self._sessions = threading.local()
        self._ingress_url = f"http://broker-ingress.local/{namespace}/{name}"

    def _build_routes(
        self, triggers: Iterable[Trigger], resolve: Callable[[str], str | None], default: Delivery
    ) -> tuple[_Route, ...]:
        routes: list[_Route] = []
        for trigger in triggers:
            if trigger.broker != self._name or trigger.namespace not in (None, self._namespace):
                logger.warning("trigger is for another broker, ignored",
                               extra={"trigger": trigger.name, "broker": trigger.broker})
                continue
            delivery = trigger.delivery or default

            def url_of(destination: Destination, role: str, trigger: Trigger = trigger) -> str:
                if destination.service is None:
                    assert destination.uri is not None
                    return destination.uri
                base = resolve(destination.service)
                if not base:
                    raise BrokerConfigError(
                        f"Trigger {trigger.name} ({trigger.source or 'no file'}): cannot resolve the {role} "
                        f"Knative Service {destination.service!r}; give its URL "
                        f"(--service {destination.service}=http://HOST:PORT)"
                    )
                if destination.uri:
                    return base.rstrip("/") + "/" + destination.uri.lstrip("/")
                return base

            sink = delivery.dead_letter_sink
            routes.append(_Route(trigger, url_of(trigger.subscriber, "subscriber"), delivery,
                                 url_of(sink, "dead-letter sink") if sink else None))
        return tuple(routes)

    # ---- public API

    @property
    def triggers(self) -> tuple[Trigger, ...]:
        return tuple(route.trigger for route in self._routes)

    @property
    def url(self) -> str:
        """The ingress URL once started."""
        if self._server is None:
            raise RuntimeError("broker not started")
        return f"http://{self._server.host}:{self._server.server_port}/"

    def publish(self, event: Event | BaseCloudEvent, headers: Mapping[str, str] | None = None) -> int:
        """Ingest an event as a POST to the ingress would, with `headers` (trace context) travelling
        along; returns the ingress status: 202, 400 (TTL exhausted) or 503 (stopped)."""
        if not isinstance(event, Event):
            event = from_sdk(event, headers)
        elif headers:
            event = Event(event.attributes, event.data, {**event.headers, **forwarded_headers(headers)})
        return self._ingest(event)[0]

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve the HTTP ingress in a background thread; returns the port."""
        if self._server is not None:
            raise RuntimeError("broker already started")
        self._ensure_scheduler()
        self._server = make_server(host, port, self._wsgi, threaded=True)
        bound = self._server.server_port
        self._ingress_url = f"http://{host}:{bound}/{self._namespace}/{self._name}"
        self._server_thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                               name="broker-http", daemon=True)
        self._server_thread.start()
        logger.info("local broker listening", extra={"host": host, "port": bound, "triggers": len(self._routes)})
        return bound

    def stop(self) -> None:
        """Stop serving and delivering; scheduled retries are dropped."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._server_thread is not None:
            self._server_thread.join(timeout=5)
            self._server_thread = None
        with self._condition:
            self._stopping = True
            dropped = len(self._heap)
            self._heap.clear()
            self._condition.notify_all()
        if dropped:
            logger.warning("broker stopped with deliveries pending", extra={"dropped": dropped})
        if self._scheduler is not None:
            self._scheduler.join(timeout=5)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def deliveries(self) -> list[Attempt]:
        """Every delivery attempt so far (the most recent `history` of them)."""
        with self._condition:
            return list(self._attempts)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is scheduled or in flight; False on timeout."""
        with self._condition:
            return self._condition.wait_for(lambda: not self._heap and self._in_flight == 0, timeout)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- ingest

    def _ingest(self, event: Event) -> tuple[int, str]:
        event = event.with_attributes(**{ARRIVAL_TIME_ATTRIBUTE: _rfc3339(time.time())})
        ttl = next_ttl(event, self._ttl)
        if ttl <= 0:
            logger.warning("event dropped: TTL exhausted",
                           extra={"event_id": event.id, "event_type": event.type, "subject": event.subject})
            return 400, f"{TTL_ATTRIBUTE} exhausted: the event went round the broker too often"
        event = event.with_attributes(**{TTL_ATTRIBUTE: str(ttl)})
        visible = event.with_attributes(**{TTL_ATTRIBUTE: None})
        tasks = [_Task(route, "subscriber", visible, event) for route in self._routes if route.trigger.matches(visible)]
        logger.info("event accepted", extra={"event_id": event.id, "event_type": event.type, "subject": event.subject,
                                             "ttl": ttl, "triggers": [t.route.trigger.name for t in tasks]})
        with self._condition:
            if self._stopping:
                return 503, "broker stopped"
            for task in tasks:
                self._schedule(task, 0.0)
        self._ensure_scheduler()
        return 202, ""

    def _schedule(self, task: _Task, delay: float) -> None:
        """Queue a task; the caller holds the condition."""
        heapq.heappush(self._heap, (self._clock.now() + delay, next(self._sequence), task))
        self._condition.notify_all()

    # ---- scheduler and senders

    def _ensure_scheduler(self) -> None:
        with self._condition:
            if self._scheduler is not None or self._stopping:
                return
            self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="broker-send")
            self._scheduler = threading.Thread(target=self._run_scheduler, name="broker-scheduler", daemon=True)
            self._scheduler.start()

    def _run_scheduler(self) -> None:
        executor = self._executor
        assert executor is not None
        with self._condition:
            while not self._stopping:
                now = self._clock.now()
                while self._heap and self._heap[0][0] <= now:
                    _, _, task = heapq.heappop(self._heap)
                    self._in_flight += 1
                    executor.submit(self._run_task, task)
                timeout = self._heap[0][0] - now if self._heap else None
                self._clock.wait(self._condition, timeout, busy=self._in_flight > 0)

    def _run_task(self, task: _Task) -> None:
        try:
            self._deliver(task)
        except Exception:  # a bug here must not wedge the broker's in-flight count
            logger.exception("delivery task failed", extra={"trigger": task.route.trigger.name})
        finally:
            with self._condition:
                self._in_flight -= 1
                self._condition.notify_all()

    def _session(self) -> requests.Session:
        session = getattr(self._sessions, "session", None)
        if session is None:
            session = requests.Session()
            self._sessions.session = session
        return session

    def _send(self, task: _Task, url: str) -> _Result:
        delivery = task.route.delivery
        headers, body = (to_structured if delivery.format == "json" else to_binary)(task.event)
        headers.update(task.event.headers)
        if task.target == "subscriber":
            headers["Prefer"] = "reply"
        try:
            response = self._session().post(url, data=body, headers=headers, allow_redirects=False,
                                            timeout=delivery.timeout or self._request_timeout)
        except requests.RequestException as error:
            return _Result(None, {}, f"dispatch error: {error}".encode(), str(error))
        headers = {key.lower(): value for key, value in response.headers.items()}
        return _Result(response.status_code, headers, response.content, None)

    def _deliver(self, task: _Task) -> None:
        route = task.route
        url = route.url if task.target == "subscriber" else route.dead_letter_url
        assert url is not None
        result = self._send(task, url)
        code = 500 if result.status is None else result.status  # what Knative reports for no response
        error = result.error
        error_body = result.body
        with_extensions = True
        if result.status is not None and 200 <= result.status < 300:
            if task.target == "dead-letter":
                self._record(task, url, result.status, None, None, "delivered")
                return
            reply, why = self._reply_of(result, task)
            if why is None:
                if reply is None:
                    self._record(task, url, result.status, None, None, "delivered")
                    return
                self._record(task, url, result.status, None, None, "replied")
                status, reason = self._ingest(reply)
                if status == 202:
                    return
                logger.warning("reply refused by the broker",
                               extra={"trigger": route.trigger.name, "event_id": task.event.id, "reason": reason})
                self._dead_letter(task, self._ingress_url, status, b"", with_extensions=True)
                return
            code, error, error_body, with_extensions = MALFORMED_REPLY_CODE, why, b"", False
        if is_retryable(code) and task.attempt <= route.delivery.retry:
            delay = retry_wait(route.delivery, task.attempt - 1, code, result.headers.get("retry-after"), time.time())
            self._record(task, url, result.status, error, delay, "retrying")
            with self._condition:
                if not self._stopping:
                    self._schedule(_Task(route, task.target, task.event, task.ingested, task.attempt + 1), delay)
            return
        self._record(task, url, result.status, error, None, "gave-up")
        if task.target == "subscriber":
            self._dead_letter(task, url, code, error_body, with_extensions)
        else:
            logger.error("dead-letter sink failed, event lost",
                         extra={"trigger": route.trigger.name, "event_id": task.event.id, "status": result.status})

    def _reply_of(self, result: _Result, task: _Task) -> tuple[Event | None, str | None]:
        """(reply or None, None) for a good 2xx; (None, reason) for a malformed one."""
        if encoding_of(result.headers) is None:
            if result.body:
                return None, "malformed reply: a non-empty response that is not a CloudEvent"
            return None, None
        try:
            reply = parse_http(result.headers, result.body)
        except InvalidEvent as error:
            return None, f"malformed reply: {error}"
        # The reply keeps the delivered event's trace unless the response carries its own context,
        # and the TTL the delivered event had (filter_handler.go writeResponse); ingest decrements it.
        headers = {**task.event.headers, **reply.headers}
        ttl = task.ingested.attributes.get(TTL_ATTRIBUTE)
        return Event(reply.attributes, reply.data, headers).with_attributes(**{TTL_ATTRIBUTE: ttl}), None

    def _dead_letter(self, task: _Task, dest: str, code: int, body: bytes, with_extensions: bool) -> None:
        route = task.route
        if route.dead_letter_url is None:
            logger.error("delivery failed and the trigger has no dead-letter sink, event lost",
                         extra={"trigger": route.trigger.name, "event_id": task.event.id, "status": code})
            return
        event = task.ingested
        if with_extensions:
            event = event.with_attributes(**{ERROR_DEST_ATTRIBUTE: dest, ERROR_CODE_ATTRIBUTE: str(code),
                                             ERROR_DATA_ATTRIBUTE: error_data(body)})
        with self._condition:
            if not self._stopping:
                self._schedule(_Task(route, "dead-letter", event, task.ingested), 0.0)

    def _record(self, task: _Task, url: str, status: int | None, error: str | None,
                next_delay: float | None, outcome: Literal["delivered", "replied", "retrying", "gave-up"]) -> None:
        attempt = Attempt(
            time=_rfc3339(time.time()), clock=self._clock.now(), trigger=task.route.trigger.name,
            target=task.target, url=url, event_id=task.event.id, type=task.event.type,
            subject=task.event.subject, attempt=task.attempt, status=status, error=error,
            next_delay=next_delay, outcome=outcome,
        )
        with self._condition:
            self._attempts.append(attempt)
        level = logging.INFO if outcome in ("delivered", "replied") else logging.WARNING
        logger.log(level, "delivery attempt", extra={
            "trigger": attempt.trigger, "target": attempt.target, "url": url, "event_id": attempt.event_id,
            "event_type": attempt.type, "subject": attempt.subject, "attempt": attempt.attempt,
            "status": status, "error": error, "delay_seconds": next_delay, "outcome": outcome,
        })

    # ---- HTTP

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        request.max_content_length = self._max_body_bytes
        response = self._handle(request)
        result: Iterable[bytes] = response(environ, start_response)
        return result

    def _handle(self, request: Request) -> Response:
        if request.path == "/_/deliveries":
            if request.method != "GET":
                return Response("use GET\n", 405, headers={"Allow": "GET"})
            listing = json.dumps([attempt.to_dict() for attempt in self.deliveries()])
            return Response(listing, 200, mimetype="application/json")
        if request.path.rstrip("/") not in ("", f"/{self._namespace}/{self._name}"):
            return Response("no such broker\n", 404)
        if request.method != "POST":
            return Response("use POST\n", 405, headers={"Allow": "POST"})
        try:
            body = request.get_data()
        except RequestEntityTooLarge:
            return Response(f"body larger than {self._max_body_bytes} bytes\n", 413)
        try:
            event = parse_http(dict(request.headers.items()), body)
        except InvalidEvent as error:
            return Response(f"{error}\n", 400)
        status, reason = self._ingest(event)
        return Response(f"{reason}\n" if reason else "", status)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


# ----------------------------------------------------------------------------------------- CLI


class _ExtrasFormatter(logging.Formatter):
    """Plain log lines for the CLI, with the structured `extra` fields appended as key=value."""

    _standard = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in self._standard}
        return line + "".join(f" {k}={v}" for k, v in extras.items())


def _service(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {text!r}")
    return name, url


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m shared.local.broker --triggers eventing/triggers --service NAME=URL ... --port N`."""
    parser = argparse.ArgumentParser(prog="python -m shared.local.broker",
                                     description="Local stand-in for the Knative Broker.")
    parser.add_argument("--triggers", type=Path, required=True, help="folder of Trigger YAML files")
    parser.add_argument("--service", type=_service, action="append", default=[], metavar="NAME=URL",
                        help="base URL of a Knative Service named in the Triggers (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ttl", type=int, default=DEFAULT_TTL)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_ExtrasFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    services = dict(args.service)
    try:
        broker = Broker(load_triggers(args.triggers), services.get, ttl=args.ttl)
    except (TriggerError, BrokerConfigError) as error:
        logger.error("cannot start the local broker: %s", error)
        return 2
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    broker.start(args.host, args.port)
    done.wait()
    broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
