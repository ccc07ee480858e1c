"""install grants itself, check-ready, store-kubeconfig, cleanup and resync their access in the
Tenant's namespace, and only there (``shared.steps.access``): what it makes, its own binding first and
in force before the Roles, that a second run writes nothing, that a Tenant made before the grants
gets them on its next delivery, and that a refused read in that namespace is temporary while
every other refusal stays permanent. In-memory fakes only."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from cloudevents.core.v1.event import CloudEvent

from functions import check_ready, install, store_kubeconfig
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import Conflict, Forbidden, PermanentError, TemporaryError
from shared.model import event_types
from shared.model.ownership import legacy_namespace_labels, namespace_labels
from shared.model.rbac import Role, RoleBinding, RoleRef, Rule, Subject
from shared.model.tenant import FINALIZER, Tenant, parse_time
from shared.settings import Settings
from shared.steps import access

from .fakes import TENANT_NAMESPACE, FakeHelm, FakeKube, FakeVClusterApi, deliver, in_sync, ref_of, tenant_object

SETTINGS = Settings(ready_poll_seconds=15, provision_timeout_seconds=600)
CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
CS_OTHER = "0b6f5a4e-3d2c-4b1a-9f8e-7d6c5b4a3f2e"
BOB_NS = "vcluster-bob-dev"
EARLY, LATE = "2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"
CONFIG = b"apiVersion: v1\nkind: Config\n"
STORE = "kubeopera-tenants:tenant-store-kubeconfig"
RESYNC = "kubeopera-tenants:tenant-resync"
INSTALL = "kubeopera-tenants:tenant-install"
CHECK = "kubeopera-tenants:tenant-check-ready"
CLEANUP = "kubeopera-tenants:tenant-cleanup"
# What install writes in a new Tenant's namespace, in order: its own binding and the two others to
# ClusterRoles it may bind by name, the Role, its binding.
FRESH = ["rolebinding create"] * 3 + ["role create", "rolebinding create"]


def live(kube: FakeKube, name: str = "bob-dev") -> Tenant:
    found = kube.get_tenant(TENANT_NAMESPACE, name)
    assert found is not None
    return found


def provision(kube: FakeKube, helm: FakeHelm, **kw: Any) -> dict[str, Any]:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, **kw))
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None
    current = kube.tenant_dict(TENANT_NAMESPACE, "bob-dev")
    assert current is not None
    return current


def grant_writes(kube: FakeKube, mark: int = 0) -> list[tuple[str, str]]:
    return [w for w in kube.journal[mark:] if w[0].startswith(("role", "rolebinding"))]


def settled(phase: str = "Ready") -> dict[str, Any]:
    cond = {"status": "True", "reason": "Installed", "observedGeneration": 1, "lastTransitionTime": EARLY}
    return {
        "phase": phase,
        "observedGeneration": 1,
        "lastSyncedAt": EARLY,
        "conditions": [{"type": "ReleaseInstalled", **cond}, {"type": "Ready", **cond, "reason": "VClusterReady"}],
    }


# what install makes -------------------------------------------------------------------------------


def test_install_grants_each_function_exactly_its_access_in_the_namespace(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    tenant = live(kube)
    labels = namespace_labels(tenant)
    services = ("tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-cleanup", "tenant-resync")
    sa = {name: Subject(name, TENANT_NAMESPACE) for name in services}

    # vcluster's kubeconfig Secret by name: one Role for store-kubeconfig and resync (issue 29: one
    # Role and one binding fewer than a Role each); resync asks for a StatefulSet through its
    # ClusterRole
    assert kube.roles == {
        (BOB_NS, STORE): Role(BOB_NS, STORE, (Rule(("",), ("secrets",), ("get",), ("vc-vc-bob-dev",)),)),
    }
    assert kube.role_bindings == {
        (BOB_NS, INSTALL): RoleBinding(
            BOB_NS,
            INSTALL,
            RoleRef("ClusterRole", "kubeopera-tenants:tenant-install:vcluster-namespace"),
            (sa["tenant-install"],),
        ),
        (BOB_NS, "kubeopera-tenants:tenant-check-ready"): RoleBinding(
            BOB_NS,
            "kubeopera-tenants:tenant-check-ready",
            RoleRef("ClusterRole", "kubeopera-tenants:tenant-check-ready:vcluster-namespace"),
            (sa["tenant-check-ready"],),
        ),
        (BOB_NS, STORE): RoleBinding(
            BOB_NS, STORE, RoleRef("Role", STORE), (sa["tenant-store-kubeconfig"], sa["tenant-resync"])
        ),
        (BOB_NS, "kubeopera-tenants:tenant-cleanup"): RoleBinding(
            BOB_NS,
            "kubeopera-tenants:tenant-cleanup",
            RoleRef("ClusterRole", "kubeopera-tenants:tenant-cleanup:vcluster-namespace"),
            (sa["tenant-cleanup"],),
        ),
    }
    # labelled as the namespace is (owner uid, namespace, name), and by the function they serve
    for obj in [*kube.roles.values(), *kube.role_bindings.values()]:
        component = obj.name.removeprefix("kubeopera-tenants:tenant-")
        assert obj.labels == labels | {
            "app.kubernetes.io/name": "kubeopera-tenants",
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": "kubeopera",
        }
    # made after the namespace, install's own first, all before helm and so before check-ready is asked
    order = [what for what, _ in kube.journal]
    start = order.index("namespace create") + 1
    assert order[start : start + len(FRESH)] == FRESH
    assert kube.journal[start] == ("rolebinding create", f"{BOB_NS}/{INSTALL}")
    assert max(i for i, what in enumerate(order) if what.startswith("role")) < order.index("helm install")


def test_install_waits_for_its_own_binding_to_be_in_force_before_it_makes_a_role(
    helm: FakeHelm, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Lagging(FakeKube):
        """The API server's RBAC cache has install's binding only on the third question."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[str] = []

        def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool:
            self.asked.append(f"{verb} {resource} in {namespace}")
            self.journal.append(("asked", namespace))
            return super().allowed(namespace, verb, group, resource) and len(self.asked) >= 3

    monkeypatch.setattr(access.time, "sleep", lambda seconds: None)
    kube = Lagging()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None

    assert kube.asked == [f"get secrets in {BOB_NS}"] * 3, "asked until in force, then not again"
    order = [what for what, _ in kube.journal]
    start = order.index("namespace create") + 1
    # the bindings to ClusterRoles install may bind by name first, then the Roles once in force
    assert order[start : start + 6] == ["rolebinding create"] * 3 + ["asked"] * 3
    assert order[start + 6] == "role create"


