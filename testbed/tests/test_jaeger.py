"""The test bed's trace receiver (testbed.jaeger): spans sent with the OpenTelemetry SDK over
OTLP/HTTP to the real Jaeger v2 all-in-one come back from its query API with their ids, parent
link, service, name, times, typed attributes and error status."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Status, StatusCode

from testbed.jaeger import Jaeger, TraceSpan, start_jaeger
from testbed.processes import Supervisor
from testbed.toolchain import Toolchain

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def jaeger(toolchain: Toolchain, testbed_supervisor: Supervisor, testbed_run_dir: Path) -> Iterator[Jaeger]:
    with start_jaeger(toolchain, testbed_supervisor, testbed_run_dir / "jaeger") as receiver:
        yield receiver


class SmallTraceIds(RandomIdGenerator):
    """Trace ids below 2**64: Jaeger's JSON writes them without their leading zeros."""

    def generate_trace_id(self) -> int:
        return secrets.randbits(63) | 1


def send(jaeger: Jaeger, service: str, small_ids: bool = False) -> tuple[ReadableSpan, ReadableSpan]:
    """A parent span and a failed child span, exported one by one, never via the global provider."""
    session = requests.Session()
    session.trust_env = False
    exporter = OTLPSpanExporter(endpoint=f"{jaeger.otlp_endpoint}/v1/traces", session=session)
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), id_generator=SmallTraceIds() if small_ids else None
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test_jaeger")
    attributes = {"tenant": "t-1", "attempt": 3, "ratio": 0.25, "ready": True}
    with (
        tracer.start_as_current_span("install", attributes=attributes) as parent,
        tracer.start_as_current_span("helm upgrade", attributes={"helm.outcome": "failed"}) as child,
    ):
        child.set_status(Status(StatusCode.ERROR, "timed out"))
    provider.shutdown()
    assert isinstance(parent, ReadableSpan) and isinstance(child, ReadableSpan)
    return parent, child


def trace_id(span: ReadableSpan) -> str:
    return format(span.context.trace_id, "032x")


def span_id(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def test_spans_sent_over_otlp_are_read_back_with_their_links_and_typed_attributes(jaeger: Jaeger) -> None:
    service = f"jaeger-test-{secrets.token_hex(3)}"
    parent, child = send(jaeger, service)

    spans = jaeger.wait_for_spans(trace_id(parent), lambda spans: len(spans) == 2)

    first, second = spans  # in start order
    assert isinstance(first, TraceSpan)
    assert (first.span_id, first.parent_id) == (span_id(parent), None)
    assert (second.span_id, second.parent_id) == (span_id(child), span_id(parent))
    assert {s.service for s in spans} == {service}
    assert (first.name, second.name) == ("install", "helm upgrade")
    assert parent.start_time is not None and parent.end_time is not None
    assert first.start_us == parent.start_time // 1000
    assert abs(first.duration_us - (parent.end_time - parent.start_time) // 1000) <= 1
    assert first.attributes["tenant"] == "t-1"
    assert first.attributes["attempt"] == 3 and type(first.attributes["attempt"]) is int
    assert first.attributes["ratio"] == 0.25
    assert first.attributes["ready"] is True
    assert (first.error, first.outcome) == (False, "ok")
    assert second.error is True
    assert second.attributes["otel.status_code"] == "ERROR"
    assert second.outcome == "failed"  # helm.outcome comes before the error flag


def test_a_service_lists_its_traces_and_jaeger_knows_the_service(jaeger: Jaeger) -> None:
    service = f"jaeger-test-{secrets.token_hex(3)}"
    older, _ = send(jaeger, service)
    newer, _ = send(jaeger, service)
    jaeger.wait_for_spans(trace_id(newer), lambda spans: len(spans) == 2)

    assert jaeger.trace_ids(service) == [trace_id(newer), trace_id(older)]  # most recent first
    assert jaeger.trace_ids(service, limit=1) == [trace_id(newer)]
    assert jaeger.trace_ids(f"{service}-unknown") == []
    assert service in jaeger.services()


def test_trace_ids_with_leading_zeros_read_as_opentelemetry_writes_them(jaeger: Jaeger) -> None:
    service = f"jaeger-test-{secrets.token_hex(3)}"
    parent, _ = send(jaeger, service, small_ids=True)
    assert trace_id(parent).startswith("0000000000000000")

    spans = jaeger.wait_for_spans(trace_id(parent), lambda spans: len(spans) == 2)

    assert spans[1].parent_id == span_id(parent)
    assert jaeger.trace_ids(service) == [trace_id(parent)]


def test_an_unknown_trace_is_empty_and_waiting_for_it_times_out(jaeger: Jaeger) -> None:
    unknown = secrets.token_hex(16)
    assert jaeger.trace(unknown) == []
    with pytest.raises(TimeoutError, match=f"trace {unknown} .*no spans"):
        jaeger.wait_for_spans(unknown, timeout=0.3)
