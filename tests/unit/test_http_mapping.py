"""The one place where errors become HTTP answers (design.md rule 4), through Flask's client.

The step here is plain Python standing in for a function's decision; no API server or helm is
involved at this layer, so nothing real is replaced.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from cloudevents.core.base import BaseCloudEvent

from functions.dead_letter import failed_step, failure_reason
from shared.delivery import events
from shared.delivery.http import MAX_BODY_BYTES, Step, function_app
from shared.errors import Conflict, NotReadyYet, PermanentError, TemporaryError
from shared.model import event_types
from shared.model.tenant import TenantRef
from shared.observability import timing

from .fakes import TENANT_NAMESPACE

REF = {"namespace": TENANT_NAMESPACE, "name": "alice", "uid": "u-1", "generation": 1}


def post(handle: Callable[[BaseCloudEvent, TenantRef], BaseCloudEvent | None], **kw: Any) -> Any:
    failed: list[str] = []
    app = function_app(
        Step(
            name="t",
            accepts=frozenset({event_types.PROVISIONING}),
            handle=handle,
            on_permanent=lambda ref, err: failed.append(f"{ref.key}: {err}"),
        )
    )
    client = app.test_client()
    headers = kw.pop("headers", None) or {
        "ce-specversion": "1.0",
        "ce-id": "1",
        "ce-source": "/test",
        "ce-type": event_types.PROVISIONING,
        "Content-Type": "application/json",
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }
    response = client.post("/", headers=headers, data=kw.pop("data", json.dumps(REF)))
    response.failed = failed
    return response


def test_reply_is_a_binary_cloudevent() -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent:
        return events.make(event_types.READY, "t", ref)

    r = post(handle)
    assert r.status_code == 200
    assert r.headers["ce-type"] == event_types.READY
    assert json.loads(r.data) == REF


def test_nothing_to_do_is_204() -> None:
    assert post(lambda e, r: None).status_code == 204


def test_not_ready_is_503_with_retry_after() -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise NotReadyYet("booting")

    r = post(handle)
    assert (r.status_code, r.headers["Retry-After"]) == (503, "15")
    assert r.json == {"error": "booting"}


def test_permanent_error_marks_failed_then_answers_422() -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise PermanentError("chart rejected the values")

    r = post(handle)
    assert r.status_code == 422
    assert r.failed == [f"{TENANT_NAMESPACE}/alice: chart rejected the values"]


def test_conflict_reruns_the_step_then_gives_up_as_temporary() -> None:
    calls: list[int] = []

    def flaky(event: BaseCloudEvent, ref: TenantRef) -> None:
        calls.append(1)
        if len(calls) < 3:
            raise Conflict("moved")

    assert post(flaky).status_code == 204
    assert len(calls) == 3

    def always(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise Conflict("moved")

    assert post(always).status_code == 503


def test_unexpected_errors_are_500_without_details() -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise RuntimeError("token=s3cret")

    r = post(handle)
    assert r.status_code == 500
    assert b"s3cret" not in r.data


def test_temporary_error_without_delay_has_no_retry_after() -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise TemporaryError("api down")

    r = post(handle)
    assert r.status_code == 503 and "Retry-After" not in r.headers


@pytest.mark.parametrize(
    ("headers", "data"),
    [
        ({"Content-Type": "application/json"}, b"{}"),
        ({"Content-Type": "text/plain"}, b"garbage"),
        (
            {
                "ce-specversion": "1.0",
                "ce-id": "1",
                "ce-source": "/x",
                "ce-type": "other.type",
                "Content-Type": "application/json",
            },
            json.dumps(REF),
        ),
    ],
)
def test_bad_requests_are_400_and_never_reach_the_step(headers: dict[str, str], data: Any) -> None:
    reached: list[int] = []
    r = post(lambda e, ref: reached.append(1), headers=headers, data=data)
    assert r.status_code == 400
    assert "error" in r.json
    assert reached == []


def test_oversized_body_is_413() -> None:
    r = post(lambda e, ref: None, data=b"x" * (MAX_BODY_BYTES + 1))
    assert r.status_code == 413


def test_probes_and_metrics() -> None:
    app = function_app(Step("probe", frozenset(), lambda e, r: None, lambda r, e: None, ready=lambda: False))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503
    post(lambda e, r: None)
    body = client.get("/metrics").data.decode()
    assert 'controller_runtime_reconcile_total{controller="t",result="success"}' in body
    assert "controller_runtime_reconcile_time_seconds_bucket" in body


def test_dead_letter_reason_decodes_the_function_answer() -> None:
    event = events.make(event_types.PROVISIONING, "install", TenantRef("ns", "n", "u", 1))
    attrs = event.get_attributes() | {
        "knativeerrordest": f"http://tenant-check-ready.{TENANT_NAMESPACE}.svc.cluster.local",
        "knativeerrorcode": "503",
        "knativeerrordata": base64.b64encode(b'{"error": "waiting for vcluster"}').decode(),
    }
    from cloudevents.core.v1.event import CloudEvent

    dead = CloudEvent(attributes=attrs, data=event.get_data())
    reason = failure_reason(dead, failed_step(dead))
    assert reason == (
        "io.kubeopera.tenant.provisioning could not be delivered to tenant-check-ready: "
        "last answer 503: waiting for vcluster"
    )


def test_every_delivery_ends_with_one_answered_line_that_says_how_long_helm_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        with timing.helm(), timing.helm():  # an install, and the chart pull inside it: counted once
            time.sleep(0.02)
        with timing.helm():  # a status read
            pass
        raise NotReadyYet("booting")

    caplog.set_level(logging.INFO, logger="shared.delivery.http")
    assert post(handle).status_code == 503
    (line,) = [r for r in caplog.records if r.getMessage() == "answered"]
    fields = line.__dict__
    assert (fields["status"], fields["result"], fields["type"], fields["id"]) == (
        503,
        "requeue",
        event_types.PROVISIONING,
        "1",
    )
    assert fields["helm_operations"] == 2
    assert 0.02 <= fields["helm_seconds"] <= fields["seconds"]


def test_a_refused_body_is_answered_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="shared.delivery.http")
    assert post(lambda e, r: None, data=b"{not json").status_code == 400
    (line,) = [r for r in caplog.records if r.getMessage() == "answered"]
    assert (line.__dict__["status"], line.__dict__["helm_operations"], line.__dict__["helm_seconds"]) == (400, 0, 0.0)


def test_helm_outside_a_delivery_keeps_no_clock() -> None:
    with timing.helm():
        pass  # resync's pass or a step called directly: nothing to add to, nothing raised
    with timing.delivery() as clock:
        pass
    assert (clock.helm_operations, clock.helm_seconds) == (0, 0.0)
