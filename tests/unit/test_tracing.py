"""Traces across the chain (``shared.observability.tracing``), recorded by OpenTelemetry's own SDK into memory.

The functions run over HTTP with the unit stand-ins of their adapters, so the spans here are the
delivery spans and their links; the Kubernetes, helm and kubeopera-api spans of the real
adapters are checked end to end against a real OTLP receiver (tests/e2e/test_tracing.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from cloudevents.core.base import BaseCloudEvent
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from functions import check_ready, install, notify_api, resync, router, store_kubeconfig
from shared.delivery import events
from shared.model import event_types
from shared.model.cluster import Rollout
from shared.model.tenant import FINALIZER
from shared.observability import tracing
from shared.runtime import Runtime
from shared.settings import Settings

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    FakeSink,
    FakeVClusterApi,
    apiserver_event,
    deliver,
    step_event,
    tenant_object,
)

CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
CONFIG = b"apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: s3cr3t-token}}]\n"
INCOMING = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """OpenTelemetry's SDK for this process (a provider can be set once per process)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    if not isinstance(trace.get_tracer_provider(), TracerProvider):  # pragma: no cover
        pytest.fail("another tracer provider was set first")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _delivery_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]


def _reply(response: object) -> BaseCloudEvent:
    assert getattr(response, "status_code", None) == 200
    return events.parse(dict(response.headers), response.data)  # type: ignore[attr-defined]


