"""Each function's ``create_app``, given a ``shared.runtime.Runtime`` made of the stand-ins
(``tests/unit/fakes.py``): no environment variable is read and no connection is made, and one event
goes through each app over HTTP, as the broker delivers it.

The environment here is poisoned (an invalid ``KUBEOPERA_API_BASE_URL``, no kubeconfig, no helm),
so an app that read it would fail to build. The chain install -> check-ready -> store-kubeconfig
-> notify-api is driven by handing each app's reply to the next one, as the broker does.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.v1.event import CloudEvent
from flask import Flask
from werkzeug.test import TestResponse

from functions import check_ready, cleanup, dead_letter, install, notify_api, resync, router, store_kubeconfig
from shared.adapters.kubeopera_api import CloudSpaceUpdate
from shared.delivery import events
from shared.errors import ConfigError
from shared.model import event_types
from shared.model.naming import KUBECONFIG_KEY
from shared.model.tenant import FINALIZER
from shared.runtime import Runtime
from shared.settings import Settings
from testbed.local.ticker import ping_event

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    FakeSink,
    FakeVClusterApi,
    apiserver_event,
    deliver,
    fake_runtime,
    ref_of,
    step_event,
    tenant_object,
)

SETTINGS = Settings()
CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
BOB_NS, BOB_RELEASE, BOB_SECRET = "vcluster-bob-dev", "vc-bob-dev", f"tenant-{CS_BOB}-kubeconfig"
CONFIG = b"apiVersion: v1\nkind: Config\n"
PINGSOURCE = Path(__file__).resolve().parents[2] / "eventing" / "resync-pingsource.yaml"
CREATE_APPS: dict[str, Callable[..., Flask]] = {
    "router": router.create_app,
    "install": install.create_app,
    "check_ready": check_ready.create_app,
    "store_kubeconfig": store_kubeconfig.create_app,
    "notify_api": notify_api.create_app,
    "dead_letter": dead_letter.create_app,
    "cleanup": cleanup.create_app,
    "resync": resync.create_app,
}


@pytest.fixture(autouse=True)
def poisoned_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings.from_env would refuse this environment, and Kube.connect would find no cluster."""
    monkeypatch.setenv("KUBEOPERA_API_BASE_URL", "not a URL")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HELM_EXECUTABLE", str(tmp_path / "no-helm"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("K_SINK", raising=False)


def stand_ins(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi, sink: FakeSink | None = None) -> Runtime:
    return fake_runtime(kube, helm, api, SETTINGS, sink)


def reply(response: TestResponse) -> BaseCloudEvent:
    """The reply event of a 200 answer, as the broker reads it back."""
    assert response.status_code == 200, response.json
    return events.parse(dict(response.headers), response.data)


def phase(kube: FakeKube) -> str | None:
    tenant = kube.get_tenant(TENANT_NAMESPACE, "bob-dev")
    assert tenant is not None, "the Tenant is gone"
    return tenant.status.phase


@pytest.mark.parametrize("name", sorted(CREATE_APPS))
def test_without_a_runtime_create_app_reads_the_environment(name: str) -> None:
    with pytest.raises(ConfigError, match="KUBEOPERA_API_BASE_URL"):
        CREATE_APPS[name]()


