"""Local stand-in for the Knative Broker, for tests and the local runner: it routes CloudEvents by the
same `eventing/triggers/*.yaml` that production applies, as the MTChannelBasedBroker of Knative
Eventing v0.48.0 does for our Triggers, and no more. What it does, and the Knative source it follows:

ingest   `POST /` (or `/kubeopera-system/default`): a binary or        pkg/broker/ingress/ingress_handler.go,
         structured CloudEvent -> 202, else 400; too large: 413        sdk-go protocol/http `NewMessage`
TTL      sets knativearrivaltime; knativebrokerttl missing or not      pkg/broker/ttl.go `TTLDefaulter`
         an int -> 255, else minus 1; <= 0 -> 400. Filters and
         subscribers never see it (the dead-letter sink does)
filters  `spec.filters` (exact prefix suffix all any not) if set,      pkg/eventfilter/subscriptionsapi/,
         else `filter.attributes` ("" = present and non-empty);        pkg/eventfilter/attributes/filter.go,
         only "fail" stops a delivery ("no filter" does not)           pkg/broker/filter/filter_handler.go
deliver  binary mode, `Prefer: reply`; traceparent, tracestate,        pkg/kncloudevents/event_dispatcher.go,
         baggage, x-request-id, knative-*, x-b3-* travel along         pkg/utils/headers.go
reply    a 2xx CloudEvent re-enters ingest with the TTL of the         filter_handler.go `writeResponse`
         event delivered; empty non-event body: done; else 502
retry    on no response, >= 500, 404, 408, 409, 429; wait before       pkg/kncloudevents/retries.go
         retry n (from 0): delay*2**n or delay*n, or a 429/503
         Retry-After capped at retryAfterMax when that is larger
dead     the event as ingested + knativeerrordest, -code, -data        event_dispatcher.go `send`,
letter   (base64 of the body cut at 1024; no response: 500 and         pkg/kncloudevents/attributes/
         "dispatch error: ..."; reply refused: 400 and the broker      knative_error.go
         URL; malformed reply: none, Knative answers it 502, no body)

Loading refuses what Knative would quietly misbehave on (empty exact/prefix/suffix values, unknown
delivery fields) and what this broker lacks: cesql, brokerRef, refs other than Knative Services,
`delivery.format`. Batches, OIDC and running without the delivery-retryafter feature are not supported.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal, cast
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

BROKER, NAMESPACE = "default", "kubeopera-system"
DEFAULT_TTL = 255
REQUEST_TIMEOUT = 300.0
STRUCTURED = "application/cloudevents+json"
KSVC = "serving.knative.dev/v1"
_CE_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in ' "%')  # CloudEvents HTTP binding 3.1.3.2
_JSON_MEDIA = re.compile(r"^(application|text)/([a-zA-Z0-9\-\.]+\+)?json(;.*)?$")
_CORE = re.compile("specversion|type|source|subject|id|time|dataschema|datacontenttype|datacontentencoding")
_DIALECTS = ("exact", "prefix", "suffix", "all", "any", "not", "cesql")
_MATCHERS: dict[str, Callable[[str, str], bool]] = dict(exact=str.__eq__, prefix=str.startswith, suffix=str.endswith)
_ATTRIBUTE_NAME = re.compile("[a-z][a-z0-9]*")
_N = r"(\d+(?:[.,]\d+)?)"
_DURATION = re.compile(rf"P(?:{_N}Y)?(?:{_N}M)?(?:{_N}W)?(?:{_N}D)?(?:T(?:{_N}H)?(?:{_N}M)?(?:{_N}S)?)?")
_DURATION_UNITS = (365.2425 * 86400, 30.436875 * 86400, 7 * 86400, 86400, 3600, 60, 1)  # as rickb777/date/period

Outcome = Literal["delivered", "replied", "retrying", "gave-up"]


class TriggerError(ValueError):
    """A Trigger file the local broker cannot use (bad YAML, unsupported filter, bad delivery)."""


class BrokerConfigError(ValueError):
    """The broker cannot be built from these Triggers (for example a subscriber it cannot resolve)."""


class InvalidEvent(ValueError):
    """An HTTP message that is not a valid CloudEvent; the message says why."""


class NotAnEvent(InvalidEvent):
    """An HTTP message that does not carry a CloudEvent at all."""


@dataclass(frozen=True)
class Event:
    """A CloudEvent as the broker carries it: attributes as their string forms, the data as raw bytes
    (passed on unchanged), and the HTTP headers that travel with it."""

    attributes: Mapping[str, str]
    data: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.attributes.get("id", "")

    @property
    def type(self) -> str:
        return self.attributes.get("type", "")

    def with_attributes(self, **changes: str | None) -> Event:
        """A copy with attributes set, or removed where the value is None."""
        merged = {**self.attributes, **changes}
        return Event({k: v for k, v in merged.items() if v is not None}, self.data, dict(self.headers))


@dataclass(frozen=True)
class Destination:
    """A Knative Service (resolved by the broker), an absolute `uri`, or a Service plus a relative `uri`."""

    service: str | None = None
    uri: str | None = None


@dataclass(frozen=True)
class Delivery:
    """A Trigger's `spec.delivery`; durations are in seconds."""

    retry: int = 0
    backoff_policy: Literal["linear", "exponential"] | None = None
    backoff_delay: float | None = None
    retry_after_max: float | None = None
    timeout: float | None = None
    dead_letter_sink: Destination | None = None


