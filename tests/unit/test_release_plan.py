"""What install does with a release, decided once from what was read (shared.model.release.plan):
when a pending release is stuck (its helm was killed) and how it is recovered, and every other case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.model.release import Action, ReleaseState, chart_matters, plan, stuck_verdict

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
        ("pending-install", Action.UNINSTALL_STUCK),
        ("uninstalling", Action.UNINSTALL_STUCK),
        ("pending-upgrade", Action.ROLL_BACK_STUCK),
        ("pending-rollback", Action.ROLL_BACK_STUCK),
    ],
)
def test_an_old_pending_release_is_recovered_by_its_kind(status: str, how: Action) -> None:
    assert stuck_verdict(state(status, 181), NOW, 180) == how


def test_a_pending_release_without_a_time_counts_as_old() -> None:
    assert stuck_verdict(state("pending-install", None), NOW, 180) is Action.UNINSTALL_STUCK


WANTED = {"a": 1}
PINNED = "0.21.2"


def planned(
    current: ReleaseState | None, values: dict[str, int] | None = None, chart: str | None = None, reapply: bool = False
) -> Action:
    return plan(current, values, chart, WANTED, PINNED, NOW, 180, reapply)


def test_an_absent_release_is_installed() -> None:
    assert planned(None) is Action.INSTALL


def test_a_deployed_release_with_the_pinned_chart_and_the_same_values_is_left_alone() -> None:
    deployed = state("deployed", 10)
    assert chart_matters(deployed, {"a": 1}, WANTED)
    assert planned(deployed, {"a": 1}, PINNED) is Action.NOTHING


@pytest.mark.parametrize(
    ("status", "values", "chart", "reapply"),
    [
        ("deployed", {"a": 2}, None, False),  # other values: the chart is not even read
        ("deployed", {"a": 1}, "0.20.0", False),  # another chart
        ("deployed", {"a": 1}, PINNED, True),  # a re-apply asked (something of it was deleted)
        ("failed", {"a": 1}, None, False),  # the last upgrade failed
        ("superseded", {"a": 1}, None, False),
    ],
)
def test_anything_else_not_pending_is_upgraded(
    status: str, values: dict[str, int], chart: str | None, reapply: bool
) -> None:
    assert planned(state(status, 10), values, chart, reapply) is Action.UPGRADE


def test_a_young_pending_release_waits_and_an_old_one_is_recovered_even_if_a_reapply_is_asked() -> None:
    assert planned(state("pending-upgrade", 10), {"a": 1}, reapply=True) is Action.WAIT
    assert planned(state("pending-upgrade", 181), {"a": 1}, reapply=True) is Action.ROLL_BACK_STUCK


def test_the_chart_is_read_only_when_it_can_still_decide() -> None:
    assert not chart_matters(None, None, WANTED)
    assert not chart_matters(state("deployed", 10), {"a": 2}, WANTED)
    assert not chart_matters(state("failed", 10), {"a": 1}, WANTED)
    assert not chart_matters(state("pending-install", 10), {"a": 1}, WANTED)