def test_install_sends_the_hosts_service_range_in_every_release(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    deliver(install.create_app(stand_ins(kube, helm, api)), step_event(obj, event_types.INSTALL))
    assert helm.values_of("vc-bob-dev", "vcluster-bob-dev")["serviceCIDR"] == "10.0.0.0/24"


def test_install_does_not_start_on_a_host_that_serves_no_service_range(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    kube.service_ranges = None  # Kubernetes before 1.33: no ServiceCIDR objects
    with pytest.raises(ConfigError, match=r"^SERVICE_CIDR is not set and this API server serves no ServiceCIDR"):
        install.create_app(stand_ins(kube, helm, api))


@pytest.mark.parametrize("name", sorted(CREATE_APPS))
def test_with_a_runtime_every_app_builds_and_is_ready(
    name: str, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    client = CREATE_APPS[name](stand_ins(kube, helm, api)).test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    # install and resync read the host's Service range once, as they start (shared.model.service_range;
    # resync for the values' digest, shared.steps.rollout); no other reads
    reads = {"service_cidrs": 1} if name in ("install", "resync") else {}
    assert kube.calls == reads, "building an app touches nothing"
    assert kube.journal == []


def test_the_chain_from_the_router_to_notify_api(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    runtime = stand_ins(kube, helm, api)
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    routed = reply(deliver(router.create_app(runtime), apiserver_event(obj, event_types.APISERVER_ADD)))
    assert routed.get_type() == event_types.INSTALL
    assert kube.calls == {}, "the router decides from the event alone"
    provisioning = reply(deliver(install.create_app(runtime), routed))
    assert provisioning.get_type() == event_types.PROVISIONING
    assert phase(kube) == "Provisioning"
    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}")]

    kube.boot_vcluster("bob-dev", CONFIG)
    ready = reply(deliver(check_ready.create_app(runtime), provisioning))
    assert ready.get_type() == event_types.READY

    stored = reply(deliver(store_kubeconfig.create_app(runtime), ready))
    assert stored.get_type() == event_types.KUBECONFIG_STORED
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["data"] == {KUBECONFIG_KEY: CONFIG}

    response = deliver(notify_api.create_app(runtime), stored)
    assert response.status_code == 204
    assert api.reports == [CloudSpaceUpdate(CS_BOB, BOB_RELEASE, BOB_NS, BOB_SECRET)]
    assert phase(kube) == "Ready"


# Each function that acts on one Tenant, and an event it takes.
TENANT_EVENTS = {
    "router": event_types.APISERVER_ADD,
    "install": event_types.INSTALL,
    "check_ready": event_types.PROVISIONING,
    "store_kubeconfig": event_types.READY,
    "notify_api": event_types.KUBECONFIG_STORED,
    "dead_letter": event_types.PROVISIONING,
    "cleanup": event_types.CLEANUP,
}


@pytest.mark.parametrize("name", sorted(TENANT_EVENTS))
def test_an_event_about_a_tenant_outside_the_served_namespace_is_ignored(
    name: str, kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """The Tenant exists, at that uid and generation, but in a namespace the ApiServerSource does
    not watch: the event is forged, answered 204, and nothing is read or written."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, namespace="elsewhere"))
    kube.calls.clear()
    event_type = TENANT_EVENTS[name]
    event = (
        apiserver_event(obj, event_type)
        if event_type in event_types.APISERVER_TYPES
        else events.make(event_type, "forger", ref_of(obj))
    )
    app = CREATE_APPS[name](stand_ins(kube, helm, api))
    kube.calls.clear()  # install read the host's Service range as it started
    response = deliver(app, event)
    assert response.status_code == 204, response.data
    assert kube.calls == {} and helm.operations == [] and api.reports == []


def test_dead_letter_marks_the_tenant_failed(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}))
    sent = events.make(event_types.PROVISIONING, "check-ready", ref_of(obj))
    errors = {"knativeerrorcode": "503", "knativeerrordata": base64.b64encode(b'{"error": "boom"}').decode()}
    gave_up = CloudEvent(attributes=sent.get_attributes() | errors, data=sent.get_data())

    response = deliver(dead_letter.create_app(stand_ins(kube, helm, api)), gave_up)

    assert response.status_code == 204
    assert phase(kube) == "Failed"
    assert kube.event("DeliveryFailed")["message"] == (
        f"{event_types.PROVISIONING} could not be delivered to tenant-check-ready: last answer 503: boom"
    )


def test_a_dead_letter_of_work_another_process_had_in_hand_fails_nothing(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """install's answer while another pod holds the namespace's work lock is a 503 that says the
    work is in hand; should the broker give up on it, dead-letter leaves the Tenant as it is."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}))
    kube.leases[("kubeopera-system", "lock-vcluster-bob-dev")] = "another-pod/1/1"
    sent = step_event(obj, event_types.INSTALL)
    answer = deliver(install.create_app(stand_ins(kube, helm, api)), sent)
    assert answer.status_code == 503 and answer.json == {
        "error": "another process is installing or removing vcluster-bob-dev "
        "(Lease kubeopera-system/lock-vcluster-bob-dev)",
        "inHand": True,
    }
    errors = {"knativeerrorcode": "503", "knativeerrordata": base64.b64encode(answer.data).decode()}
    gave_up = CloudEvent(attributes=sent.get_attributes() | errors, data=sent.get_data())
    writes = dict(kube.calls)

    response = deliver(dead_letter.create_app(stand_ins(kube, helm, api)), gave_up)

    assert response.status_code == 204
    assert phase(kube) == "Pending"
    assert {k: v for k, v in kube.calls.items() if k.startswith(("patch", "set", "update", "record"))} == {
        k: v for k, v in writes.items() if k.startswith(("patch", "set", "update", "record"))
    }, "no status write, no Event"


def test_cleanup_lets_a_deleted_tenant_go(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    deleting = kube.delete_tenant(TENANT_NAMESPACE, "bob-dev")
    assert deleting is not None

    response = deliver(cleanup.create_app(stand_ins(kube, helm, api)), step_event(deleting, event_types.CLEANUP))

    assert response.status_code == 204
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None
    assert api.reports == [CloudSpaceUpdate(CS_BOB, BOB_RELEASE, BOB_NS, BOB_SECRET, "deleted")]


def test_resync_redrives_a_tenant_on_the_tick(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    sink = FakeSink(kube)
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    headers, body = ping_event(PINGSOURCE)

    response = resync.create_app(stand_ins(kube, helm, api, sink)).test_client().post("/", headers=headers, data=body)

    assert response.status_code == 204
    assert [(e.get_type(), events.tenant_ref(e)) for e in sink.sent] == [(event_types.INSTALL, ref_of(obj))]


def test_resync_without_a_sink_serves_and_asks_for_redelivery() -> None:
    """Its first revision starts before the SinkBinding can inject K_SINK: it must not crash."""
    runtime = Runtime(
        settings=SETTINGS, kube=FakeKube(), helm=None, kubeopera_api=None, sink=None, vcluster_api=FakeVClusterApi()
    )
    app = resync.create_app(runtime)
    headers = {
        "ce-specversion": "1.0",
        "ce-type": event_types.PING,
        "ce-source": "/apis/v1/namespaces/kubeopera-system/pingsources/tenant-resync",
        "ce-id": "tick-1",
        "content-type": "application/json",
    }
    response = app.test_client().post("/", headers=headers, data=b"{}")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "10"
    assert app.test_client().get("/healthz").status_code == 200
