"""Every decision install, store-kubeconfig, cleanup, check-ready, notify-api and dead-letter make,
through their real ``handle`` functions, with in-memory adapters (``tests/unit/fakes.py``).

The fakes only hold state and answer as the adapters do; ownership, phases, Events and the HTTP
mapping are the product's own code. No cluster, helm or Go tool is involved.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.v1.event import CloudEvent
from prometheus_client import REGISTRY

from functions import check_ready, cleanup, dead_letter, install, notify_api, store_kubeconfig
from shared import cli
from shared.adapters.kubeopera_api import CallbackResult, CloudSpaceUpdate
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import (
    CleanupStalled,
    Conflict,
    NotReadyYet,
    OwnershipConflict,
    PermanentError,
    ProvisionTimeout,
    TemporaryError,
    WorkInHand,
)
from shared.model import event_types, lifecycle
from shared.model.cluster import Marker, Rollout, Volume
from shared.model.naming import KUBECONFIG_KEY, LABEL_OWNER_UID, VCLUSTER_CONFIG_KEY
from shared.model.ownership import (
    legacy_namespace_labels,
    legacy_secret_labels,
    namespace_labels,
    owner_labels,
    release_labels,
    secret_labels,
)
from shared.model.tenant import (
    COND_RELEASE_INSTALLED,
    FINALIZER,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantRef,
    parse_time,
    utcnow,
)
from shared.model.values import vcluster_values
from shared.model.vcluster_watch import look_reads
from shared.runtime import Runtime
from shared.settings import Settings
from shared.steps import locks
from shared.steps.reconcile import mark_failed, write_status

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    FakeVClusterApi,
    apiserver_event,
    deliver,
    in_sync,
    ref_of,
    step_event,
    tenant_object,
)

SETTINGS = Settings(cleanup_poll_seconds=7, ready_poll_seconds=15, provision_timeout_seconds=600)
CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
CS_OTHER = "0b6f5a4e-3d2c-4b1a-9f8e-7d6c5b4a3f2e"
BOB_NS = "vcluster-bob-dev"
BOB_RELEASE = "vc-bob-dev"
BOB_SECRET = f"tenant-{CS_BOB}-kubeconfig"
BOB_KEY = f"{TENANT_NAMESPACE}/bob-dev"
CONFIG = b"apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: s3cret}}]\n"
EARLY, LATE = "2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"
BOB_CLAIM = f"{TENANT_NAMESPACE}/cloudspace-{CS_BOB}"  # the Lease that holds bob-dev's cloudSpaceID
# What install writes in bob-dev's namespace for itself and the other functions (shared.steps.access),
# round by round: its own binding, then side by side the two other bindings to ClusterRoles, the
# two Roles, the two bindings to them (``in_rounds`` puts each pair in this order).
GRANTS = [
    ("rolebinding create", f"{BOB_NS}/kubeopera-tenants:tenant-install"),
    ("rolebinding create", f"{BOB_NS}/kubeopera-tenants:tenant-check-ready"),
    ("rolebinding create", f"{BOB_NS}/kubeopera-tenants:tenant-cleanup"),
    ("role create", f"{BOB_NS}/kubeopera-tenants:tenant-store-kubeconfig"),
    ("rolebinding create", f"{BOB_NS}/kubeopera-tenants:tenant-store-kubeconfig"),
]


# helpers ----------------------------------------------------------------------------------------


def in_rounds(journal: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``journal`` with each pair of grants that install writes side by side (``access.at_once``)
    in ``GRANTS``' order; which of a pair lands first is up to the threads."""
    out = list(journal)
    start = out.index(GRANTS[0]) if GRANTS[0] in out else len(out)
    for first in range(start + 1, min(start + len(GRANTS), len(out)) - 1, 2):
        pair = out[first : first + 2]
        if all(entry in GRANTS for entry in pair):
            out[first : first + 2] = sorted(pair, key=GRANTS.index)
    return out


def live(kube: FakeKube, name: str = "bob-dev", namespace: str = TENANT_NAMESPACE) -> Tenant:
    found = kube.get_tenant(namespace, name)
    assert found is not None, f"Tenant {namespace}/{name} is gone"
    return found


def run_install(kube: FakeKube, helm: FakeHelm, obj: dict[str, Any]) -> BaseCloudEvent | None:
    return install.handle(kube, helm, SETTINGS, ref_of(obj))


def run_store(kube: FakeKube, obj: dict[str, Any]) -> BaseCloudEvent | None:
    return store_kubeconfig.handle(kube, SETTINGS, ref_of(obj))


def run_cleanup(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi, obj: dict[str, Any]) -> BaseCloudEvent | None:
    return cleanup.handle(kube, helm, api, SETTINGS, step_event(obj, event_types.CLEANUP), ref_of(obj))


def provision(kube: FakeKube, helm: FakeHelm, name: str = "bob-dev", cs: str = CS_BOB, **kw: Any) -> dict[str, Any]:
    """A new Tenant taken through install; returns it as it is now."""
    obj = kube.add_tenant(tenant_object(name, cs, **kw))
    assert run_install(kube, helm, obj) is not None
    return current(kube, obj["metadata"]["namespace"], name)


def booted(kube: FakeKube, tenant_name: str = "bob-dev", generation: int = 1) -> None:
    """The StatefulSet rolled out and its pod is ready; vcluster wrote its kubeconfig Secret."""
    kube.boot_vcluster(tenant_name, CONFIG, generation)


def provisioned_and_stored(kube: FakeKube, helm: FakeHelm) -> dict[str, Any]:
    obj = provision(kube, helm)
    booted(kube)
    assert run_store(kube, obj) is not None
    return current(kube, TENANT_NAMESPACE, "bob-dev")


def refuse(kube: FakeKube, helm: FakeHelm, obj: dict[str, Any]) -> Exception:
    """Run install expecting it to refuse; the Tenant is then marked as the HTTP layer does."""
    with pytest.raises((OwnershipConflict, TemporaryError)) as caught:
        run_install(kube, helm, obj)
    err = caught.value
    if isinstance(err, PermanentError):
        mark_failed(kube, ref_of(obj), str(err), err.reason)
    return err


def deleted(kube: FakeKube, name: str) -> dict[str, Any]:
    """``kubectl delete`` of a Tenant with a finalizer: what the update event carries."""
    obj = kube.delete_tenant(TENANT_NAMESPACE, name)
    assert obj is not None, f"Tenant {name} had no finalizer and is gone"
    return obj


def current(kube: FakeKube, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.tenant_dict(namespace, name)
    assert obj is not None, f"Tenant {namespace}/{name} is gone"
    return obj


def since(kube: FakeKube, mark: int) -> list[tuple[str, str]]:
    return kube.journal[mark:]


def legacy_values(tenant_name: str, cs: str) -> dict[str, Any]:
    """The values the version before ownership labels installed (labels without a uid)."""
    return {
        "controlPlane": {
            "distro": {"k3s": {"enabled": True}},
            "statefulSet": {
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
                "labels": {
                    "kubeopera.io/environment": "development",
                    "kubeopera.io/tenant": tenant_name,
                    "kubeopera.io/tenant-id": cs,
                },
            },
        },
        "sync": {"toHost": {"ingresses": {"enabled": True}, "serviceAccounts": {"enabled": True}}},
        "exportKubeConfig": {"server": f"https://vc-{tenant_name}.vcluster-{tenant_name}:443"},
    }


def settled_status(phase: str = "Ready") -> dict[str, Any]:
    cond = {"status": "True", "reason": "Installed", "observedGeneration": 1, "lastTransitionTime": EARLY}
    return {
        "phase": phase,
        "observedGeneration": 1,
        "lastSyncedAt": EARLY,
        "conditions": [{"type": "ReleaseInstalled", **cond}, {"type": "Ready", **cond, "reason": "VClusterReady"}],
    }


def reconcile_total(controller: str, result: str) -> float:
    value = REGISTRY.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": controller, "result": result}
    )
    return value or 0.0


def runtime(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi | None = None) -> Runtime:
    """What a function's create_app works with: these tests' settings and the stand-ins."""
    return Runtime(settings=SETTINGS, kube=kube, helm=helm, kubeopera_api=api, vcluster_api=FakeVClusterApi())


# install ----------------------------------------------------------------------------------------


