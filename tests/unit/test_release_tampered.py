"""A tampered helm history (issue 23, item 3), as install, check-ready and cleanup meet it through
their real code, with the in-memory adapters (``tests/unit/fakes.py``): a Secret in the Tenant's
namespace that carries its release's labels but is not a record helm wrote (the syncer's
identity may create Secrets there). install and check-ready run no helm operation and fail the
Tenant with a Warning Event ``ReleaseTampered`` that names what was found; cleanup does not ask
helm what to delete, says so in a Warning Event, and still deletes the namespace. The pure rule
is tested in ``test_release_record.py``; the real API server and helm in
``tests/integration/test_tampered_history.py``."""

from __future__ import annotations

from typing import Any

import pytest

from functions import check_ready, cleanup, install, store_kubeconfig
from shared.adapters.release import RECORD_TYPE
from shared.delivery import events
from shared.errors import NotReadyYet, ReleaseTampered
from shared.model import event_types
from shared.model.ownership import release_labels
from shared.runtime import Runtime
from shared.settings import Settings
from shared.steps import claims

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    FakeVClusterApi,
    deliver,
    ref_of,
    step_event,
    tenant_object,
)

SETTINGS = Settings(cleanup_poll_seconds=7, ready_poll_seconds=15, provision_timeout_seconds=600)
CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
NS, RELEASE = "vcluster-bob-dev", "vc-bob-dev"
FORGED = "vc-bob-dev-history"
SECRET_BODY = b"H4sIAAAAAAAA-the-forged-release-body"
FOUND = (
    f"the history of helm release {NS}/{RELEASE} was tampered with: Secret {FORGED} (type {RECORD_TYPE}, "
    f"labels name={RELEASE},owner=helm,status=deployed,version=99): its name is not "
    f"sh.helm.release.v1.{RELEASE}.v<revision>"
)


def runtime(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi | None = None) -> Runtime:
    return Runtime(settings=SETTINGS, kube=kube, helm=helm, kubeopera_api=api, vcluster_api=FakeVClusterApi())


def provisioned(kube: FakeKube, helm: FakeHelm) -> dict[str, Any]:
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    assert install.handle(kube, helm, SETTINGS, ref_of(obj)) is not None
    found = kube.tenant_dict(TENANT_NAMESPACE, "bob-dev")
    assert found is not None and found["status"]["phase"] == "Provisioning"
    return found


def forge(kube: FakeKube) -> None:
    """What the syncer's identity could do: a copy of the release's record, version 99, under a
    name of its own (the name helm would give it is not one a synced Secret can take)."""
    labels = {"owner": "helm", "name": RELEASE, "version": "99", "status": "deployed"}
    kube.add_secret(NS, FORGED, {"release": SECRET_BODY}, labels, type_=RECORD_TYPE)


def failed_with_tampered(kube: FakeKube, response: Any) -> None:
    assert response.status_code == 422, response.json
    assert response.json["error"].startswith(FOUND)
    tenant = kube.get_tenant(TENANT_NAMESPACE, "bob-dev")
    assert tenant is not None and tenant.status.phase == "Failed"
    ready = tenant.status.condition("Ready")
    assert ready is not None and ready.reason == "ReleaseTampered"
    event = kube.event("ReleaseTampered")
    assert event["type"] == "Warning" and event["message"].startswith(FOUND)
    assert SECRET_BODY.decode() not in event["message"] + response.json["error"]


def test_install_runs_no_helm_operation_on_a_tampered_history_and_fails_the_tenant(
    kube: FakeKube, helm: FakeHelm
) -> None:
    provisioned(kube, helm)
    forge(kube)
    releases = dict(helm.releases)
    changed = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "3"})  # a new generation: an upgrade

    response = deliver(install.create_app(runtime(kube, helm)), step_event(changed, event_types.INSTALL))

    failed_with_tampered(kube, response)
    # asked, it read the history first and refused it: no helm operation ran
    assert helm.operations == [("install", f"{NS}/{RELEASE}")]
    assert helm.releases == releases


