"""The Tenant model, status patches, and CloudEvents in and out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.delivery import events
from shared.errors import BadEvent, PermanentError
from shared.model import event_types
from shared.model.tenant import COND_READY, Condition, Phase, StatusUpdate, Tenant, merge_conditions

from .fakes import TENANT_NAMESPACE

CS_ID = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"


def tenant_object(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeopera.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {
            "name": "alice-default",
            "namespace": TENANT_NAMESPACE,
            "uid": "u-1",
            "generation": 3,
            "resourceVersion": "42",
        },
        "spec": {
            "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
            "tenantName": "alice-default",
            "cloudSpaceID": CS_ID,
            "quota": {"cpu": 2, "memory": "4Gi"},
        },
        "status": status,
    }


def test_tenant_from_object() -> None:
    t = Tenant.from_object(tenant_object(phase="Provisioning", observedGeneration=2))
    assert (t.namespace, t.name, t.uid, t.generation, t.resource_version) == (
        TENANT_NAMESPACE,
        "alice-default",
        "u-1",
        3,
        "42",
    )
    assert t.spec.quota.cpu == "2"
    assert t.status.phase is Phase.PROVISIONING
    assert t.status.observed_generation == 2


def test_tenant_without_required_spec_is_permanent() -> None:
    obj = tenant_object()
    del obj["spec"]["quota"]
    with pytest.raises(PermanentError, match="quota"):
        Tenant.from_object(obj)


def test_status_patch_is_guarded_by_resource_version_and_keeps_transition_times() -> None:
    earlier = "2026-01-01T00:00:00Z"
    t = Tenant.from_object(
        tenant_object(
            conditions=[
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Provisioning",
                    "message": "",
                    "lastTransitionTime": earlier,
                    "observedGeneration": 3,
                }
            ]
        )
    )
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    patch = StatusUpdate(
        phase=Phase.READY,
        fields={"kubeconfigSecret": "x"},
        conditions=(Condition(COND_READY, "True", "VClusterReady", "ok", 3), Condition("Other", "False", "R", "", 3)),
    ).patch_for(t, now)
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert patch["status"]["phase"] == "Ready"
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conds["Ready"]["lastTransitionTime"] == "2026-11-30T12:00:00Z"  # status changed
    assert conds["Other"]["lastTransitionTime"] == "2026-11-30T12:00:00Z"


def test_unchanged_condition_keeps_its_transition_time() -> None:
    old = [Condition("Ready", "False", "A", "", 1, "2026-01-01T00:00:00Z")]
    merged = merge_conditions(old, [Condition("Ready", "False", "B", "m", 2)], "2026-11-30T00:00:00Z")
    assert merged[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert merged[0].reason == "B"


def binary(event_type: str, data: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    return (
        {
            "ce-specversion": "1.0",
            "ce-id": "1",
            "ce-source": "/test",
            "ce-type": event_type,
            "content-type": "application/json",
        },
        json.dumps(data).encode(),
    )


def test_apiserver_event_yields_the_tenant_ref() -> None:
    headers, body = binary(event_types.APISERVER_ADD, tenant_object())
    ref = events.tenant_ref(events.parse(headers, body))
    assert (ref.namespace, ref.name, ref.uid, ref.generation) == (TENANT_NAMESPACE, "alice-default", "u-1", 3)


def test_structured_event_is_accepted() -> None:
    ref_data = {"namespace": "ns", "name": "n", "uid": "u", "generation": 1}
    body = json.dumps(
        {
            "specversion": "1.0",
            "id": "1",
            "source": "/x",
            "type": event_types.PROVISIONING,
            "datacontenttype": "application/json",
            "data": ref_data,
        }
    ).encode()
    event = events.parse({"Content-Type": "application/cloudevents+json"}, body)
    assert events.tenant_ref(event).key == "ns/n"


def test_own_events_follow_the_contract_and_round_trip() -> None:
    t = Tenant.from_object(tenant_object())
    event = events.make(event_types.KUBECONFIG_STORED, "store-kubeconfig", t.ref, kubeconfigSecret="s")
    headers, body = events.to_binary(event)
    assert headers["ce-source"] == "/kubeopera/tenants/store-kubeconfig"
    assert headers["ce-subject"] == f"{TENANT_NAMESPACE}/alice-default"
    assert headers["content-type"] == "application/json"
    again = events.parse(headers, body)
    assert again.get_data() == {
        "namespace": TENANT_NAMESPACE,
        "name": "alice-default",
        "uid": "u-1",
        "generation": 3,
        "kubeconfigSecret": "s",
    }


BINARY_JSON = {
    "ce-specversion": "1.0",
    "ce-id": "1",
    "ce-source": "/x",
    "ce-type": "x",
    "content-type": "application/json",
}
DEEP = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's JSON decoder goes


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        ({"content-type": "application/json"}, b'{"a": 1}', "not a CloudEvent"),
        ({"ce-specversion": "1.0", "ce-type": "x"}, b"{}", "malformed"),
        ({"content-type": "application/cloudevents+json"}, b"garbage", "malformed"),
        (BINARY_JSON, DEEP, "nested too deeply"),
        (
            {"content-type": "application/cloudevents+json"},
            b'{"specversion": "1.0", "id": "1", "source": "/x", "type": "x", "time": [null, null]}',
            "malformed",
        ),
        (
            {"content-type": "application/cloudevents+json"},
            b'{"specversion": "1.0", "id": "1", "source": "/x", "type": "x", "data": ' + DEEP + b"}",
            "nested too deeply",
        ),
    ],
)
def test_garbage_is_a_bad_event(headers: dict[str, str], body: bytes, message: str) -> None:
    with pytest.raises(BadEvent, match=message):
        events.parse(headers, body)


@pytest.mark.parametrize(
    "data",
    [
        {"namespace": "ns", "name": "n"},
        {"namespace": "ns", "name": "", "uid": "u"},
        {"namespace": "ns", "name": "n", "uid": "u", "generation": "3"},
        # names no Kubernetes object can have must not reach a URL or a selector
        {"namespace": "\ud800", "name": "n", "uid": "u", "generation": 1},
        {"namespace": "ns", "name": "../../secrets/x", "uid": "u", "generation": 1},
        {"namespace": "ns/x", "name": "n", "uid": "u", "generation": 1},
        {"namespace": "NS", "name": "n", "uid": "u", "generation": 1},
        {"namespace": "n" * 64, "name": "n", "uid": "u", "generation": 1},
        {"namespace": "ns", "name": "n" * 254, "uid": "u", "generation": 1},
        {"namespace": "ns", "name": "n", "uid": "u,kubeopera.io/owner-uid!=x", "generation": 1},
        {"namespace": "ns", "name": "n", "uid": "u" * 129, "generation": 1},
    ],
)
def test_event_data_without_a_tenant_ref_is_bad(data: dict[str, Any]) -> None:
    headers, body = binary(event_types.PROVISIONING, data)
    with pytest.raises(BadEvent):
        events.tenant_ref(events.parse(headers, body))


def test_the_longest_names_kubernetes_allows_are_a_tenant_ref() -> None:
    data = {"namespace": "n" * 63, "name": ".".join(["a" * 63] * 3) + ".b", "uid": "u" * 128, "generation": 2**63}
    headers, body = binary(event_types.PROVISIONING, data)
    ref = events.tenant_ref(events.parse(headers, body))
    assert (ref.namespace, ref.name, ref.uid) == (data["namespace"], data["name"], data["uid"])


def test_apiserver_event_about_another_kind_is_bad() -> None:
    obj = tenant_object()
    obj["kind"] = "ConfigMap"
    headers, body = binary(event_types.APISERVER_UPDATE, obj)
    with pytest.raises(BadEvent, match="ConfigMap"):
        events.tenant_ref(events.parse(headers, body))
