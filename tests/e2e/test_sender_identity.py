"""Only the broker can make a function act, on Knative's real broker with authentication-oidc.

The stack runs with sender identity on (its default): the real broker filter attaches each
Trigger's token, and each function checks it with a TokenReview against the real API server
(shared/delivery/senders.py). Here a Tenant is provisioned to Ready through that, and then forged events
are posted straight to each function (the way any pod in the cluster could reach a cluster-local
Service) and to the Broker's ingress, with no token and with real tokens of the wrong identity or
audience. Each is refused, and nothing changes: the Tenant keeps its resourceVersion, no Event is
recorded, no function receives the forged event from the broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import requests

from shared.adapters.kube import Kube
from shared.delivery import events
from shared.model import event_types
from shared.model.tenant import Tenant
from testbed import controlplane as cp_mod
from testbed.knative import oidc
from testbed.local.stack import Stack, StackOptions, start_stack

from .support import ready_and_announced, tenant_events, tenant_yaml

pytestmark = pytest.mark.integration

NAMESPACE = "kubeopera-system"
CS_ID = "5b0c3a9e-8d1f-4e2a-9b7c-6d5e4f3a2b1c"
INTRUDER = "intruder"  # a ServiceAccount of the Tenant namespace that no policy names
FUNCTIONS = (
    "tenant-router",
    "tenant-install",
    "tenant-check-ready",
    "tenant-store-kubeconfig",
    "tenant-notify-api",
    "tenant-dead-letter",
    "tenant-cleanup",
    "tenant-resync",
)
# A forged event for each function, of a type it takes: the most harmful one each could do.
FORGED_TYPE = {
    "tenant-router": event_types.APISERVER_UPDATE,  # refused before it is read, as every forgery here
    "tenant-install": event_types.INSTALL,
    "tenant-check-ready": event_types.PROVISIONING,
    "tenant-store-kubeconfig": event_types.READY,
    "tenant-notify-api": event_types.KUBECONFIG_STORED,
    "tenant-dead-letter": event_types.PROVISIONING,  # dead-letter would mark the Tenant Failed
    "tenant-cleanup": event_types.CLEANUP,
    "tenant-resync": event_types.PING,
}


def a_sender_of(service: str) -> str:
    """The identity of a Trigger that delivers to ``service`` (dead-letter: every Trigger's)."""
    return oidc.trigger_identity("tenant-install" if service == "tenant-dead-letter" else service)


@pytest.fixture(scope="module")
def pipeline() -> Iterator[Stack]:
    with start_stack(StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1)) as stack:
        assert stack.sender_identity, "the stack's default is Knative's authentication-oidc on"
        stack.kubectl("create", "serviceaccount", INTRUDER, "-n", NAMESPACE)
        yield stack


@pytest.fixture(scope="module")
def vera(pipeline: Stack, kube: Kube) -> Tenant:
    since = time.time()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("vera", CS_ID))
    return ready_and_announced(kube, pipeline, "vera", since, timeout=150)


def token(pipeline: Stack, service_account: str, audience: str) -> str:
    return cp_mod.request_token(pipeline.control_plane, NAMESPACE, service_account, audiences=[audience])


def forged(pipeline: Stack, service: str, tenant: Tenant, authorization: str | None) -> requests.Response:
    """A valid-looking event about ``tenant`` posted straight to the function, not via the broker."""
    event = events.make(FORGED_TYPE[service], "forger", tenant.ref)
    headers, body = events.to_binary(event)
    if authorization is not None:
        headers["Authorization"] = authorization
    session = requests.Session()
    session.trust_env = False
    return session.post(pipeline.function_urls[service], headers=headers, data=body, timeout=30)


def test_each_function_is_told_whom_to_believe(pipeline: Stack) -> None:
    for service in FUNCTIONS:
        env = pipeline.function_specs[service].env
        assert env.get("SENDER_IDENTITY", "oidc") == "oidc", service
        assert env["SENDER_AUDIENCE"] == service
        assert oidc.subject(NAMESPACE, a_sender_of(service)) in env["SENDER_SUBJECTS"].split(",")


