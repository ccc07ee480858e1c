"""What a Tenant's deletion does next, decided once from what cleanup read (shared.model.deletion)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.model.cluster import NamespaceInfo
from shared.model.deletion import DeletionPlan, Do, Progress, plan, progress
from shared.model.ownership import Claim, Owner, Verdict

OURS = Verdict(Claim.OURS)
ADOPTED = Verdict(Claim.ADOPT)
THEIRS = Verdict(Claim.FOREIGN, Owner("kubeopera-system", "carl", "uid-carl"))
FREE = Verdict(Claim.FREE)
LIVE = NamespaceInfo(labels={}, terminating=False)
GOING = NamespaceInfo(labels={}, terminating=True, remaining="2 pods")


def planned(namespace: NamespaceInfo | None, ns: Verdict, secret: bool, secret_verdict: Verdict) -> DeletionPlan:
    return plan("vcluster-bob", namespace, ns, secret, secret_verdict)


def test_our_live_namespace_is_deleted_and_waited_for_and_our_secret_deleted() -> None:
    todo = planned(LIVE, OURS, True, OURS)
    assert (todo.namespace, todo.secret, todo.done) == (Do.DELETE, Do.DELETE, False)
    assert todo.waiting_for == "namespace vcluster-bob to be deleted"


def test_a_namespace_being_deleted_is_waited_for_saying_what_remains() -> None:
    todo = planned(GOING, ADOPTED, False, FREE)
    assert (todo.namespace, todo.secret) == (Do.WAIT, Do.NOTHING)
    assert todo.waiting_for == "namespace vcluster-bob to be deleted (2 pods)"


@pytest.mark.parametrize("namespace", [LIVE, GOING])
def test_what_is_someone_elses_is_left_and_not_waited_for(namespace: NamespaceInfo) -> None:
    todo = planned(namespace, THEIRS, True, THEIRS)
    assert (todo.namespace, todo.secret, todo.done) == (Do.LEAVE, Do.LEAVE, True)


def test_nothing_left_is_done() -> None:
    assert planned(None, FREE, False, FREE) == DeletionPlan(Do.NOTHING, Do.NOTHING, "")


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_a_deletion_moved_when_what_it_waits_for_changed() -> None:
    assert progress("waiting for 1 pod", "waiting for 2 pods", NOW - timedelta(seconds=999), NOW, 300) == (
        Progress.MOVED,
        0.0,
    )


def test_an_unchanged_deletion_waits_until_the_stall_limit_then_stalls() -> None:
    assert progress("w", "w", NOW - timedelta(seconds=300), NOW, 300) == (Progress.WAITING, 300.0)
    assert progress("w", "w", NOW - timedelta(seconds=301), NOW, 300) == (Progress.STALLED, 301.0)
    assert progress("w", "w", None, NOW, 300) == (Progress.WAITING, 0.0)
