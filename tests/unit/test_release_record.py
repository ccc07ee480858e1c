"""shared.release: a release's state from the labels of helm's record Secrets (no helm process)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.release import ReleaseRecords, current_state, record_selector


def record(version: str, status: str, name: str = "vc-bob", **more: str) -> dict[str, str]:
    return {"owner": "helm", "name": name, "version": version, "status": status, **more}


def test_no_record_is_no_release() -> None:
    assert current_state("vc-bob", "vcluster-bob", []) is None


def test_the_highest_revision_is_the_current_one_whatever_the_order() -> None:
    records = [record("2", "superseded"), record("10", "deployed", modifiedAt="1764633600"), record("9", "superseded")]
    state = current_state("vc-bob", "vcluster-bob", records)
    assert state is not None
    assert (state.name, state.namespace, state.revision, state.status) == ("vc-bob", "vcluster-bob", 10, "deployed")
    assert state.deployed and not state.pending
    assert state.updated == datetime(2025, 12, 2, tzinfo=UTC)


def test_created_at_counts_when_never_modified_and_a_pending_one_is_pending() -> None:
    state = current_state("vc-bob", "ns", [record("1", "pending-install", createdAt="1764633600")])
    assert state is not None and state.pending and state.updated == datetime(2025, 12, 2, tzinfo=UTC)
    assert current_state("vc-bob", "ns", [record("1", "deployed")]).updated is None  # type: ignore[union-attr]


def test_records_not_helms_or_of_another_release_are_passed_over() -> None:
    records = [
        record("7", "deployed", name="vc-bob2"),
        {"owner": "someone", "name": "vc-bob", "version": "8", "status": "deployed"},
        record("v9", "deployed"),
        record("3", "failed"),
    ]
    state = current_state("vc-bob", "ns", records)
    assert state is not None and (state.revision, state.status) == (3, "failed")


def test_the_reader_asks_for_the_releases_records_by_helms_labels() -> None:
    asked: list[tuple[str, str]] = []

    class Source:
        def list_secret_labels(self, namespace: str, label_selector: str) -> list[dict[str, str]]:
            asked.append((namespace, label_selector))
            return [record("1", "deployed")]

    state = ReleaseRecords(Source()).release("vc-bob", "vcluster-bob")
    assert state is not None and state.revision == 1
    assert asked == [("vcluster-bob", "owner=helm,name=vc-bob")] == [("vcluster-bob", record_selector("vc-bob"))]
