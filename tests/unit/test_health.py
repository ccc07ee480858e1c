"""shared.model.health: what VClusterAvailable says, with the API asked and without."""

from __future__ import annotations

from typing import Any

import pytest

from shared.model import health
from shared.model.cluster import Rollout
from shared.model.tenant import Tenant

from .fakes import tenant_object

READY_POD, NO_POD = Rollout(1, 1, 1, 1, 1), Rollout(1, 1, 1, 0, 1)
REFUSED = "the vCluster's API at https://vc-bob.vcluster-bob.svc:443 cannot be reached with the stored kubeconfig"


def with_available(status: str | None, reason: str = "") -> Tenant:
    obj: dict[str, Any] = tenant_object("bob-dev", "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b")
    if status is not None:
        condition = {"type": "VClusterAvailable", "status": status, "reason": reason, "message": "as it was"}
        obj["status"] = {"phase": "Ready", "conditions": [condition]}
    return Tenant.from_object(obj)


def test_asked_the_pod_then_the_api_decide() -> None:
    no_pod = health.availability(NO_POD, 1, REFUSED)
    assert (no_pod.status, no_pod.reason) == ("False", health.UNAVAILABLE)
    down = health.availability(READY_POD, 1, REFUSED)
    assert (down.status, down.reason, down.message) == ("False", health.NOT_SERVING, REFUSED)
    assert health.availability(READY_POD, 1).reason == health.AVAILABLE


@pytest.mark.parametrize("reason", [health.NOT_SERVING, health.UNAVAILABLE])
def test_unasked_with_a_ready_pod_a_false_condition_stays_as_it_is(reason: str) -> None:
    tenant = with_available("False", reason)
    kept = health.unasked(READY_POD, tenant)
    assert kept == tenant.status.condition("VClusterAvailable")
    assert not health.changed(tenant, kept)


@pytest.mark.parametrize(("status", "reason"), [("True", health.AVAILABLE), ("False", health.NOT_SERVING), (None, "")])
def test_unasked_with_no_ready_pod_is_down_whatever_it_said(status: str | None, reason: str) -> None:
    wanted = health.unasked(NO_POD, with_available(status, reason))
    assert (wanted.status, wanted.reason) == ("False", health.UNAVAILABLE)


@pytest.mark.parametrize(("status", "reason"), [("True", health.AVAILABLE), (None, "")])
def test_unasked_with_a_ready_pod_and_nothing_against_it_is_the_pods_word(status: str | None, reason: str) -> None:
    wanted = health.unasked(READY_POD, with_available(status, reason))
    assert (wanted.status, wanted.reason) == ("True", health.AVAILABLE)
