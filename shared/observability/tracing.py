"""Traces: one trace per Tenant across the chain, with OpenTelemetry (the only module that imports it).

Configured only by the standard ``OTEL_*`` variables, and off unless an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED``
turns it off again. The SDK reads the rest itself: ``OTEL_SERVICE_NAME`` (default
``tenant-<function>``), ``OTEL_TRACES_SAMPLER`` (default ``parentbased_always_on``),
``OTEL_EXPORTER_OTLP_*`` (protocol http/protobuf), ``OTEL_BSP_*`` (the batch processor). Spans
leave through a background batch processor, so a slow or absent collector never delays or fails
a delivery; with tracing off every call here is OpenTelemetry's no-op.

Where a trace comes from (:func:`incoming`): the CloudEvents ``traceparent`` extension first,
then the W3C ``traceparent`` header. Each function puts its delivery span's context on its reply
as that extension (:func:`stamp`), an event attribute the broker keeps unchanged, so the next
function's span is the child of the previous one's, and a check-ready poll the broker
re-delivers is one more child of install's span, in the same trace. The header is what Knative
itself propagates hop by hop; it is used when there is no extension (the first event of a
chain), so a trace Knative started (or an ApiServerSource with tracing on) goes on.

Nothing secret goes on a span: attributes are event attributes, names, phases, counts and
status codes, never event data, kubeconfigs, tokens or Secret content.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.v1.event import CloudEvent
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:  # the SDK is imported only when tracing is on (configure): off, it is not loaded at all
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

TRACER = "kubeopera-tenants"
_PROPAGATOR = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None


def enabled_by(environ: Mapping[str, str]) -> bool:
    """Whether these variables turn tracing on: an OTLP endpoint set, the SDK not disabled."""
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return bool(endpoint and endpoint.strip()) and not disabled


def configure(function: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the tracer provider for this process if the environment asks for it; whether it did.

    Called once per worker process (gunicorn builds the app after fork). A failure to set up
    is logged and leaves tracing off: tracing never stops a function from starting."""
    global _provider
    env = os.environ if environ is None else environ
    if _provider is not None or not enabled_by(env):
        return _provider is not None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": f"tenant-{function}"}
        provider = TracerProvider(resource=Resource.create(attributes))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    except Exception:
        log.exception("tracing could not be set up; going on without it")
        return False
    _provider = provider
    log.info("tracing on", extra={"service": provider.resource.attributes.get("service.name", "")})
    return True


def shutdown() -> None:
    """Flush what is buffered (a worker about to exit)."""
    if _provider is not None:
        _provider.shutdown()


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


def incoming(headers: Mapping[str, str], event: BaseCloudEvent | None) -> otel_context.Context:
    """The context a delivery continues: the event's ``traceparent`` extension, else the header
    (``headers`` with lowercase names)."""
    carrier: dict[str, str] = {}
    if event is not None:
        extension = event.get_extension("traceparent")
        if isinstance(extension, str) and extension:
            carrier["traceparent"] = extension
            state = event.get_extension("tracestate")
            if isinstance(state, str) and state:
                carrier["tracestate"] = state
    if not carrier:
        carrier = {name: headers[name] for name in ("traceparent", "tracestate") if headers.get(name)}
    return _PROPAGATOR.extract(carrier)


def current_traceparent() -> str:
    """The W3C ``traceparent`` of the current span ("" with no span, e.g. tracing off and no
    incoming context)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current trace context to outgoing HTTP headers (kubeopera-api, the broker)."""
    _PROPAGATOR.inject(headers)
    return headers


def stamp(event: BaseCloudEvent) -> BaseCloudEvent:
    """The event with the current trace context as its ``traceparent``/``tracestate`` extensions,
    unless it names the trace it continues itself (check-ready's ready event after a look, which
    continues the provisioning's trace: ``status.traceparent``)."""
    if event.get_extension("traceparent"):
        return event
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    if not carrier.get("traceparent"):
        return event
    return CloudEvent(attributes={**event.get_attributes(), **carrier}, data=event.get_data())


def event_attributes(event: BaseCloudEvent) -> dict[str, str]:
    """A CloudEvent's attributes as span attributes (OpenTelemetry's CloudEvents conventions)."""
    found = {
        "cloudevents.event_id": event.get_id(),
        "cloudevents.event_type": event.get_type(),
        "cloudevents.event_source": event.get_source(),
        "cloudevents.event_spec_version": event.get_specversion(),
        "cloudevents.event_subject": event.get_subject() or "",
    }
    return {k: v for k, v in found.items() if v}


@contextmanager
def delivery(function: str, parent: otel_context.Context) -> Iterator[Span]:
    """The server span of one delivery, continuing ``parent``; current inside the block."""
    token = otel_context.attach(parent)
    try:
        with _tracer().start_as_current_span(
            function, kind=SpanKind.SERVER, attributes={"faas.trigger": "pubsub", "faas.name": function}
        ) as span:
            yield span
    finally:
        otel_context.detach(token)


@contextmanager
def span(
    name: str, attributes: Mapping[str, Any] | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[Span]:
    """A child span of the current one (a Kubernetes call, a helm operation, an HTTP request).
    An exception leaving the block marks the span as an error with the exception's type."""
    with _tracer().start_as_current_span(
        name,
        kind=kind,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as err:
            current.set_status(Status(StatusCode.ERROR, type(err).__name__))
            current.set_attribute("error.type", type(err).__name__)
            raise


def client_span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Span]:
    """:func:`span` of kind CLIENT."""
    return span(name, attributes, kind=SpanKind.CLIENT)


def annotate(**attributes: str) -> None:
    """Put attributes on the current span (the Tenant a delivery is about)."""
    current = trace.get_current_span()
    for key, value in attributes.items():
        current.set_attribute(f"kubeopera.{key}", value)


def outcome(span: Span, status_code: int, result: str) -> None:
    """How a delivery ended: its HTTP status and its result (success, requeue or error)."""
    span.set_attribute("http.response.status_code", status_code)
    span.set_attribute("kubeopera.outcome", result)
    if result == "error":
        span.set_status(Status(StatusCode.ERROR, f"answered {status_code}"))


def error_status(description: str) -> Status:
    """An error status for a span (a failed callback, which is not an exception)."""
    return Status(StatusCode.ERROR, description)