def test_the_chain_is_one_trace_each_step_the_child_of_the_one_before(
    spans: InMemorySpanExporter, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    settings = Settings(ready_poll_seconds=1)
    runtime = Runtime(
        settings=settings, kube=kube, helm=helm, kubeopera_api=api, sink=FakeSink(kube), vcluster_api=FakeVClusterApi()
    )
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    checker = check_ready.create_app(runtime)

    added = apiserver_event(obj, event_types.APISERVER_ADD)
    routed = _reply(deliver(router.create_app(runtime), added, {"traceparent": INCOMING}))
    provisioning = _reply(deliver(install.create_app(runtime), routed))
    poll = deliver(checker, provisioning)  # the vCluster is not up: 503, the broker re-delivers
    assert poll.status_code == 503
    kube.boot_vcluster("bob-dev", CONFIG)
    ready = _reply(deliver(checker, provisioning))  # the same event, re-delivered
    stored = _reply(deliver(store_kubeconfig.create_app(runtime), ready))
    assert deliver(notify_api.create_app(runtime), stored).status_code == 204

    router_span, install_span, poll_span, check_span, store_span, notify_span = _delivery_spans(spans)
    assert {s.context.trace_id for s in _delivery_spans(spans)} == {int("a" * 32, 16)}
    assert router_span.parent is not None and router_span.parent.span_id == int("b" * 16, 16)
    assert install_span.parent.span_id == router_span.context.span_id  # type: ignore[union-attr]
    assert poll_span.parent.span_id == install_span.context.span_id  # type: ignore[union-attr]
    assert check_span.parent.span_id == install_span.context.span_id  # type: ignore[union-attr]
    assert store_span.parent.span_id == check_span.context.span_id  # type: ignore[union-attr]
    assert notify_span.parent.span_id == store_span.context.span_id  # type: ignore[union-attr]

    assert router_span.name == f"router {event_types.APISERVER_ADD}"
    assert install_span.name == f"install {event_types.INSTALL}"
    assert install_span.attributes is not None
    assert install_span.attributes["cloudevents.event_type"] == event_types.INSTALL
    assert install_span.attributes["kubeopera.tenant"] == "kubeopera-system/bob-dev"
    assert install_span.attributes["http.response.status_code"] == 200
    assert poll_span.attributes is not None
    assert (poll_span.attributes["http.response.status_code"], poll_span.attributes["kubeopera.outcome"]) == (
        503,
        "requeue",
    )
    assert poll_span.status.status_code != StatusCode.ERROR, "a poll is not an error"


def test_a_ready_heard_from_the_vcluster_goes_on_in_the_provisionings_trace(
    spans: InMemorySpanExporter, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """install keeps its trace context on the Tenant (status.traceparent); check-ready's look at a
    StatefulSet change, in the trace of that change, replies ready in the provisioning's trace."""
    sink, vcluster = FakeSink(kube), FakeVClusterApi()
    runtime = Runtime(settings=Settings(), kube=kube, helm=helm, kubeopera_api=api, sink=sink, vcluster_api=vcluster)
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    routed = _reply(deliver(router.create_app(runtime), apiserver_event(obj), {"traceparent": INCOMING}))
    _reply(deliver(install.create_app(runtime), routed))
    (_, install_span) = _delivery_spans(spans)
    stored = kube.tenant_dict(TENANT_NAMESPACE, "bob-dev")
    assert stored is not None
    assert stored["status"]["traceparent"] == f"00-{'a' * 32}-{install_span.context.span_id:016x}-01"

    kube.boot_vcluster("bob-dev", CONFIG)
    change = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"  # the StatefulSet change's own trace
    hint = step_event(stored, event_types.VCLUSTER_CHANGED)
    ready = _reply(deliver(check_ready.create_app(runtime), hint, {"traceparent": change}))
    assert ready.get_type() == event_types.READY
    look_span = _delivery_spans(spans)[-1]
    assert look_span.context.trace_id == int("c" * 32, 16), "the look is a span of the change's trace"
    assert ready.get_extension("traceparent") == stored["status"]["traceparent"], "its reply, of install's"


def test_a_chain_without_incoming_context_starts_its_own_trace(
    spans: InMemorySpanExporter, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    runtime = Runtime(
        settings=Settings(),
        kube=kube,
        helm=helm,
        kubeopera_api=api,
        sink=FakeSink(kube),
        vcluster_api=FakeVClusterApi(),
    )
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    provisioning = _reply(deliver(install.create_app(runtime), step_event(obj, event_types.INSTALL)))

    (install_span,) = _delivery_spans(spans)
    assert install_span.parent is None
    version, trace_id, span_id, _flags = str(provisioning.get_extension("traceparent")).split("-")
    context = install_span.context
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")


def test_a_refused_event_is_an_error_span(spans: InMemorySpanExporter, kube: FakeKube, helm: FakeHelm) -> None:
    runtime = Runtime(
        settings=Settings(), kube=kube, helm=helm, kubeopera_api=FakeKubeoperaApi(), vcluster_api=FakeVClusterApi()
    )
    app = install.create_app(runtime)

    response = app.test_client().post("/", headers={"traceparent": INCOMING}, data=b"not an event")

    assert response.status_code == 400
    (span,) = _delivery_spans(spans)
    assert span.status.status_code == StatusCode.ERROR
    assert span.context.trace_id == int("a" * 32, 16)


def test_no_span_holds_a_secret(
    spans: InMemorySpanExporter, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    test_the_chain_is_one_trace_each_step_the_child_of_the_one_before(spans, kube, helm, api)
    for span in spans.get_finished_spans():
        text = repr(dict(span.attributes or {})) + repr([dict(e.attributes or {}) for e in span.events])
        assert "s3cr3t" not in text and "kubeconfig:" not in text and "token" not in text.lower(), span.name


def test_tracing_is_off_unless_an_endpoint_is_set() -> None:
    assert not tracing.enabled_by({})
    assert not tracing.enabled_by({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"})
    assert tracing.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.enabled_by({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not tracing.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})


class TracedKube(FakeKube):
    """A FakeKube whose read of vcluster's Secret (resync's one read per Tenant) opens a client
    span, as the real adapter's does, and notes the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        with tracing.client_span("k8s get secret"):
            self.threads.add(threading.current_thread().name)
            return super().read_secret_key(namespace, name, key)


def test_resyncs_reads_on_its_worker_threads_are_children_of_the_tick(spans: InMemorySpanExporter) -> None:
    kube = TracedKube()
    names = [f"team-{i}" for i in range(12)]
    for i, name in enumerate(names):
        status = {"phase": "Ready", "observedGeneration": 1}
        kube.add_tenant(
            tenant_object(name, f"{i:08d}-0000-4000-8000-000000000000", status=status, finalizers=[FINALIZER])
        )
        if i % 2:
            kube.rollouts[(f"vcluster-{name}", f"vc-{name}")] = Rollout(1, 1, 1, 1, 1)
    tenants = kube.list_tenants(TENANT_NAMESPACE, "")

    with tracing.span("tick") as tick:
        drifts = resync.observe_all(kube, Settings(), tenants)

    assert {key: d.release_present for key, d in drifts.items()} == {
        f"{TENANT_NAMESPACE}/{name}": bool(i % 2) for i, name in enumerate(names)
    }
    assert len(kube.threads) > 1 and all(t.startswith("resync-observe") for t in kube.threads)
    reads = [s for s in spans.get_finished_spans() if s.name == "k8s get secret"]
    assert len(reads) == len(names)
    tick_context = tick.get_span_context()
    assert all(s.parent is not None and s.parent.span_id == tick_context.span_id for s in reads)
    assert {s.context.trace_id for s in reads} == {tick_context.trace_id}