@dataclass(frozen=True)
class Filter:
    """One entry of a Trigger's `spec.filters`."""

    dialect: Literal["exact", "prefix", "suffix", "all", "any", "not"]
    attributes: tuple[tuple[str, str], ...] = ()
    children: tuple[Filter, ...] = ()


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
            return evaluate(Filter("all", children=self.filters), event) is not False
        for key, value in self.filter_attributes or ():  # attributes/filter.go
            actual = lookup_attribute(event, key)
            if (not actual) if value == "" else actual != value:
                return False
        return True


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
    outcome: Outcome

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- delivery policy
def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration such as `PT1S`, `PT0.5S`, `PT15S`, `P1D`."""
    found = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if found is None or not any(found.groups()):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    return sum(float(n.replace(",", ".")) * unit for n, unit in zip(found.groups(), _DURATION_UNITS, strict=True) if n)


def is_retryable(status: int | None) -> bool:
    """Whether Knative retries this outcome (`None` = no response). retries.go `SelectiveRetry`."""
    return status is None or status >= 500 or status in (404, 408, 409, 429)


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
    text = (value or "").strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return float(int(text))
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return 0.0
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() - now


def retry_wait(delivery: Delivery, attempt_num: int, status: int | None, retry_after: str | None, now: float) -> float:
    """The wait before retry `attempt_num`: the larger of the backoff and, when `retryAfterMax` is
    set and the code is 429/503, Retry-After capped at `retryAfterMax`. retries.go `generateBackoffFn`."""
    after = 0.0
    if delivery.retry_after_max is not None and status in (429, 503):
        after = min(parse_retry_after(retry_after, now), delivery.retry_after_max)
    policy = backoff(delivery, attempt_num)
    return after if after > policy else policy


def error_data(body: bytes) -> str:
    """`knativeerrordata`: base64 of the response body, cut at 1024 characters. (v0.48.0 sizes its
    buffer to the cut length and so panics on bodies over 768 bytes; this follows the intent.)"""
    return base64.b64encode(body).decode("ascii")[:1024]


def next_ttl(event: Event, default: int) -> int:
    """The TTL an ingested event gets. ttl.go `TTLDefaulter`."""
    try:
        return max(int(event.attributes["knativebrokerttl"].strip()) - 1, 0)
    except (KeyError, ValueError):
        return default


# ------------------------------------------------------------------------------- HTTP encoding
def parse_http(headers: Mapping[str, str], body: bytes) -> Event:
    """The CloudEvent in an HTTP request or response: structured when the Content-Type says so, else
    binary when there is a `ce-specversion` header (sdk-go `NewMessage`)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if lowered.get("content-type", "").split(";")[0].strip().lower() == STRUCTURED:
        attributes, data = _parse_structured(body)
    elif "ce-specversion" in lowered:
        attributes = {k[3:]: unquote(v) for k, v in lowered.items() if k.startswith("ce-") and len(k) > 3}
        if "content-type" in lowered:
            attributes["datacontenttype"] = lowered["content-type"]
        data = body
    else:
        raise NotAnEvent(f"not a CloudEvent: no ce-specversion header and Content-Type is not {STRUCTURED}")
    # Validated by the SDK's rules, but not carried as an SDK event: that would add a missing id or
    # time, re-format the time and re-encode the data, which the broker passes on as they came.
    specversion = attributes.get("specversion", "")
    if specversion not in ("1.0", "0.3"):
        raise InvalidEvent(f"unsupported specversion {specversion!r}")
    values: dict[str, Any] = dict(attributes)
    try:
        if "time" in values:
            values["time"] = datetime.fromisoformat(values["time"])
        get_event_factory_for_version(specversion)(values, None)
    except BaseCloudEventException as error:
        raise InvalidEvent(str(error)) from None
    except ValueError:  # from fromisoformat
        raise InvalidEvent(f"time is not an RFC 3339 timestamp: {attributes['time']!r}") from None
    return Event(attributes, data, forwarded_headers(lowered))


