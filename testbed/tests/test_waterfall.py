"""The terminal waterfall of a trace (``testbed.local.waterfall``): order, nesting, offsets,
outcomes and bars, from spans as the receiver returns them."""

from __future__ import annotations

from testbed.jaeger import TraceSpan
from testbed.local.waterfall import render

T0 = 1_700_000_000_000_000


def span(
    span_id: str, parent: str | None, service: str, name: str, start_s: float, dur_s: float, **attrs: object
) -> TraceSpan:
    return TraceSpan(span_id, parent, service, name, T0 + int(start_s * 1e6), int(dur_s * 1e6), attrs)


def test_the_chain_reads_in_start_order_nested_under_parents() -> None:
    spans = [
        span(
            "c",
            "a",
            "tenant-check-ready",
            "check-ready io.kubeopera.tenant.provisioning",
            1.2,
            0.05,
            **{"kubeopera.outcome": "requeue", "http.response.status_code": 503},
        ),
        span(
            "a",
            None,
            "tenant-install",
            "install dev.knative.apiserver.resource.add",
            0.0,
            1.0,
            **{"kubeopera.outcome": "success", "http.response.status_code": 200},
        ),
        span("h", "a", "tenant-install", "helm upgrade --install", 0.3, 0.6, **{"helm.outcome": "installed"}),
        span(
            "d",
            "a",
            "tenant-check-ready",
            "check-ready io.kubeopera.tenant.provisioning",
            2.2,
            0.04,
            **{"kubeopera.outcome": "success", "http.response.status_code": 200},
        ),
        span(
            "p",
            "d",
            "tenant-notify-api",
            "PATCH /api/v1/cloudspaces/{id}",
            2.3,
            0.1,
            **{"kubeopera.callback_delivered": True},
        ),
    ]

    lines = render(spans, width=20)

    assert lines[0].split()[:5] == ["START", "DURATION", "FUNCTION", "STEP", "OUTCOME"]
    body = lines[1:]
    assert [line.split()[2] for line in body] == ["install", "install", "check-ready", "check-ready", "notify-api"]
    assert body[0].split()[0] == "0.00s" and body[2].split()[0] == "1.20s"
    assert "  helm upgrade --install" in body[1] and "installed" in body[1]
    assert "requeue 503" in body[2] and "success 200" in body[3] and "delivered" in body[4]
    column = lines[0].index("0s")
    bars = [line[column:].ljust(20) for line in body]
    assert bars[0].startswith("#") and bars[2].index("#") > bars[1].index("#")


def test_no_spans_says_so() -> None:
    assert render([]) == ["(no spans)"]


def test_a_span_whose_parent_is_missing_is_at_the_top() -> None:
    (line,) = render([span("x", "gone", "tenant-resync", "resync dev.knative.sources.ping", 0, 0.01)])[1:]
    assert "resync dev.knative.sources.ping" in line and "  resync" not in line.split("resync", 1)[0]