def test_install_binding_never_in_force_is_temporary_and_makes_no_role(
    helm: FakeHelm, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Never(FakeKube):
        def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool:
            return False

    clock = iter(range(0, 1000))
    monkeypatch.setattr(access.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(access.time, "sleep", lambda seconds: None)
    kube = Never()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    with pytest.raises(TemporaryError, match="not in force") as raised:
        install.handle(kube, helm, SETTINGS, ref_of(obj))

    assert raised.value.retry_after == access.ACCESS_RETRY_SECONDS
    assert kube.roles == {}
    assert list(kube.role_bindings) == [(BOB_NS, INSTALL), (BOB_NS, CHECK), (BOB_NS, CLEANUP)], "no Role's binding"
    assert helm.operations == []


def test_the_rules_install_binds_are_the_ones_the_functions_need_in_the_namespace() -> None:
    needed = {
        # helm's release record, listed by label (shared.adapters.release); vcluster's kubeconfig Secret by name
        "tenant-check-ready": (Rule(("",), ("secrets",), ("get", "list")),),
        # helm uninstall: lists, gets, marks "uninstalling" (update) and deletes the records
        "tenant-cleanup": (Rule(("",), ("secrets",), ("get", "list", "update", "delete")),),
    }
    assert needed == access.NAMESPACE_RULES
    tenant = Tenant.from_object(tenant_object("bob-dev", CS_BOB))
    # store-kubeconfig's copy and resync's comparison (functions.resync.observe), by name
    assert access.kubeconfig_rules(tenant) == (
        Rule(("",), ("secrets",), ("get",), (tenant.spec.names.vcluster_secret,)),
    )
    assert access.KUBECONFIG_READERS == ("tenant-store-kubeconfig", "tenant-resync")


def test_a_second_install_run_writes_no_grant(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    assert len(grant_writes(kube)) == 5
    mark = len(kube.journal)

    obj = kube.set_phase(TENANT_NAMESPACE, "bob-dev", "Pending")  # the runbook's retry
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None

    assert grant_writes(kube, mark) == []
    assert access.grant(kube, live(kube), TENANT_NAMESPACE) == 0
    assert kube.calls["create_role"] == 1 and kube.calls["create_role_binding"] == 4
    assert kube.calls["allowed"] == 1, "in force asked once, after install's own binding was made"


def test_a_changed_grant_is_put_back_with_one_write_each(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm)
    tenant = live(kube)
    store = kube.roles[(BOB_NS, STORE)]
    kube.roles[(BOB_NS, STORE)] = Role(BOB_NS, STORE, (Rule(("",), ("secrets",), ("get", "list")),), store.labels, "7")
    check = kube.role_bindings[(BOB_NS, "kubeopera-tenants:tenant-check-ready")]
    kube.role_bindings[(BOB_NS, check.name)] = RoleBinding(
        BOB_NS, check.name, check.role_ref, (Subject("someone-else", "default"),), {}, "8"
    )
    cleanup = kube.role_bindings[(BOB_NS, "kubeopera-tenants:tenant-cleanup")]
    kube.role_bindings[(BOB_NS, cleanup.name)] = RoleBinding(
        BOB_NS, cleanup.name, RoleRef("ClusterRole", "admin"), cleanup.subjects, cleanup.labels, "9"
    )
    mark = len(kube.journal)

    assert access.grant(kube, tenant, TENANT_NAMESPACE) == 4

    assert grant_writes(kube, mark) == [
        ("rolebinding patch", f"{BOB_NS}/{check.name}"),
        ("rolebinding delete", f"{BOB_NS}/{cleanup.name}"),  # a roleRef cannot change: made again
        ("rolebinding create", f"{BOB_NS}/{cleanup.name}"),
        ("role patch", f"{BOB_NS}/{STORE}"),
    ]
    wanted = access.namespace_grants(tenant, TENANT_NAMESPACE)
    assert tuple(kube.roles.values()) == wanted.roles
    assert set(kube.role_bindings.values()) == set(wanted.bindings)
    assert kube.role_bindings[(BOB_NS, check.name)].labels == check.labels
    assert access.grant(kube, tenant, TENANT_NAMESPACE) == 0


class RacingKube(FakeKube):
    """Another install delivery creates store-kubeconfig's Role just before this one does."""

    def create_role(self, role: Role) -> bool:
        if role.name == STORE and (role.namespace, role.name) not in self.roles:
            super().create_role(role)
        return super().create_role(role)


def test_a_new_tenants_namespace_is_granted_without_a_read(kube: FakeKube, helm: FakeHelm) -> None:
    """install has just made the namespace: nothing is in it, so each grant is created at once."""
    provision(kube, helm)
    assert len(grant_writes(kube)) == 5
    assert kube.calls["get_role"] == 0 and kube.calls["get_role_binding"] == 0
    assert kube.calls["allowed"] == 1, "in force asked once, after install's own binding was made"


def test_a_new_tenants_namespace_is_created_without_a_read_and_a_known_one_is_read_first(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """A Tenant with no namespace recorded creates it at once (a 409 would be read and judged, as
    another Tenant's is below); one that has a namespace recorded (an upgrade) reads it first."""
    provision(kube, helm)
    assert (kube.calls["get_namespace"], kube.calls["create_namespace"]) == (0, 1)
    changed = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "3"})
    assert install.handle(kube, helm, SETTINGS, ref_of(changed)) is not None
    assert (kube.calls["get_namespace"], kube.calls["create_namespace"]) == (1, 1)


def test_a_grant_made_by_another_delivery_in_a_new_namespace_is_read_and_kept(helm: FakeHelm) -> None:
    kube = RacingKube()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None
    # the other delivery's Role is what this one wants: read once, kept, nothing written over it
    assert kube.calls["get_role"] == 1 and kube.writes["role create"] == 1  # the other delivery's
    assert kube.roles[(BOB_NS, STORE)] == access.namespace_grants(live(kube), TENANT_NAMESPACE).roles[0]


def test_a_grant_made_by_another_delivery_meanwhile_is_a_conflict_to_run_again(helm: FakeHelm) -> None:
    """In a namespace that was there already, a Role read as missing and then found made by
    another delivery is a conflict: the HTTP layer runs the step again on fresh data."""
    kube = RacingKube()
    helm.kube = kube
    provision(kube, helm)
    del kube.roles[(BOB_NS, STORE)]  # gone, and about to be made by another delivery
    with pytest.raises(Conflict, match="made by another delivery meanwhile"):
        access.grant(kube, live(kube), TENANT_NAMESPACE)
    # run again: now it is found as it should be
    assert access.grant(kube, live(kube), TENANT_NAMESPACE) == 0


def test_no_grant_in_a_namespace_that_is_another_tenants(kube: FakeKube, helm: FakeHelm) -> None:
    provision(kube, helm, created=EARLY)
    mark = len(kube.journal)
    intruder = kube.add_tenant(tenant_object("bob-dev-2", CS_OTHER, tenant_name="bob-dev", created=LATE))
    with pytest.raises(PermanentError):
        install.handle(kube, helm, SETTINGS, ref_of(intruder))
    failed = kube.set_phase(TENANT_NAMESPACE, "bob-dev-2", "Failed")

    assert install.handle(kube, helm, SETTINGS, ref_of(failed)) is None  # a later delivery: left alone

    assert grant_writes(kube, mark) == []
    owner = live(kube).uid
    assert {obj.labels["kubeopera.io/owner-uid"] for obj in kube.role_bindings.values()} == {owner}


# Tenants made before the grants -------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        pytest.param({"status": settled("Ready"), "finalizers": [FINALIZER]}, id="ready"),
        pytest.param({"status": settled("Provisioning"), "finalizers": [FINALIZER]}, id="provisioning"),
        pytest.param({"status": {"phase": "Failed", "message": "earlier"}, "finalizers": [FINALIZER]}, id="failed"),
        pytest.param({"status": settled("Ready"), "finalizers": [FINALIZER], "deleting": True}, id="deleting"),
    ],
)
def test_a_tenant_install_leaves_alone_gets_the_grants_in_its_namespace(
    kube: FakeKube, helm: FakeHelm, how: dict[str, Any]
) -> None:
    how = dict(how)
    deleting = how.pop("deleting", False)
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, **how), SETTINGS))
    kube.add_namespace(BOB_NS, namespace_labels(live(kube)))
    if deleting:
        obj = kube.delete_tenant(TENANT_NAMESPACE, "bob-dev") or obj
    before = kube.tenant_dict(TENANT_NAMESPACE, "bob-dev")

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None

    # made before the Pod Security labels too: they come with the grants
    assert [what for what, _ in kube.journal] == ["namespace label", *FRESH]
    assert kube.namespaces[BOB_NS]["labels"] == namespace_labels(live(kube)) | POD_SECURITY
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") == before, "the Tenant itself is left alone"
    assert helm.calls == {}
    mark = len(kube.journal)
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None
    assert kube.journal[mark:] == [], "the next delivery only reads"