def _parse_structured(body: bytes) -> tuple[dict[str, str], bytes]:
    try:
        document = json.loads(body)
        data, data_base64 = document.pop("data", None), document.pop("data_base64", None)
        if data_base64 is not None:
            data = base64.b64decode(data_base64, validate=True)
    except (ValueError, TypeError, AttributeError) as error:  # not JSON, not an object, not base64
        raise InvalidEvent(f"not a structured CloudEvent: {error}") from None
    if any(isinstance(value, dict | list) for value in document.values()):
        raise InvalidEvent("CloudEvent attributes must be strings, numbers or booleans")
    attributes = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in document.items() if v is not None}
    if data is None or isinstance(data, bytes):
        return attributes, data or b""
    if isinstance(data, str) and not _JSON_MEDIA.match(attributes.get("datacontenttype", "application/json")):
        return attributes, data.encode("utf-8")
    return attributes, json.dumps(data, separators=(",", ":")).encode("utf-8")


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that travel with an event: W3C trace context and Knative's pass-through set."""
    lowered = ((k.lower(), v) for k, v in headers.items())
    kept = ("traceparent", "tracestate", "baggage", "x-request-id")
    return {k: v for k, v in lowered if k in kept or k.startswith(("knative-", "x-b3-"))}


def to_binary(event: Event) -> tuple[dict[str, str], bytes]:
    """HTTP headers and body of the event in binary mode."""
    headers = {f"ce-{k}": quote(v, safe=_CE_SAFE) for k, v in event.attributes.items() if k != "datacontenttype"}
    if "datacontenttype" in event.attributes:
        headers["Content-Type"] = event.attributes["datacontenttype"]
    return headers, event.data


# ------------------------------------------------------------------------------------- filters
def lookup_attribute(event: Event, name: str) -> str | None:
    """An attribute's value for filtering: core attributes always exist (possibly empty), extensions
    only when set. attributes/filter.go `LookupAttribute`."""
    if name == "schemaurl":
        return event.attributes.get("dataschema", "")
    if name == "datamediatype":
        return event.attributes.get("datacontenttype", "").split(";")[0].strip()
    return event.attributes.get(name, "") if _CORE.fullmatch(name) else event.attributes.get(name)


def evaluate(entry: Filter, event: Event) -> bool | None:
    """One `spec.filters` entry: True passes, False fails, None is "no filter" (subscriptionsapi/).
    `all` and `any` give the last child's result when no child decides."""
    if entry.dialect in _MATCHERS:
        match = _MATCHERS[entry.dialect]
        return all((actual := lookup_attribute(event, k)) is not None and match(actual, v) for k, v in entry.attributes)
    if entry.dialect == "not":
        inner = evaluate(entry.children[0], event)
        return None if inner is None else not inner
    result = None
    for child in entry.children:
        result = evaluate(child, event)
        if result is (entry.dialect == "any"):  # any stops at the first pass, all at the first fail
            break
    return result


