"""check-ready's verdict while the vCluster boots: poll again, renew the event, or give up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from functions.check_ready import Poll, poll_verdict
from shared.delivery.events import RENEW_AFTER_POLLS
from shared.errors import ProvisionTimeout
from shared.model.tenant import Tenant
from shared.settings import Settings

from .fakes import TENANT_NAMESPACE

SETTINGS = Settings(provision_timeout_seconds=600, ready_poll_seconds=15)
STARTED = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def provisioning_since(last_synced_at: str) -> Tenant:
    return Tenant.from_object(
        {
            "metadata": {"namespace": TENANT_NAMESPACE, "name": "a", "uid": "u", "generation": 1},
            "spec": {
                "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
                "tenantName": "alice",
                "cloudSpaceID": "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
                "quota": {"cpu": "1", "memory": "1Gi"},
            },
            "status": {"phase": "Provisioning", "lastSyncedAt": last_synced_at},
        }
    )


def test_within_the_timeout_it_polls_again() -> None:
    now = STARTED + timedelta(seconds=599)
    verdict = poll_verdict(provisioning_since("2026-11-30T12:00:00Z"), "booting", SETTINGS, now, now)
    assert verdict == Poll.AGAIN


def test_after_the_timeout_it_fails_with_the_timeout_and_what_it_was_waiting_for() -> None:
    now = STARTED + timedelta(seconds=601)
    verdict = poll_verdict(provisioning_since("2026-11-30T12:00:00Z"), "waiting for Secret x", SETTINGS, now, now)
    assert isinstance(verdict, ProvisionTimeout)
    assert verdict.reason == "ProvisionTimeout"
    assert str(verdict) == (
        "vCluster not ready 601s after provisioning began (PROVISION_TIMEOUT_SECONDS=600): waiting for Secret x"
    )


def test_without_a_start_time_it_keeps_polling() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert poll_verdict(provisioning_since(""), "booting", SETTINGS, now, now) == Poll.AGAIN


def test_an_event_polled_many_times_is_renewed_before_the_broker_runs_out_of_retries() -> None:
    settings = Settings(provision_timeout_seconds=3600, ready_poll_seconds=5)
    tenant = provisioning_since("2026-11-30T12:00:00Z")
    budget = RENEW_AFTER_POLLS * settings.ready_poll_seconds
    just_before = STARTED + timedelta(seconds=budget - 1)
    assert poll_verdict(tenant, "booting", settings, just_before, STARTED) == Poll.AGAIN
    at = STARTED + timedelta(seconds=budget)
    assert poll_verdict(tenant, "booting", settings, at, STARTED) == Poll.RENEW
    # The renewed event starts its own count.
    assert poll_verdict(tenant, "booting", settings, at, at) == Poll.AGAIN


def test_the_renewal_comes_well_inside_the_triggers_retry_budget() -> None:
    path = Path(__file__).resolve().parents[2] / "eventing" / "triggers" / "tenant-check-ready.yaml"
    trigger = yaml.safe_load(path.read_text())
    assert trigger["spec"]["delivery"]["retry"] >= RENEW_AFTER_POLLS * 2


def test_the_timeout_wins_over_a_renewal() -> None:
    settings = Settings(provision_timeout_seconds=20, ready_poll_seconds=2)
    tenant = provisioning_since("2026-11-30T12:00:00Z")
    now = STARTED + timedelta(seconds=100)
    assert isinstance(poll_verdict(tenant, "booting", settings, now, STARTED), ProvisionTimeout)
