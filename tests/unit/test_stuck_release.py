"""When a pending helm release is stuck (its helm was killed) and how it is recovered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.helm import stuck_verdict
from shared.adapters.release import ReleaseState

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def state(status: str, age_seconds: float | None) -> ReleaseState:
    updated = None if age_seconds is None else NOW - timedelta(seconds=age_seconds)
    return ReleaseState("vc-a", "vcluster-a", 3, status, "0.21.2", updated)


@pytest.mark.parametrize("status", ["deployed", "failed", "superseded"])
def test_a_release_that_is_not_pending_is_never_stuck(status: str) -> None:
    assert stuck_verdict(state(status, 10_000), NOW, 180) is None


@pytest.mark.parametrize("status", ["pending-install", "pending-upgrade", "pending-rollback", "uninstalling"])
def test_a_young_pending_release_is_another_operation_in_progress(status: str) -> None:
    assert stuck_verdict(state(status, 179), NOW, 180) is None


@pytest.mark.parametrize(
    ("status", "how"),
    [
        ("pending-install", "uninstall"),
        ("uninstalling", "uninstall"),
        ("pending-upgrade", "rollback"),
        ("pending-rollback", "rollback"),
    ],
)
def test_an_old_pending_release_is_recovered_by_its_kind(status: str, how: str) -> None:
    assert stuck_verdict(state(status, 181), NOW, 180) == how


def test_a_pending_release_without_a_time_counts_as_old() -> None:
    assert stuck_verdict(state("pending-install", None), NOW, 180) == "uninstall"
