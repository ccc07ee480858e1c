"""What a Tenant that went without its cleanup left behind (issue 26 item 4): resync finds its
vcluster-* namespace by the owner labels (``ownership.orphaned_by``), waits out
``ORPHAN_GRACE_SECONDS``, and sends it to cleanup, which checks again under the namespace's work
lock and removes it with the stored kubeconfig. Nothing of a living Tenant is touched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from functions import cleanup
from functions.resync import resync
from shared.delivery import events
from shared.errors import BadEvent, WorkInHand
from shared.model import event_types
from shared.model.ownership import namespace_labels, orphaned_by, secret_labels
from shared.model.tenant import FINALIZER, Tenant
from shared.settings import Settings

from .fakes import (
    NAMESPACES_MADE,
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    FakeSink,
    tenant_object,
)

CS = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
GRACE = 600
SETTINGS = Settings(orphan_grace_seconds=GRACE)
AFTER_GRACE = NAMESPACES_MADE + timedelta(seconds=GRACE + 1)
KUBECONFIG = f"tenant-{CS}-kubeconfig"


def left_behind(kube: FakeKube, name: str = "bob") -> Tenant:
    """Tenant ``name`` made its namespace and stored kubeconfig, then went without cleanup (its
    finalizer removed by hand): what it owned stays, labelled with its uid."""
    gone = Tenant.from_object(tenant_object(name, CS, finalizers=[FINALIZER]))
    kube.add_namespace(f"vcluster-{name}", namespace_labels(gone))
    kube.add_secret(TENANT_NAMESPACE, KUBECONFIG, {"kubeconfig": b"..."}, secret_labels(gone))
    return gone


def orphans_found() -> float | None:
    return REGISTRY.get_sample_value("kubeopera_tenant_orphaned_namespaces")


def test_the_rule_names_only_an_owner_that_is_gone() -> None:
    owner = Tenant.from_object(tenant_object("bob", CS))
    labels = namespace_labels(owner)
    found = orphaned_by(labels, TENANT_NAMESPACE, live_uids=set())
    assert found is not None and (found.key, found.uid) == (f"{TENANT_NAMESPACE}/bob", owner.uid)
    assert orphaned_by(labels, TENANT_NAMESPACE, live_uids={owner.uid}) is None
    assert orphaned_by(labels, "elsewhere", live_uids=set()) is None, "Tenants of another namespace are not ours"
    assert orphaned_by({"kubeopera.io/tenant": "bob"}, TENANT_NAMESPACE, live_uids=set()) is None, "no owner uid"


def test_resync_sends_a_namespace_left_behind_to_cleanup_once_past_the_grace(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    gone = left_behind(kube)
    sink = FakeSink()
    assert resync(kube, sink, SETTINGS, now=NAMESPACES_MADE + timedelta(seconds=GRACE - 1)) == {}
    assert sink.sent == [] and orphans_found() == 1, "young: a Tenant may have been made after the list"

    assert resync(kube, sink, SETTINGS, now=AFTER_GRACE) == {"ORPHAN": 1}
    (sent,) = sink.sent
    assert sent.get_type() == event_types.CLEANUP and sent.get_subject() == f"{TENANT_NAMESPACE}/bob"
    assert sent.get_data() == {"namespace": TENANT_NAMESPACE, "name": "bob", "uid": gone.uid, "generation": 0} | {
        "orphan": "vcluster-bob"
    }

    assert cleanup.handle(kube, helm, api, SETTINGS, sent, events.tenant_ref(sent)) is None
    assert kube.namespaces["vcluster-bob"]["terminating"], "its deletion started"
    assert (TENANT_NAMESPACE, KUBECONFIG) not in kube.secrets
    assert kube.leases == {}, "the work lock was given up"
    assert api.reports == [], "kubeopera-api is told of Tenants, not of leftovers"
    kube.finish_namespace_deletion("vcluster-bob")
    assert resync(kube, sink, SETTINGS, now=AFTER_GRACE) == {} and orphans_found() == 0


def test_a_namespace_whose_owner_lives_or_is_going_is_no_orphan(kube: FakeKube) -> None:
    owner = kube.add_tenant(tenant_object("bob", CS, finalizers=[FINALIZER]))
    kube.add_namespace("vcluster-bob", namespace_labels(Tenant.from_object(owner)))
    kube.add_namespace("vcluster-old", namespace_labels(Tenant.from_object(tenant_object("old", CS))), terminating=True)
    sink = FakeSink()
    assert "ORPHAN" not in resync(kube, sink, SETTINGS, now=AFTER_GRACE)
    assert [e.get_type() for e in sink.sent] == [event_types.INSTALL], "bob (no status yet) goes to install"
    assert orphans_found() == 0


def test_cleanup_removes_nothing_of_a_living_tenant_whatever_the_event_says(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """A stale or forged ``orphan`` event: the Tenant it names is alive, or the namespace carries
    another owner: nothing is deleted."""
    live = Tenant.from_object(kube.add_tenant(tenant_object("bob", CS, finalizers=[FINALIZER])))
    kube.add_namespace("vcluster-bob", namespace_labels(live))
    kube.add_secret(TENANT_NAMESPACE, KUBECONFIG, {"kubeconfig": b"..."}, secret_labels(live))
    stale = events.make(event_types.CLEANUP, "resync", live.ref, orphan="vcluster-bob")
    assert cleanup.handle(kube, helm, api, SETTINGS, stale, live.ref) is None
    ghost = Tenant.from_object(tenant_object("ghost", CS)).ref
    other = events.make(event_types.CLEANUP, "resync", ghost, orphan="vcluster-bob")
    assert cleanup.handle(kube, helm, api, SETTINGS, other, ghost) is None
    assert not kube.namespaces["vcluster-bob"]["terminating"] and (TENANT_NAMESPACE, KUBECONFIG) in kube.secrets
    assert kube.writes["namespace delete"] == 0 and kube.writes["secret delete"] == 0


def test_cleanup_of_an_orphan_waits_for_an_install_of_that_name(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    gone = left_behind(kube)
    kube.leases[(TENANT_NAMESPACE, "lock-vcluster-bob")] = "another-pod/1/1"
    event = events.make(event_types.CLEANUP, "resync", gone.ref, orphan="vcluster-bob")
    with pytest.raises(WorkInHand):
        cleanup.handle(kube, helm, api, SETTINGS, event, gone.ref)
    assert not kube.namespaces["vcluster-bob"]["terminating"]


def test_an_orphan_outside_vcluster_namespaces_is_refused(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    gone = Tenant.from_object(tenant_object("bob", CS))
    event = events.make(event_types.CLEANUP, "resync", gone.ref, orphan="kube-system")
    with pytest.raises(BadEvent, match="vcluster-"):
        cleanup.handle(kube, helm, api, SETTINGS, event, gone.ref)


def test_tenants_on_every_page_of_the_pass_own_their_namespaces(kube: FakeKube) -> None:
    living = [
        kube.add_tenant(tenant_object(name, f"7c9e6679-7425-40de-944b-e07fc1f90ae{i}", finalizers=[FINALIZER]))
        for i, name in enumerate(("alice", "carol", "erin"))
    ]
    for obj in living:
        owner = Tenant.from_object(obj)
        kube.add_namespace(f"vcluster-{owner.name}", namespace_labels(owner))
    left_behind(kube)
    kube.tenant_page = 1  # a pass of three pages
    sink = FakeSink()

    assert resync(kube, sink, SETTINGS, now=AFTER_GRACE)["ORPHAN"] == 1
    (orphan,) = [e for e in sink.sent if e.get_type() == event_types.CLEANUP]
    assert orphan.get_data()["orphan"] == "vcluster-bob"  # type: ignore[index]
    assert orphans_found() == 1
