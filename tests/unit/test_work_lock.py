"""The work lock of a Tenant's namespace (shared/steps/locks.py): a Lease in the Tenants' namespace, held
for as long as install's or cleanup's work runs, renewed by a thread of its own, given up after; a
Lease lost meanwhile is said loudly."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from shared.errors import WorkInHand
from shared.model.cluster import LeaseHold
from shared.model.naming import TenantNames
from shared.steps import locks

from .fakes import FakeKube

NS = "kubeopera-system"
NAMES = TenantNames.of("bob-dev", "7c9e6679-7425-40de-944b-e07fc1f90ae7")
LEASE = (NS, "lock-vcluster-bob-dev")


@pytest.fixture(autouse=True)
def quick_renewal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "RENEW_SECONDS", 0.02)


def test_the_lease_is_renewed_while_the_operation_runs_and_given_up_after(kube: FakeKube) -> None:
    with locks.work_lock(kube, NS, NAMES):
        holder = kube.leases[LEASE]
        time.sleep(0.2)  # a helm run longer than several renewals
        assert kube.leases[LEASE] == holder
        renewals = kube.calls["acquire_lease"] - 1
    assert renewals >= 3, renewals
    assert LEASE not in kube.leases
    assert kube.calls["release_lease"] == 1


def test_a_quick_operation_is_not_renewed(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "RENEW_SECONDS", 60.0)
    started = time.monotonic()
    with locks.work_lock(kube, NS, NAMES):
        pass
    assert time.monotonic() - started < 5  # stopping the renewal does not wait out its interval
    assert kube.calls["acquire_lease"] == 1 and LEASE not in kube.leases


def test_another_holder_is_refused_and_nothing_is_renewed(kube: FakeKube) -> None:
    kube.leases[LEASE] = "another-pod/1/1"
    said = r"another process is installing or removing vcluster-bob-dev \(Lease kubeopera-system/lock-vcluster-bob-dev"
    refused = pytest.raises(WorkInHand, match=said)
    with refused, locks.work_lock(kube, NS, NAMES):
        raise AssertionError("the block must not run")
    time.sleep(0.1)
    assert kube.calls["acquire_lease"] == 1 and kube.leases[LEASE] == "another-pod/1/1"


def test_a_lease_taken_over_meanwhile_is_logged_as_an_error(kube: FakeKube, caplog: pytest.LogCaptureFixture) -> None:
    with locks.work_lock(kube, NS, NAMES):
        kube.leases[LEASE] = "another-pod/1/1"  # ran out during an API outage, and was taken
        time.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "the work Lease was taken over while the work ran"
    ]
    assert kube.leases[LEASE] == "another-pod/1/1"  # theirs now: not given up on their behalf


NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("hold", "free"),
    [
        (LeaseHold(holder="", renewed=NOW, duration_seconds=30), True),  # nobody holds it
        (LeaseHold(holder="me", renewed=NOW, duration_seconds=30), True),  # ours already
        (LeaseHold(holder="them", renewed=NOW - timedelta(seconds=30), duration_seconds=30), False),  # just in time
        (LeaseHold(holder="them", renewed=NOW - timedelta(seconds=31), duration_seconds=30), True),  # expired
        (LeaseHold(holder="them", renewed=None, duration_seconds=30), True),  # never renewed nor acquired
    ],
)
def test_a_lease_is_free_unless_another_holder_renewed_it_within_its_duration(hold: LeaseHold, free: bool) -> None:
    assert hold.free_for("me", NOW) is free
