"""The pure ownership rules (shared/model/ownership.py): whose an object is, and what a Tenant is told."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import OwnershipConflict, TemporaryError
from shared.model.naming import (
    LABEL_MANAGED_BY,
    LABEL_OWNER_NAME,
    LABEL_OWNER_NAMESPACE,
    LABEL_OWNER_UID,
    LABEL_TENANT_ID,
    LABEL_TENANT_NAME,
    MANAGED_BY,
)
from shared.model.ownership import (
    WAIT_FOR_CLEANUP_SECONDS,
    Claim,
    Owner,
    OwnerState,
    Thing,
    Verdict,
    judge,
    legacy_namespace_labels,
    legacy_release_labels,
    legacy_secret_labels,
    namespace_labels,
    owner_labels,
    owner_state,
    refusal,
    release_labels,
    rival,
    rival_refusal,
    secret_labels,
)
from shared.model.tenant import Tenant

from .fakes import DELETED_AT, TENANT_NAMESPACE, tenant_object

CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
CS_OTHER = "0b6f5a4e-3d2c-4b1a-9f8e-7d6c5b4a3f2e"
NS_THING = Thing("namespace", "vcluster-bob-dev", "kubectl delete namespace vcluster-bob-dev")


def tenant(name: str = "bob-dev", cloud_space_id: str = CS_BOB, **kw: Any) -> Tenant:
    deleting = kw.pop("deleting", False)
    obj = tenant_object(name, cloud_space_id, **kw)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = DELETED_AT
    return Tenant.from_object(obj)


BOB = tenant()


# judge ------------------------------------------------------------------------------------------


def test_an_object_that_does_not_exist_is_free() -> None:
    verdict = judge(None, BOB, legacy_namespace_labels(BOB))
    assert verdict == Verdict(Claim.FREE)
    assert verdict.usable


def test_an_object_with_this_tenants_uid_is_ours_whatever_else_it_carries() -> None:
    labels = {LABEL_OWNER_UID: BOB.uid, LABEL_TENANT_ID: CS_OTHER, "team": "x"}
    verdict = judge(labels, BOB, legacy_namespace_labels(BOB))
    assert verdict == Verdict(Claim.OURS)
    assert verdict.usable


def test_an_object_with_another_uid_is_other_and_names_its_owner() -> None:
    labels = owner_labels(tenant("alice", CS_OTHER, namespace="team-a")) | legacy_namespace_labels(BOB)
    verdict = judge(labels, BOB, legacy_namespace_labels(BOB))
    assert verdict.claim == Claim.OTHER
    assert verdict.owner == Owner("team-a", "alice", "uid-team-a-alice")
    assert verdict.owner.key == "team-a/alice"
    assert not verdict.usable


def test_an_other_owner_without_name_labels_is_still_other() -> None:
    verdict = judge({LABEL_OWNER_UID: "someone"}, BOB, legacy_namespace_labels(BOB))
    assert verdict == Verdict(Claim.OTHER, Owner("?", "?", "someone"))


def test_exactly_the_legacy_labels_without_a_uid_are_adopted() -> None:
    legacy = {LABEL_TENANT_NAME: "bob-dev", LABEL_TENANT_ID: CS_BOB, LABEL_MANAGED_BY: MANAGED_BY}
    assert legacy_namespace_labels(BOB) == legacy
    verdict = judge(legacy | {"kubernetes.io/metadata.name": "vcluster-bob-dev"}, BOB, legacy)
    assert verdict == Verdict(Claim.ADOPT)
    assert verdict.usable


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"kubernetes.io/metadata.name": "vcluster-bob-dev"},
        # another cloudSpaceID, another name, or not ours by managed-by: never this Tenant's
        {LABEL_TENANT_NAME: "bob-dev", LABEL_TENANT_ID: CS_OTHER, LABEL_MANAGED_BY: MANAGED_BY},
        {LABEL_TENANT_NAME: "bob", LABEL_TENANT_ID: CS_BOB, LABEL_MANAGED_BY: MANAGED_BY},
        {LABEL_TENANT_NAME: "bob-dev", LABEL_TENANT_ID: CS_BOB, LABEL_MANAGED_BY: "someone-else"},
        {LABEL_TENANT_NAME: "bob-dev", LABEL_TENANT_ID: CS_BOB},
    ],
)
def test_anything_else_without_a_uid_is_foreign(labels: dict[str, str]) -> None:
    verdict = judge(labels, BOB, legacy_namespace_labels(BOB))
    assert verdict == Verdict(Claim.FOREIGN)
    assert not verdict.usable


def test_with_nothing_to_compare_an_unlabelled_object_is_foreign_not_adopted() -> None:
    assert judge({}, BOB, {}) == Verdict(Claim.FOREIGN)


def test_the_legacy_labels_of_each_kind_are_the_previous_versions() -> None:
    named = tenant("bob-dev-object", tenant_name="bob-dev")
    # the namespace carried the Tenant object's name; the release's values its tenantName
    assert legacy_namespace_labels(named)[LABEL_TENANT_NAME] == "bob-dev-object"
    assert legacy_release_labels(named) == {LABEL_TENANT_NAME: "bob-dev", LABEL_TENANT_ID: CS_BOB}
    assert legacy_secret_labels(named) == {LABEL_TENANT_ID: CS_BOB, LABEL_MANAGED_BY: MANAGED_BY}
    owner = {
        LABEL_OWNER_UID: named.uid,
        LABEL_OWNER_NAMESPACE: TENANT_NAMESPACE,
        LABEL_OWNER_NAME: "bob-dev-object",
    }
    assert owner_labels(named) == owner
    assert namespace_labels(named) == legacy_namespace_labels(named) | owner
    assert secret_labels(named) == legacy_secret_labels(named) | owner
    # what install writes is judged ours afterwards
    assert judge(namespace_labels(named), named, legacy_namespace_labels(named)).claim == Claim.OURS


# owner_state ------------------------------------------------------------------------------------


def test_owner_state_follows_the_live_tenant_at_the_owners_name() -> None:
    owner = Owner(TENANT_NAMESPACE, "bob-dev", BOB.uid)
    assert owner_state(owner, None) == OwnerState.GONE
    assert owner_state(owner, tenant(uid="a-new-incarnation")) == OwnerState.GONE
    assert owner_state(owner, BOB) == OwnerState.LIVE
    assert owner_state(owner, tenant(deleting=True)) == OwnerState.DELETING


# refusal ----------------------------------------------------------------------------------------


def test_a_live_owner_is_named_exactly() -> None:
    newcomer = tenant("bob-dev-2", CS_OTHER, tenant_name="bob-dev")
    verdict = Verdict(Claim.OTHER, Owner(TENANT_NAMESPACE, "bob-dev", BOB.uid))
    err = refusal(newcomer, NS_THING, "tenantName", "bob-dev", verdict, OwnerState.LIVE)
    assert isinstance(err, OwnershipConflict)
    assert err.reason == "OwnershipConflict"
    assert str(err) == f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/bob-dev'


def test_an_owner_being_deleted_is_waited_for_not_failed() -> None:
    newcomer = tenant("bob-dev-2", CS_OTHER, tenant_name="bob-dev")
    verdict = Verdict(Claim.OTHER, Owner(TENANT_NAMESPACE, "bob-dev", BOB.uid))
    err = refusal(newcomer, NS_THING, "tenantName", "bob-dev", verdict, OwnerState.DELETING)
    assert type(err) is TemporaryError
    assert err.retry_after == WAIT_FOR_CLEANUP_SECONDS
    assert f"{TENANT_NAMESPACE}/bob-dev, which is being deleted" in str(err)


def test_a_leftover_says_whose_it_was_and_how_to_resolve_it() -> None:
    reborn = tenant(uid="uid-new")
    verdict = Verdict(Claim.OTHER, Owner(TENANT_NAMESPACE, "bob-dev", "uid-old"))
    err = refusal(reborn, NS_THING, "tenantName", "bob-dev", verdict, OwnerState.GONE)
    assert isinstance(err, OwnershipConflict)
    message = str(err)
    assert message.startswith(
        f"namespace vcluster-bob-dev was left behind by Tenant {TENANT_NAMESPACE}/bob-dev (uid uid-old), "
        "which no longer exists"
    )
    assert "nothing adopts it silently" in message
    assert "kubectl delete namespace vcluster-bob-dev" in message
    assert message.endswith(f"then retry: kubeopera-tenants retry bob-dev -n {TENANT_NAMESPACE}")


def test_a_hand_made_object_says_how_to_resolve_it_and_is_never_adopted() -> None:
    err = refusal(BOB, NS_THING, "tenantName", "bob-dev", Verdict(Claim.FOREIGN), None)
    assert isinstance(err, OwnershipConflict)
    message = str(err)
    assert message.startswith(
        f"namespace vcluster-bob-dev exists but was not made by kubeopera-tenants for this Tenant (no {LABEL_OWNER_UID}"
    )
    assert "nothing adopts it silently" in message
    assert "kubectl delete namespace vcluster-bob-dev" in message
    assert f"label it {LABEL_OWNER_UID}={BOB.uid}" in message
    assert message.endswith(f"then retry: kubeopera-tenants retry bob-dev -n {TENANT_NAMESPACE}")


# rival ------------------------------------------------------------------------------------------


def test_the_older_tenant_wins_and_the_newer_has_no_rival() -> None:
    older = tenant("bob-dev", CS_BOB, created="2026-11-30T10:00:00Z")
    newer = tenant("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created="2026-11-30T11:00:00Z")
    assert rival(newer, [older, newer]) == older
    assert rival(older, [older, newer]) is None


def test_a_shared_cloud_space_id_alone_is_a_rivalry() -> None:
    older = tenant("bob-dev", CS_BOB, created="2026-11-30T10:00:00Z")
    newer = tenant("carol", CS_BOB, created="2026-11-30T11:00:00Z")
    assert rival(newer, [older]) == older


def test_tenants_asking_for_neither_are_no_rivals() -> None:
    unrelated = tenant("carol", CS_OTHER, created="2020-01-01T00:00:00Z")
    assert rival(BOB, [unrelated]) is None


def test_the_tenant_itself_is_skipped_by_uid_even_when_listed_twice() -> None:
    # list_tenants by tenantName and by cloudSpaceID both return the Tenant itself; an older copy
    # of the same uid (read before a write) must not make it its own rival either
    stale_self = tenant(created="2000-01-01T00:00:00Z")
    assert rival(BOB, [BOB, BOB, stale_self]) is None


def test_the_oldest_of_several_older_claimants_is_named() -> None:
    first = tenant("a-first", CS_OTHER, tenant_name="bob-dev", created="2026-11-30T09:00:00Z")
    second = tenant("b-second", CS_BOB, tenant_name="other", created="2026-11-30T10:00:00Z")
    me = tenant(created="2026-11-30T11:00:00Z")
    assert rival(me, [second, me, first, second]) == first


def test_a_tie_in_creation_time_is_broken_by_namespace_then_name() -> None:
    same = "2026-11-30T10:00:00Z"
    alpha = tenant("alpha", CS_OTHER, tenant_name="bob-dev", created=same)
    zulu = tenant("zulu", CS_OTHER, tenant_name="bob-dev", created=same)
    assert rival(zulu, [alpha, zulu]) == alpha
    assert rival(alpha, [alpha, zulu]) is None
    other_ns = tenant("zulu", CS_OTHER, tenant_name="bob-dev", created=same, namespace="a-team")
    assert rival(alpha, [other_ns]) == other_ns


def test_a_rival_refusal_names_the_field_and_the_owner() -> None:
    owner = tenant("bob-dev", CS_BOB, created="2026-11-30T10:00:00Z")
    by_name = rival_refusal(tenant("bob-dev-2", CS_OTHER, tenant_name="bob-dev"), owner)
    assert isinstance(by_name, OwnershipConflict)
    assert str(by_name) == f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/bob-dev'
    by_id = rival_refusal(tenant("carol", CS_BOB), owner)
    assert isinstance(by_id, OwnershipConflict)
    assert str(by_id) == f'cloudSpaceID "{CS_BOB}" is already used by Tenant {TENANT_NAMESPACE}/bob-dev'


def test_a_rival_being_deleted_is_waited_for() -> None:
    leaving = tenant("bob-dev", CS_BOB, created="2026-11-30T10:00:00Z", deleting=True)
    err = rival_refusal(tenant("bob-dev-2", CS_OTHER, tenant_name="bob-dev"), leaving)
    assert type(err) is TemporaryError
    assert err.retry_after == WAIT_FOR_CLEANUP_SECONDS
    assert "which is being deleted" in str(err)


# release_labels ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (None, None),
        ({}, {}),
        ({"sync": {"toHost": {}}}, {}),
        ({"controlPlane": "not a mapping"}, {}),
        ({"controlPlane": {"statefulSet": ["a", "list"]}}, {}),
        ({"controlPlane": {"statefulSet": {"labels": None}}}, {}),
        ({"controlPlane": {"statefulSet": {"labels": "x=y"}}}, {}),
        ({"controlPlane": {"statefulSet": {"labels": {"a": 1, "b": True}}}}, {"a": "1", "b": "True"}),
        (
            {"controlPlane": {"statefulSet": {"labels": {LABEL_OWNER_UID: "u", LABEL_TENANT_ID: CS_BOB}}}},
            {LABEL_OWNER_UID: "u", LABEL_TENANT_ID: CS_BOB},
        ),
    ],
)
def test_release_labels_reads_what_is_there_and_nothing_else(values: Any, expected: Any) -> None:
    assert release_labels(values) == expected


def test_a_release_without_labels_is_foreign_and_one_without_values_is_free() -> None:
    legacy = legacy_release_labels(BOB)
    assert judge(release_labels({"controlPlane": {}}), BOB, legacy).claim == Claim.FOREIGN
    assert judge(release_labels(None), BOB, legacy).claim == Claim.FREE