def test_install_writes_the_finalizer_before_it_makes_anything(kube: FakeKube, helm: FakeHelm) -> None:
    """A new Tenant is Pending from the CRD's default: install's first write is its finalizer,
    and its first status write is Provisioning, once helm has run (issue 29: one write less)."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    assert Tenant.from_object(obj).status.phase == "Pending", "as the API server returns it"
    reply = run_install(kube, helm, obj)

    assert in_rounds(kube.journal) == [
        ("finalizer+", BOB_KEY),
        ("claim create", BOB_CLAIM),
        ("namespace create", BOB_NS),
        *GRANTS,
        ("helm install", f"{BOB_NS}/{BOB_RELEASE}"),
        ("status", f"{BOB_KEY}:Provisioning"),
        ("event", "Provisioning"),
    ]
    assert kube.event_reasons() == ["Provisioning"]
    tenant = live(kube)
    assert tenant.finalizers == (FINALIZER,)
    assert kube.namespaces[BOB_NS]["labels"] == namespace_labels(tenant) | SETTINGS.isolation.pod_security_labels()
    values = helm.values_of(BOB_RELEASE, BOB_NS)
    assert values == vcluster_values(tenant, SETTINGS.environment)
    assert release_labels(values)[LABEL_OWNER_UID] == tenant.uid
    status = tenant.status
    assert (status.phase, status.vcluster_name, status.namespace, status.observed_generation) == (
        "Provisioning",
        BOB_RELEASE,
        BOB_NS,
        1,
    )
    assert status.is_true("ReleaseInstalled", 1)
    ready = status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "Provisioning")
    assert reply is not None and reply.get_type() == event_types.PROVISIONING
    assert reply.get_data() == events.ref_data(ref_of(obj))


def test_install_redelivery_of_the_same_event_changes_nothing(kube: FakeKube, helm: FakeHelm) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    run_install(kube, helm, obj)
    mark, operations = len(kube.journal), list(helm.operations)

    assert run_install(kube, helm, obj) is None
    assert helm.operations == operations == [("install", f"{BOB_NS}/{BOB_RELEASE}")]
    assert since(kube, mark) == []


def test_install_retry_of_an_installed_tenant_makes_no_new_helm_revision(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    obj = kube.set_phase(TENANT_NAMESPACE, "bob-dev", "Pending")  # the runbook's retry
    # install reconsiders the Tenant (it is no longer settled), but the release already has
    # exactly these values: helm is asked, and nothing new is installed
    assert run_install(kube, helm, obj) is not None
    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}")]
    assert helm.releases[(BOB_NS, BOB_RELEASE)]["revision"] == 1
    assert kube.writes["namespace create"] == 1 and kube.writes["namespace label"] == 0
    assert live(kube).status.phase == "Provisioning"


def test_install_upgrades_a_new_generation_without_a_second_provisioning_event(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    mark = len(kube.journal)
    obj = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "4"})

    assert run_install(kube, helm, obj) is not None

    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}"), ("upgrade", f"{BOB_NS}/{BOB_RELEASE}")]
    assert helm.values_of(BOB_RELEASE, BOB_NS)["controlPlane"]["statefulSet"]["resources"]["limits"]["cpu"] == "4"
    # Provisioning again, for generation 2: the status is written, but the phase did not change,
    # so there is no new Event, and nothing is Pending again
    assert since(kube, mark) == [("helm upgrade", f"{BOB_NS}/{BOB_RELEASE}"), ("status", f"{BOB_KEY}:Provisioning")]
    assert live(kube).status.observed_generation == 2
    assert [(e["reason"], e["count"]) for e in kube.events] == [("Provisioning", 1)]


def test_a_new_distro_setting_is_for_new_vclusters_only(kube: FakeKube, helm: FakeHelm) -> None:
    """VCLUSTER_DISTRO changed from k3s to k8s: bob's running k3s vCluster is upgraded as k3s (a
    k8s one would be a new, empty cluster); a Tenant made now gets k8s."""
    provision(kube, helm)
    k8s = dataclasses.replace(SETTINGS, distro="k8s")
    obj = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "4"})

    assert install.handle(kube, helm, k8s, ref_of(obj)) is not None

    values = helm.values_of(BOB_RELEASE, BOB_NS)
    assert values["controlPlane"]["statefulSet"]["resources"]["limits"]["cpu"] == "4"
    assert values["controlPlane"]["distro"] == {"k3s": {"enabled": True}}
    newcomer = kube.add_tenant(tenant_object("erin", CS_OTHER))
    assert install.handle(kube, helm, k8s, ref_of(newcomer)) is not None
    assert helm.values_of("vc-erin", "vcluster-erin")["controlPlane"]["distro"] == {"k8s": {"enabled": True}}


def test_install_refuses_a_second_tenant_reusing_the_tenant_name(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    namespace_before = copy.deepcopy(kube.namespaces[BOB_NS])
    release_before = copy.deepcopy(helm.releases)
    mark = len(kube.journal)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))

    err = refuse(kube, helm, intruder)

    assert isinstance(err, OwnershipConflict)
    assert str(err) == f'tenantName "bob-dev" is already used by Tenant {BOB_KEY}'
    assert kube.namespaces[BOB_NS] == namespace_before
    assert helm.releases == release_before
    assert helm.calls["install_or_upgrade"] == 1  # the owner's own install, nothing since
    key = f"{TENANT_NAMESPACE}/bob-dev-2"
    # what changed is the intruder's own Tenant: its finalizer, then Failed by the refusal
    assert since(kube, mark) == [
        ("finalizer+", key),
        ("status", f"{key}:Failed"),
        ("event", "OwnershipConflict"),
    ]
    failed = live(kube, "bob-dev-2")
    assert failed.status.phase == "Failed"
    assert failed.status.message == str(err)
    assert kube.event("OwnershipConflict")["type"] == "Warning"
    assert live(kube).status.phase == "Provisioning"  # the owner is untouched


def test_install_refuses_a_second_tenant_reusing_the_cloud_space_id(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    mark, operations = len(kube.journal), list(helm.operations)
    carol = kube.add_tenant(tenant_object("carol", CS_BOB, created=LATE))

    err = refuse(kube, helm, carol)

    assert isinstance(err, OwnershipConflict)
    assert str(err) == f'cloudSpaceID "{CS_BOB}" is already used by Tenant {BOB_KEY}'
    assert "vcluster-carol" not in kube.namespaces
    assert helm.operations == operations
    assert not [w for w in since(kube, mark) if w[0].startswith(("namespace", "helm", "secret"))]


def test_of_two_tenants_created_in_one_second_the_first_to_claim_the_cloud_space_id_goes_on(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Creation times are kept to the second, and the older-Tenant rule breaks a tie by name: amy,
    created in zed's second, counts as the older, and finds no older rival. Had zed been provisioned
    before amy existed, both would go on. The claim, a Lease only one create can make, decides:
    zed's came first, so amy is Failed before she makes anything, and there is one release."""
    zed = provision(kube, helm, "zed", CS_BOB, created=EARLY)
    operations = list(helm.operations)
    amy = kube.add_tenant(tenant_object("amy", CS_BOB, created=EARLY))

    err = refuse(kube, helm, amy)

    assert isinstance(err, OwnershipConflict)
    assert str(err) == f'cloudSpaceID "{CS_BOB}" is already used by Tenant {TENANT_NAMESPACE}/zed'
    assert live(kube, "amy").status.phase == "Failed"
    assert "vcluster-amy" not in kube.namespaces
    assert helm.operations == operations
    assert kube.claims[(TENANT_NAMESPACE, f"cloudspace-{CS_BOB}")].labels[LABEL_OWNER_UID] == zed["metadata"]["uid"]


def test_a_claim_left_by_a_tenant_that_is_gone_is_released_and_taken(kube: FakeKube, helm: FakeHelm) -> None:
    """The garbage collector removes a claim with its Tenant, but not at once: a new Tenant for the
    same cloudSpaceID meanwhile deletes the leftover (at the version read) and claims anew."""
    ghost = Tenant.from_object(tenant_object("ghost", CS_BOB, uid="uid-gone"))
    kube.claims[(TENANT_NAMESPACE, f"cloudspace-{CS_BOB}")] = Marker(secret_labels(ghost), "7")

    bob = provision(kube, helm)

    assert kube.claims[(TENANT_NAMESPACE, f"cloudspace-{CS_BOB}")].labels == secret_labels(Tenant.from_object(bob))
    assert ("claim delete", BOB_CLAIM) in kube.journal
    assert live(kube).status.phase == "Provisioning"


def test_a_claim_of_a_tenant_being_deleted_waits_for_its_cleanup(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    kube.delete_tenant(TENANT_NAMESPACE, "bob-dev")
    # The same second, and amy sorts first: no older rival, so only bob-dev's claim holds her back.
    amy = kube.add_tenant(tenant_object("amy", CS_BOB, created=EARLY))

    with pytest.raises(TemporaryError) as caught:
        run_install(kube, helm, amy)

    assert f'cloudSpaceID "{CS_BOB}" is still held by Tenant {BOB_KEY}, which is being deleted' in str(caught.value)
    assert kube.calls["get_claim"] == 1
    assert "vcluster-amy" not in kube.namespaces


def test_install_waits_for_an_older_rival_being_deleted(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    kube.delete_tenant(TENANT_NAMESPACE, "bob-dev")
    operations = list(helm.operations)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))

    err = refuse(kube, helm, intruder)

    assert type(err) is TemporaryError
    assert err.retry_after == 5
    assert f"still held by Tenant {BOB_KEY}, which is being deleted" in str(err)
    assert helm.operations == operations
    assert kube.namespaces[BOB_NS]["labels"][LABEL_OWNER_UID] == f"uid-{TENANT_NAMESPACE}-bob-dev"
    assert live(kube, "bob-dev-2").status.phase == "Pending"  # not Failed: it asks again later


def test_install_refuses_a_namespace_owned_by_a_tenant_in_another_namespace(kube: FakeKube, helm: FakeHelm) -> None:
    # Tenants of another namespace are not listed as rivals; the namespace's labels still stop it
    provision(kube, helm, namespace="team-a", created=EARLY)
    operations = list(helm.operations)
    obj = kube.add_tenant(tenant_object("bob-dev", CS_OTHER, created=LATE))

    err = refuse(kube, helm, obj)

    assert isinstance(err, OwnershipConflict)
    assert str(err) == 'tenantName "bob-dev" is already used by Tenant team-a/bob-dev'
    assert kube.namespaces[BOB_NS]["labels"][LABEL_OWNER_UID] == "uid-team-a-bob-dev"
    assert helm.operations == operations


def test_install_refuses_a_namespace_left_behind_by_a_tenant_that_no_longer_exists(
    kube: FakeKube, helm: FakeHelm
) -> None:
    # An earlier bob-dev (another uid) made the namespace; that Tenant is gone and a new one with
    # the same name asks for it: it is not handed the old one's namespace.
    old = Tenant.from_object(tenant_object("bob-dev", CS_BOB, uid="uid-old"))
    kube.add_namespace(BOB_NS, namespace_labels(old))
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, uid="uid-new"))

    err = refuse(kube, helm, obj)

    assert isinstance(err, OwnershipConflict)
    assert f"namespace {BOB_NS} was left behind by Tenant {BOB_KEY} (uid uid-old)" in str(err)
    assert f"kubectl delete namespace {BOB_NS}" in str(err)
    assert kube.namespaces[BOB_NS]["labels"] == namespace_labels(old)
    assert kube.writes["namespace label"] == 0
    assert helm.calls["install_or_upgrade"] == 0


def test_install_refuses_a_namespace_made_by_hand(kube: FakeKube, helm: FakeHelm) -> None:
    kube.add_namespace(BOB_NS, {"team": "platform"})
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    err = refuse(kube, helm, obj)

    assert isinstance(err, OwnershipConflict)
    assert f"namespace {BOB_NS} exists but was not made by kubeopera-tenants" in str(err)
    assert kube.namespaces[BOB_NS]["labels"] == {"team": "platform"}
    assert kube.writes["namespace label"] == 0
    assert helm.calls["install_or_upgrade"] == 0


def test_install_judges_again_a_namespace_made_by_someone_else_between_look_and_create(helm: FakeHelm) -> None:
    class RacingKube(FakeKube):
        """Another Tenant's install creates the namespace just before ours does."""

        def create_namespace(self, name: str, labels: Any) -> bool:
            if name not in self.namespaces:
                winner = Tenant.from_object(tenant_object("bob-dev", CS_OTHER, namespace="team-a"))
                self.add_namespace(name, namespace_labels(winner))
            return super().create_namespace(name, labels)

    kube = RacingKube()
    helm.kube = kube
    kube.add_tenant(tenant_object("bob-dev", CS_OTHER, namespace="team-a", created=EARLY))
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, created=LATE))

    with pytest.raises(OwnershipConflict, match=r'^tenantName "bob-dev" is already used by Tenant team-a/bob-dev$'):
        run_install(kube, helm, obj)
    assert kube.calls["create_namespace"] == 1 and kube.calls["label_namespace"] == 0
    assert helm.calls["install_or_upgrade"] == 0


def test_install_refuses_a_release_installed_by_hand_in_its_namespace(kube: FakeKube, helm: FakeHelm) -> None:
    hand_made = {"controlPlane": {"distro": {"k3s": {"enabled": True}}}}
    helm.add_release(BOB_RELEASE, BOB_NS, hand_made)
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    err = refuse(kube, helm, obj)

    assert isinstance(err, OwnershipConflict)
    assert str(err).startswith(f"helm release {BOB_NS}/{BOB_RELEASE} exists but was not made by kubeopera-tenants")
    assert f"helm uninstall {BOB_RELEASE} -n {BOB_NS}" in str(err)
    assert helm.operations == []
    assert helm.values_of(BOB_RELEASE, BOB_NS) == hand_made