def test_a_tenant_provisions_through_verified_deliveries(pipeline: Stack, vera: Tenant) -> None:
    """Every delivery of vera's chain was checked and accepted: none was refused."""
    assert vera.status.phase.value == "Ready"
    delivered = [d for d in pipeline.watch.deliveries() if d.subject and "vera" in d.subject]
    assert {d.service for d in delivered} >= {
        "tenant-router",
        "tenant-install",
        "tenant-check-ready",
        "tenant-store-kubeconfig",
        "tenant-notify-api",
    }
    assert not [d for d in delivered if d.status == 401], "the broker's own deliveries must pass"


@pytest.mark.parametrize("service", FUNCTIONS)
def test_forged_events_to_a_function_are_refused_and_change_nothing(
    pipeline: Stack, kube: Kube, vera: Tenant, service: str
) -> None:
    before = kube.get_tenant(NAMESPACE, "vera")
    assert before is not None
    events_before = len(tenant_events(pipeline, "vera"))
    trigger_identity = a_sender_of(service)
    other = "tenant-cleanup" if service != "tenant-cleanup" else "tenant-install"
    attempts = {
        "no token": None,
        "not a bearer token": "Basic dXNlcjpwYXNz",
        "a forged JWT": "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
        # a real token, for the right audience, of a ServiceAccount no Trigger uses
        "another identity": f"Bearer {token(pipeline, INTRUDER, service)}",
        # the function's own Trigger identity, but minted for another function's audience
        "another audience": f"Bearer {token(pipeline, trigger_identity, other)}",
        # a real token of the right identity for the API server's default audience
        "no audience": f"Bearer {token(pipeline, trigger_identity, 'https://kubernetes.default.svc')}",
    }
    for what, authorization in attempts.items():
        response = forged(pipeline, service, before, authorization)
        assert response.status_code == 401, f"{service}, {what}: {response.status_code} {response.text}"
        assert "error" in response.json()
    after = kube.get_tenant(NAMESPACE, "vera")
    assert after is not None and after.resource_version == before.resource_version, "the Tenant was written"
    assert after.status.phase.value == "Ready"
    assert len(tenant_events(pipeline, "vera")) == events_before, "an Event was recorded"


def test_the_right_identity_and_audience_is_accepted(pipeline: Stack, vera: Tenant) -> None:
    """The check refuses the forgeries above for what they are, not everything: the Trigger's own
    identity with its audience is read (and the Tenant is Ready, so install has nothing to do)."""
    service = "tenant-install"
    authorization = f"Bearer {token(pipeline, oidc.trigger_identity(service), service)}"
    response = forged(pipeline, service, vera, authorization)
    assert response.status_code in (200, 204), response.text


def test_the_broker_refuses_forged_events(pipeline: Stack, kube: Kube, vera: Tenant) -> None:
    before = kube.get_tenant(NAMESPACE, "vera")
    assert before is not None
    event_id = f"forged-{uuid.uuid4()}"
    event = events.make(event_types.INSTALL, "forger", before.ref)
    headers, body = events.to_binary(event)
    headers["ce-id"] = event_id
    session = requests.Session()
    session.trust_env = False
    refused = {
        "no token": ({}, 401),
        "an identity the EventPolicy does not name": (pipeline.sender_authorization(INTRUDER), 403),
    }
    for what, (authorization, status) in refused.items():
        response = session.post(pipeline.ingress_url, headers=headers | authorization, data=body, timeout=10)
        assert response.status_code == status, f"{what}: {response.status_code} {response.text}"
    assert pipeline.watch.wait_idle(30)
    assert not [d for d in pipeline.watch.deliveries() if d.event_id == event_id], "the broker delivered it"
    after = kube.get_tenant(NAMESPACE, "vera")
    assert after is not None and after.resource_version == before.resource_version
