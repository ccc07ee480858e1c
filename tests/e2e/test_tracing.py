"""One trace per Tenant across the chain, stored by a real OTLP receiver (Jaeger v2).

The functions run with tracing on (``OTEL_EXPORTER_OTLP_ENDPOINT`` at the test bed's Jaeger, the
standard variables only) on Knative's own broker. A Tenant is provisioned; from what Jaeger
stored: one trace id over the spans of install, check-ready, store-kubeconfig and notify-api,
each delivery the child of the one before it across the broker's hops, every check-ready poll
one more child of install's delivery, and the helm, Kubernetes and kubeopera-api spans under the
deliveries that made them. No span holds a secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from shared.adapters.kube import Kube
from shared.model import event_types
from testbed.jaeger import Jaeger, TraceSpan, start_jaeger
from testbed.local.stack import Stack, StackOptions, start_stack

from .support import phase_of, tenant_yaml, wait_for

pytestmark = pytest.mark.integration

CS_PIA = "5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e8f"
FUNCTIONS = ("tenant-router", "tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-notify-api")


@pytest.fixture(scope="module")
def jaeger_and_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Jaeger, Stack]]:
    from testbed.processes import Supervisor
    from testbed.toolchain import ensure_all

    run_dir = tmp_path_factory.mktemp("jaeger")
    with Supervisor(run_dir / "logs") as supervisor, start_jaeger(ensure_all(), supervisor, run_dir) as jaeger:
        options = StackOptions(
            vcluster_boot_seconds=3.0,
            ready_poll_seconds=1,
            function_env={"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"},
        )
        with start_stack(options) as stack:
            yield jaeger, stack


@pytest.fixture(scope="module")
def jaeger(jaeger_and_stack: tuple[Jaeger, Stack]) -> Jaeger:
    return jaeger_and_stack[0]


@pytest.fixture(scope="module")
def pipeline(jaeger_and_stack: tuple[Jaeger, Stack]) -> Stack:
    return jaeger_and_stack[1]


@pytest.fixture(scope="module")
def pia_trace(pipeline: Stack, kube: Kube, jaeger: Jaeger) -> list[TraceSpan]:
    """The trace of pia's provisioning: the one that holds notify-api's delivery for her."""
    # No tick can list pia: the stack answered its start tick before it was handed over, and holds
    # the PingSource's schedule; an earlier test's tick is answered too.
    assert pipeline.watch.wait_idle(timeout=30)
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("pia", CS_PIA))
    wait_for("pia to be Ready", lambda: phase_of(kube, "pia", "Ready"), timeout=180)
    assert pipeline.watch.wait_idle(timeout=30)

    def notified() -> list[TraceSpan] | None:
        """pia's trace once each function's delivery span is stored (spans arrive in any order)."""
        for trace_id in jaeger.trace_ids("tenant-notify-api"):
            spans = jaeger.trace(trace_id)
            if any(s.service == "tenant-notify-api" and _tenant(s) == "kubeopera-system/pia" for s in spans):
                return spans if all(_deliveries(spans, service) for service in FUNCTIONS) else None
        return None

    return wait_for("pia's trace in Jaeger", notified, timeout=30)


def _tenant(span: TraceSpan) -> object:
    return span.attributes.get("kubeopera.tenant")


def _deliveries(spans: list[TraceSpan], service: str) -> list[TraceSpan]:
    return sorted(
        (s for s in spans if s.service == service and "cloudevents.event_type" in s.attributes),
        key=lambda s: s.start_us,
    )


def _children(spans: list[TraceSpan], parent: TraceSpan) -> list[TraceSpan]:
    return [s for s in spans if s.parent_id == parent.span_id]


def test_the_five_functions_of_a_provisioning_share_one_trace(pia_trace: list[TraceSpan]) -> None:
    services = {s.service for s in pia_trace}
    assert set(FUNCTIONS) <= services, services
    for service in FUNCTIONS:
        assert all(_tenant(s) == "kubeopera-system/pia" for s in _deliveries(pia_trace, service)), service


def test_each_delivery_is_the_child_of_the_one_before(pia_trace: list[TraceSpan]) -> None:
    (router,) = _deliveries(pia_trace, "tenant-router")
    (install,) = _deliveries(pia_trace, "tenant-install")
    checks = _deliveries(pia_trace, "tenant-check-ready")
    (store,) = _deliveries(pia_trace, "tenant-store-kubeconfig")
    (notify,) = _deliveries(pia_trace, "tenant-notify-api")

    # The chain starts at the ApiServerSource's event, which the router sent on to install: no
    # resync tick ran while pia was Pending.
    assert router.attributes["cloudevents.event_type"] == event_types.APISERVER_ADD
    assert install.attributes["cloudevents.event_type"] == event_types.INSTALL
    assert install.parent_id == router.span_id, "install continues the router's reply"
    assert all(c.parent_id == install.span_id for c in checks), "every poll continues install's reply"
    if checks[-1].outcome == "success 200":  # a poll found the vCluster ready
        assert store.parent_id == checks[-1].span_id, "store-kubeconfig continues the check that found it ready"
    else:
        # check-ready's look at the StatefulSet's change did first (its span is in that change's
        # trace), and the poll after it found pia Ready: the ready event went on from install's
        # context, which install keeps on the Tenant (status.traceparent)
        assert checks[-1].outcome == "success 204", [c.outcome for c in checks]
        assert store.parent_id == install.span_id, "store-kubeconfig continues the provisioning's trace"
    assert notify.parent_id == store.span_id
    assert [s.outcome for s in (router, install, store)] == ["success 200"] * 3
    assert notify.outcome == "success 204"


def test_the_polls_are_spans_with_the_brokers_waits_between(pia_trace: list[TraceSpan]) -> None:
    checks = _deliveries(pia_trace, "tenant-check-ready")
    polls = [c for c in checks if c.attributes.get("http.response.status_code") == 503]
    assert len(polls) >= 1 and len(checks) == len(polls) + 1, [c.outcome for c in checks]
    assert all(p.outcome == "requeue 503" and not p.error for p in polls)
    gaps = [b.start_us - (a.start_us + a.duration_us) for a, b in zip(checks, checks[1:], strict=False)]
    assert all(gap > 500_000 for gap in gaps), f"the 1 s poll is the broker's delay between deliveries: {gaps}"


def test_helm_kubernetes_and_callback_spans_hang_under_their_delivery(pia_trace: list[TraceSpan]) -> None:
    (install,) = _deliveries(pia_trace, "tenant-install")
    (notify,) = _deliveries(pia_trace, "tenant-notify-api")
    under_install = {s.name for s in _children(pia_trace, install)}
    assert "helm upgrade --install" in under_install
    # a new Tenant's namespace is created without a read first
    assert {"k8s get tenant", "k8s create namespace", "k8s patch tenant"} <= under_install
    assert "k8s get namespace" not in under_install
    (helm,) = [s for s in _children(pia_trace, install) if s.name == "helm upgrade --install"]
    assert helm.attributes["helm.outcome"] == "installed" and helm.attributes["helm.release"] == "vc-pia"
    (callback,) = [s for s in _children(pia_trace, notify) if s.name.startswith("PATCH /api/v1/cloudspaces")]
    assert callback.attributes["kubeopera.callback_delivered"] is True
    for check in _deliveries(pia_trace, "tenant-check-ready"):
        if check.outcome == "success 204":
            continue  # the poll after check-ready's look made pia Ready: it reads her, and stops
        names = {s.name for s in _children(pia_trace, check)}
        # the StatefulSet first; helm's release record is read from the API (shared.adapters.release)
        # only once the control plane has rolled out (the look that finds it up is in the trace of
        # the StatefulSet's change): no helm process per poll
        assert "k8s get statefulset" in names
        assert not any(name.startswith("helm") for name in names)


def test_the_callback_carries_the_trace_on(pipeline: Stack, pia_trace: list[TraceSpan]) -> None:
    assert pipeline.api is not None
    (notify,) = _deliveries(pia_trace, "tenant-notify-api")
    (callback,) = [s for s in _children(pia_trace, notify) if s.name.startswith("PATCH")]
    received = [r for r in pipeline.api.requests() if r.path == f"/api/v1/cloudspaces/{CS_PIA}"]
    assert received, "kubeopera-api got pia's callback"
    headers = {name.lower(): value for name, value in received[-1].headers}
    traceparent = headers.get("traceparent", "")
    assert traceparent.split("-")[2] == callback.span_id


def test_no_span_holds_a_secret(pipeline: Stack, pia_trace: list[TraceSpan]) -> None:
    secret = pipeline.kubectl(
        "get", "secret", f"tenant-{CS_PIA}-kubeconfig", "-n", "kubeopera-system", "-o", "jsonpath={.data.kubeconfig}"
    )
    assert secret
    for span in pia_trace:
        text = repr(span.attributes)
        assert secret[:40] not in text and "BEGIN CERTIFICATE" not in text and "client-key" not in text, span.name


def test_a_trace_header_sent_to_the_broker_is_continued(pipeline: Stack, jaeger: Jaeger) -> None:
    """The W3C header on an event entering the broker reaches the function: resync's span joins it."""
    trace_id = uuid.uuid4().hex
    traceparent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    pipeline.tick({"traceparent": traceparent})
    spans = wait_for("resync's span in the sent trace", lambda: jaeger.trace(trace_id), timeout=30)
    assert any(s.service == "tenant-resync" for s in spans)