def test_install_adopts_the_previous_versions_namespace_and_release_once(kube: FakeKube, helm: FakeHelm) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    tenant = live(kube)
    kube.add_namespace(BOB_NS, legacy_namespace_labels(tenant))
    helm.add_release(BOB_RELEASE, BOB_NS, legacy_values("bob-dev", CS_BOB))

    assert run_install(kube, helm, obj) is not None

    assert kube.namespaces[BOB_NS]["labels"] == namespace_labels(tenant) | SETTINGS.isolation.pod_security_labels()
    assert helm.operations == [("upgrade", f"{BOB_NS}/{BOB_RELEASE}")]
    assert release_labels(helm.values_of(BOB_RELEASE, BOB_NS)) == (
        {"kubeopera.io/environment": "development"}
        | {"kubeopera.io/tenant": "bob-dev", "kubeopera.io/tenant-id": CS_BOB}
        | owner_labels(tenant)
    )
    assert live(kube).status.phase == "Provisioning"

    # again (the runbook's retry): now it is simply ours; nothing is labelled or upgraded twice
    run_install(kube, helm, kube.set_phase(TENANT_NAMESPACE, "bob-dev", "Pending"))
    assert kube.writes["namespace label"] == 1
    assert kube.writes["namespace create"] == 0
    assert helm.operations == [("upgrade", f"{BOB_NS}/{BOB_RELEASE}")]


@pytest.mark.parametrize(
    "how",
    [
        pytest.param({"status": {"phase": "Failed", "message": "earlier failure"}}, id="failed"),
        pytest.param({"status": settled_status("Ready"), "finalizers": [FINALIZER]}, id="settled-ready"),
        pytest.param({"status": settled_status("Provisioning"), "finalizers": [FINALIZER]}, id="settled-provisioning"),
        pytest.param({"finalizers": [FINALIZER], "deleting": True}, id="deleting"),
    ],
)
def test_install_leaves_failed_deleting_and_settled_tenants_alone(
    kube: FakeKube, helm: FakeHelm, how: dict[str, Any]
) -> None:
    how = dict(how)
    deleting = how.pop("deleting", False)
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, **how), SETTINGS))
    if deleting:
        obj = deleted(kube, "bob-dev")
    before = kube.tenant_dict(TENANT_NAMESPACE, "bob-dev")

    assert run_install(kube, helm, obj) is None

    assert kube.journal == []
    assert kube.calls == {"get_tenant": 1, "get_namespace": 1}  # no namespace: no access to grant in it
    assert helm.calls == {}
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") == before


def test_install_ignores_an_event_about_another_incarnation_or_generation(kube: FakeKube, helm: FakeHelm) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    ref = ref_of(obj)
    for stale in (
        TenantRef(ref.namespace, ref.name, "uid-of-a-deleted-one", 1),
        TenantRef(ref.namespace, ref.name, ref.uid, 2),
    ):
        assert install.handle(kube, helm, SETTINGS, stale) is None
    assert kube.journal == []
    assert helm.calls == {}


def test_a_ready_tenant_of_the_previous_version_gets_the_finalizer_on_its_next_update(
    kube: FakeKube, helm: FakeHelm
) -> None:
    # What the previous version left: a Ready Tenant without finalizer, a namespace and a
    # release with the labels of that version.
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status=settled_status("Ready")))
    kube.add_namespace(BOB_NS, legacy_namespace_labels(live(kube)))
    helm.add_release(BOB_RELEASE, BOB_NS, legacy_values("bob-dev", CS_BOB))

    run_install(kube, helm, obj)

    assert live(kube).has_finalizer, "a later kubectl delete would remove it at once and leave its vCluster"


# store-kubeconfig -------------------------------------------------------------------------------


def test_store_copies_the_kubeconfig_with_owner_labels_and_replies_only_its_name(
    kube: FakeKube, helm: FakeHelm
) -> None:
    obj = provision(kube, helm)
    booted(kube)

    reply = run_store(kube, obj)

    stored = kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]
    assert stored["data"] == {KUBECONFIG_KEY: CONFIG}
    assert stored["labels"] == secret_labels(live(kube))
    assert reply is not None and reply.get_type() == event_types.KUBECONFIG_STORED
    assert reply.get_data() == events.ref_data(ref_of(obj)) | {"kubeconfigSecret": BOB_SECRET}
    assert "s3cret" not in json.dumps(reply.get_data())
    assert kube.calls["get_secret"] == 0, "created without a read: there was none"


def test_store_adds_the_kubeconfig_at_the_external_address_when_one_is_set(kube: FakeKube, helm: FakeHelm) -> None:
    exported = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://vc-bob-dev.vcluster-bob-dev.svc:443"}}],
            "users": [{"name": "u", "user": {"token": "s3cret"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    ).encode()
    settings = dataclasses.replace(SETTINGS, external_server="https://{tenant}.vclusters.example.com")
    obj = provision(kube, helm)
    kube.boot_vcluster("bob-dev", exported)

    assert store_kubeconfig.handle(kube, settings, ref_of(obj)) is not None

    data = kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["data"]
    assert data[KUBECONFIG_KEY] == exported  # the one Ready was proven with, byte for byte
    external = yaml.safe_load(data["kubeconfig-external"])
    assert external["clusters"][0]["cluster"]["server"] == "https://bob-dev.vclusters.example.com"
    assert external["users"] == yaml.safe_load(exported)["users"]


def test_store_does_not_rewrite_an_identical_secret(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provisioned_and_stored(kube, helm)
    version = kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["resourceVersion"]

    assert run_store(kube, obj) is not None

    assert kube.writes["secret write"] == 1
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["resourceVersion"] == version


def test_store_replaces_a_changed_kubeconfig_at_the_version_it_read(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provisioned_and_stored(kube, helm)
    kube.secrets[(BOB_NS, "vc-vc-bob-dev")]["data"] = {VCLUSTER_CONFIG_KEY: b"rotated"}

    run_store(kube, obj)

    assert kube.writes["secret write"] == 2
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["data"] == {KUBECONFIG_KEY: b"rotated"}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        pytest.param(
            namespace_labels(Tenant.from_object(tenant_object("alice", CS_OTHER))),
            f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/alice',
            id="another-tenants",
        ),
        pytest.param({}, f"namespace {BOB_NS} exists but was not made by kubeopera-tenants", id="hand-made"),
    ],
)
def test_store_copies_only_from_a_namespace_that_is_ours(kube: FakeKube, labels: dict[str, str], message: str) -> None:
    kube.add_tenant(tenant_object("alice", CS_OTHER, tenant_name="alice"))
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Provisioning"}))
    kube.add_namespace(BOB_NS, labels)
    booted(kube)

    with pytest.raises(OwnershipConflict) as caught:
        run_store(kube, obj)

    assert str(caught.value).startswith(message)
    assert kube.calls["read_secret_key"] == 0  # not even read
    assert (TENANT_NAMESPACE, BOB_SECRET) not in kube.secrets


def test_store_refuses_a_secret_of_another_tenant_without_changing_a_byte(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm, created=EARLY)
    booted(kube)
    alice = Tenant.from_object(kube.add_tenant(tenant_object("alice", CS_BOB, created=LATE)))
    kube.add_secret(TENANT_NAMESPACE, BOB_SECRET, {KUBECONFIG_KEY: b"alice's"}, secret_labels(alice))
    before = copy.deepcopy(kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)])

    with pytest.raises(OwnershipConflict) as caught:
        run_store(kube, obj)

    assert str(caught.value) == f'cloudSpaceID "{CS_BOB}" is already used by Tenant {TENANT_NAMESPACE}/alice'
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)] == before
    assert kube.calls["write_secret"] == 1, "the create, refused (409): nothing written over alice's"


def test_store_adopts_the_previous_versions_secret_once(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    booted(kube)
    tenant = live(kube)
    kube.add_secret(TENANT_NAMESPACE, BOB_SECRET, {KUBECONFIG_KEY: b"old"}, legacy_secret_labels(tenant))

    run_store(kube, obj)
    run_store(kube, obj)

    stored = kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]
    assert stored["labels"] == secret_labels(tenant)
    assert stored["data"] == {KUBECONFIG_KEY: CONFIG}
    assert kube.writes["secret write"] == 1


@pytest.mark.parametrize(
    "how",
    [
        pytest.param({"status": {"phase": "Pending"}}, id="pending"),
        pytest.param({"status": {"phase": "Failed"}}, id="failed"),
        pytest.param({"status": {"phase": "Provisioning"}, "finalizers": [FINALIZER], "deleting": True}, id="deleting"),
    ],
)
def test_store_stores_nothing_for_a_tenant_not_provisioning_or_being_deleted(
    kube: FakeKube, how: dict[str, Any]
) -> None:
    how = dict(how)
    deleting = how.pop("deleting", False)
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, **how), SETTINGS))
    if deleting:
        obj = deleted(kube, "bob-dev")
    booted(kube)

    assert run_store(kube, obj) is None
    assert kube.calls == {"get_tenant": 1}


