"""check-ready's verdict while the vCluster boots: poll again, or give up after the timeout."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.check_ready import not_ready
from shared.errors import NotReadyYet, PermanentError
from shared.settings import Settings
from shared.tenant import Tenant

SETTINGS = Settings(provision_timeout_seconds=600, ready_poll_seconds=15)


def provisioning_since(last_synced_at: str) -> Tenant:
    return Tenant.from_object(
        {
            "metadata": {"namespace": "kubeopera-system", "name": "a", "uid": "u", "generation": 1},
            "spec": {
                "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
                "tenantName": "alice",
                "cloudSpaceID": "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
                "quota": {"cpu": "1", "memory": "1Gi"},
            },
            "status": {"phase": "Provisioning", "lastSyncedAt": last_synced_at},
        }
    )


def test_within_the_timeout_it_polls_again_after_the_interval() -> None:
    verdict = not_ready(
        provisioning_since("2026-11-30T12:00:00Z"), "booting", SETTINGS, datetime(2026, 11, 30, 12, 9, 59, tzinfo=UTC)
    )
    assert isinstance(verdict, NotReadyYet) and verdict.retry_after == 15 and str(verdict) == "booting"


def test_after_the_timeout_it_fails_with_what_it_was_waiting_for() -> None:
    verdict = not_ready(
        provisioning_since("2026-11-30T12:00:00Z"),
        "waiting for Secret x",
        SETTINGS,
        datetime(2026, 11, 30, 12, 10, 1, tzinfo=UTC),
    )
    assert isinstance(verdict, PermanentError)
    assert str(verdict) == "not ready 601s after provisioning began: waiting for Secret x"


def test_without_a_start_time_it_keeps_polling() -> None:
    verdict = not_ready(provisioning_since(""), "booting", SETTINGS, datetime(2030, 1, 1, tzinfo=UTC))
    assert isinstance(verdict, NotReadyYet)
