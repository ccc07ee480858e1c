"""shared.adapters.release: a release's state from helm's record Secrets (no helm process), and a tampered
history refused: every Secret with the release's labels must be a record helm itself wrote."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.adapters.release import (
    RECORD_TYPE,
    ReleaseRecords,
    SecretMeta,
    current_state,
    record_flaw,
    record_name,
    record_selector,
)
from shared.errors import PermanentError, ReleaseTampered


def record(version: str, status: str, name: str = "vc-bob", **more: str) -> SecretMeta:
    """A record as helm's Secret driver writes it."""
    labels = {"owner": "helm", "name": name, "version": version, "status": status, **more}
    return SecretMeta(f"sh.helm.release.v1.{name}.v{version}", RECORD_TYPE, labels)


def forged(secret: str, type_: str = RECORD_TYPE, **labels: str) -> SecretMeta:
    return SecretMeta(secret, type_, {"owner": "helm", "name": "vc-bob", "version": "99", **labels})


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


def test_secrets_without_the_releases_labels_are_not_its_history() -> None:
    """The selector returns only the release's; should anything else come along, it is not
    this release's history, tampered or not."""
    records = [
        record("7", "deployed", name="vc-bob2"),
        SecretMeta("sh.helm.release.v1.vc-bob.v8", RECORD_TYPE, {"owner": "someone", "name": "vc-bob", "version": "8"}),
        SecretMeta("unrelated", "Opaque", {"app": "x"}),
        record("3", "failed"),
    ]
    state = current_state("vc-bob", "ns", records)
    assert state is not None and (state.revision, state.status) == (3, "failed")


def test_helms_own_records_have_no_flaw() -> None:
    assert record_name("vc-bob", 12) == "sh.helm.release.v1.vc-bob.v12"
    for revision in ("1", "9", "10", "123"):
        assert record_flaw("vc-bob", record(revision, "deployed")) is None
    # A release name with dots (helm allows them) is read by its whole name.
    assert record_flaw("vc.bob", record("4", "deployed", name="vc.bob")) is None


@pytest.mark.parametrize(
    ("secret", "flaw"),
    [
        # a plain Secret the syncer may write, labelled as the release's record
        (forged("sh.helm.release.v1.vc-bob.v99", type_="Opaque"), "its type is not helm.sh/release.v1"),
        (forged("sh.helm.release.v1.vc-bob.v99", type_=""), "its type is not helm.sh/release.v1"),
        # helm's type, but a name helm never gives a record of this release
        (forged("vc-bob-copy"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        (forged("sh.helm.release.v1.vc-bob.v0"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        (forged("sh.helm.release.v1.vc-bob.v099"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        (forged("sh.helm.release.v1.vc-bob.vx"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        (forged("sh.helm.release.v2.vc-bob.v99"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        # another release's name (a neighbour's record copied, relabelled as this release's)
        (forged("sh.helm.release.v1.vc-alice.v99"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        (forged("sh.helm.release.v1.vc-bob2.v99"), "its name is not sh.helm.release.v1.vc-bob.v<revision>"),
        # the right name, but labels that disagree with it
        (forged("sh.helm.release.v1.vc-bob.v3"), "its version label does not say 3, the revision its name gives"),
        (forged("sh.helm.release.v1.vc-bob.v3", version="v3"), "its version label does not say 3"),
    ],
)
def test_a_secret_with_the_releases_labels_that_helm_did_not_write_is_flawed(secret: SecretMeta, flaw: str) -> None:
    found = record_flaw("vc-bob", secret)
    assert found is not None and found.startswith(flaw)


def test_a_record_named_for_this_release_but_labelled_for_another_is_flawed() -> None:
    """Asked about vc-alice, bob's (relabelled) record is not hers: its name says vc-bob."""
    secret = SecretMeta("sh.helm.release.v1.vc-bob.v99", RECORD_TYPE, {"owner": "helm", "name": "vc-alice"})
    assert record_flaw("vc-alice", secret) == "its name is not sh.helm.release.v1.vc-alice.v<revision>"
    secret = SecretMeta("sh.helm.release.v1.vc-bob.v5", RECORD_TYPE, {"owner": "helm", "name": "vc-alice"})
    assert record_flaw("vc-bob", secret) == "its labels do not say owner=helm,name=vc-bob"


def test_a_tampered_history_is_refused_naming_what_was_found_and_never_its_data() -> None:
    """The forgery of issue 23: a copy of the release's record with version 99 under another name.
    The highest version label no longer decides anything: the whole history is refused."""
    history = [record("1", "superseded"), record("2", "deployed"), forged("vc-bob-forged", status="deployed")]
    with pytest.raises(ReleaseTampered) as raised:
        current_state("vc-bob", "vcluster-bob", history)
    err = raised.value
    assert isinstance(err, PermanentError) and err.reason == "ReleaseTampered"
    assert str(err) == (
        "the history of helm release vcluster-bob/vc-bob was tampered with: Secret vc-bob-forged "
        "(type helm.sh/release.v1, labels name=vc-bob,owner=helm,status=deployed,version=99): its name is not "
        "sh.helm.release.v1.vc-bob.v<revision>. It carries the release's labels but is not a record helm wrote; "
        "no helm operation runs on this history"
    )


def test_many_forgeries_are_named_a_few_at_a_time() -> None:
    history = [forged(f"forged-{i}", type_="Opaque") for i in range(5)]
    history.append(forged("many-labels", type_="Opaque", **{f"l{i}": "x" for i in range(10)}))
    with pytest.raises(ReleaseTampered) as raised:
        current_state("vc-bob", "ns", history)
    message = str(raised.value)
    assert "Secret forged-0 " in message and "Secret forged-2 " in message and "forged-3" not in message
    assert "; and 3 more." in message
    assert len(message) < 1024  # the Ready condition's message keeps it whole


def test_the_reader_asks_for_the_releases_records_by_helms_labels() -> None:
    asked: list[tuple[str, str]] = []

    class Source:
        def __init__(self, secrets: list[SecretMeta]) -> None:
            self.secrets = secrets

        def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]:
            asked.append((namespace, label_selector))
            return self.secrets

    state = ReleaseRecords(Source([record("1", "deployed")])).release("vc-bob", "vcluster-bob")
    assert state is not None and state.revision == 1
    assert asked == [("vcluster-bob", "owner=helm,name=vc-bob")] == [("vcluster-bob", record_selector("vc-bob"))]
    with pytest.raises(ReleaseTampered, match="Secret vc-bob-forged "):
        ReleaseRecords(Source([record("1", "deployed"), forged("vc-bob-forged")])).release("vc-bob", "vcluster-bob")