def test_store_waits_while_vcluster_has_not_written_its_secret(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    with pytest.raises(TemporaryError, match="vc-vc-bob-dev has no key 'config'"):
        run_store(kube, obj)
    assert kube.writes["secret write"] == 0


# cleanup ----------------------------------------------------------------------------------------


def test_cleanup_removes_what_the_tenant_owns_then_waits_for_the_namespace(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provisioned_and_stored(kube, helm)
    obj = deleted(kube, "bob-dev")

    with pytest.raises(NotReadyYet) as first:
        run_cleanup(kube, helm, api, obj)

    assert first.value.retry_after == SETTINGS.cleanup_poll_seconds
    assert str(first.value) == f"waiting for namespace {BOB_NS} to be deleted"
    tenant = live(kube)
    assert tenant.status.phase == "Deleting"
    assert kube.event("CleanupStarted")["type"] == "Normal"
    assert helm.operations[-1] == ("uninstall", f"{BOB_NS}/{BOB_RELEASE}")
    assert kube.namespaces[BOB_NS]["terminating"]
    assert (TENANT_NAMESPACE, BOB_SECRET) not in kube.secrets
    assert tenant.has_finalizer
    assert api.reports == []

    # asked again while the namespace is still terminating: nothing is done twice
    writes = kube.writes.copy()
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, obj)
    assert kube.writes == writes
    assert [op for op, _ in helm.operations].count("uninstall") == 1

    kube.finish_namespace_deletion(BOB_NS)
    assert run_cleanup(kube, helm, api, obj) is None

    assert api.reports == [CloudSpaceUpdate(CS_BOB, BOB_RELEASE, BOB_NS, BOB_SECRET, "deleted")]
    assert kube.event("CleanupFinished")["type"] == "Normal"
    assert kube.journal[-3:] == [
        ("claim delete", BOB_CLAIM),
        ("event", "CleanupFinished"),
        ("finalizer-", BOB_KEY),
    ], "the cloudSpaceID is free again before the Tenant goes"
    assert kube.claims == {}
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None  # the API server let it go
    assert kube.event("CleanupStarted")["count"] == 1


def test_cleanup_waits_while_the_deletion_moves_and_gives_up_only_when_it_stalls(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """What the namespace controller says it waits for is the Tenant's message, written when it
    changes; unchanged for CLEANUP_STALL_SECONDS, cleanup fails the Tenant (CleanupFailed) with it."""
    provisioned_and_stored(kube, helm)
    obj = deleted(kube, "bob-dev")
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, obj)
    kube.namespaces[BOB_NS]["remaining"] = "Some resources are remaining: pods. has 2 resource instances"

    with pytest.raises(NotReadyYet) as waiting:
        run_cleanup(kube, helm, api, obj)
    expected = (
        f"waiting for namespace {BOB_NS} to be deleted (Some resources are remaining: pods. has 2 resource instances)"
    )
    assert str(waiting.value) == expected
    assert live(kube).status.message == expected  # progress: written, lastSyncedAt with it

    kube.tenants[(TENANT_NAMESPACE, "bob-dev")]["status"]["lastSyncedAt"] = EARLY
    kube.namespaces[BOB_NS]["remaining"] = "Some resources are remaining: pods. has 1 resource instances"
    with pytest.raises(NotReadyYet):  # one pod went: that is progress, however long it took
        run_cleanup(kube, helm, api, obj)
    assert live(kube).status.phase == "Deleting"
    assert "has 1 resource instances" in live(kube).status.message

    kube.tenants[(TENANT_NAMESPACE, "bob-dev")]["status"]["lastSyncedAt"] = EARLY  # and then nothing moves
    with pytest.raises(CleanupStalled) as stalled:
        run_cleanup(kube, helm, api, obj)
    assert "nothing of the deletion moved for" in str(stalled.value)
    assert f"(CLEANUP_STALL_SECONDS={SETTINGS.cleanup_stall_seconds})" in str(stalled.value)
    assert str(stalled.value).endswith("pods. has 1 resource instances)")
    assert stalled.value.reason == "CleanupFailed"


def test_cleanup_renews_an_event_polled_long_enough(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    provisioned_and_stored(kube, helm)
    obj = deleted(kube, "bob-dev")
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, obj)
    budget = events.RENEW_AFTER_POLLS * SETTINGS.cleanup_poll_seconds
    sent = events.make(event_types.CLEANUP, "resync", ref_of(obj))
    old = CloudEvent(
        attributes=sent.get_attributes() | {"time": datetime.now(UTC) - timedelta(seconds=budget + 1)},
        data=sent.get_data(),
    )

    reply = cleanup.handle(kube, helm, api, SETTINGS, old, ref_of(obj))

    assert reply is not None and reply.get_type() == event_types.CLEANUP and reply.get_id() != old.get_id()
    assert reply.get_data() == events.ref_data(ref_of(obj))


def test_cleanup_answers_503_with_retry_after_cleanup_poll_seconds(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provisioned_and_stored(kube, helm)
    obj = deleted(kube, "bob-dev")
    app = cleanup.create_app(runtime(kube, helm, api))
    before = reconcile_total(cleanup.NAME, "requeue")

    response = deliver(app, step_event(obj, event_types.CLEANUP))

    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(SETTINGS.cleanup_poll_seconds)
    assert response.json == {"error": f"waiting for namespace {BOB_NS} to be deleted"}
    assert reconcile_total(cleanup.NAME, "requeue") == before + 1
    assert live(kube).status.phase == "Deleting", "nothing permanent happened"


def test_cleanup_leaves_a_namespace_of_another_tenant_alone(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provision(kube, helm, created=EARLY)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))
    refuse(kube, helm, intruder)
    releases, namespace = copy.deepcopy(helm.releases), copy.deepcopy(kube.namespaces[BOB_NS])
    obj = deleted(kube, "bob-dev-2")

    assert run_cleanup(kube, helm, api, obj) is None

    skipped = kube.event("CleanupSkipped")
    assert skipped["type"] == "Warning"
    assert skipped["message"] == f"left namespace {BOB_NS} alone: it belongs to Tenant {BOB_KEY}, not to this Tenant"
    assert kube.namespaces[BOB_NS] == namespace
    assert helm.releases == releases
    assert helm.calls["uninstall"] == 0
    assert kube.writes["namespace delete"] == 0
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev-2") is None
    assert live(kube).status.phase == "Provisioning"


def test_cleanup_of_a_tenant_that_never_got_far_finishes_at_once(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    obj = deleted(kube, "bob-dev")

    assert run_cleanup(kube, helm, api, obj) is None

    assert kube.event_reasons() == ["CleanupStarted", "CleanupFinished"]
    assert helm.calls == {}
    assert kube.writes["namespace delete"] == 0 and kube.writes["secret delete"] == 0
    assert [u.status for u in api.reports] == ["deleted"]
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None


def test_cleanup_goes_on_when_kubeopera_api_is_down(kube: FakeKube, helm: FakeHelm) -> None:
    down = FakeKubeoperaApi(CallbackResult(False, "unreachable: ConnectionError"))
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    obj = deleted(kube, "bob-dev")

    assert run_cleanup(kube, helm, down, obj) is None

    assert len(down.reports) == 1
    warning = kube.event("CallbackFailed")
    assert (warning["type"], warning["message"]) == (
        "Warning",
        "kubeopera-api was not told: unreachable: ConnectionError",
    )
    assert kube.event("CleanupFinished")["count"] == 1
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None


@pytest.mark.parametrize("delete", [False, True], ids=["reported", "deleted"])
def test_a_volume_retained_after_the_namespace_is_gone_is_reported_or_deleted(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi, delete: bool
) -> None:
    """The chart's StatefulSet retains its claim, and a storage class of reclaim policy Retain keeps
    the volume after the namespace goes: the vCluster's data, its CA key among it."""
    provisioned_and_stored(kube, helm)
    kube.volumes = {
        "pv-data": Volume("pv-data", f"{BOB_NS}/data-vc-bob-dev-0", "Retain", "Released", "5"),
        "pv-scratch": Volume("pv-scratch", f"{BOB_NS}/scratch", "Delete", "Released", "6"),
        "pv-other": Volume("pv-other", "vcluster-carol/data-vc-carol-0", "Retain", "Bound", "7"),
    }
    obj = deleted(kube, "bob-dev")
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, obj)
    assert sorted(kube.volumes) == ["pv-data", "pv-other", "pv-scratch"], "not while the namespace is there"
    kube.finish_namespace_deletion(BOB_NS)
    settings = dataclasses.replace(SETTINGS, delete_retained_volumes=delete)

    assert cleanup.handle(kube, helm, api, settings, step_event(obj, event_types.CLEANUP), ref_of(obj)) is None

    if delete:
        assert sorted(kube.volumes) == ["pv-other", "pv-scratch"]
        assert kube.event("VolumeDeleted")["message"] == (
            f"deleted PersistentVolume pv-data (reclaim Retain), once bound to {BOB_NS}/data-vc-bob-dev-0"
        )
    else:
        assert sorted(kube.volumes) == ["pv-data", "pv-other", "pv-scratch"]
        retained = kube.event("VolumeRetained")
        assert retained["type"] == "Warning"
        assert retained["message"] == (
            f"PersistentVolume pv-data (reclaim Retain), once bound to {BOB_NS}/data-vc-bob-dev-0, still holds the "
            "tenant's data: delete it (kubectl delete pv pv-data), or set DELETE_RETAINED_VOLUMES=true"
        )
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None


def test_cleanup_does_not_tell_kubeopera_api_while_another_tenant_claims_the_cloud_space_id(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provisioned_and_stored(kube, helm)
    carol = kube.add_tenant(tenant_object("carol", CS_BOB, created="2099-01-01T00:00:00Z"))
    refuse(kube, helm, carol)
    secret = copy.deepcopy(kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)])
    obj = deleted(kube, "carol")

    assert run_cleanup(kube, helm, api, obj) is None

    assert api.reports == []  # bob-dev's CloudSpace is not "deleted"
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)] == secret  # bob-dev's Secret stays
    assert kube.claims[(TENANT_NAMESPACE, f"cloudspace-{CS_BOB}")].labels[LABEL_OWNER_UID] == live(kube).uid
    assert kube.event("CleanupSkipped")["message"] == (
        f"left Secret {TENANT_NAMESPACE}/{BOB_SECRET} alone: it belongs to Tenant {BOB_KEY}, not to this Tenant"
    )
    assert kube.tenant_dict(TENANT_NAMESPACE, "carol") is None


def test_cleanup_takes_the_previous_versions_namespace_and_release_with_it(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    kube.add_namespace(BOB_NS, legacy_namespace_labels(live(kube)))
    helm.add_release(BOB_RELEASE, BOB_NS, legacy_values("bob-dev", CS_BOB))
    obj = deleted(kube, "bob-dev")

    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, obj)

    assert helm.operations == [("uninstall", f"{BOB_NS}/{BOB_RELEASE}")]
    assert kube.namespaces[BOB_NS]["terminating"]


@pytest.mark.parametrize("replaced", [False, True], ids=["gone", "replaced"])
def test_cleanup_does_nothing_for_a_tenant_already_gone_or_replaced(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi, replaced: bool
) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, finalizers=[FINALIZER]))
    obj = deleted(kube, "bob-dev")
    del kube.tenants[(TENANT_NAMESPACE, "bob-dev")]
    if replaced:
        kube.add_tenant(tenant_object("bob-dev", CS_BOB, uid="uid-new", finalizers=[FINALIZER]))

    assert run_cleanup(kube, helm, api, obj) is None

    assert kube.journal == []
    assert helm.calls == {}
    assert api.reports == []


def test_a_tenant_whose_cleanup_was_dead_lettered_stays_failed(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provisioned_and_stored(kube, helm)
    deleting = deleted(kube, "bob-dev")
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, deleting)  # the namespace never finishes terminating
    gave_up = dead_lettered(deleting, f"http://tenant-cleanup.{TENANT_NAMESPACE}.svc.cluster.local", "503")
    dead_letter.handle(kube, gave_up, ref_of(deleting))
    assert live(kube).status.phase == "Failed"

    # the ApiServerSource sends that status write as an update, which goes to cleanup too:
    # it waits, like every Failed Tenant, for a person
    after = current(kube, TENANT_NAMESPACE, "bob-dev")
    kube.journal.clear()
    assert run_cleanup(kube, helm, api, after) is None
    assert kube.journal == []
    assert live(kube).status.phase == "Failed"

    # ... who fixes the cause and patches the phase to Pending (kubeopera-tenants retry)
    retried = kube.set_phase(TENANT_NAMESPACE, "bob-dev", "Pending")
    with pytest.raises(NotReadyYet):
        run_cleanup(kube, helm, api, retried)
    assert live(kube).status.phase == "Deleting"


# check-ready ------------------------------------------------------------------------------------


def provisioning_event(obj: dict[str, Any], time: Any) -> CloudEvent:
    return CloudEvent(
        attributes={
            "type": event_types.PROVISIONING,
            "source": "/kubeopera/tenants/install",
            "subject": BOB_KEY,
            "time": time,
            "datacontenttype": "application/json",
        },
        data=events.ref_data(ref_of(obj)),
    )