# ------------------------------------------------------------------------------- Trigger files
def load_triggers(folder: Path) -> list[Trigger]:
    """Every eventing.knative.dev/v1 Trigger in the *.yaml files under `folder`; other kinds (a
    kustomization, say) are skipped. Raises TriggerError naming the file on anything unusable."""
    _check(folder.is_dir(), f"{folder}: not a directory")
    triggers: list[Trigger] = []
    for path in sorted(folder.rglob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as error:
            raise TriggerError(f"{path}: not valid YAML: {error}") from None
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == "Trigger":
                new = parse_trigger(document, source=str(path))
                for old in triggers:
                    same = (old.namespace, old.name) == (new.namespace, new.name)
                    _check(not same, f"{path}: Trigger {new.name} is also defined in {old.source}")
                triggers.append(new)
    return triggers


def parse_trigger(document: Mapping[str, Any], source: str = "<memory>") -> Trigger:
    """A Trigger from its parsed YAML; a TriggerError names the file and the Trigger."""
    metadata: Any = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    spec: Any = document.get("spec")
    try:
        _check(document.get("apiVersion") == "eventing.knative.dev/v1", "apiVersion is not eventing.knative.dev/v1")
        _check(isinstance(metadata.get("name"), str) and metadata["name"], "metadata.name is missing")
        _check(isinstance(spec, dict), "spec is missing")
        _check(isinstance(spec.get("broker"), str) and spec["broker"], "spec.broker is missing (no brokerRef locally)")
        plain, namespace = spec.get("filter"), metadata.get("namespace")
        _check(isinstance(plain, dict | None) and set(plain or {}) <= {"attributes"}, "spec.filter: attributes only")
        return Trigger(
            name=metadata["name"],
            broker=spec["broker"],
            namespace=namespace if isinstance(namespace, str) and namespace else None,
            subscriber=_destination(spec.get("subscriber"), "spec.subscriber"),
            filter_attributes=None if plain is None else _attribute_map(plain.get("attributes") or {}),
            filters=tuple(_filter(entry) for entry in spec.get("filters") or []),
            delivery=_delivery(spec["delivery"]) if spec.get("delivery") else None,
            source=source,
        )
    except TriggerError as error:
        raise TriggerError(f"{source}: Trigger {metadata.get('name') or '<no name>'}: {error}") from None


def _check(ok: object, message: str) -> None:
    if not ok:
        raise TriggerError(message)


def _attribute_map(raw: Any, allow_empty: bool = True) -> tuple[tuple[str, str], ...]:
    _check(isinstance(raw, dict), f"{raw!r} is not a map of attribute name to value")
    for key, value in raw.items():
        _check(isinstance(key, str) and _ATTRIBUTE_NAME.fullmatch(key), f"{key!r}: not lowercase letters and digits")
        _check(isinstance(value, str), f"the value of {key!r} must be a string (quote it in YAML)")
        _check(value or allow_empty, f"the value of {key!r} is empty (Knative would drop the filter)")
    return tuple(raw.items())


def _filter(raw: Any) -> Filter:
    _check(isinstance(raw, dict) and set(raw) <= set(_DIALECTS), f"filter {raw!r} is not a map of one of {_DIALECTS}")
    dialects = [d for d in _DIALECTS if raw.get(d) not in (None, {}, [], "")]
    _check(len(dialects) == 1, f"exactly one dialect per filter entry is allowed, found {dialects or 'none'}")
    dialect, value = dialects[0], raw[dialects[0]]
    _check(dialect != "cesql", "cesql filters are not supported by the local broker")
    if dialect in _MATCHERS:
        return Filter(cast(Literal["exact", "prefix", "suffix"], dialect), _attribute_map(value, allow_empty=False))
    if dialect == "not":
        return Filter("not", children=(_filter(value),))
    _check(isinstance(value, list), f"{dialect} must be a list of filters")
    return Filter("all" if dialect == "all" else "any", children=tuple(_filter(child) for child in value))


def _destination(raw: Any, where: str) -> Destination:
    ref, uri = (raw.get("ref"), raw.get("uri")) if isinstance(raw, dict) else (None, None)
    scheme = urlsplit(uri).scheme if isinstance(uri, str) else None
    if ref is None:
        _check(scheme in ("http", "https"), f"{where} needs a Service ref or an absolute http(s) uri, not {raw!r}")
        return Destination(uri=uri)
    ok = isinstance(ref, dict) and (ref.get("apiVersion"), ref.get("kind")) == (KSVC, "Service") and ref.get("name")
    _check(ok, f"{where}.ref: only {KSVC} Service refs (with a name) can be resolved locally")
    _check(uri is None or scheme == "", f"{where}.uri must be a relative path when a ref is given")
    return Destination(service=str(ref["name"]), uri=uri)


def _delivery(raw: Any) -> Delivery:
    known = {"retry", "backoffPolicy", "backoffDelay", "retryAfterMax", "timeout", "deadLetterSink"}
    _check(isinstance(raw, dict), "spec.delivery must be a map")
    _check(set(raw) <= known, f"spec.delivery: unknown field(s) {sorted(set(raw) - known)}")
    retry, policy, sink = raw.get("retry", 0), raw.get("backoffPolicy"), raw.get("deadLetterSink")
    _check(type(retry) is int and retry >= 0, "spec.delivery.retry must be an integer >= 0")
    _check(policy in (None, "linear", "exponential"), "spec.delivery.backoffPolicy must be linear or exponential")

    def seconds(key: str) -> float | None:
        try:
            return None if raw.get(key) is None else parse_duration(raw[key])
        except ValueError as error:
            raise TriggerError(f"spec.delivery.{key}: {error}") from None

    return Delivery(
        retry=retry,
        backoff_policy=policy,
        backoff_delay=seconds("backoffDelay"),
        retry_after_max=seconds("retryAfterMax"),
        timeout=seconds("timeout"),
        dead_letter_sink=None if sink is None else _destination(sink, "spec.delivery.deadLetterSink"),
    )


# -------------------------------------------------------------------------------------- broker
class VirtualClock:
    """For tests: broker time that jumps to the next due retry whenever no delivery is in flight, so
    backoff and Retry-After schedules run at once while `Attempt.clock` keeps their spacing."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start


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


class Broker:
    """A local Knative Broker (kubeopera-system/default) for `triggers`. `resolve` maps a Knative
    Service name to its base URL (None when unknown). `publish` ingests directly; `start` serves
    `POST /` and `GET /_/deliveries` (every `Attempt` as JSON). Retries wait on a timer heap served
    by one scheduler thread, so a waiting retry never holds up other deliveries."""

    def __init__(
        self,
        triggers: Iterable[Trigger],
        resolve: Callable[[str], str | None],
        *,
        ttl: int = DEFAULT_TTL,
        clock: VirtualClock | None = None,
        max_body_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        if ttl <= 0:
            raise BrokerConfigError("ttl must be > 0")
        self._ttl, self._clock, self._max_body_bytes = ttl, clock, max_body_bytes
        self._routes: list[_Route] = []
        for trigger in triggers:
            if trigger.broker != BROKER or trigger.namespace not in (None, NAMESPACE):
                logger.warning("Trigger %s is for another broker (%s), ignored", trigger.name, trigger.broker)
                continue
            delivery = trigger.delivery or Delivery()
            sink = delivery.dead_letter_sink
            dead_letter_url = None if sink is None else _url(trigger, sink, "dead-letter sink", resolve)
            url = _url(trigger, trigger.subscriber, "subscriber", resolve)
            self._routes.append(_Route(trigger, url, delivery, dead_letter_url))
        self._condition = threading.Condition()  # guards the state below; reentrant
        self._heap: list[tuple[float, int, _Task]] = []  # (due, sequence, task)
        self._sequence = itertools.count()
        self._in_flight = 0
        self._stopping = False
        self._attempts: list[Attempt] = []
        self._scheduler: threading.Thread | None = None
        self._server: BaseWSGIServer | None = None
        self._ingress_url = f"http://broker-ingress.local/{NAMESPACE}/{BROKER}"

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
            message = to_binary_event(event)
            event = parse_http(message.headers, message.body)
        if headers:
            event = replace(event, headers={**event.headers, **forwarded_headers(headers)})
        return self._ingest(event)[0]

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve the HTTP ingress in a background thread; returns the port."""
        if self._server is not None:
            raise RuntimeError("broker already started")
        # werkzeug logs every request at INFO; the deliveries list is this broker's record.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = make_server(host, port, Request.application(self._handle), threaded=True)
        port = self._server.server_port
        self._ingress_url = f"http://{host}:{port}/{NAMESPACE}/{BROKER}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        logger.info("local broker listening on %s:%s with %d triggers", host, port, len(self._routes))
        return port

    def stop(self) -> None:
        """Stop serving and delivering; scheduled retries are dropped."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._condition:
            self._stopping = True
            if self._heap:
                logger.warning("broker stopped with %d deliveries pending", len(self._heap))
            self._heap.clear()
            self._condition.notify_all()
        if self._scheduler is not None:
            self._scheduler.join(timeout=5)

    def deliveries(self) -> list[Attempt]:
        """Every delivery attempt so far."""
        with self._condition:
            return list(self._attempts)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is scheduled or in flight; False on timeout."""
        with self._condition:
            return self._condition.wait_for(lambda: not self._heap and self._in_flight == 0, timeout)

    def _ingest(self, event: Event) -> tuple[int, str]:
        event = event.with_attributes(knativearrivaltime=_rfc3339(time.time()))
        ttl = next_ttl(event, self._ttl)
        if ttl <= 0:
            logger.warning("event %s (%s) dropped: TTL exhausted", event.id, event.type)
            return 400, "knativebrokerttl exhausted: the event went round the broker too often"
        event = event.with_attributes(knativebrokerttl=str(ttl))
        visible = event.with_attributes(knativebrokerttl=None)
        routes = [route for route in self._routes if route.trigger.matches(visible)]
        logger.info("event %s (%s) accepted for %s", event.id, event.type, [r.trigger.name for r in routes])
        with self._condition:
            if self._stopping:
                return 503, "broker stopped"
            for route in routes:
                self._schedule(_Task(route, "subscriber", visible, event), 0.0)
            if self._scheduler is None:
                self._scheduler = threading.Thread(target=self._run_scheduler, name="broker-scheduler", daemon=True)
                self._scheduler.start()
        return 202, ""

    def _now(self) -> float:
        return self._clock.now if self._clock else time.monotonic()

    def _schedule(self, task: _Task, delay: float) -> None:
        with self._condition:
            if not self._stopping:
                heapq.heappush(self._heap, (self._now() + delay, next(self._sequence), task))
                self._condition.notify_all()

    def _run_scheduler(self) -> None:
        """Start a sender thread for each task that is due, then wait for the next one."""
        with self._condition:
            while not self._stopping:
                now = self._now()
                while self._heap and self._heap[0][0] <= now:
                    task = heapq.heappop(self._heap)[2]
                    self._in_flight += 1
                    threading.Thread(target=self._run_task, args=(task,), daemon=True).start()
                timeout = self._heap[0][0] - now if self._heap else None
                if self._clock and timeout is not None and not self._in_flight:
                    self._clock.now += timeout  # nothing to do but wait: a virtual clock jumps
                else:
                    self._condition.wait(None if self._clock else timeout)

    def _run_task(self, task: _Task) -> None:
        try:
            self._deliver(task)
        except Exception:  # a bug here must not wedge the broker's in-flight count
            logger.exception("delivery for Trigger %s failed", task.route.trigger.name)
        finally:
            with self._condition:
                self._in_flight -= 1
                self._condition.notify_all()

    def _deliver(self, task: _Task) -> None:
        """Send the event, record the attempt, then retry, dead-letter, or ingest the reply."""
        route, event, to_subscriber = task.route, task.event, task.target == "subscriber"
        url = route.url if to_subscriber else route.dead_letter_url
        assert url is not None
        headers, body = to_binary(event)
        headers.update(event.headers)
        if to_subscriber:
            headers["Prefer"] = "reply"
        timeout = route.delivery.timeout or REQUEST_TIMEOUT
        status, error, retry_after, reply = None, None, None, None
        try:
            response = requests.post(url, data=body, headers=headers, allow_redirects=False, timeout=timeout)
            status = code = response.status_code
            error_body: bytes | None = response.content
            retry_after = response.headers.get("retry-after")
            if to_subscriber and 200 <= status < 300:
                reply = self._reply_of(response, task)
        except requests.RequestException as failure:  # Knative reports no response as 500
            code, error, error_body = 500, str(failure), f"dispatch error: {failure}".encode()
        except InvalidEvent as malformed:  # broker-filter answers 502, no body: no error extensions
            code, error, error_body = 502, f"malformed reply: {malformed}", None
        ok = 200 <= code < 300
        retry = not ok and is_retryable(code) and task.attempt <= route.delivery.retry
        delay = retry_wait(route.delivery, task.attempt - 1, code, retry_after, time.time()) if retry else None
        outcome: Outcome = ("delivered" if reply is None else "replied") if ok else ("retrying" if retry else "gave-up")
        attempt = Attempt(
            time=_rfc3339(time.time()),
            clock=self._now(),
            trigger=route.trigger.name,
            target=task.target,
            url=url,
            event_id=event.id,
            type=event.type,
            subject=event.attributes.get("subject"),
            attempt=task.attempt,
            status=status,
            error=error,
            next_delay=delay,
            outcome=outcome,
        )
        with self._condition:
            self._attempts.append(attempt)
        logger.log(logging.INFO if ok else logging.WARNING, "%s", attempt)
        if delay is not None:
            self._schedule(replace(task, attempt=task.attempt + 1), delay)
        elif not ok and to_subscriber:
            self._dead_letter(task, url, code, error_body)
        elif not ok:
            logger.error("dead-letter sink of Trigger %s failed, event %s lost", route.trigger.name, event.id)
        elif reply is not None:
            refused, _ = self._ingest(reply)
            if refused != 202:
                self._dead_letter(task, self._ingress_url, refused, b"")

    def _reply_of(self, response: requests.Response, task: _Task) -> Event | None:
        """The reply in a 2xx response (None for an empty body that is no CloudEvent), with the trace
        headers of the delivered event unless it has its own, and the TTL the delivered event had."""
        try:
            reply = parse_http(response.headers, response.content)
        except NotAnEvent:
            if response.content:
                raise InvalidEvent("a non-empty response that is not a CloudEvent") from None
            return None
        reply = replace(reply, headers={**task.event.headers, **reply.headers})
        return reply.with_attributes(knativebrokerttl=task.ingested.attributes.get("knativebrokerttl"))

    def _dead_letter(self, task: _Task, dest: str, code: int, body: bytes | None) -> None:
        """Send the event as ingested to the dead-letter sink; `body` None: without error extensions."""
        if task.route.dead_letter_url is None:
            logger.error("Trigger %s has no dead-letter sink, event %s lost", task.route.trigger.name, task.event.id)
            return
        event = task.ingested
        if body is not None:
            extensions = {"knativeerrordest": dest, "knativeerrorcode": str(code), "knativeerrordata": error_data(body)}
            event = event.with_attributes(**extensions)
        self._schedule(_Task(task.route, "dead-letter", event, task.ingested), 0.0)

    def _handle(self, request: Request) -> Response:
        request.max_content_length = self._max_body_bytes
        if request.path == "/_/deliveries":
            if request.method != "GET":
                return Response("use GET\n", 405, headers={"Allow": "GET"})
            return Response(json.dumps([a.to_dict() for a in self.deliveries()]), 200, mimetype="application/json")
        if request.path.rstrip("/") not in ("", f"/{NAMESPACE}/{BROKER}"):
            return Response("no such broker\n", 404)
        if request.method != "POST":
            return Response("use POST\n", 405, headers={"Allow": "POST"})
        try:
            event = parse_http(dict(request.headers.items()), request.get_data())
        except RequestEntityTooLarge:
            return Response(f"body larger than {self._max_body_bytes} bytes\n", 413)
        except InvalidEvent as error:
            return Response(f"{error}\n", 400)
        status, reason = self._ingest(event)
        return Response(f"{reason}\n" if reason else "", status)


def _url(trigger: Trigger, destination: Destination, role: str, resolve: Callable[[str], str | None]) -> str:
    if destination.service is None:
        assert destination.uri is not None
        return destination.uri
    base = resolve(destination.service)
    if not base:
        raise BrokerConfigError(
            f"Trigger {trigger.name} ({trigger.source or 'no file'}): cannot resolve the {role} Knative Service "
            f"{destination.service!r}; give its URL (--service {destination.service}=http://HOST:PORT)"
        )
    return base.rstrip("/") + "/" + destination.uri.lstrip("/") if destination.uri else base


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m shared.local.broker --triggers eventing/triggers --service NAME=URL ... --port N`."""
    parser = argparse.ArgumentParser(prog="python -m shared.local.broker", description="Local Knative Broker.")
    parser.add_argument("--triggers", type=Path, required=True, help="folder of Trigger YAML files")
    parser.add_argument("--service", action="append", default=[], metavar="NAME=URL", help="a Knative Service's URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    services = {name: url for name, _, url in (text.partition("=") for text in args.service)}
    try:
        broker = Broker(load_triggers(args.triggers), services.get)
    except (TriggerError, BrokerConfigError) as error:
        logger.error("cannot start the local broker: %s", error)
        return 2
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    broker.start(args.host, args.port)
    done.wait()
    broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