def test_check_ready_fails_the_tenant_on_a_tampered_history(kube: FakeKube, helm: FakeHelm) -> None:
    obj = provisioned(kube, helm)
    kube.boot_vcluster("bob-dev", b"apiVersion: v1\nkind: Config\n")
    forge(kube)

    response = deliver(
        check_ready.create_app(runtime(kube, helm)), events.make(event_types.PROVISIONING, install.NAME, ref_of(obj))
    )

    failed_with_tampered(kube, response)
    assert kube.calls["list_secret_records"] == 1  # check-ready's; install's helm read the records' bodies once
    assert kube.calls["list_release_records"] == 1
    assert helm.calls["release"] == 0 and helm.operations == [("install", f"{NS}/{RELEASE}")]


def test_cleanup_skips_helm_uninstall_on_a_tampered_history_and_still_deletes_the_namespace(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    obj = provisioned(kube, helm)
    kube.boot_vcluster("bob-dev", b"apiVersion: v1\nkind: Config\n")
    assert store_kubeconfig.handle(kube, SETTINGS, ref_of(obj)) is not None
    forge(kube)
    gone = kube.delete_tenant(TENANT_NAMESPACE, "bob-dev")
    assert gone is not None

    with pytest.raises(NotReadyYet, match=f"waiting for namespace {NS} to be deleted"):
        cleanup.handle(kube, helm, api, SETTINGS, step_event(gone, event_types.CLEANUP), ref_of(gone))

    assert [op for op, _ in helm.operations] == ["install"]  # asked, helm refused the history: nothing uninstalled
    assert kube.namespaces[NS]["terminating"]
    warning = kube.event("ReleaseTampered")
    assert warning["type"] == "Warning"
    assert warning["message"].startswith("helm uninstall skipped, the namespace is deleted with all in it: " + FOUND)
    assert SECRET_BODY.decode() not in warning["message"]
    stored = f"{TENANT_NAMESPACE}/tenant-{CS_BOB}-kubeconfig"
    # then what it waits for becomes the Tenant's message (cleanup's progress)
    assert kube.journal[-3:-1] == [("namespace delete", NS), ("secret delete", stored)]
    assert kube.journal[-1][0] == "status"

    kube.finish_namespace_deletion(NS)  # the forged record goes with the namespace
    assert cleanup.handle(kube, helm, api, SETTINGS, step_event(gone, event_types.CLEANUP), ref_of(gone)) is None
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") is None
    assert kube.event("CleanupFinished")["type"] == "Normal"
    assert [u.status for u in api.reports] == ["deleted"]


def test_the_helm_step_reads_the_history_itself_so_a_forgery_made_before_it_is_caught(
    kube: FakeKube, helm: FakeHelm
) -> None:
    """install and cleanup read helm's history only through the helm step (the adapter's one read,
    under the release lock, before it changes anything); the guard judges the values that read
    found. A forgery made at any time before that read is refused by it."""
    provisioned(kube, helm)
    tenant = kube.get_tenant(TENANT_NAMESPACE, "bob-dev")
    assert tenant is not None
    guard = claims.release_guard(kube, tenant)
    values = helm.values_of(RELEASE, NS)
    guard(values)  # the release is this Tenant's
    assert release_labels(values)

    forge(kube)
    with pytest.raises(ReleaseTampered, match=f"Secret {FORGED} "):
        helm.install_or_upgrade(RELEASE, NS, values | {"x": 1}, guard=guard)
    with pytest.raises(ReleaseTampered):
        helm.uninstall(RELEASE, NS, guard=guard)
    assert (NS, RELEASE) in helm.releases and [op for op, _ in helm.operations] == ["install"]


def test_a_plain_secret_labelled_as_the_release_is_tampering_too(kube: FakeKube, helm: FakeHelm) -> None:
    """The type the syncer's own Secrets have (Opaque), with the record's own name pattern."""
    obj = provisioned(kube, helm)
    labels = {"owner": "helm", "name": RELEASE, "version": "2", "status": "deployed"}
    kube.add_secret(NS, f"sh.helm.release.v1.{RELEASE}.v2", {}, labels)
    with pytest.raises(ReleaseTampered, match=rf"Secret sh\.helm\.release\.v1\.{RELEASE}\.v2 \(type Opaque, "):
        install.handle(kube, helm, SETTINGS, ref_of(kube.edit_spec(TENANT_NAMESPACE, "bob-dev", quota={"cpu": "3"})))
    assert obj["metadata"]["generation"] == 1 and helm.operations == [("install", f"{NS}/{RELEASE}")]