def run_check(
    kube: FakeKube,
    helm: FakeHelm,
    obj: dict[str, Any],
    after: float = 30,
    polled: float = 0,
    vcluster: FakeVClusterApi | None = None,
) -> Any:
    """check-ready ``after`` seconds into provisioning, for an event first sent ``polled`` s ago;
    the vCluster's API answers as ``vcluster`` says (default: it works)."""
    started = parse_time(live(kube).status.last_synced_at)
    assert started is not None
    now = started + timedelta(seconds=after)
    event = provisioning_event(obj, now - timedelta(seconds=polled))
    return check_ready.handle(kube, helm, SETTINGS, event, ref_of(obj), now=now, vcluster=vcluster or FakeVClusterApi())


def test_check_ready_replies_ready_once_deployed_and_the_secret_has_config(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    booted(kube)
    reply = run_check(kube, helm, obj)
    assert reply is not None and reply.get_type() == event_types.READY
    assert reply.get_data() == events.ref_data(ref_of(obj))


def test_check_ready_polls_again_while_vcluster_boots(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    with pytest.raises(NotReadyYet) as caught:
        run_check(kube, helm, obj)
    assert caught.value.retry_after == SETTINGS.ready_poll_seconds
    assert str(caught.value) == (
        f"waiting for StatefulSet {BOB_NS}/{BOB_RELEASE} to roll out generation 1 "
        "(observed 0; 0 updated and 0 ready of 1)"
    )

    del kube.rollouts[(BOB_NS, BOB_RELEASE)]  # deleted by hand
    with pytest.raises(NotReadyYet) as caught:
        run_check(kube, helm, obj)
    assert str(caught.value) == f"waiting for StatefulSet {BOB_NS}/{BOB_RELEASE} to exist"

    # An upgrade: the StatefulSet's spec is at generation 2, its controller still reports 1.
    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(2, 1, 1, 1, 0)
    kube.add_secret(BOB_NS, "vc-vc-bob-dev", {VCLUSTER_CONFIG_KEY: CONFIG}, {})  # the previous boot's
    with pytest.raises(NotReadyYet) as caught:
        run_check(kube, helm, obj)
    assert str(caught.value) == (
        f"waiting for StatefulSet {BOB_NS}/{BOB_RELEASE} to roll out generation 2 "
        "(observed 1; 0 updated and 1 ready of 1)"
    )

    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(2, 2, 1, 0, 1)  # rolled out, pod not ready yet
    with pytest.raises(NotReadyYet, match="0 ready of 1"):
        run_check(kube, helm, obj)

    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(2, 2, 1, 1, 1)
    del kube.secrets[(BOB_NS, "vc-vc-bob-dev")]
    with pytest.raises(NotReadyYet) as caught:
        run_check(kube, helm, obj)
    assert str(caught.value) == f"waiting for vcluster to write Secret {BOB_NS}/vc-vc-bob-dev"

    helm.releases[(BOB_NS, BOB_RELEASE)]["status"] = "pending-install"
    booted(kube)
    with pytest.raises(NotReadyYet, match=f"^helm release {BOB_NS}/{BOB_RELEASE} is pending-install$"):
        run_check(kube, helm, obj)


def test_check_ready_writes_its_heartbeat_every_few_polls_and_nothing_between(kube: FakeKube, helm: FakeHelm) -> None:
    """Issue 26 item 5: the poll is the broker's re-delivery and writes nothing, so resync could
    not tell a live chain from a lost one and started a second every pass. Every
    ``HEARTBEAT_POLLS`` polls check-ready writes ``lastPolledAt`` (never ``lastSyncedAt``: the
    timeout counts from install); resync leaves the Tenant alone while that is recent."""
    obj = provision(kube, helm)
    poll = SETTINGS.ready_poll_seconds
    began = live(kube).status.last_synced_at
    written = kube.calls["patch_tenant_status"]
    every = lifecycle.HEARTBEAT_POLLS * poll

    with pytest.raises(NotReadyYet):
        run_check(kube, helm, obj, after=every - 1)
    assert kube.calls["patch_tenant_status"] == written, "a poll within the heartbeat writes nothing"
    with pytest.raises(NotReadyYet):
        run_check(kube, helm, obj, after=every)
    tenant = live(kube)
    assert kube.calls["patch_tenant_status"] == written + 1
    assert tenant.status.phase == Phase.PROVISIONING and tenant.status.last_synced_at == began
    heard = parse_time(tenant.status.last_polled_at)
    assert heard is not None and heard == lifecycle.poll_heard(tenant)
    with pytest.raises(NotReadyYet):
        run_check(kube, helm, obj, after=2 * every - 1)
    assert kube.calls["patch_tenant_status"] == written + 1, "counted from the heartbeat now"
    later = heard + timedelta(seconds=lifecycle.LOST_AFTER_POLLS * poll)
    assert not lifecycle.poll_chain_lost(tenant, later, poll)
    assert lifecycle.poll_chain_lost(tenant, later + timedelta(seconds=1), poll)


def test_check_ready_asks_the_vclusters_api_through_the_kubeconfig_it_will_store(
    kube: FakeKube, helm: FakeHelm
) -> None:
    obj = provision(kube, helm)
    booted(kube)
    missing = (
        "the vCluster's API at https://vc-bob-dev.vcluster-bob-dev.svc:443: Service default/kubernetes does not exist"
    )
    api = FakeVClusterApi(missing)
    began = live(kube).status.last_synced_at
    written = kube.calls["patch_tenant_status"]

    with pytest.raises(NotReadyYet) as caught:
        run_check(kube, helm, obj, vcluster=api)
    assert str(caught.value) == missing
    assert api.asked == [CONFIG]  # exactly the kubeconfig store-kubeconfig will copy
    tenant = live(kube)
    assert tenant.status.phase == Phase.PROVISIONING and tenant.status.message == missing
    ready = tenant.status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason, ready.message) == ("False", "VClusterNotServing", missing)
    assert tenant.status.last_synced_at == began  # the provision timeout still counts from install
    assert kube.calls["patch_tenant_status"] == written + 1

    with pytest.raises(NotReadyYet):  # the same wait again: nothing written
        run_check(kube, helm, obj, after=45, vcluster=api)
    assert kube.calls["patch_tenant_status"] == written + 1

    with pytest.raises(ProvisionTimeout, match="Service default/kubernetes does not exist"):
        run_check(kube, helm, obj, after=SETTINGS.provision_timeout_seconds + 1, vcluster=api)

    api.missing_now = None
    reply = run_check(kube, helm, obj, after=60, vcluster=api)
    assert reply is not None and reply.get_type() == event_types.READY


def test_check_ready_does_not_ask_the_api_before_the_kubeconfig_exists(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    api = FakeVClusterApi("never asked")
    with pytest.raises(NotReadyYet, match="roll out"):
        run_check(kube, helm, obj, vcluster=api)
    assert api.asked == []


def test_check_ready_missing_release_is_temporary_and_failed_release_permanent(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    helm.releases[(BOB_NS, BOB_RELEASE)]["status"] = "failed"
    # a control plane still rolling out is waited on without reading helm's record (install
    # fails the Tenant whose helm failed; this is the backstop, and the provision timeout's)
    with pytest.raises(NotReadyYet, match="to roll out generation 1"):
        run_check(kube, helm, obj)
    assert kube.calls["list_secret_records"] == 0
    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(1, 1, 1, 1, 1)  # rolled out
    with pytest.raises(PermanentError, match="revision 1 failed"):
        run_check(kube, helm, obj)
    del kube.rollouts[(BOB_NS, BOB_RELEASE)]  # or none at all
    with pytest.raises(PermanentError, match="revision 1 failed"):
        run_check(kube, helm, obj)
    del helm.releases[(BOB_NS, BOB_RELEASE)]
    with pytest.raises(TemporaryError, match="does not exist") as caught:
        run_check(kube, helm, obj)
    assert not isinstance(caught.value, NotReadyYet)


@pytest.mark.parametrize("deleting", [False, True], ids=["pending", "deleting"])
def test_check_ready_ignores_a_tenant_not_provisioning_or_being_deleted(
    kube: FakeKube, helm: FakeHelm, deleting: bool
) -> None:
    if deleting:
        provision(kube, helm)
        obj = deleted(kube, "bob-dev")
    else:
        obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending", "lastSyncedAt": EARLY}))
    helm.calls.clear()
    assert run_check(kube, helm, obj) is None
    assert helm.calls == {}


def test_check_ready_renews_an_event_polled_long_enough(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    budget = events.RENEW_AFTER_POLLS * SETTINGS.ready_poll_seconds
    started = parse_time(live(kube).status.last_synced_at)
    assert started is not None
    now = started + timedelta(seconds=budget + 1)
    old = provisioning_event(obj, now - timedelta(seconds=budget))

    reply = check_ready.handle(kube, helm, SETTINGS, old, ref_of(obj), now=now, vcluster=FakeVClusterApi())

    assert reply is not None and reply.get_type() == event_types.PROVISIONING
    assert reply.get_source() == "/kubeopera/tenants/check-ready"
    assert reply.get_data() == events.ref_data(ref_of(obj))
    assert reply.get_id() != old.get_id()
    with pytest.raises(NotReadyYet):  # one second short of the budget: the same event is polled again
        run_check(kube, helm, obj, after=budget + 1, polled=budget - 1)


def test_check_ready_gives_up_after_the_provision_timeout(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    timeout = SETTINGS.provision_timeout_seconds
    with pytest.raises(ProvisionTimeout) as caught:
        run_check(kube, helm, obj, after=timeout + 1)
    assert caught.value.reason == "ProvisionTimeout"

    mark_failed(kube, ref_of(obj), str(caught.value), caught.value.reason)
    assert live(kube).status.phase == "Failed"
    assert kube.event("ProvisionTimeout")["type"] == "Warning"


# check-ready's look at a changed vCluster (the vCluster watch's hint) -----------------


def run_look(
    kube: FakeKube,
    helm: FakeHelm,
    obj: dict[str, Any],
    changed_ago: float = 0,
    vcluster: FakeVClusterApi | None = None,
) -> Any:
    """check-ready's look, 30 s into provisioning, at a change the vCluster watch heard ``changed_ago`` s ago."""
    now = utcnow()
    hint = CloudEvent(
        attributes={
            "type": event_types.VCLUSTER_CHANGED,
            "source": "/kubeopera/tenants/vcluster-watch",
            "subject": BOB_KEY,
            "time": now - timedelta(seconds=changed_ago),
            "datacontenttype": "application/json",
        },
        data=events.ref_data(ref_of(obj)),
    )
    return check_ready.answer(kube, helm, SETTINGS, hint, ref_of(obj), vcluster=vcluster or FakeVClusterApi())


def test_a_look_at_a_ready_vcluster_replies_ready_at_once(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provision(kube, helm)
    booted(kube)
    reply = run_look(kube, helm, obj)
    assert reply is not None and reply.get_type() == event_types.READY
    assert reply.get_data() == events.ref_data(ref_of(obj))


def test_a_look_before_the_control_plane_is_up_leaves_the_wait_to_the_poll_and_writes_nothing(
    kube: FakeKube, helm: FakeHelm
) -> None:
    obj = provision(kube, helm)
    kube.journal.clear()
    assert run_look(kube, helm, obj) is None, "no 503: a look starts no second poll"
    del kube.rollouts[(BOB_NS, BOB_RELEASE)]
    assert run_look(kube, helm, obj) is None
    assert kube.journal == [], "the poll writes the heartbeat and the waits, not a look"
    assert kube.calls["list_secret_records"] == 0, "helm's record is not read for a control plane not up"


def test_a_look_after_the_rollout_asks_again_each_second_for_one_poll_interval(kube: FakeKube, helm: FakeHelm) -> None:
    """vcluster writes its kubeconfig Secret after its pod is ready: the look asks again within
    seconds, until the poll would have seen it anyway."""
    obj = provision(kube, helm)
    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(1, 1, 1, 1, 1)  # rolled out, no Secret yet
    with pytest.raises(NotReadyYet) as caught:
        run_look(kube, helm, obj, changed_ago=3)
    assert caught.value.retry_after == check_ready.LOOK_AGAIN_SECONDS == 1
    assert str(caught.value) == f"waiting for vcluster to write Secret {BOB_NS}/vc-{BOB_RELEASE}"
    assert run_look(kube, helm, obj, changed_ago=SETTINGS.ready_poll_seconds) is None, "the poll's from here"
    # the API through the kubeconfig not answering yet is the same kind of wait
    kube.add_secret(BOB_NS, f"vc-{BOB_RELEASE}", {VCLUSTER_CONFIG_KEY: CONFIG}, {})
    with pytest.raises(NotReadyYet):
        run_look(kube, helm, obj, changed_ago=1, vcluster=FakeVClusterApi(missing="/readyz answered 503"))
    assert run_look(kube, helm, obj, changed_ago=2) is not None


def test_a_poll_and_a_look_that_both_find_the_vcluster_up_send_one_ready_event(kube: FakeKube, helm: FakeHelm) -> None:
    """The first writes Ready=False VClusterUp (with the resourceVersion it read) and replies; the
    second reads that and sends nothing. A ready event lost since is sent again once resync
    would count the chain as lost."""
    obj = provision(kube, helm)
    booted(kube)
    first = run_look(kube, helm, obj)
    assert first is not None and first.get_type() == event_types.READY
    ready = live(kube).status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "VClusterUp")
    assert live(kube).status.phase == "Provisioning"
    assert run_check(kube, helm, obj) is None, "the poll finds it announced: its chain ends"
    assert run_look(kube, helm, obj) is None

    # an announcer that read the Tenant before the first wrote is refused (Conflict: it re-reads)
    stale = Tenant.from_object(obj)
    with pytest.raises(Conflict):
        check_ready._ready(kube, stale, 1, utcnow(), SETTINGS.ready_poll_seconds)

    lost = SETTINGS.ready_poll_seconds * (lifecycle.LOST_AFTER_POLLS + 1)
    again = run_check(kube, helm, obj, after=lost + 30)
    assert again is not None and again.get_type() == event_types.READY, "a lost ready event is sent again"


def test_a_look_never_fails_a_tenant(kube: FakeKube, helm: FakeHelm) -> None:
    """Past the provision timeout, or with a failed release: failing is the poll's decision."""
    obj = provision(kube, helm)
    helm.releases[(BOB_NS, BOB_RELEASE)]["status"] = "failed"
    assert run_look(kube, helm, obj) is None
    assert live(kube).status.phase == "Provisioning"
    assert lifecycle.CHECK_READY.dead_letter_of(event_types.VCLUSTER_CHANGED) == lifecycle.DeadLetter.NOTHING
    assert lifecycle.CHECK_READY.dead_letter_of(event_types.PROVISIONING) == lifecycle.DeadLetter.FAIL


def test_a_look_at_a_ready_tenant_keeps_its_availability(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    obj = provisioned_and_stored(kube, helm)
    notify_api.handle(kube, api, ref_of(obj))
    assert live(kube).status.is_true("VClusterAvailable", 1)
    kube.journal.clear()
    assert run_look(kube, helm, obj) is None
    assert kube.journal == [], "nothing changed: nothing written"

    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(1, 1, 1, 0, 1)  # its pod stopped being ready
    assert run_look(kube, helm, obj) is None
    available = live(kube).status.condition("VClusterAvailable")
    assert available is not None and (available.status, available.reason) == ("False", "ControlPlaneNotReady")
    assert live(kube).status.phase == "Ready", "the phase says what provisioning reached"
    assert kube.event("VClusterUnavailable")["type"] == "Warning"

    kube.rollouts[(BOB_NS, BOB_RELEASE)] = Rollout(1, 1, 1, 1, 1)
    run_look(kube, helm, obj)
    assert live(kube).status.is_true("VClusterAvailable", 1)
    assert kube.event("VClusterAvailable")["type"] == "Normal"

    # its pod ready, its API not answering through the kubeconfig vcluster exported (the stored one)
    down = FakeVClusterApi(missing="/readyz: connection refused")
    run_look(kube, helm, obj, vcluster=down)
    available = live(kube).status.condition("VClusterAvailable")
    assert available is not None and (available.status, available.reason) == ("False", "APINotServing")
    assert down.asked == [CONFIG]


# Rollouts of a 1- or 2-replica StatefulSet at generation 1 or 2, in every state its controller
# and kubelet may report.
ROLLOUTS = [
    Rollout(generation, observed, replicas, ready, updated)
    for generation in (1, 2)
    for observed in range(generation + 1)
    for replicas in (1, 2)
    for ready in range(replicas + 1)
    for updated in range(replicas + 1)
]


def _look_outcome(rollout: Rollout, phase: str) -> tuple[Any, ...]:
    """What check-ready's look answers and writes for a Tenant (Provisioning, or Ready) whose
    vCluster's StatefulSet reports ``rollout`` (its Secret written, its API answering)."""
    kube = FakeKube()
    helm = FakeHelm(kube)
    obj = provisioned_and_stored(kube, helm) if phase == "Ready" else provision(kube, helm)
    if phase == "Ready":
        notify_api.handle(kube, FakeKubeoperaApi(), ref_of(obj))
    else:
        booted(kube)
    kube.rollouts[(BOB_NS, BOB_RELEASE)] = rollout
    kube.journal.clear()
    try:
        reply = run_look(kube, helm, obj)
        answer: Any = None if reply is None else reply.get_type()
    except NotReadyYet as wait:
        answer = ("wait", wait.retry_after)
    available = live(kube).status.condition("VClusterAvailable")
    kept = None if available is None else (available.status, available.reason, available.message)
    return answer, kept, tuple(kube.journal)


@pytest.mark.parametrize("phase", ["Provisioning", "Ready"])
def test_the_look_answers_alike_for_rollouts_the_vcluster_watch_deems_alike(phase: str) -> None:
    """The vCluster watch sends a hint only when a change moves ``look_reads`` of the rollout
    (shared.model.vcluster_watch): over every rollout, check-ready's real look answers and writes
    the same for all that ``look_reads`` calls alike, so a change the watch drops is one the look
    would have answered the same for."""
    outcomes: dict[tuple[bool, int, int], set[tuple[Any, ...]]] = {}
    for rollout in ROLLOUTS:
        outcomes.setdefault(look_reads(rollout), set()).add(_look_outcome(rollout, phase))
    assert {key: found for key, found in outcomes.items() if len(found) > 1} == {}
    assert len({next(iter(found)) for found in outcomes.values()}) > 1, "the look does tell rollouts apart"


# notify-api -------------------------------------------------------------------------------------


def test_notify_sets_ready_and_tells_kubeopera_api_once(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    obj = provisioned_and_stored(kube, helm)

    assert notify_api.handle(kube, api, ref_of(obj)) is None
    assert notify_api.handle(kube, api, ref_of(obj)) is None

    assert api.reports == [CloudSpaceUpdate(CS_BOB, BOB_RELEASE, BOB_NS, BOB_SECRET, "active")]
    status = live(kube).status
    assert status.phase == "Ready" and status.kubeconfig_secret == BOB_SECRET
    assert status.is_true("CallbackDelivered", 1) and status.is_true("Ready", 1)


def test_notify_sets_ready_even_when_kubeopera_api_fails(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provisioned_and_stored(kube, helm)
    down = FakeKubeoperaApi(CallbackResult(False, "answered 502"))

    notify_api.handle(kube, down, ref_of(obj))

    status = live(kube).status
    assert status.phase == "Ready"
    assert status.message == "vCluster ready; kubeopera-api callback failed (answered 502)"
    callback = status.condition("CallbackDelivered")
    assert callback is not None and (callback.status, callback.reason) == ("False", "CallbackFailed")


def test_notify_announces_nothing_for_a_tenant_being_deleted(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provisioned_and_stored(kube, helm)
    obj = deleted(kube, "bob-dev")
    mark = len(kube.journal)
    assert notify_api.handle(kube, api, ref_of(obj)) is None
    assert api.reports == [] and since(kube, mark) == []


# dead-letter ------------------------------------------------------------------------------------


def dead_lettered(
    obj: dict[str, Any], dest: str, code: str, body: bytes = b"", type_: str = event_types.INSTALL
) -> CloudEvent:
    """The event the broker gave up on, as it reaches the dead-letter sink: install's (the
    router's, unless ``type_`` says another), with Knative's knativeerror* extensions."""
    event = apiserver_event(obj, type_) if type_ in event_types.APISERVER_TYPES else step_event(obj, type_)
    attributes = event.get_attributes() | {"knativeerrordest": dest, "knativeerrorcode": code}
    if body:
        attributes["knativeerrordata"] = base64.b64encode(body).decode()
    return CloudEvent(attributes=attributes, data=event.get_data())


def test_dead_letter_fails_the_tenant_with_the_last_answer(kube: FakeKube) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}))
    dest = f"http://tenant-install.{TENANT_NAMESPACE}.svc"
    event = dead_lettered(obj, dest, "503", b'{"error": "helm failed: boom"}')

    dead_letter.handle(kube, event, ref_of(obj))

    status = live(kube).status
    assert status.phase == "Failed"
    assert status.message == (
        f"{event_types.INSTALL} could not be delivered to tenant-install: last answer 503: helm failed: boom"
    )
    assert kube.event("DeliveryFailed")["type"] == "Warning"


def test_dead_letter_names_a_deletion_cleanups_failure(kube: FakeKube) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Deleting"}, finalizers=[FINALIZER]))
    obj = deleted(kube, "bob-dev")

    dead_letter.handle(kube, dead_lettered(obj, "", "503", type_=event_types.CLEANUP), ref_of(obj))

    assert "could not be delivered to tenant-cleanup" in live(kube).status.message
    assert kube.event_reasons() == ["CleanupFailed"]


@pytest.mark.parametrize("dest", ["", f"http://tenant-router.{TENANT_NAMESPACE}.svc.cluster.local"])
@pytest.mark.parametrize("type_", [event_types.APISERVER_ADD, event_types.APISERVER_UPDATE])
def test_dead_letter_of_a_change_the_router_gave_up_on_fails_nothing(kube: FakeKube, dest: str, type_: str) -> None:
    """The router only routes: a Tenant change it could not route is re-driven by resync, so its
    dead letter (lifecycle.DeadLetter.NOTHING) fails no Tenant, Pending or being deleted."""
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    for obj in (current(kube, TENANT_NAMESPACE, "bob-dev"), deleted(kube, "bob-dev")):
        mark = len(kube.journal)
        dead_letter.handle(kube, dead_lettered(obj, dest, "503", type_=type_), ref_of(obj))
        assert since(kube, mark) == []
    assert live(kube).status.phase == "Pending"


def test_dead_letter_of_check_readys_hint_fails_nothing_and_of_its_poll_fails_the_tenant(kube: FakeKube) -> None:
    """A look at a changed vCluster is a hint (lifecycle.CHECK_READY.hints): the poll goes on."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Provisioning", "lastSyncedAt": EARLY}))
    dest = f"http://tenant-check-ready.{TENANT_NAMESPACE}.svc.cluster.local"
    dead_letter.handle(kube, dead_lettered(obj, dest, "503", type_=event_types.VCLUSTER_CHANGED), ref_of(obj))
    assert kube.journal == [] and live(kube).status.phase == "Provisioning"
    dead_letter.handle(kube, dead_lettered(obj, dest, "503", type_=event_types.PROVISIONING), ref_of(obj))
    assert live(kube).status.phase == "Failed"


@pytest.mark.parametrize(
    ("event_type", "status", "step", "reason"),
    [
        (event_types.INSTALL, {"phase": "Pending"}, "tenant-install", "DeliveryFailed"),
        (event_types.CLEANUP, {"phase": "Deleting"}, "tenant-cleanup", "CleanupFailed"),
    ],
    ids=["install", "cleanup"],
)
def test_dead_letter_takes_resyncs_own_redrives_and_fails_the_tenant(
    kube: FakeKube, helm: FakeHelm, event_type: str, status: dict[str, str], step: str, reason: str
) -> None:
    """A re-drive resync sent (``io.kubeopera.tenant.install`` or ``.cleanup``) that its step gave
    up on ends the Tenant Failed, naming the step, instead of a 400 and a Tenant Pending for ever."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, status=status, finalizers=[FINALIZER]))
    sent = events.make(event_type, "resync", ref_of(obj))
    attributes = sent.get_attributes() | {
        "knativeerrordest": f"http://{step}.{TENANT_NAMESPACE}.svc.cluster.local",
        "knativeerrorcode": "503",
        "knativeerrordata": base64.b64encode(b'{"error": "still failing"}').decode(),
    }
    answer = deliver(
        dead_letter.create_app(runtime(kube, helm)), CloudEvent(attributes=attributes, data=sent.get_data())
    )

    assert answer.status_code == 204
    tenant = live(kube)
    assert tenant.status.phase == "Failed"
    assert tenant.status.message == f"{event_type} could not be delivered to {step}: last answer 503: still failing"
    assert kube.event(reason)["type"] == "Warning"


def test_dead_letter_of_an_install_delivery_fails_nothing_once_install_recorded_its_outcome(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """A duplicate install event (the router's and resync's for one change) is dead-lettered while
    the Tenant provisions fine: Provisioning at that generation, recorded no earlier than the event
    was made (to the second: lastSyncedAt has no fraction). The Tenant stays Provisioning and goes
    on to Ready."""
    added = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    duplicate = dead_lettered(added, f"http://tenant-install.{TENANT_NAMESPACE}.svc", "503", b'{"error": "busy"}')
    assert run_install(kube, helm, added) is not None  # Provisioning: install recorded its outcome
    obj = current(kube, TENANT_NAMESPACE, "bob-dev")
    mark = len(kube.journal)

    dead_letter.handle(kube, duplicate, ref_of(obj))

    assert live(kube).status.phase == "Provisioning" and since(kube, mark) == []
    booted(kube)
    assert run_check(kube, helm, obj) is not None


def test_dead_letter_of_an_install_fails_a_tenant_install_never_took(kube: FakeKube, helm: FakeHelm) -> None:
    """The same dead letter for a Tenant install never made Provisioning (after a retry: Pending,
    the earlier Provisioning long gone) is a real failure."""
    obj = provision(kube, helm)
    echo = current(kube, TENANT_NAMESPACE, "bob-dev")
    mark_failed(kube, ref_of(obj), "vCluster not ready", "ProvisionTimeout")
    retried = kube.patch_tenant_status(live(kube), StatusUpdate(phase=Phase.PENDING, fields={"message": "retry"}))
    assert retried.status.phase == "Pending"
    dest = f"http://tenant-install.{TENANT_NAMESPACE}.svc"

    dead_letter.handle(kube, dead_lettered(echo, dest, "503", b'{"error": "helm failed"}'), ref_of(obj))

    assert live(kube).status.phase == "Failed"
    assert live(kube).status.message.endswith("last answer 503: helm failed")


def test_a_steps_own_422_dead_lettered_after_a_retry_leaves_the_retried_tenant_alone(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """CI of f367758 (test_faults, the wrong Service range): check-ready failed the Tenant at its
    timeout itself and answered 422; the runbook's retry patched it to Pending within the second;
    then the broker's dead letter of that 422 arrived and failed the retried Tenant again. An event
    made before the Tenant's last recorded failure carries nothing new (``lifecycle.failed_since``)."""
    obj = provision(kube, helm)
    # install's Provisioning, with its Ready=False "Provisioning", was written 20 s before: a failure
    # after it keeps that condition's lastTransitionTime (its status stays False), so only
    # lastSyncedAt dates the failure
    stored = kube.tenants[(TENANT_NAMESPACE, "bob-dev")]["status"]
    long_ago = (datetime.now(UTC) - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    stored["lastSyncedAt"] = long_ago
    for condition in stored["conditions"]:
        condition["lastTransitionTime"] = long_ago
    sent = events.make(event_types.PROVISIONING, "resync", ref_of(obj))
    made_before = CloudEvent(
        attributes=sent.get_attributes()
        | {
            "time": datetime.now(UTC) - timedelta(seconds=14),
            "knativeerrordest": f"http://tenant-check-ready.{TENANT_NAMESPACE}.svc.cluster.local",
            "knativeerrorcode": "422",
        },
        data=sent.get_data(),
    )
    mark_failed(kube, ref_of(obj), "vCluster not ready 16s after provisioning began", "ProvisionTimeout")
    failed = live(kube).status.condition("Ready")
    assert failed is not None and failed.last_transition_time == long_ago, "as the API server keeps it"
    kube.patch_tenant_status(live(kube), StatusUpdate(phase=Phase.PENDING, fields={"message": "retry requested"}))
    mark = len(kube.journal)

    dead_letter.handle(kube, made_before, ref_of(obj))

    assert live(kube).status.phase == "Pending" and since(kube, mark) == []


def back_dated_failure(kube: FakeKube, obj: dict[str, Any], seconds: int) -> None:
    """Failed ``seconds`` ago, as check-ready's timeout writes it (lastSyncedAt dates the failure)."""
    mark_failed(kube, ref_of(obj), "vCluster not ready 16s after provisioning began", "ProvisionTimeout")
    stored = kube.tenants[(TENANT_NAMESPACE, "bob-dev")]["status"]
    stored["lastSyncedAt"] = (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_stale_install_event_from_before_a_cli_retry_leaves_the_retried_tenant_alone(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Issue 26 item 1: an install event made between the failure and ``kubeopera-tenants retry``
    (a duplicate still in the broker's retries) is dead-lettered after the retry. The retry's mark
    (RetryRequested, lastSyncedAt now) supersedes it; without the mark, the failure's time was the
    only date, and the event, newer than it, failed the retried Tenant again."""
    obj = provision(kube, helm)
    back_dated_failure(kube, obj, 30)
    stale = dead_lettered(obj, f"http://tenant-install.{TENANT_NAMESPACE}.svc", "503", b'{"error": "busy"}')
    stale = CloudEvent(stale.get_attributes() | {"time": datetime.now(UTC) - timedelta(seconds=10)}, stale.get_data())

    assert cli.retry(kube, TENANT_NAMESPACE, "bob-dev").endswith("install starts over")  # type: ignore[arg-type]
    retried = live(kube)
    ready = retried.status.condition("Ready")
    assert retried.status.phase == "Pending" and ready is not None and ready.reason == "RetryRequested"
    assert retried.status.message.startswith("retry requested at ")
    assert retried.status.message.endswith("; was: vCluster not ready 16s after provisioning began")
    assert lifecycle.provision_started(retried) == lifecycle.failed_since(retried) is not None
    mark = len(kube.journal)

    dead_letter.handle(kube, stale, ref_of(obj))

    assert live(kube).status.phase == "Pending" and since(kube, mark) == []


def test_install_marks_a_retry_by_hand_when_it_first_sees_it(kube: FakeKube, helm: FakeHelm) -> None:
    """A Failed Tenant patched to Pending with ``kubectl`` (only the phase) still carries its
    failure's time. install's first write for it is the retry's mark (RetryAccepted, lastSyncedAt
    now), from which its provision timeout counts; then it provisions as usual."""
    obj = provision(kube, helm)
    back_dated_failure(kube, obj, 3600)
    kube.patch_tenant_status(live(kube), StatusUpdate(phase=Phase.PENDING))
    by_hand = live(kube)
    assert lifecycle.unacknowledged_retry(by_hand) and lifecycle.provision_started(by_hand) is None
    mark = len(kube.echoes)

    assert run_install(kube, helm, obj) is not None

    statuses = [echo["status"] for echo in kube.echoes[mark:]]
    accepted = statuses[0]
    assert accepted["phase"] == "Pending"
    assert [(c["type"], c["reason"]) for c in accepted["conditions"] if c["type"] == "Ready"] == [
        ("Ready", "RetryAccepted")
    ]
    assert accepted["message"].startswith("retry accepted at ")
    assert statuses[-1]["phase"] == "Provisioning"
    assert live(kube).status.phase == "Provisioning"


def test_dead_letter_never_fails_a_ready_tenant(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    obj = provisioned_and_stored(kube, helm)
    notify_api.handle(kube, api, ref_of(obj))
    mark = len(kube.journal)

    dead_letter.handle(kube, dead_lettered(obj, "", "503"), ref_of(obj))

    assert live(kube).status.phase == "Ready"
    assert since(kube, mark) == []


# Events -----------------------------------------------------------------------------------------


def test_each_phase_change_records_exactly_one_event(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    obj = provision(kube, helm)
    booted(kube)
    assert run_check(kube, helm, obj) is not None
    run_store(kube, obj)
    notify_api.handle(kube, api, ref_of(obj))
    # re-deliveries of every step
    run_install(kube, helm, obj)
    run_store(kube, obj)
    notify_api.handle(kube, api, ref_of(obj))

    # Pending is the CRD's default, never written (issue 29)
    assert [(e["reason"], e["count"]) for e in kube.events] == [("Provisioning", 1), ("Ready", 1)]
    assert kube.writes["status"] == 3  # Provisioning, check-ready's VClusterUp, Ready


def test_a_repeated_refusal_folds_into_a_count_of_two(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))
    refuse(kube, helm, intruder)
    # the runbook's retry, while the name is still taken: refused again with the same message
    refuse(kube, helm, kube.set_phase(TENANT_NAMESPACE, "bob-dev-2", "Pending"))

    refusals = [e for e in kube.events if e["reason"] == "OwnershipConflict"]
    assert len(refusals) == 1
    assert refusals[0]["count"] == 2
    assert refusals[0]["message"] == f'tenantName "bob-dev" is already used by Tenant {BOB_KEY}'


def test_a_repeated_cleanup_skipped_warning_folds_into_a_count_of_two(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    provision(kube, helm)  # the namespace is bob-dev's; the kubeconfig Secret was made by hand
    kube.add_secret(TENANT_NAMESPACE, BOB_SECRET, {KUBECONFIG_KEY: b"by hand"}, {})
    obj = deleted(kube, "bob-dev")

    for _ in range(2):
        with pytest.raises(NotReadyYet):
            run_cleanup(kube, helm, api, obj)

    skipped = kube.event("CleanupSkipped")
    assert skipped["count"] == 2
    assert skipped["message"] == (
        f"left Secret {TENANT_NAMESPACE}/{BOB_SECRET} alone: "
        "it belongs to nobody this Tenant knows of, not to this Tenant"
    )
    assert kube.secrets[(TENANT_NAMESPACE, BOB_SECRET)]["data"] == {KUBECONFIG_KEY: b"by hand"}


# shared/delivery/http.py: nothing escapes the mapping ----------------------------------------------------


REF = {"namespace": TENANT_NAMESPACE, "name": "bob-dev", "uid": "u-1", "generation": 1}


def post_failing_step(name: str, on_permanent: Callable[[TenantRef, PermanentError], object]) -> Any:
    def handle(event: BaseCloudEvent, ref: TenantRef) -> None:
        raise OwnershipConflict(f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/bob-dev')

    step = Step(name=name, accepts=frozenset({event_types.PROVISIONING}), handle=handle, on_permanent=on_permanent)
    event = CloudEvent(attributes={"type": event_types.PROVISIONING, "source": "/test"}, data=dict(REF))
    return deliver(function_app(step), event)


def refused_403(ref: TenantRef, err: PermanentError) -> None:
    raise PermanentError(f"patch tenant {TENANT_NAMESPACE}/bob-dev status: the API server refused it (403 Forbidden)")


def buggy(ref: TenantRef, err: PermanentError) -> None:
    raise RuntimeError("token=s3cret")


@pytest.mark.parametrize(
    ("marking", "status", "error"),
    [
        pytest.param(
            refused_403,
            422,
            f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/bob-dev',
            id="marking-refused-403",
        ),
        pytest.param(
            buggy,
            500,
            f'tenantName "bob-dev" is already used by Tenant {TENANT_NAMESPACE}/bob-dev '
            "(and marking the tenant Failed failed; see the function's logs)",
            id="marking-raises-a-bug",
        ),
    ],
)
def test_a_failure_while_marking_failed_is_still_a_json_answer_and_counted(
    marking: Callable[[TenantRef, PermanentError], object], status: int, error: str
) -> None:
    controller = f"unit-{marking.__name__}"
    before_total = reconcile_total(controller, "error")
    before_errors = (
        REGISTRY.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": controller}) or 0.0
    )

    response = post_failing_step(controller, marking)

    assert response.status_code == status
    assert response.mimetype == "application/json"
    assert response.json == {"error": error}
    assert b"<html" not in response.data.lower() and b"s3cret" not in response.data
    assert reconcile_total(controller, "error") == before_total + 1
    assert reconcile_total(controller, "success") == 0
    errors = REGISTRY.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": controller})
    assert errors == before_errors + 1


def test_an_install_refusal_over_http_is_422_and_the_tenant_is_failed(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))
    app = install.create_app(runtime(kube, helm))
    before = reconcile_total(install.NAME, "error")

    response = deliver(app, step_event(intruder, event_types.INSTALL))

    message = f'tenantName "bob-dev" is already used by Tenant {BOB_KEY}'
    assert response.status_code == 422
    assert response.json == {"error": message}
    assert live(kube, "bob-dev-2").status.message == message
    ready = live(kube, "bob-dev-2").status.condition("Ready")
    assert ready is not None and ready.reason == "OwnershipConflict"
    assert reconcile_total(install.NAME, "error") == before + 1


# one install per Tenant generation in a process --------------------------------------------------


def test_a_delivery_while_this_process_installs_the_same_generation_adds_nothing(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """The ApiServerSource's updates of the Tenant's own status arrive while its add is still
    installing: they are answered at once, without a read of helm or a thread held."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    mark = len(kube.journal)
    with locks.installing(obj["metadata"]["uid"], 1) as first:
        assert first
        assert run_install(kube, helm, obj) is None
    assert helm.operations == [] and since(kube, mark) == []
    assert run_install(kube, helm, obj) is not None, "once the first is done, a delivery works again"
    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}")]


def test_a_newer_generation_is_not_coalesced_into_an_older_install(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    obj = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "4"})
    with locks.installing(obj["metadata"]["uid"], 1):
        assert run_install(kube, helm, obj) is not None
    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}"), ("upgrade", f"{BOB_NS}/{BOB_RELEASE}")]


def test_installing_counts_each_generation_until_its_own_block_ends() -> None:
    with locks.installing("uid-a", 1) as g1:
        with locks.installing("uid-a", 2) as g2:
            assert (g1, g2) == (True, True)
            with locks.installing("uid-a", 1) as late:
                assert not late
        with locks.installing("uid-a", 1) as again:
            assert not again, "generation 1 is still being installed"
        with locks.installing("uid-b", 1) as other:
            assert other, "another Tenant is not affected"
    with locks.installing("uid-a", 1) as after:
        assert after, "nothing is left registered once every block ended"


def test_a_rival_for_the_tenant_name_while_this_process_installs_the_first_is_failed_not_dropped(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Found trying ``make run`` as a new user: Tenants carl and dora, both ``tenantName: carl``,
    created together. dora's install delivery came while this process installed carl's release,
    and the guard, keyed by the release, answered it "nothing to add" (204): dora stayed Pending
    until resync's next pass. Keyed by the Tenant, dora goes on to the rival check, which fails it."""
    first = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    rival = kube.add_tenant(tenant_object("bob-two", CS_OTHER, tenant_name="bob-dev"))
    with locks.installing(first["metadata"]["uid"], 1), pytest.raises(OwnershipConflict, match="already used"):
        run_install(kube, helm, rival)


# a deletion racing an install (issue 26 item 4) ---------------------------------------------------


def test_a_tenant_deleted_while_install_waited_for_the_work_lock_gets_nothing_made(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """install read the Tenant, then its deletion began before install held the lock: under the
    lock install reads it again and makes nothing (no claim, namespace, grant or release); cleanup
    then finds nothing and lets the Tenant go. Before the lock install went on and created the
    namespace after cleanup had let the Tenant go: a namespace owned by a uid that no longer exists."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, finalizers=[FINALIZER]))
    acquire = kube.acquire_lease

    def deleted_meanwhile(namespace: str, name: str, holder: str, seconds: int) -> str | None:
        kube.acquire_lease = acquire  # type: ignore[method-assign]
        deleted(kube, "bob-dev")
        return acquire(namespace, name, holder, seconds)

    kube.acquire_lease = deleted_meanwhile  # type: ignore[method-assign]
    assert run_install(kube, helm, obj) is None
    assert kube.get_namespace(BOB_NS) is None and helm.operations == [] and kube.claims == {}
    assert kube.leases == {}
    assert run_cleanup(kube, helm, api, current(kube, TENANT_NAMESPACE, "bob-dev")) is None
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None


def test_cleanup_waits_while_another_process_holds_the_work_lock(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    """An install in another pod is making the namespace: cleanup answers "in hand" and writes
    nothing, so it cannot let the Tenant go before it sees what that install made."""
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status={"phase": "Pending"}, finalizers=[FINALIZER]))
    obj = deleted(kube, "bob-dev")
    kube.leases[(TENANT_NAMESPACE, "lock-vcluster-bob-dev")] = "another-pod/1/1"
    writes = dict(kube.writes)
    with pytest.raises(WorkInHand, match="another process is installing or removing vcluster-bob-dev"):
        run_cleanup(kube, helm, api, obj)
    assert dict(kube.writes) == writes and live(kube).has_finalizer and api.reports == []

    # That install made the namespace and then gave the lock up: cleanup now removes it.
    kube.add_namespace(BOB_NS, namespace_labels(live(kube)))
    del kube.leases[(TENANT_NAMESPACE, "lock-vcluster-bob-dev")]
    with pytest.raises(NotReadyYet, match=f"namespace {BOB_NS} to be deleted"):
        run_cleanup(kube, helm, api, obj)
    assert kube.writes["namespace delete"] == 1 and live(kube).has_finalizer


def test_install_that_waited_for_the_release_finds_it_provisioned_and_adds_nothing(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Another pod provisioned this generation while this delivery read and waited: under the
    Lease the Tenant is read again, and helm is not asked."""
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    acquire = kube.acquire_lease

    def provisioned_meanwhile(namespace: str, name: str, holder: str, seconds: int) -> str | None:
        kube.acquire_lease = acquire  # type: ignore[method-assign]
        other_pod = Condition(COND_RELEASE_INSTALLED, "True", "Installed", "by the other pod", 1)
        write_status(
            kube, live(kube), StatusUpdate(Phase.PROVISIONING, {"observedGeneration": 1}, conditions=(other_pod,))
        )
        return acquire(namespace, name, holder, seconds)

    kube.acquire_lease = provisioned_meanwhile  # type: ignore[method-assign]
    assert run_install(kube, helm, obj) is None
    assert helm.operations == []
    assert live(kube).status.phase == "Provisioning"


# one install or cleanup of a Tenant's namespace at a time across processes ----------------------


def test_install_waits_while_another_process_holds_the_work_lock(kube: FakeKube, helm: FakeHelm) -> None:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    kube.leases[(TENANT_NAMESPACE, "lock-vcluster-bob-dev")] = "another-pod/1/1"
    with pytest.raises(WorkInHand, match="another process is installing or removing vcluster-bob-dev"):
        run_install(kube, helm, obj)
    assert helm.operations == []
    assert kube.get_namespace(BOB_NS) is None, "nothing is made without the lock"

    del kube.leases[(TENANT_NAMESPACE, "lock-vcluster-bob-dev")]
    assert run_install(kube, helm, current(kube, TENANT_NAMESPACE, "bob-dev")) is not None
    assert helm.operations == [("install", f"{BOB_NS}/{BOB_RELEASE}")]
    assert (TENANT_NAMESPACE, "lock-vcluster-bob-dev") not in kube.leases, "the lock is given up after the work"