def test_a_namespace_with_the_previous_versions_grants_gets_installs_own_and_resyncs(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Made when install held its rights cluster-wide and resync read Secrets cluster-wide (the
    store-kubeconfig binding bound it alone): the next delivery adds install's own binding (first)
    and resync to the store-kubeconfig binding, nothing else."""
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, status=settled(), finalizers=[FINALIZER]), SETTINGS))
    tenant = live(kube)
    kube.add_namespace(BOB_NS, namespace_labels(tenant) | POD_SECURITY)
    wanted = access.namespace_grants(tenant, TENANT_NAMESPACE)
    for role in wanted.roles:
        kube.roles[(BOB_NS, role.name)] = role
    for binding in wanted.bindings:
        if binding.name == STORE:
            binding = dataclasses.replace(binding, subjects=binding.subjects[:1])  # store-kubeconfig alone
        if binding.name != INSTALL:
            kube.role_bindings[(BOB_NS, binding.name)] = binding

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None

    assert kube.journal == [
        ("rolebinding create", f"{BOB_NS}/{INSTALL}"),
        ("rolebinding patch", f"{BOB_NS}/{STORE}"),
    ]
    assert kube.role_bindings[(BOB_NS, STORE)] == wanted.bindings[-1]
    assert helm.calls == {}


def test_a_namespace_with_resyncs_own_role_from_before_gets_resync_on_the_shared_binding(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """Made before issue 29's one Role for store-kubeconfig and resync: resync's own Role and
    binding (that Secret and the StatefulSet by name) stay, granting nothing it does not hold
    otherwise; resync is added to the store-kubeconfig binding, with one write."""
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, status=settled(), finalizers=[FINALIZER]), SETTINGS))
    tenant = live(kube)
    kube.add_namespace(BOB_NS, namespace_labels(tenant) | POD_SECURITY)
    wanted = access.namespace_grants(tenant, TENANT_NAMESPACE)
    kube.roles[(BOB_NS, STORE)] = wanted.roles[0]
    for binding in wanted.bindings:
        if binding.name == STORE:
            binding = dataclasses.replace(binding, subjects=binding.subjects[:1])
        kube.role_bindings[(BOB_NS, binding.name)] = binding
    old_rules = (
        Rule(("",), ("secrets",), ("get",), (tenant.spec.names.vcluster_secret,)),
        Rule(("apps",), ("statefulsets",), ("get",), (tenant.spec.names.release,)),
    )
    kube.roles[(BOB_NS, RESYNC)] = Role(BOB_NS, RESYNC, old_rules)
    kube.role_bindings[(BOB_NS, RESYNC)] = RoleBinding(
        BOB_NS, RESYNC, RoleRef("Role", RESYNC), (Subject("tenant-resync", TENANT_NAMESPACE),)
    )

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None

    assert kube.journal == [("rolebinding patch", f"{BOB_NS}/{STORE}")]
    assert (BOB_NS, RESYNC) in kube.roles and (BOB_NS, RESYNC) in kube.role_bindings


# Pod Security labels: part of what install keeps true --------------------------------------------

POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


@pytest.mark.parametrize(
    "drift",
    [
        pytest.param({"pod-security.kubernetes.io/enforce": "privileged"}, id="enforce-changed"),
        pytest.param({"pod-security.kubernetes.io/warn": None}, id="warn-removed"),
        pytest.param({"pod-security.kubernetes.io/enforce": None, "pod-security.kubernetes.io/audit": None}, id="two"),
        # the label the helm-records admission policy selects the namespaces it guards by
        pytest.param({"kubeopera.io/managed-by": None}, id="managed-by-removed"),
    ],
)
@pytest.mark.parametrize("phase", ["Ready", "Pending"])
def test_a_pod_security_label_changed_by_hand_is_put_back_by_the_next_install_delivery(
    kube: FakeKube, helm: FakeHelm, drift: dict[str, str | None], phase: str
) -> None:
    """A settled Tenant: the delivery that leaves it alone (once this process's recheck window is
    over); a Pending one: the full install run. Only the labels install keeps are written."""
    if phase == "Ready":
        obj = kube.add_tenant(
            in_sync(tenant_object("bob-dev", CS_BOB, status=settled("Ready"), finalizers=[FINALIZER]), SETTINGS)
        )
    else:
        obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB, finalizers=[FINALIZER]))
    labels = namespace_labels(live(kube)) | POD_SECURITY | {"team": "kept"}
    kube.add_namespace(BOB_NS, {k: v for k, v in (labels | drift).items() if v is not None})
    access.grant(kube, live(kube), TENANT_NAMESPACE)
    access.forget_ensured()
    mark = len(kube.journal)

    install.handle(kube, helm, SETTINGS, ref_of(obj))

    assert kube.namespaces[BOB_NS]["labels"] == labels
    written = [what for what, _ in kube.journal[mark:]]
    assert written.count("namespace label") == 1
    assert "helm install" not in written[: written.index("namespace label")], "before helm runs"


def test_the_enforced_level_is_a_setting(kube: FakeKube, helm: FakeHelm) -> None:
    settings = Settings.from_env({"POD_SECURITY_ENFORCE": "restricted", "SENDER_IDENTITY": "off"})
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    install.handle(kube, helm, settings, ref_of(obj))
    assert kube.namespaces[BOB_NS]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("case", ["terminating", "adopt", "foreign", "absent"])
def test_a_left_alone_tenant_gets_no_grant_where_it_has_no_settled_namespace(
    kube: FakeKube, helm: FakeHelm, case: str
) -> None:
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, status=settled(), finalizers=[FINALIZER]), SETTINGS))
    tenant = live(kube)
    if case == "terminating":
        kube.add_namespace(BOB_NS, namespace_labels(tenant), terminating=True)
    elif case == "adopt":  # the previous version's labels: adopted by a full install run, not here
        kube.add_namespace(BOB_NS, legacy_namespace_labels(tenant))
    elif case == "foreign":
        kube.add_namespace(BOB_NS, {"team": "platform"})

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None
    assert kube.journal == []


def test_a_refused_grant_on_a_left_alone_tenant_is_logged_not_a_failure(
    helm: FakeHelm, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing(FakeKube):
        def create_role(self, role: Role) -> bool:
            raise Forbidden(f"create role {role.namespace}/{role.name}: the API server refused it (403 Forbidden)")

    kube = Refusing()
    obj = kube.add_tenant(in_sync(tenant_object("bob-dev", CS_BOB, status=settled(), finalizers=[FINALIZER]), SETTINGS))
    kube.add_namespace(BOB_NS, namespace_labels(live(kube)))

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is None
    assert live(kube).status.phase == "Ready"
    assert "could not grant the functions' access" in caplog.text


def test_a_grant_on_a_new_tenant_refused_fails_it_with_the_verb_named(helm: FakeHelm) -> None:
    class Refusing(FakeKube):
        def create_role_binding(self, binding: RoleBinding) -> bool:
            raise Forbidden(f"create rolebinding {binding.name}: the API server refused it (403 Forbidden)")

    kube = Refusing()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    with pytest.raises(PermanentError, match="create rolebinding .* refused it"):
        install.handle(kube, helm, SETTINGS, ref_of(obj))
    assert helm.operations == [], "nothing is installed that the others could not check"


# a refused read in the namespace is temporary; elsewhere it is not ----------------------------------


class NotGrantedYet(FakeKube):
    """The API server before its RBAC cache has install's bindings: 403 on Secrets in vcluster-*."""

    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        if namespace.startswith("vcluster-"):
            self.calls["read_secret_key"] += 1
            raise Forbidden(f"get secret {namespace}/{name}: the API server refused it (403 Forbidden)")
        return super().read_secret_key(namespace, name, key)


def test_a_delivery_that_finds_installs_binding_made_by_another_reads_again_later_not_failed(
    helm: FakeHelm,
) -> None:
    """Two deliveries of one new Tenant: the other one has just made install's own RoleBinding in
    the namespace (and waits for it), this one finds it made and reads the Roles at once, before
    the API server's RBAC has it: 403. That is temporary (CI run 3 dead-lettered a healthy Tenant to
    Failed on it), and the next delivery makes the grants."""

    class BindingNotInForceYet(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.refuse = True

        def get_role(self, namespace: str, name: str) -> Role | None:
            if self.refuse and namespace == BOB_NS:
                raise Forbidden(f"get role {namespace}/{name}: the API server refused it (403 Forbidden)")
            return super().get_role(namespace, name)

    kube = BindingNotInForceYet()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    # what the other delivery has made: the namespace, as this Tenant's, and install's own binding in it
    tenant = live(kube)
    kube.add_namespace(BOB_NS, namespace_labels(tenant) | POD_SECURITY)
    kube.create_role_binding(access.namespace_grants(tenant, TENANT_NAMESPACE).bindings[0])

    with pytest.raises(TemporaryError) as raised:
        install.handle(kube, helm, SETTINGS, ref_of(obj))
    assert not isinstance(raised.value, PermanentError)
    assert raised.value.retry_after == access.ACCESS_RETRY_SECONDS
    assert (BOB_NS, INSTALL) in kube.role_bindings  # what the other delivery had made
    assert live(kube).status.phase != "Failed" and helm.operations == []

    kube.refuse = False  # in force now: the broker's next delivery goes through
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None
    assert helm.operations == [("install", f"{BOB_NS}/vc-bob-dev")]


def test_store_kubeconfig_refused_in_the_namespace_answers_503_and_leaves_the_tenant(helm: FakeHelm) -> None:
    kube = NotGrantedYet()
    helm.kube = kube
    obj = provision(kube, helm)
    kube.boot_vcluster("bob-dev", CONFIG)
    app = function_app(
        Step(
            name=store_kubeconfig.NAME,
            accepts=frozenset({event_types.READY}),
            handle=lambda event, ref: store_kubeconfig.handle(kube, SETTINGS, ref),
        )
    )
    ready = CloudEvent(
        attributes={"type": event_types.READY, "source": "/test", "datacontenttype": "application/json"},
        data=events.ref_data(ref_of(obj)),
    )

    answer = deliver(app, ready)

    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == str(access.ACCESS_RETRY_SECONDS)
    assert "not in force yet" in answer.json["error"]
    assert live(kube).status.phase == "Provisioning"
    assert kube.writes["secret write"] == 0


def test_check_ready_refused_in_the_namespace_is_temporary(helm: FakeHelm) -> None:
    kube = NotGrantedYet()
    helm.kube = kube
    obj = provision(kube, helm)
    kube.boot_vcluster("bob-dev", CONFIG)
    started = parse_time(live(kube).status.last_synced_at)
    assert started is not None
    event = CloudEvent(
        attributes={
            "type": event_types.PROVISIONING,
            "source": "/test",
            "time": started,
            "datacontenttype": "application/json",
        },
        data=events.ref_data(ref_of(obj)),
    )

    with pytest.raises(TemporaryError) as raised:
        check_ready.handle(
            kube, helm, SETTINGS, event, ref_of(obj), now=started + timedelta(seconds=30), vcluster=FakeVClusterApi()
        )

    assert raised.value.retry_after == access.ACCESS_RETRY_SECONDS
    assert not isinstance(raised.value, PermanentError)


def test_a_refusal_anywhere_else_stays_permanent() -> None:
    class RefusesTenants(FakeKube):
        def get_tenant(self, namespace: str, name: str) -> Tenant | None:
            raise Forbidden(f"get tenant {namespace}/{name}: the API server refused it (403 Forbidden)")

    kube = RefusesTenants()
    obj = tenant_object("bob-dev", CS_BOB, namespace="default")
    with pytest.raises(Forbidden):  # a rule missing from deploy/: permanent, the Tenant is Failed
        store_kubeconfig.handle(kube, SETTINGS, ref_of(obj))
    # and only a refusal becomes temporary inside the namespace: other permanent errors pass as they are
    with pytest.raises(PermanentError) as raised, access.granted_at_run_time(BOB_NS):
        raise PermanentError("the API server found it invalid (422)")
    assert type(raised.value) is PermanentError


def test_the_bindings_install_may_make_by_name_are_written_side_by_side(helm: FakeHelm) -> None:
    class Together(FakeKube):
        """check-ready's and cleanup's bindings wait for each other to be in flight: written side
        by side (``access.at_once``), after install's own."""

        def __init__(self) -> None:
            super().__init__()
            self.pair = threading.Barrier(2, timeout=5)

        def create_role_binding(self, binding: RoleBinding) -> bool:
            if binding.role_ref.kind == "ClusterRole" and binding.name != INSTALL:
                self.pair.wait()
            return super().create_role_binding(binding)

    kube = Together()
    helm.kube = kube
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))

    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None

    assert set(kube.roles) == {(BOB_NS, STORE)}
    assert kube.calls["allowed"] == 1, "in force asked once, before the Role"
    assert [what for what, _ in grant_writes(kube)] == FRESH


def test_writes_side_by_side_all_finish_and_the_first_error_in_order_is_raised() -> None:
    finished: list[str] = []

    def fails(name: str) -> Callable[[], int]:
        def call() -> int:
            finished.append(name)
            raise Conflict(f"{name} moved on")

        return call

    def writes(name: str) -> Callable[[], int]:
        def call() -> int:
            finished.append(name)
            return 1

        return call

    with pytest.raises(Conflict, match="first moved on"):
        access.at_once([writes("a"), fails("first"), fails("second"), writes("b")])
    assert sorted(finished) == ["a", "b", "first", "second"], "every write ran to its end"
    assert access.at_once([writes("c"), writes("d")]) == 2
    assert access.at_once([writes("e")]) == 1
    assert access.at_once([]) == 0
